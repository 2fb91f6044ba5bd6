/* fma_peak.c — the machine's fp32 FMA peak, measured: T threads, each a
 * loop of independent fused multiply-adds on registers only (12 chains, more
 * than the FMA latency times the pipes), no memory traffic. bench_run.py
 * builds it with -O3 -march=native and takes the best of 256-bit and, where
 * the compiler targets it, 512-bit vectors (a CPU may run 512-bit FMAs at half
 * the rate per instruction: AMD Zen 4 splits them in two).
 *
 * usage: fma_peak THREADS   prints "avx2 G" and, with AVX-512, "avx512 G":
 * the GFLOP/s of all threads together, best of 3 passes. */
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

enum { CHAINS = 12 };
static const long ITERS = 40000000; /* ~0.1 s per pass at ~100 GFLOP/s a core */

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static void *loop256(void *out) {
  __m256 a[CHAINS], m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
  for (int j = 0; j < CHAINS; j++) a[j] = _mm256_set1_ps((float)j);
  for (long i = 0; i < ITERS / CHAINS; i++)
    for (int j = 0; j < CHAINS; j++) a[j] = _mm256_fmadd_ps(a[j], m, c);
  float s = 0, v[8];
  for (int j = 0; j < CHAINS; j++) {
    _mm256_storeu_ps(v, a[j]);
    for (int k = 0; k < 8; k++) s += v[k];
  }
  *(float *)out = s; /* keeps the loop */
  return NULL;
}

#ifdef __AVX512F__
static void *loop512(void *out) {
  __m512 a[CHAINS], m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
  for (int j = 0; j < CHAINS; j++) a[j] = _mm512_set1_ps((float)j);
  for (long i = 0; i < ITERS / CHAINS; i++)
    for (int j = 0; j < CHAINS; j++) a[j] = _mm512_fmadd_ps(a[j], m, c);
  float s = 0;
  for (int j = 0; j < CHAINS; j++) s += _mm512_reduce_add_ps(a[j]);
  *(float *)out = s;
  return NULL;
}
#endif

/* GFLOP/s of `threads` threads running fn at once, best of 3 passes */
static double measure(void *(*fn)(void *), int threads, int lanes) {
  pthread_t *t = calloc((size_t)threads, sizeof *t);
  float *sink = calloc((size_t)threads, sizeof *sink);
  double best = 0;
  for (int pass = 0; pass < 3 && t && sink; pass++) {
    double t0 = now();
    for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, fn, &sink[i]);
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    double g = (double)threads * (ITERS / CHAINS * CHAINS) * lanes * 2 / (now() - t0) / 1e9;
    if (g > best) best = g;
  }
  free(t);
  free(sink);
  return best;
}

int main(int argc, char **argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 1;
  if (threads < 1 || threads > 1024) {
    fprintf(stderr, "usage: fma_peak THREADS\n");
    return 2;
  }
  printf("avx2 %.1f\n", measure(loop256, threads, 8));
#ifdef __AVX512F__
  printf("avx512 %.1f\n", measure(loop512, threads, 16));
#endif
  return 0;
}
