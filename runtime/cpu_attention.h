/* cpu_attention.h — the CPU device's fused attention (program.h's
 * SC_STEP_ATTENTION and SC_STEP_ATTENTION_GRAD), FlashAttention's
 * algorithm over host memory.
 *
 * The forward runs per (batch·head, block of SC_CPU_ATTN_BLOCK query
 * rows): it walks the key blocks with an online softmax (running maximum,
 * running sum, accumulator rescaled when the maximum grows), so no score
 * matrix is ever in memory; key blocks wholly above a causal diagonal are
 * skipped. It writes o and the rows' log-sum-exp (lse, f32).
 * The backward recomputes each probability from lse (p = exp(s - lse)),
 * with D = rowsum(dO ∘ O) and dS = P ∘ (dP − D): dq per (batch·head, query
 * block) over the key blocks, then dk and dv per (batch·kv head, key
 * block) over the query heads of that kv head and their query blocks, so
 * that every output row has one writer (no races, no atomics). The scores
 * are computed twice in the backward (once per pass).
 *
 * bf16 and f16 operands are widened to f32 per block; every product and
 * sum accumulates in f32; results are rounded to the operands' dtype once.
 * The work units' boundaries depend only on the shapes, never on the
 * thread count: results are bit-identical with 1 or N threads.
 *
 * Thread-safe over distinct outputs; tp may be NULL (runs inline). The
 * step's extents must have passed sc_attention_problem (program.h). */
#ifndef SC_RUNTIME_CPU_ATTENTION_H
#define SC_RUNTIME_CPU_ATTENTION_H

#include "codegen/program.h"
#include "runtime/device.h"

enum { SC_CPU_ATTN_BLOCK = 64 }; /* query and key rows per block */

/* The host addresses of an attention step's buffers (NULL where the step
 * names none) and their dtypes: t of q, k, v, o, d_o, dq, dk, dv; mask_t
 * of the mask. */
typedef struct sc_cpu_attention_io {
  const sc_attention_step *a;
  sc_dtype t, mask_t;
  const void *q, *k, *v, *mask;
  void *o;
  float *lse;
  const void *d_o;
  void *dq, *dk, *dv;
} sc_cpu_attention_io;

/* ATTENTION: writes io->o and io->lse. false: out of memory (nothing
 * written is then to be trusted). */
bool sc_cpu_attention_forward(sc_thread_pool *tp, const sc_cpu_attention_io *io);
/* ATTENTION_GRAD: reads o, lse and d_o, writes dq, dk, dv. false: out of
 * memory. */
bool sc_cpu_attention_backward(sc_thread_pool *tp, const sc_cpu_attention_io *io);

#endif
