/* cpu_attention.c — fused attention on the CPU (cpu_attention.h): the
 * FlashAttention forward and backward over blocks of SC_CPU_ATTN_BLOCK
 * rows, in f32, with the thread pool over work units whose boundaries are
 * fixed by the shapes alone.
 *
 * A unit widens its blocks into f32 scratch (one allocation per chunk of
 * units), so the inner loops are plain f32 dot products and row updates
 * that the compiler vectorises (dot keeps eight partial sums: a sum the
 * compiler may not reorder otherwise). */
#include "runtime/cpu_attention.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "ir/dtype.h"

enum { BLK = SC_CPU_ATTN_BLOCK };

/* n elements of dtype t from base[off...] into dst, as f32 */
static void load_f32(sc_dtype t, const void *base, int64_t off, int64_t n, float *dst) {
  if (t == SC_DTYPE_F32) {
    memcpy(dst, (const float *)base + off, (size_t)n * sizeof *dst);
  } else if (t == SC_DTYPE_BF16) {
    const uint16_t *s = (const uint16_t *)base + off;
    for (int64_t i = 0; i < n; i++) dst[i] = sc_bf16_to_f32(s[i]);
  } else {
    const uint16_t *s = (const uint16_t *)base + off;
    for (int64_t i = 0; i < n; i++) dst[i] = sc_f16_to_f32(s[i]);
  }
}

/* n f32 values into base[off...] as dtype t (rounded to nearest even) */
static void store_f32(sc_dtype t, void *base, int64_t off, int64_t n, const float *src) {
  if (t == SC_DTYPE_F32) {
    memcpy((float *)base + off, src, (size_t)n * sizeof *src);
  } else if (t == SC_DTYPE_BF16) {
    uint16_t *d = (uint16_t *)base + off;
    for (int64_t i = 0; i < n; i++) d[i] = sc_f32_to_bf16(src[i]);
  } else {
    uint16_t *d = (uint16_t *)base + off;
    for (int64_t i = 0; i < n; i++) d[i] = sc_f32_to_f16(src[i]);
  }
}

static float dot(const float *restrict a, const float *restrict b, int64_t n) {
  float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; k++) s[k] += a[i + k] * b[i + k];
  float r = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
  for (; i < n; i++) r += a[i] * b[i];
  return r;
}

/* y += alpha x */
static void axpy(float *restrict y, float alpha, const float *restrict x, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] += alpha * x[i];
}

typedef struct job {
  const sc_cpu_attention_io *io;
  int64_t nqb, nkb; /* query and key blocks */
  atomic_bool nomem;
} job;

static int64_t mini(int64_t a, int64_t b) { return a < b ? a : b; }

/* The scores of query rows [i0, i1) of (b, h) against key rows [j0, j1):
 * s[(i - i0) * BLK + (j - j0)] = scale * q_i·k_j + mask, -INFINITY where
 * causal hides key j from query i. qf, kf: the widened rows; mrow scratch
 * of BLK floats for the mask's row. */
static void scores(const sc_cpu_attention_io *io, int64_t b, int64_t h, int64_t i0, int64_t i1,
                   int64_t j0, int64_t j1, const float *qf, const float *kf, float *mrow,
                   float *s) {
  const sc_attention_step *a = io->a;
  int64_t off = a->skv - a->sq, d = a->d;
  for (int64_t i = i0; i < i1; i++) {
    float *srow = s + (i - i0) * BLK;
    const float *qi = qf + (i - i0) * d;
    if (io->mask)
      load_f32(io->mask_t, io->mask, b * a->mask_stride_b + h * a->mask_stride_h + i * a->skv + j0,
               j1 - j0, mrow);
    for (int64_t j = j0; j < j1; j++) {
      float v = a->scale * dot(qi, kf + (j - j0) * d, d);
      if (io->mask) v += mrow[j - j0];
      if (a->causal && j > i + off) v = -INFINITY;
      srow[j - j0] = v;
    }
  }
}

/* ---- forward ---- */

static void fwd_units(void *ud, int64_t begin, int64_t end) {
  job *jb = ud;
  const sc_cpu_attention_io *io = jb->io;
  const sc_attention_step *a = io->a;
  int64_t d = a->d, dv = a->dv_dim, grp = a->heads / a->kv_heads, off = a->skv - a->sq;
  size_t n = (size_t)BLK * (size_t)(2 * d + dv + dv + BLK + 3) + BLK;
  float *buf = sc_malloc(n * sizeof *buf);
  if (!buf) {
    atomic_store(&jb->nomem, true);
    return;
  }
  float *qf = buf, *kf = qf + BLK * d, *vf = kf + BLK * d, *acc = vf + BLK * dv;
  float *s = acc + BLK * dv, *m = s + BLK * BLK, *l = m + BLK, *mrow = l + BLK;
  for (int64_t u = begin; u < end; u++) {
    int64_t bh = u / jb->nqb, qb = u % jb->nqb, b = bh / a->heads, h = bh % a->heads;
    int64_t kh = b * a->kv_heads + h / grp;
    int64_t i0 = qb * BLK, i1 = mini(a->sq, i0 + BLK), rows = i1 - i0;
    load_f32(io->t, io->q, (bh * a->sq + i0) * d, rows * d, qf);
    for (int64_t r = 0; r < rows; r++) m[r] = -INFINITY, l[r] = 0;
    memset(acc, 0, (size_t)(rows * dv) * sizeof *acc);
    int64_t jmax = a->causal ? mini(a->skv, i1 - 1 + off + 1) : a->skv; /* keys [0, jmax) */
    for (int64_t j0 = 0; j0 < jmax; j0 += BLK) {
      int64_t j1 = mini(jmax, j0 + BLK), cols = j1 - j0;
      load_f32(io->t, io->k, (kh * a->skv + j0) * d, cols * d, kf);
      load_f32(io->t, io->v, (kh * a->skv + j0) * dv, cols * dv, vf);
      scores(io, b, h, i0, i1, j0, j1, qf, kf, mrow, s);
      for (int64_t r = 0; r < rows; r++) {
        float *srow = s + r * BLK, mx = m[r];
        for (int64_t c = 0; c < cols; c++) mx = srow[c] > mx ? srow[c] : mx;
        if (mx == -INFINITY) continue; /* nothing visible yet */
        float alpha = expf(m[r] - mx), sum = 0;
        float *ar = acc + r * dv;
        if (alpha != 1.0f) {
          for (int64_t c = 0; c < dv; c++) ar[c] *= alpha;
        }
        for (int64_t c = 0; c < cols; c++) {
          float p = expf(srow[c] - mx);
          sum += p;
          if (p != 0.0f) axpy(ar, p, vf + c * dv, dv);
        }
        l[r] = l[r] * alpha + sum;
        m[r] = mx;
      }
    }
    for (int64_t r = 0; r < rows; r++) {
      float inv = l[r] > 0 ? 1.0f / l[r] : 0.0f;
      for (int64_t c = 0; c < dv; c++) acc[r * dv + c] *= inv;
      io->lse[bh * a->sq + i0 + r] = l[r] > 0 ? m[r] + logf(l[r]) : -INFINITY;
    }
    store_f32(io->t, io->o, (bh * a->sq + i0) * dv, rows * dv, acc);
  }
  sc_free(buf);
}

/* Units over [0, total) in chunks: a few per thread, inline when tp is
 * NULL or there is one unit. */
static void run_units(sc_thread_pool *tp, sc_pool_fn fn, job *jb, int64_t total) {
  int64_t chunks = tp ? (int64_t)sc_thread_pool_threads(tp) * 4 : 1;
  if (chunks > total) chunks = total;
  if (!tp || chunks <= 1)
    fn(jb, 0, total);
  else
    sc_thread_pool_run(tp, fn, jb, total, chunks);
}

bool sc_cpu_attention_forward(sc_thread_pool *tp, const sc_cpu_attention_io *io) {
  const sc_attention_step *a = io->a;
  job jb = {.io = io, .nqb = (a->sq + BLK - 1) / BLK, .nkb = (a->skv + BLK - 1) / BLK};
  atomic_init(&jb.nomem, false);
  run_units(tp, fwd_units, &jb, a->batch * a->heads * jb.nqb);
  return !atomic_load(&jb.nomem);
}

/* ---- backward ---- */

/* The widened dO and O rows [i0, i1) of head bh, and D_i = dO_i·O_i. */
static void load_do(const sc_cpu_attention_io *io, int64_t bh, int64_t i0, int64_t rows,
                    float *dof, float *of, float *dd) {
  const sc_attention_step *a = io->a;
  int64_t dv = a->dv_dim;
  load_f32(io->t, io->d_o, (bh * a->sq + i0) * dv, rows * dv, dof);
  load_f32(io->t, io->o, (bh * a->sq + i0) * dv, rows * dv, of);
  for (int64_t r = 0; r < rows; r++) dd[r] = dot(dof + r * dv, of + r * dv, dv);
}

/* dS of one block in place over s (the scores): p = exp(s - lse_i), dP =
 * dO_i·v_j, dS = p (dP - D_i); p is kept in pout when given (for dV). */
static void block_ds(const sc_cpu_attention_io *io, int64_t bh, int64_t i0, int64_t rows,
                     int64_t cols, const float *dof, const float *vf, const float *dd, float *s,
                     float *pout) {
  const sc_attention_step *a = io->a;
  int64_t dv = a->dv_dim;
  for (int64_t r = 0; r < rows; r++) {
    float lse = io->lse[bh * a->sq + i0 + r];
    float *srow = s + r * BLK;
    for (int64_t c = 0; c < cols; c++) {
      float p = lse == -INFINITY || srow[c] == -INFINITY ? 0.0f : expf(srow[c] - lse);
      if (pout) pout[r * BLK + c] = p;
      srow[c] = p == 0.0f ? 0.0f : p * (dot(dof + r * dv, vf + c * dv, dv) - dd[r]);
    }
  }
}

/* dq of query block qb of head bh, over every visible key block. */
static void dq_units(void *ud, int64_t begin, int64_t end) {
  job *jb = ud;
  const sc_cpu_attention_io *io = jb->io;
  const sc_attention_step *a = io->a;
  int64_t d = a->d, dv = a->dv_dim, grp = a->heads / a->kv_heads, off = a->skv - a->sq;
  size_t n = (size_t)BLK * (size_t)(3 * d + 3 * dv + BLK + 2);
  float *buf = sc_malloc(n * sizeof *buf);
  if (!buf) {
    atomic_store(&jb->nomem, true);
    return;
  }
  float *qf = buf, *kf = qf + BLK * d, *dqf = kf + BLK * d, *vf = dqf + BLK * d;
  float *dof = vf + BLK * dv, *of = dof + BLK * dv, *s = of + BLK * dv, *dd = s + BLK * BLK;
  float *mrow = dd + BLK;
  for (int64_t u = begin; u < end; u++) {
    int64_t bh = u / jb->nqb, qb = u % jb->nqb, b = bh / a->heads, h = bh % a->heads;
    int64_t kh = b * a->kv_heads + h / grp;
    int64_t i0 = qb * BLK, i1 = mini(a->sq, i0 + BLK), rows = i1 - i0;
    load_f32(io->t, io->q, (bh * a->sq + i0) * d, rows * d, qf);
    load_do(io, bh, i0, rows, dof, of, dd);
    memset(dqf, 0, (size_t)(rows * d) * sizeof *dqf);
    int64_t jmax = a->causal ? mini(a->skv, i1 - 1 + off + 1) : a->skv;
    for (int64_t j0 = 0; j0 < jmax; j0 += BLK) {
      int64_t j1 = mini(jmax, j0 + BLK), cols = j1 - j0;
      load_f32(io->t, io->k, (kh * a->skv + j0) * d, cols * d, kf);
      load_f32(io->t, io->v, (kh * a->skv + j0) * dv, cols * dv, vf);
      scores(io, b, h, i0, i1, j0, j1, qf, kf, mrow, s);
      block_ds(io, bh, i0, rows, cols, dof, vf, dd, s, NULL);
      for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
          if (s[r * BLK + c] != 0.0f) axpy(dqf + r * d, a->scale * s[r * BLK + c], kf + c * d, d);
    }
    store_f32(io->t, io->dq, (bh * a->sq + i0) * d, rows * d, dqf);
  }
  sc_free(buf);
}

/* dk and dv of key block kb of kv head (b, kh), over the query heads that
 * share it and their query blocks that see it. */
static void dkv_units(void *ud, int64_t begin, int64_t end) {
  job *jb = ud;
  const sc_cpu_attention_io *io = jb->io;
  const sc_attention_step *a = io->a;
  int64_t d = a->d, dv = a->dv_dim, grp = a->heads / a->kv_heads, off = a->skv - a->sq;
  size_t n = (size_t)BLK * (size_t)(3 * d + 4 * dv + 2 * BLK + 2);
  float *buf = sc_malloc(n * sizeof *buf);
  if (!buf) {
    atomic_store(&jb->nomem, true);
    return;
  }
  float *qf = buf, *kf = qf + BLK * d, *dkf = kf + BLK * d, *vf = dkf + BLK * d;
  float *dvf = vf + BLK * dv, *dof = dvf + BLK * dv, *of = dof + BLK * dv, *s = of + BLK * dv;
  float *p = s + BLK * BLK, *dd = p + BLK * BLK, *mrow = dd + BLK;
  for (int64_t u = begin; u < end; u++) {
    int64_t bkh = u / jb->nkb, kb = u % jb->nkb, b = bkh / a->kv_heads, kv = bkh % a->kv_heads;
    int64_t j0 = kb * BLK, j1 = mini(a->skv, j0 + BLK), cols = j1 - j0;
    load_f32(io->t, io->k, (bkh * a->skv + j0) * d, cols * d, kf);
    load_f32(io->t, io->v, (bkh * a->skv + j0) * dv, cols * dv, vf);
    memset(dkf, 0, (size_t)(cols * d) * sizeof *dkf);
    memset(dvf, 0, (size_t)(cols * dv) * sizeof *dvf);
    /* causal: query i sees key j0 iff i >= j0 - off */
    int64_t imin = a->causal ? j0 - off : 0;
    if (imin < 0) imin = 0;
    for (int64_t h = kv * grp; h < (kv + 1) * grp; h++) {
      int64_t bh = b * a->heads + h;
      for (int64_t i0 = (imin / BLK) * BLK; i0 < a->sq; i0 += BLK) {
        int64_t i1 = mini(a->sq, i0 + BLK), rows = i1 - i0;
        load_f32(io->t, io->q, (bh * a->sq + i0) * d, rows * d, qf);
        load_do(io, bh, i0, rows, dof, of, dd);
        scores(io, b, h, i0, i1, j0, j1, qf, kf, mrow, s);
        block_ds(io, bh, i0, rows, cols, dof, vf, dd, s, p);
        for (int64_t r = 0; r < rows; r++)
          for (int64_t c = 0; c < cols; c++) {
            if (p[r * BLK + c] != 0.0f) axpy(dvf + c * dv, p[r * BLK + c], dof + r * dv, dv);
            if (s[r * BLK + c] != 0.0f)
              axpy(dkf + c * d, a->scale * s[r * BLK + c], qf + r * d, d);
          }
      }
    }
    store_f32(io->t, io->dk, (bkh * a->skv + j0) * d, cols * d, dkf);
    store_f32(io->t, io->dv, (bkh * a->skv + j0) * dv, cols * dv, dvf);
  }
  sc_free(buf);
}

bool sc_cpu_attention_backward(sc_thread_pool *tp, const sc_cpu_attention_io *io) {
  const sc_attention_step *a = io->a;
  job jb = {.io = io, .nqb = (a->sq + BLK - 1) / BLK, .nkb = (a->skv + BLK - 1) / BLK};
  atomic_init(&jb.nomem, false);
  run_units(tp, dq_units, &jb, a->batch * a->heads * jb.nqb);
  run_units(tp, dkv_units, &jb, a->batch * a->kv_heads * jb.nkb);
  return !atomic_load(&jb.nomem);
}
