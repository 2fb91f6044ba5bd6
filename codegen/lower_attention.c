/* lower_attention.c — the fused attention ops (ir/attention.h) lowered to
 * one step each: FusedAttention to SC_STEP_ATTENTION, FusedAttentionGrad
 * to SC_STEP_ATTENTION_GRAD (program.h's sc_attention_step), reading and
 * writing the values' buffers as they are (contiguous row-major, which
 * every program buffer is); the lse buffer is the f32 value the op
 * declares. */
#include <string.h>

#include "codegen/lower_internal.h"
#include "ir/attention.h"

static sc_status attention_build(sc_lower_ctx *cx, const sc_node *n) {
  sc_attention_shape sh;
  if (sc_attention_read(cx->g, n, &sh) != SC_OK) {
    *cx->diag = cx->g->diag;
    return cx->diag->status;
  }
  bool grad = n->op == SC_OP_FUSED_ATTENTION_GRAD;
  sc_step s;
  memset(&s, 0, sizeof s);
  s.kind = grad ? SC_STEP_ATTENTION_GRAD : SC_STEP_ATTENTION;
  s.kernel = -1;
  sc_attention_step *a = &s.attn;
  *a = (sc_attention_step){.mask = -1, .d_o = -1, .dq = -1, .dk = -1, .dv = -1,
                           .batch = sh.b, .heads = sh.h, .kv_heads = sh.kvh, .sq = sh.sq,
                           .skv = sh.skv, .d = sh.d, .dv_dim = sh.dv,
                           .mask_stride_b = sh.mask_stride_b, .mask_stride_h = sh.mask_stride_h,
                           .scale = (float)sh.scale, .causal = sh.causal};
  int32_t mask_in = grad ? 6 : 3;
  bool ok = (a->q = sc_lower_buffer_of(cx, n->inputs[0])) >= 0 &&
            (a->k = sc_lower_buffer_of(cx, n->inputs[1])) >= 0 &&
            (a->v = sc_lower_buffer_of(cx, n->inputs[2])) >= 0 &&
            (!sh.has_mask || (a->mask = sc_lower_buffer_of(cx, n->inputs[mask_in])) >= 0);
  if (ok && grad)
    ok = (a->o = sc_lower_buffer_of(cx, n->inputs[3])) >= 0 &&
         (a->lse = sc_lower_buffer_of(cx, n->inputs[4])) >= 0 &&
         (a->d_o = sc_lower_buffer_of(cx, n->inputs[5])) >= 0 &&
         (a->dq = sc_lower_buffer_of(cx, n->outputs[0])) >= 0 &&
         (a->dk = sc_lower_buffer_of(cx, n->outputs[1])) >= 0 &&
         (a->dv = sc_lower_buffer_of(cx, n->outputs[2])) >= 0;
  else if (ok)
    ok = (a->o = sc_lower_buffer_of(cx, n->outputs[0])) >= 0 &&
         (a->lse = sc_lower_buffer_of(cx, n->outputs[1])) >= 0;
  if (!ok) return sc_lower_error(cx, n, SC_ERR_NOMEM, "out of memory");
  return sc_lower_add_step(cx, &s);
}
const sc_lowering sc_lw_attention = {SC_LOWER_STEP, NULL, attention_build};
