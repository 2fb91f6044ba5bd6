/* cpu_gemm.h — shardc's own f32 matrix-product kernel for x86-64 CPUs
 * with AVX2 and FMA, private to the CPU device (runtime/cpu_device.c).
 *
 * One call computes one tile of a GEMM (the CPU device cuts every product
 * into tiles whose boundaries depend only on the shape), single-threaded,
 * BLIS-style: op(A) is packed in blocks of KC columns into micro-panels of
 * 6 rows, op(B) into panels of 16 columns, and a 6 x 16 register-blocked
 * kernel (12 accumulators, FMA) computes each block of C. The summation
 * order depends only on the shape, so results do not depend on the thread
 * count. docs/runtime.md#the-gemm-engine. */
#ifndef SHARDC_RUNTIME_CPU_GEMM_H
#define SHARDC_RUNTIME_CPU_GEMM_H

#include <stdbool.h>
#include <stdint.h>

#include "codegen/device_memory.h" /* the engines, sizes of packed forms */

/* The engine in use, never AUTO: the one set by sc_gemm_engine_set, else
 * the host's (sc_gemm_engine_host, codegen/device_memory.h). OWN is taken
 * only where it is supported. */
sc_gemm_engine sc_gemm_engine_get(void);
/* Sets the engine for the process (AUTO: back to the default choice).
 * For tests and benchmarks; not meant to change while products run. */
void sc_gemm_engine_set(sc_gemm_engine e);

/* op(B) of a product, packed once for every tile that reads it (a
 * constant B: the weights of a layer): for each block of KC rows, its
 * panels of 16 columns, [panel][row][16], the last panel padded with
 * zeros. data holds sc_gemm_packed_b_numel(k, n) floats, 32-byte aligned. */
typedef struct sc_gemm_packed_b {
  float *data;
  int64_t n_pad; /* n rounded up to 16 */
} sc_gemm_packed_b;

/* Packs rows [k0, k1) of op(B) (k x n; k0 a multiple of SC_GEMM_KC,
 * rounded down otherwise) into out->data; sets out->n_pad. Row
 * ranges are independent: threads may pack disjoint ones. */
void sc_gemm_pack_b(bool trans_b, int64_t k, int64_t n, const float *B, int64_t ldb, int64_t k0,
                    int64_t k1, sc_gemm_packed_b *out);

/* Packs the m rows of op(A) that start at A (as sc_cpu_gemm_tile reads
 * them) into out (sc_gemm_packed_a_numel(m, k) floats, 32-byte aligned):
 * the micro-panels the kernel would pack for itself, every block of rows
 * and of k, so that tiles sharing those rows read them packed once. */
void sc_gemm_pack_a(bool trans_a, int64_t m, int64_t k, const float *A, int64_t lda, float *out);

/* C = alpha * op(A) @ op(B) + beta * C for one m x n tile with k > 0,
 * row-major: A, B and C point at the tile's first element of op(A)'s
 * rows, op(B)'s columns and C (op(X) = X^T when trans_x). With packed_a
 * (not NULL), op(A)'s rows are read from it (sc_gemm_pack_a of these m
 * rows) instead of A. With packed (not NULL), op(B) is read from it
 * instead of B, the tile's columns starting at column n0 (a multiple of
 * 16) of the packed matrix. The bits of C are the same either way.
 * beta == 0 never reads C. Needs sc_cpu_gemm_own_supported(); uses this
 * thread's packing buffers (allocated on the thread's first call, or by
 * sc_cpu_gemm_thread_reserve, freed when it ends; false when that
 * allocation fails, and nothing is computed). */
bool sc_cpu_gemm_tile(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                      const float *A, int64_t lda, const float *packed_a, const float *B,
                      int64_t ldb, const sc_gemm_packed_b *packed, int64_t n0, float beta,
                      float *C, int64_t ldc);
/* Bytes of the own kernel's per-thread packing buffers now allocated in
 * the process (sc_cpu_gemm_thread_buffer_bytes each; a thread's is freed
 * when it ends). */
int64_t sc_cpu_gemm_thread_buffers_held(void);
/* Allocates this thread's packing buffers now, if it has none; false when
 * that fails. */
bool sc_cpu_gemm_thread_reserve(void);

#endif
