/* test_search.c — the planner's block model and search
 * (passes/plan/block_model.h, passes/plan/search.h) on the shape-only
 * samples/gpt_1p5b.onnx (48 blocks, hidden 1600, 25 heads, sequence 128)
 * and the tiny samples/gpt2.onnx.
 *
 * Block model: the blocks and their figures against the model's
 * configuration by hand (a GPT-2 block's GEMMs are 2·s·12h² + 4·s²·h
 * FLOPs; its parameters 12h² + 13h), and the parameters against the
 * graph's own count. Search: every kept candidate is a strategy shardc
 * runs (the devices factor into pp·dp·fsdp·tp, tp divides the heads and
 * stays in a node, dp·fsdp divides the batch, M x micro-batch x dp x fsdp
 * = the batch), fits the memory, and the list is sorted; the pruned
 * counts add up; re-estimating the best gives its figures again; more
 * GPUs for the same batch never give a slower best; a memory budget
 * below every plan keeps none and names the closest; a batch no
 * data-parallel size divides is refused naming batches that do; the ZeRO
 * stages differ in memory and communication as the ZeRO paper says.
 * Inference: every kept candidate is a plan the inference path runs (dp
 * x cp x tp x pp on at most the cluster's devices, cp dividing the sequence into 2·cp chunks, no fsdp, ZeRO or recompute,
 * GPipe, dp dividing the batch for latency), sorted by the objective; the
 * estimate has no backward, optimizer or recompute term and is below the
 * training step of the same mesh; throughput serves dp batches a step and
 * ranks by step / dp, and its best serves at least as many examples per
 * second as latency's best. Expert parallelism on samples/moe.onnx: the
 * block model's experts and all-to-all buffers, ep=2 against dp=2 (the
 * experts' state halved, the all-to-alls costed), fsdp=2 x ep=2 holding
 * a quarter of every parameter as fsdp=4 does, the candidates meshes ep.c
 * runs; a dense model gets no ep. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "driver/driver.h"
#include "passes/plan/cost.h"
#include "passes/plan/search.h"
#include "test_plan_util.h"

#define GPT_1P5B SC_SOURCE_DIR "/samples/gpt_1p5b.onnx"
#define GPT2 SC_SOURCE_DIR "/samples/gpt2.onnx"
#define MOE SC_SOURCE_DIR "/samples/moe.onnx"

/* The forward graph of one example, shapes only, and its block model;
 * the attention cores fused unless no_fuse. */
static void model_of_fused(const char *path, bool no_fuse, sc_block_model *bm,
                           int64_t *graph_params) {
  sc_pass_opts po;
  sc_pass_opts_init(&po);
  po.quiet = true;
  sc_build_opts o;
  sc_build_opts_init(&o);
  o.model = path;
  o.no_weights = true;
  o.codegen = false;
  o.pass = &po;
  o.no_fuse_attention = no_fuse;
  sc_build *b = NULL;
  sc_diag d = {0};
  sc_diag_clear(&d);
  assert_int_equal(sc_build_run(&o, &b, &d), SC_OK);
  *graph_params = 0;
  for (int32_t i = 0; i < b->graph->n_values; i++) {
    const sc_value *v = &b->graph->values[i];
    if ((v->flags & SC_VALUE_PARAM) && !(v->flags & SC_VALUE_DEAD))
      *graph_params += sc_value_numel(v);
  }
  assert_int_equal(sc_block_model_build(b->graph, bm, &d), SC_OK);
  sc_build_destroy(b);
}

static void model_of(const char *path, sc_block_model *bm, int64_t *graph_params) {
  model_of_fused(path, false, bm, graph_params);
}

/* The unfused core: its two products' FLOPs (4 s² h) and its saved
 * values (the scores' and the probabilities'); fused (ir/attention.h):
 * the causal core's visible pairs, s (s + 1) / 2 per head, at 2 (d + dv)
 * FLOPs each, and nothing saved for selective recompute to drop. */
static void test_block_model(void **state) {
  (void)state;
  sc_block_model bm;
  int64_t n;
  double h = 1600, s = 128;
  model_of(GPT_1P5B, &bm, &n);
  assert_true(bm.attn_fused);
  assert_int_equal(bm.heads, 25);
  assert_true(bm.block.gemm_flops == 2 * s * 12 * h * h + 2 * s * (s + 1) * h);
  assert_true(bm.block.attn_saved_bytes == 0);
  /* the products outside the core by shape (m, n, k), each by a 2-D
   * weight: QKV (s, 3h, h), the attention's output (s, h, h), the MLP's
   * up (s, 4h, h) and down (s, h, 4h) projections, 2·s·12h² FLOPs */
  static const int64_t shapes[4][3] = {{128, 4800, 1600}, {128, 1600, 1600},
                                       {128, 6400, 1600}, {128, 1600, 6400}};
  assert_int_equal(bm.block.n_gemms, 4);
  double listed = 0;
  for (int32_t i = 0; i < bm.block.n_gemms; i++) {
    const sc_block_gemm *e = &bm.block.gemms[i];
    bool found = false;
    for (int j = 0; j < 4; j++)
      found |= e->m == shapes[j][0] && e->n == shapes[j][1] && e->k == shapes[j][2];
    assert_true(found && e->weight);
    assert_true(e->flops == 2.0 * (double)e->m * (double)e->n * (double)e->k);
    listed += e->flops;
  }
  assert_true(listed == 2 * s * 12 * h * h);
  /* the block's last product, which full recompute does not rerun: the
   * MLP's down projection, (s, h, 4h) */
  const sc_block_gemm *last = &bm.block.gemms[bm.block.last_gemm];
  assert_true(last->n == 1600 && last->k == 6400);
  assert_true(bm.block.last_gemm_flops == 2 * s * h * 4 * h);
  /* of the stream's kernels, the two norms' (row kernels), which a
   * tensor-parallel step runs on the gathered stream: each reads and
   * writes [seq, hidden] f32 at least */
  assert_true(bm.block.row_mem_bytes >= 2 * 2 * s * h * 4 &&
              bm.block.row_mem_bytes < bm.block.whole_mem_bytes);
  /* the lookups' tables outside the blocks: the token and position
   * embeddings, [50257, 1600] and [1024, 1600] */
  assert_true(bm.outside.lookup_elems == (50257.0 + 1024.0) * h);
  assert_true(bm.block.lookup_elems == 0);
  /* a bf16 step's low kernels are part of the memory-bound bytes */
  assert_true(bm.block.low_mem_bytes > 0 && bm.block.low_mem_bytes < bm.block.mem_bytes);
  model_of_fused(GPT_1P5B, true, &bm, &n);
  assert_false(bm.attn_fused);
  assert_int_equal(bm.n_blocks, 48);
  assert_int_equal(bm.hidden, 1600);
  assert_int_equal(bm.heads, 25);
  assert_int_equal(bm.seq, 128);
  assert_int_equal(bm.vocab, 50257);
  /* the cross-entropy's kept values per example beside the logits: the
   * fused loss's log-sum-exp, a row's f32; the decomposed form's
   * log-probabilities and one-hot, [seq, vocab] f32 each */
  assert_true(bm.loss_saved_bytes == s * 4);
  assert_true(bm.loss_split_saved_bytes == 2 * s * 50257 * 4);
  assert_true(bm.block.gemm_flops == 2 * s * 12 * h * h + 4 * s * s * h);
  assert_int_equal(bm.block.params, (int64_t)(12 * h * h + 13 * h));
  assert_int_equal(bm.block.split_params, (int64_t)(12 * h * h));
  assert_int_equal(bm.block.param_tensors, 12);
  assert_int_equal(sc_block_model_params(&bm), n);
  /* full recompute keeps the block input: [seq, hidden] in f32 */
  assert_true(bm.block.input_bytes == s * h * 4);
  assert_true(bm.block.attn_saved_bytes > 0 && bm.block.attn_saved_bytes < bm.block.saved_bytes);
  assert_true(bm.block.whole_saved_bytes > 0 &&
              bm.block.whole_saved_bytes + bm.block.attn_saved_bytes < bm.block.saved_bytes);
}

static sc_status run(const sc_block_model *bm, const char *cluster, int64_t batch, int64_t budget,
                     sc_search_result *r, sc_diag *d) {
  static sc_cluster c;
  c = preset(cluster);
  sc_search_opts o = {.cluster = &c, .global_batch = batch, .dtype = SC_CLUSTER_BF16,
                      .adamw = true, .memory_budget = budget};
  sc_diag_clear(d);
  return sc_search_run(bm, &o, r, d);
}

static void test_search_space(void **state) {
  (void)state;
  sc_block_model bm;
  int64_t n;
  model_of(GPT_1P5B, &bm, &n);
  sc_search_result r;
  sc_diag d = {0};
  assert_int_equal(run(&bm, "h100-sxm:8x2", 64, 0, &r, &d), SC_OK);
  assert_int_equal(r.n_top, SC_SEARCH_TOP);
  assert_true(r.evaluated > 0);
  assert_int_equal(r.pruned, r.pruned_heads + r.pruned_node + r.pruned_batch +
                                 r.pruned_microbatch + r.pruned_state + r.pruned_bound +
                                 r.pruned_fsdp + r.pruned_cp + r.pruned_ep + r.pruned_split);
  assert_true(r.pruned_heads > 0); /* 2, 4, 8, 16 do not divide 25 heads */
  for (int32_t i = 0; i < r.n_top; i++) {
    const sc_search_cand *c = &r.top[i];
    assert_int_equal(c->pp * c->dp * c->fsdp * c->cp * c->tp, 16);
    assert_true(128 % (2 * c->cp) == 0);
    assert_int_equal(bm.heads % c->tp, 0);
    assert_true(c->tp <= 8);
    assert_int_equal(64 % (c->dp * c->fsdp), 0);
    assert_int_equal(c->micro_batch_size * c->microbatches * c->dp * c->fsdp, 64);
    assert_true(c->fits && c->peak_bytes > 0);
    assert_true(c->peak_bytes <= 81559LL * 1024 * 1024);
    assert_true(c->step_s > 0 && c->step_s == c->step_s);
    assert_true(c->mfu > 0 && c->mfu < 1);
    if (i) assert_true(r.top[i - 1].step_s <= c->step_s);
    if (c->pp == 1) assert_int_equal(c->microbatches, 1);
    if (strcmp(c->schedule, "interleaved") == 0) assert_int_equal(c->microbatches % c->pp, 0);
  }
  /* the estimate of the best, recomputed alone, is the search's */
  sc_search_cand again = r.top[0];
  again.step_s = 0;
  again.peak_bytes = 0;
  sc_cluster c = preset("h100-sxm:8x2");
  sc_search_opts o = {.cluster = &c, .global_batch = 64, .dtype = SC_CLUSTER_BF16, .adamw = true};
  assert_int_equal(sc_search_estimate(&bm, &o, &again, &d), SC_OK);
  assert_true(again.step_s == r.top[0].step_s);
  assert_int_equal(again.peak_bytes, r.top[0].peak_bytes);
}

/* tp that divides the heads but not the dim it splits of a block's GEMM
 * weight (the MLP's 6400 made 6402: 2 divides it, 4 and 8 do not) is
 * pruned, counted apart: tp.c would keep that weight whole and every tp
 * rank would compute its product whole. With 32 heads (hidden 1600, 50 a
 * head) no tp is pruned for the heads. */
static void test_split_pruned(void **state) {
  (void)state;
  sc_block_model bm;
  int64_t n;
  model_of(GPT_1P5B, &bm, &n);
  bm.heads = 32;
  int32_t widened = 0;
  for (int32_t i = 0; i < bm.block.n_gemms; i++)
    if (bm.block.gemms[i].weight && bm.block.gemms[i].n == 4 * bm.hidden) {
      bm.block.gemms[i].n += 2;
      widened++;
    } else if (bm.block.gemms[i].weight && bm.block.gemms[i].k == 4 * bm.hidden) {
      bm.block.gemms[i].k += 2;
      widened++;
    }
  assert_int_equal(widened, 2); /* c_fc's n, c_proj's k */
  sc_search_result r;
  sc_diag d = {0};
  assert_int_equal(run(&bm, "h100-sxm:8x2", 64, 0, &r, &d), SC_OK);
  assert_int_equal(r.pruned_heads, 0);
  assert_true(r.pruned_split > 0); /* tp = 4, 8 (and 16 across the nodes) */
  assert_int_equal(r.pruned, r.pruned_heads + r.pruned_node + r.pruned_batch +
                                 r.pruned_microbatch + r.pruned_state + r.pruned_bound +
                                 r.pruned_fsdp + r.pruned_cp + r.pruned_ep + r.pruned_split);
  for (int32_t i = 0; i < r.n_top; i++) assert_true(r.top[i].tp <= 2);
  for (int32_t i = 0; i < r.n_over; i++) assert_true(r.over[i].tp <= 2);
  for (int32_t i = 0; i < r.n_near; i++) assert_true(r.near[i].tp <= 2);
  for (int32_t k = 0; k < 2; k++) assert_true(!r.have_kind_best[k] || r.kind_best[k].tp <= 2);
  /* the unchanged model: nothing pruned for a split dim */
  model_of(GPT_1P5B, &bm, &n);
  assert_int_equal(run(&bm, "h100-sxm:8x2", 64, 0, &r, &d), SC_OK);
  assert_int_equal(r.pruned_split, 0);
  assert_true(r.pruned_heads > 0);
}

/* More GPUs for the same global batch: the best estimate is never slower. */
static void test_more_gpus(void **state) {
  (void)state;
  sc_block_model bm;
  int64_t n;
  model_of(GPT_1P5B, &bm, &n);
  const char *clusters[] = {"h100-sxm:8x1", "h100-sxm:8x2", "h100-sxm:8x4", "h100-sxm:8x8"};
  double prev = 0;
  for (int i = 0; i < 4; i++) {
    sc_search_result r;
    sc_diag d = {0};
    assert_int_equal(run(&bm, clusters[i], 64, 0, &r, &d), SC_OK);
    assert_true(r.n_top > 0);
    if (i) assert_true(r.top[0].step_s <= prev);
    prev = r.top[0].step_s;
  }
}

/* The property plan --auto reports: the best plan on a cluster is never
 * estimated slower than the best on half of it, or the comparison says
 * so and why (the terms that grew, the batch per GPU). Over models,
 * clusters and batches where both happen (gpt2's tiny blocks at a batch of
 * 4 on 16 GPUs: more GPUs only add communication). */
static void test_fewer_devices(void **state) {
  (void)state;
  struct { const char *model, *cluster; int64_t batch; } cases[] = {
      {GPT_1P5B, "h100-sxm:8x2", 64}, {GPT_1P5B, "h100-sxm:8x4", 64},
      {GPT_1P5B, "h100-sxm:8x2", 16}, {GPT2, "h100-sxm:8x2", 4},
      {GPT2, "h100-sxm:8x1", 8},     {GPT2, "h100-sxm:8x4", 64}};
  int n_slower = 0, n_faster = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    sc_block_model bm;
    int64_t n;
    model_of(cases[i].model, &bm, &n);
    sc_search_result *r = sc_calloc(1, sizeof *r);
    assert_non_null(r);
    sc_diag d = {0};
    assert_int_equal(run(&bm, cases[i].cluster, cases[i].batch, 0, r, &d), SC_OK);
    assert_true(r->n_top > 0);
    sc_cluster c = preset(cases[i].cluster);
    sc_search_opts o = {.cluster = &c, .global_batch = cases[i].batch,
                        .dtype = SC_CLUSTER_BF16, .adamw = true};
    sc_search_fewer f;
    assert_int_equal(sc_search_fewer_devices(&bm, &o, &r->top[0], &f, &d), SC_OK);
    assert_true(f.searched);
    assert_int_equal(f.devices * 2, sc_cluster_devices(&c));
    assert_true(f.why[0] != 0);
    if (f.have) {
      /* monotone, or the reason is there */
      assert_true(f.slower == (r->top[0].step_s > f.best.step_s));
      assert_int_equal(f.best.pp * f.best.dp * f.best.fsdp * f.best.tp, f.devices);
      if (f.slower) {
        n_slower++;
        assert_non_null(strstr(f.why, "slower than the best on"));
        assert_non_null(strstr(f.why, "examples a GPU"));
      } else {
        n_faster++;
        assert_true(r->top[0].step_s <= f.best.step_s);
      }
    }
    sc_free(r);
  }
  /* both branches were exercised */
  assert_true(n_slower > 0 && n_faster > 0);
}

static void test_budget(void **state) {
  (void)state;
  sc_block_model bm;
  int64_t n;
  model_of(GPT_1P5B, &bm, &n);
  sc_search_result r;
  sc_diag d = {0};
  int64_t budget = 2LL << 30;
  assert_int_equal(run(&bm, "h100-sxm:8x1", 64, budget, &r, &d), SC_OK);
  assert_int_equal(r.n_top, 0);
  assert_true(r.have_closest);
  assert_true(r.closest.peak_bytes > budget && !r.closest.fits);
  char why[256];
  sc_search_why(&r.closest, &r.closest, budget, why, sizeof why);
  assert_non_null(strstr(why, "does not fit: pipeline rank"));
  /* a budget that the training state of a plan exceeds prunes it */
  assert_true(r.pruned_state > 0);
  /* a budget every plan fits keeps as many as the device's memory does */
  sc_search_result r2;
  assert_int_equal(run(&bm, "h100-sxm:8x1", 64, 0, &r2, &d), SC_OK);
  assert_true(r2.n_top > 0 && r2.pruned_state < r.pruned_state);
}

/* The ZeRO stages (Rajbhandari et al. 2020): 1 shards the optimizer
 * state, 2 the gradients too, 3 the parameters too, so each holds less
 * than the one before, by what it shards; 1 and 2 move the same bytes (a
 * reduce-scatter of the gradients and an all-gather of the updated
 * parameters a step), 3 gathers the parameters again for the backward:
 * and moves more bytes, but the compiled step groups its gathers per
 * block, not 1 and 2's, so on 16 ranks over two nodes it communicates
 * less (one example per rank, and eight). */
static void test_zero_stages(void **state) {
  (void)state;
  sc_block_model bm;
  int64_t n;
  model_of(GPT_1P5B, &bm, &n);
  sc_cluster cl = preset("h100-sxm:8x2");
  sc_diag d = {0};
  sc_diag_clear(&d);
  for (int64_t mbs = 1; mbs <= 8; mbs *= 8) {
    sc_search_opts o = {.cluster = &cl, .global_batch = 16 * mbs, .dtype = SC_CLUSTER_BF16,
                        .adamw = true};
    sc_search_cand z[4];
    for (int32_t k = 1; k <= 3; k++) {
      z[k] = (sc_search_cand){.dp = 1, .fsdp = 16, .tp = 1, .pp = 1, .cp = 1, .zero = k,
                              .schedule = "gpipe", .virtual_stages = 1, .microbatches = 1,
                              .micro_batch_size = mbs};
      assert_int_equal(sc_search_estimate(&bm, &o, &z[k], &d), SC_OK);
      assert_true(z[k].fsdp_s > 0 && z[k].step_s == z[k].step_s);
    }
    /* memory: each stage shards one more part of the state; 1 -> 2 drops
     * 15/16 of the fp32 gradients (4 B an element) at least */
    double e = (double)sc_block_model_params(&bm);
    assert_true((double)(z[1].peak_bytes - z[2].peak_bytes) >= e * 4 * 15 / 16 * 0.99);
    /* 2 -> 3 drops 15/16 of the fp32 parameters (3.75 bytes an
     * element), less ZeRO-3's working memory (the gathered blocks' casts
     * and temporaries: 2.4 against 0.5 bytes an element, search.c) and
     * the two gathered blocks it holds: at least 1 byte an element */
    assert_true((double)(z[2].peak_bytes - z[3].peak_bytes) >= e);
    /* communication: 1 and 2 the same; 3 about as much, as the compiled
     * steps are: its gathers, one a block and region (bucket.c groups
     * ZeRO-3's), against 1 and 2's gathers of the updated parameters, one
     * a tensor (580 latencies over two nodes), about pay for its second
     * gather's bytes (over two nodes the reduce-scatters do not hide
     * behind the backward: search.c, behind_backward). gpt_1p5b, the same
     * mesh, bf16, AdamW (plan --train, 2026-12-07): exposed fsdp 0.248 s
     * (ZeRO-2) and 0.263 s (ZeRO-3) at batch 16, 0.240 and 0.251 at 128;
     * the estimate 0.270 and 0.272, 0.262 and 0.264. The compiled steps
     * once had ZeRO-3 below (0.239 against 0.320 at batch 16, SGD) */
    assert_true(z[1].fsdp_s == z[2].fsdp_s);
    assert_true(z[1].optimizer_s == z[2].optimizer_s);
    assert_true(z[3].fsdp_s > z[2].fsdp_s * 0.9 && z[3].fsdp_s < z[2].fsdp_s * 1.2);
  }
}

/* The estimate counts the parameters' collectives as the compiled step
 * groups them (passes/partition/bucket.c, by its rule): the counts of
 * plan --train on gpt_1p5b, one rank of the whole model (pinned in
 * tests/lit/plan/gpt_1p5b_fsdp_groups.test): at fsdp=2 ZeRO-3, 51
 * reduce-scatters (a block's in one: 48, the tensors outside blocks
 * alone); at dp=2 fp32, 198 all-reduces (DDP's 25 MiB buckets: 4 a
 * block, the 4 tensors outside, and the loss's 2 scalars, which are no
 * parameter's); at dp=2 bf16, 198 again (every gradient reduced in fp32,
 * the default --reduce-dtype), and under --reduce-dtype bf16 150 (the GEMM
 * weights' gradients bf16, the rest fp32, one open bucket per dtype: 2
 * bf16 buckets of 25 MiB and the fp32 one a block); ZeRO-1's gathers of the updated parameters one a
 * tensor (580). */
static void test_grouped_collectives(void **state) {
  (void)state;
  sc_block_model bm;
  int64_t n;
  model_of(GPT_1P5B, &bm, &n);
  assert_int_equal(bm.block.n_listed, 12);
  sc_cluster cl = preset("h100-sxm:8x1");
  sc_search_opts o = {.cluster = &cl, .global_batch = 2, .dtype = SC_CLUSTER_FP32};
  sc_search_cand c = {.dp = 2, .fsdp = 1, .tp = 1, .pp = 1, .cp = 1, .schedule = "gpipe",
                      .virtual_stages = 1, .microbatches = 1, .micro_batch_size = 1};
  assert_true(sc_search_param_collectives(&bm, &o, &c, SC_SEARCH_GROUP_DDP) == 48 * 4 + 4);
  assert_true(sc_search_param_collectives(&bm, &o, &c, SC_SEARCH_GROUP_BLOCK) == 48 + 4);
  assert_true(sc_search_param_collectives(&bm, &o, &c, SC_SEARCH_GROUP_TENSOR) == 580);
  o.dtype = SC_CLUSTER_BF16;
  assert_true(sc_search_param_collectives(&bm, &o, &c, SC_SEARCH_GROUP_DDP) == 48 * 4 + 4);
  o.reduce_low = true;
  assert_true(sc_search_param_collectives(&bm, &o, &c, SC_SEARCH_GROUP_DDP) == 48 * 3 + 4);
  /* ZeRO-3's gathers: a block's in one per dtype, the GEMM weights' in
   * bf16 apart from the rest's fp32 in a bf16 step; a step's gathers at
   * fsdp=2 the forward's and the backward's, the tensors outside once:
   * 100 in fp32 (tests/lit/plan/gpt_1p5b_fsdp_groups.test's AllGather
   * row), 196 in bf16 (GPT-2's sample compiled: 12 = 2 x 2 x 2 + 4,
   * tests/lit/plan/gpt2_zero3_gathers.test) */
  sc_search_cand z3 = c;
  z3.dp = 1;
  z3.fsdp = 2;
  z3.zero = 3;
  z3.pp = 1;
  o.dtype = SC_CLUSTER_FP32;
  assert_true(sc_search_param_collectives(&bm, &o, &z3, SC_SEARCH_GROUP_GATHER) == 48 + 4);
  assert_true(sc_search_step_gathers(&bm, &o, &z3) == 100);
  o.dtype = SC_CLUSTER_BF16;
  assert_true(sc_search_param_collectives(&bm, &o, &z3, SC_SEARCH_GROUP_GATHER) == 48 * 2 + 4);
  assert_true(sc_search_step_gathers(&bm, &o, &z3) == 196);
  z3.microbatches = 2; /* ZeRO-3 gathers for every microbatch */
  assert_true(sc_search_step_gathers(&bm, &o, &z3) == 2 * 196);
  z3.zero = 1; /* the updated parameters once, a tensor each */
  assert_true(sc_search_step_gathers(&bm, &o, &z3) == 580);
  /* two pipeline stages: the critical one holds 24 blocks */
  c.pp = 2;
  assert_true(sc_search_param_collectives(&bm, &o, &c, SC_SEARCH_GROUP_BLOCK) == 24 + 4);
  /* the reduce-scatters over fsdp: the tied embedding ([50257, 1600], read
   * by the lookup and the LM head) sharded on dim 1 (fsdp does not divide
   * 50257), its gradient's two parts in 13 chunks of rows each
   * (sc_partition_split_grad_sums): 48 + 4 - 1 + 26, the compiled step's
   * 76 (tests/lit/plan/gpt_1p5b_fsdp_groups.test: its 51 - 1 + 26) and
   * the last norm's two tensors counted apart; under --reduce-dtype bf16
   * the sum's cast comes between and nothing is split (52); in a pipeline
   * the parts are on two stages (the 24 blocks' 24 + 4) */
  assert_int_equal(bm.n_tied, 1);
  assert_true(bm.tied_dims[0][0] == 50257 && bm.tied_dims[0][1] == 1600);
  z3.pp = 1;
  z3.zero = 3;
  z3.microbatches = 1;
  o.dtype = SC_CLUSTER_FP32;
  o.reduce_low = false;
  assert_true(sc_search_step_scatters(&bm, &o, &z3) == 48 + 4 - 1 + 26);
  z3.fsdp = 8; /* 1600 / 8 rows of 50257: the same 13 chunks */
  assert_true(sc_search_step_scatters(&bm, &o, &z3) == 48 + 4 - 1 + 26);
  o.dtype = SC_CLUSTER_BF16;
  o.reduce_low = true;
  assert_true(sc_search_step_scatters(&bm, &o, &z3) == 48 + 4);
  o.reduce_low = false;
  z3.pp = 2;
  z3.microbatches = 2;
  assert_true(sc_search_step_scatters(&bm, &o, &z3) == 2 * (24 + 4));
}

/* A pipeline's bubble and hand-offs (docs/planner.md, "The estimate"):
 * the fill and drain pass each microbatch's forward and backward piece
 * but not its weight piece (codegen/pipe_schedule.c: 1F1B ends at
 * M(F+B+W) + (P-1)(F+B)), so the bubble is under (P-1) whole microbatch
 * times; zb-h1 at M >= P less by the weight pieces, and equal to 1F1B's
 * under full recompute (no weight pieces); the exposed hand-offs are one
 * message whatever M where a chunk's forward hides the others (NVLink,
 * sequence 128 here), of the stream split by tp under sequence
 * parallelism. */
static void test_pipeline_bubble(void **state) {
  (void)state;
  sc_block_model bm;
  int64_t n;
  model_of(GPT_1P5B, &bm, &n);
  sc_cluster cl = preset("h100-sxm:8x1");
  sc_search_opts o = {.cluster = &cl, .global_batch = 16, .dtype = SC_CLUSTER_BF16,
                      .adamw = true};
  sc_search_cand c = {.dp = 1, .fsdp = 1, .tp = 1, .pp = 4, .cp = 1, .schedule = "1f1b",
                      .virtual_stages = 1, .microbatches = 8, .micro_batch_size = 2,
                      .batch = 16};
  sc_diag d = {0};
  sc_diag_clear(&d);
  assert_int_equal(sc_search_estimate(&bm, &o, &c, &d), SC_OK);
  double mb = (c.compute_s + c.recompute_s) / 8;
  /* 0.29 of 3 microbatches simulated (plan --train --estimate: 1.98 ms of
   * bubble, 18.0 ms of compute over 8), 0.29 estimated: a slot holds no
   * casts since each chunk's prepare piece makes them once a step */
  assert_true(isfinite(c.bubble_s) && c.bubble_s > 3 * mb * 0.2 && c.bubble_s < 3 * mb * 0.8);
  assert_true(c.pp_s > 0);
  sc_search_cand more = c;
  more.microbatches = 16;
  more.micro_batch_size = 1;
  assert_int_equal(sc_search_estimate(&bm, &o, &more, &d), SC_OK);
  assert_true(more.pp_s < c.pp_s); /* one message of half the examples */
  sc_search_cand zb = c;
  zb.schedule = "zb-h1";
  assert_int_equal(sc_search_estimate(&bm, &o, &zb, &d), SC_OK);
  assert_true(zb.bubble_s > 0 && zb.bubble_s < c.bubble_s);
  sc_search_cand full = c, zb_full = zb;
  full.recompute = zb_full.recompute = SC_SEARCH_RECOMPUTE_FULL;
  assert_int_equal(sc_search_estimate(&bm, &o, &full, &d), SC_OK);
  assert_int_equal(sc_search_estimate(&bm, &o, &zb_full, &d), SC_OK);
  assert_true(fabs(full.bubble_s - zb_full.bubble_s) <= 1e-12 * full.bubble_s);
  /* interleaved (Megatron's order): (pp - 1) chunk slots, (pp - 1)/V of
   * 1F1B's stage slots, each chunk with its two hand-offs (V times a
   * stage's: slightly more than half of 1F1B's bubble at V = 2) */
  sc_search_cand il = c;
  il.schedule = "interleaved";
  il.virtual_stages = 2;
  assert_int_equal(sc_search_estimate(&bm, &o, &il, &d), SC_OK);
  printf("bubble: 1f1b %.6g s, interleaved V=2 %.6g s\n", c.bubble_s, il.bubble_s);
  assert_true(il.bubble_s >= c.bubble_s / 2 && il.bubble_s < c.bubble_s * 0.6);
  /* sequence parallelism hands on the rank's shard of the stream */
  sc_search_cand tp = c, sp;
  tp.tp = 2;
  tp.pp = 4;
  sp = tp;
  sp.sequence_parallel = true;
  assert_int_equal(sc_search_estimate(&bm, &o, &tp, &d), SC_OK);
  assert_int_equal(sc_search_estimate(&bm, &o, &sp, &d), SC_OK);
  assert_true(sp.pp_s < tp.pp_s);
}

/* The loss's kept values in the memory estimate: the decomposed form's,
 * split by tp, on a tensor-parallel plan only (the step keeps that form
 * there: passes/train.h split_vocab_loss); the fused form's otherwise;
 * per example of the micro-batch (M = 1 here). */
static void test_loss_memory(void **state) {
  (void)state;
  sc_block_model bm;
  int64_t n;
  model_of(GPT_1P5B, &bm, &n);
  sc_cluster cl = preset("h100-sxm:8x1");
  sc_search_opts o = {.cluster = &cl, .global_batch = 8, .dtype = SC_CLUSTER_BF16,
                      .adamw = true};
  for (int64_t tp = 1; tp <= 2; tp++) {
    sc_search_cand c = {.dp = 8 / tp, .fsdp = 1, .tp = tp, .pp = 1, .cp = 1, .zero = 0,
                        .schedule = "gpipe", .virtual_stages = 1, .microbatches = 1,
                        .micro_batch_size = tp, .recompute = SC_SEARCH_RECOMPUTE_FULL};
    int64_t act = 0;
    int64_t base = sc_search_rank_memory(&bm, &o, &c, 0, &act);
    sc_block_model more = bm;
    more.loss_saved_bytes += 1e6;
    more.loss_split_saved_bytes += 1e6;
    int64_t grown = sc_search_rank_memory(&more, &o, &c, 0, &act);
    /* 1e6 bytes an example, micro-batch tp, over the vocabulary's split:
     * a rank's ceil(V / tp) of the padded vocabulary's rows (50257 is odd:
     * padded to 50258 at tp 2) */
    double per = (double)((bm.vocab + tp - 1) / tp);
    double want = 1e6 * (double)tp * per / (double)bm.vocab;
    assert_true(llabs(grown - base - (int64_t)want) <= 2);
    sc_block_model other = bm; /* the other form's figure does not count */
    if (tp == 1) other.loss_split_saved_bytes += 1e6;
    else other.loss_saved_bytes += 1e6;
    assert_int_equal(sc_search_rank_memory(&other, &o, &c, 0, &act), base);
  }
}

/* A step that decomposes its loss at every tp (train --no-fuse-loss:
 * bm.loss_split) is estimated with that form at tp = 1 too: its kept
 * values are the decomposed form's figure (the fused one's no longer
 * counts), and its time over the logits the decomposed form's bytes over
 * the whole vocabulary (LOSS_WHOLE_*, 40 an element against the fused 6;
 * the 1.7B H100 row's simulated loss 36): a later step, the difference
 * within those bytes over HBM (the GEMMs unchanged). */
static void test_loss_split_at_tp1(void **state) {
  (void)state;
  sc_block_model bm;
  int64_t n;
  model_of(GPT_1P5B, &bm, &n);
  sc_cluster cl = preset("h100-sxm:8x1");
  sc_search_opts o = {.cluster = &cl, .global_batch = 8, .dtype = SC_CLUSTER_BF16,
                      .adamw = true};
  sc_search_cand c = {.dp = 8, .fsdp = 1, .tp = 1, .pp = 1, .cp = 1, .zero = 0,
                      .schedule = "gpipe", .virtual_stages = 1, .microbatches = 1,
                      .micro_batch_size = 1, .recompute = SC_SEARCH_RECOMPUTE_NONE};
  sc_block_model split = bm;
  split.loss_split = true;
  int64_t act = 0;
  int64_t base = sc_search_rank_memory(&bm, &o, &c, 0, &act);
  int64_t with = sc_search_rank_memory(&split, &o, &c, 0, &act);
  double want = split.loss_split_saved_bytes - split.loss_saved_bytes;
  assert_true(want > 0);
  assert_true(llabs(with - base - (int64_t)want) <= 2);
  sc_search_cand fused = c, unfused = c;
  sc_diag d = {0};
  assert_int_equal(sc_search_estimate(&bm, &o, &fused, &d), SC_OK);
  assert_int_equal(sc_search_estimate(&split, &o, &unfused, &d), SC_OK);
  double logits = bm.loss_saved_bytes / 4 * (double)bm.vocab; /* one example */
  double extra = logits * (18.0 + 22.0 - 2.0 - 4.0) / (cl.memory_bytes_per_s * SC_COST_MEMORY_EFF);
  assert_true(isfinite(unfused.step_s) && isfinite(fused.step_s));
  assert_true(unfused.compute_s > fused.compute_s + 0.5 * extra);
  assert_true(unfused.compute_s < fused.compute_s + 1.5 * extra);
}

/* one and one at cp=2 (*two) estimated: cp time only at cp=2, its compute
 * between 0.4 and hi of one's, its step at least compute and cp. */
static void cp_pair(const sc_block_model *bm, const sc_search_opts *o, sc_search_cand *one,
                    sc_search_cand *two, double hi) {
  *two = *one;
  two->cp = 2;
  sc_diag d = {0};
  assert_int_equal(sc_search_estimate(bm, o, one, &d), SC_OK);
  assert_int_equal(sc_search_estimate(bm, o, two, &d), SC_OK);
  assert_true(one->cp_s == 0 && two->cp_s > 0);
  assert_true(two->compute_s < hi * one->compute_s && two->compute_s > 0.4 * one->compute_s);
  assert_true(two->step_s > two->compute_s + two->cp_s - 1e-12);
}

/* cp's estimate (docs/planner.md, "The estimate"): the same microbatch at
 * cp=2 keeps half the activations and computes about half; the ring's
 * sends and the gradients' all-reduce over cp are its cp time, at least
 * the ring's bytes over NVLink (forward 1 hop, backward 3, of kv_bytes / 2
 * an example, per block); without cp none. */
static void test_cp_estimate(void **state) {
  (void)state;
  sc_block_model bm;
  int64_t n;
  model_of(GPT_1P5B, &bm, &n);
  /* the keys and values of one example: [25 heads, 128, 64] f32 each */
  assert_true(bm.kv_bytes == 2.0 * 25 * 128 * 64 * 4);
  sc_cluster cl = preset("h100-sxm:8x1");
  sc_search_opts o = {.cluster = &cl, .global_batch = 4, .dtype = SC_CLUSTER_FP32,
                      .adamw = true};
  sc_search_cand one = {.dp = 1, .fsdp = 1, .tp = 1, .pp = 1, .cp = 1, .schedule = "gpipe",
                        .virtual_stages = 1, .microbatches = 1, .micro_batch_size = 4,
                        .batch = 4};
  sc_search_cand two;
  cp_pair(&bm, &o, &one, &two, 0.6);
  double ratio = (double)two.peak_activation_bytes / (double)one.peak_activation_bytes;
  assert_true(ratio > 0.49 && ratio < 0.51);
  double ring = 48.0 * (1 + 3) * 4 * bm.kv_bytes / 2;
  assert_true(two.cp_s >= ring / 450e9);
}

/* Expert parallelism (docs/moe.md): the MoE sample's experts in the block
 * model (8 experts [64, 64] three times a layer; the dispatched tokens
 * [1, 8, 5, 64] in, the experts' outputs out); ep=2 against dp=2 at the
 * same micro-batch: the experts' state halved, the all-to-alls costed
 * (8 a step of a 40,960-byte buffer, half of it sent), no dp term;
 * fsdp=2 x ep=2 (the rest stored over both) against fsdp=4 on 4 devices:
 * the optimizer's pass over a quarter of the parameters either way; every
 * candidate of a search on 4 devices a mesh ep.c runs (ep dividing the
 * experts, dp x fsdp x ep the batch); a dense model gets no ep. */
static void test_ep_estimate(void **state) {
  (void)state;
  sc_block_model bm;
  int64_t n;
  model_of(MOE, &bm, &n);
  assert_int_equal(bm.n_blocks, 2);
  assert_int_equal(bm.block.experts, 8);
  assert_int_equal(bm.block.expert_params, 3 * 8 * 64 * 64);
  assert_int_equal(bm.block.a2a_count, 2);
  assert_true(bm.block.a2a_bytes == 2.0 * 8 * 5 * 64 * 4);
  assert_int_equal(bm.block.expert_m, 5);
  assert_true(bm.block.expert_flops == 3 * 2.0 * 8 * 5 * 64 * 64);
  assert_int_equal(bm.outside.experts, 0);
  sc_cluster cl = preset("h100-sxm:2x1");
  sc_search_opts o = {.cluster = &cl, .global_batch = 8, .dtype = SC_CLUSTER_FP32,
                      .adamw = true};
  sc_search_cand dp = {.dp = 2, .fsdp = 1, .tp = 1, .pp = 1, .cp = 1, .ep = 1,
                       .schedule = "gpipe", .virtual_stages = 1, .microbatches = 1,
                       .micro_batch_size = 4, .batch = 8};
  sc_search_cand ep = dp;
  ep.dp = 1;
  ep.ep = 2;
  sc_diag d = {0};
  assert_int_equal(sc_search_estimate(&bm, &o, &dp, &d), SC_OK);
  assert_int_equal(sc_search_estimate(&bm, &o, &ep, &d), SC_OK);
  assert_true(dp.ep_s == 0 && dp.dp_s > 0);
  assert_true(ep.dp_s == 0 && ep.ep_s >= 8 * 20480 / 450e9);
  /* the same products a rank (its E/ep experts over the group's tokens);
   * only the accumulation's pass over the parameters is shorter */
  assert_true(ep.compute_s <= dp.compute_s && ep.compute_s > 0.95 * dp.compute_s);
  /* half the experts' parameters, gradients and AdamW moments (16 B) */
  double saved = (double)(dp.peak_bytes - ep.peak_bytes), half = 2.0 * 3 * 8 * 64 * 64 / 2 * 16;
  assert_true(saved >= half && saved < 1.1 * half);
  assert_int_equal(dp.peak_activation_bytes, ep.peak_activation_bytes);
  assert_true(ep.optimizer_s < dp.optimizer_s);
  sc_cluster four = preset("h100-sxm:4x1");
  o.cluster = &four;
  /* fsdp=2 x ep=2 stores the parameters outside the experts over both
   * axes and the experts (E/ep a rank) over fsdp: a quarter of every
   * parameter a rank, as fsdp=4; the optimizer's pass is the same */
  sc_search_cand f4 = dp, fe = dp;
  f4.dp = 1, f4.fsdp = 4, f4.zero = 3, f4.micro_batch_size = 2;
  fe.dp = 1, fe.fsdp = 2, fe.ep = 2, fe.zero = 3, fe.micro_batch_size = 2;
  assert_int_equal(sc_search_estimate(&bm, &o, &f4, &d), SC_OK);
  assert_int_equal(sc_search_estimate(&bm, &o, &fe, &d), SC_OK);
  assert_true(fe.optimizer_s > 0 &&
              fabs(fe.optimizer_s - f4.optimizer_s) < 1e-9 * f4.optimizer_s);
  assert_true(fe.dp_s == 0 && fe.fsdp_s > 0 && fe.ep_s > 0);
  sc_search_result r;
  assert_int_equal(sc_search_run(&bm, &o, &r, &d), SC_OK);
  assert_true(r.n_top > 0);
  for (int32_t i = 0; i < r.n_top; i++) {
    const sc_search_cand *c = &r.top[i];
    int64_t e = c->ep > 1 ? c->ep : 1;
    assert_int_equal(c->pp * c->dp * c->fsdp * c->cp * e * c->tp, 4);
    assert_int_equal(8 % e, 0);
    assert_true(e == 1 || c->cp == 1);
    assert_int_equal(c->micro_batch_size * c->microbatches * c->dp * c->fsdp * e, 8);
  }
  /* a dense model: no ep candidate, none pruned for ep */
  model_of(GPT2, &bm, &n);
  assert_int_equal(bm.block.experts, 0);
  assert_int_equal(bm.block.a2a_count, 0);
  o.global_batch = 4;
  assert_int_equal(sc_search_run(&bm, &o, &r, &d), SC_OK);
  assert_int_equal(r.pruned_ep, 0);
  for (int32_t i = 0; i < r.n_top; i++) assert_true(r.top[i].ep <= 1);
}

/* Expert tensor parallelism (docs/moe.md): the block model's exits (one
 * [1, 8, 5, 64] a layer) and hidden size (64); tp=2 x ep=2 with the
 * option against without: a quarter of the experts' state a rank in
 * place of half, less compute (each expert's half once), and on tp's
 * link the exits' sums (an all-reduce of the rank's capacity slots, or
 * under sequence parallelism reduce-scatters of [mbs, seq, hidden]); the
 * search on 4 devices puts the option only beside tp, tries it only where
 * tp divides the hidden size, and tries no cp on a model with experts
 * (their capacity dispatch's CumSum: cp.c). */
static void test_etp_estimate(void **state) {
  (void)state;
  sc_block_model bm;
  int64_t n;
  model_of(MOE, &bm, &n);
  assert_int_equal(bm.block.expert_exits, 1);
  assert_true(bm.block.expert_exit_bytes == 8.0 * 5 * 64 * 4);
  assert_int_equal(bm.block.expert_hidden, 64);
  assert_int_equal(bm.block.expert_tensors, 3);
  sc_cluster cl = preset("h100-sxm:4x1");
  sc_search_opts o = {.cluster = &cl, .global_batch = 8, .dtype = SC_CLUSTER_FP32,
                      .adamw = true};
  sc_search_cand whole = {.dp = 1, .fsdp = 1, .tp = 2, .pp = 1, .cp = 1, .ep = 2,
                          .schedule = "gpipe", .virtual_stages = 1, .microbatches = 1,
                          .micro_batch_size = 4, .batch = 8};
  sc_search_cand etp = whole;
  etp.expert_tensor_parallel = true;
  sc_diag d = {0};
  assert_int_equal(sc_search_estimate(&bm, &o, &whole, &d), SC_OK);
  assert_int_equal(sc_search_estimate(&bm, &o, &etp, &d), SC_OK);
  /* a quarter of the experts' 16 B an element in place of half */
  double saved = (double)(whole.peak_bytes - etp.peak_bytes),
         quarter = 2.0 * 3 * 8 * 64 * 64 / 4 * 16;
  assert_true(saved >= quarter && saved < 1.1 * quarter);
  assert_true(etp.compute_s < whole.compute_s);
  assert_true(etp.tp_s > whole.tp_s);
  sc_search_cand sp = etp;
  sp.sequence_parallel = true;
  sc_search_cand sp_whole = whole;
  sp_whole.sequence_parallel = true;
  assert_int_equal(sc_search_estimate(&bm, &o, &sp, &d), SC_OK);
  assert_int_equal(sc_search_estimate(&bm, &o, &sp_whole, &d), SC_OK);
  assert_true(sp.tp_s > sp_whole.tp_s);
  sc_search_result r, none;
  assert_int_equal(sc_search_run(&bm, &o, &r, &d), SC_OK);
  assert_true(r.n_top > 0);
  for (int32_t i = 0; i < r.n_top; i++) {
    assert_true(!r.top[i].expert_tensor_parallel || r.top[i].tp > 1);
    assert_true(r.top[i].cp <= 1);
  }
  /* a hidden size tp cannot split: the candidates with the option (and
   * only those) are gone */
  bm.block.expert_hidden = 63;
  assert_int_equal(sc_search_run(&bm, &o, &none, &d), SC_OK);
  assert_true(none.evaluated + none.pruned < r.evaluated + r.pruned);
  for (int32_t i = 0; i < none.n_top; i++) assert_false(none.top[i].expert_tensor_parallel);
}

static void test_batch_refused(void **state) {
  (void)state;
  sc_block_model bm;
  int64_t n;
  model_of(GPT2, &bm, &n);
  assert_int_equal(bm.n_blocks, 2);
  assert_int_equal(bm.heads, 4);
  sc_search_result r;
  sc_diag d = {0};
  /* 128 devices, tp <= 4 (heads), pp <= 2 (blocks), cp <= 8 (16 causal
   * tokens in 2·cp chunks): dp x fsdp >= 2 */
  assert_int_equal(run(&bm, "h100-sxm:8x16", 3, 0, &r, &d), SC_ERR_USAGE);
  assert_non_null(strstr(d.msg, "global batch 3 does not divide"));
  assert_non_null(strstr(d.msg, "batches that do: 2 or 4"));
  assert_int_equal(run(&bm, "h100-sxm:8x2", 4, 0, &r, &d), SC_OK);
  assert_true(r.n_top > 0);
  for (int32_t i = 0; i < r.n_top; i++) assert_int_equal(4 % (r.top[i].dp * r.top[i].fsdp), 0);
  /* on 16 devices tp=4 x cp=4 (or pp=2 x cp=4 x tp=2) leaves dp x fsdp =
   * 1: a batch of 3 has plans, all with cp > 1 */
  assert_int_equal(run(&bm, "h100-sxm:8x2", 3, 0, &r, &d), SC_OK);
  assert_true(r.n_top > 0);
  for (int32_t i = 0; i < r.n_top; i++)
    assert_true(r.top[i].cp > 1 && r.top[i].dp * r.top[i].fsdp == 1 &&
                16 % (2 * r.top[i].cp) == 0);
}

static sc_status infer(const sc_block_model *bm, const char *cluster, sc_search_goal goal,
                       int64_t batch, sc_search_result *r, sc_diag *d) {
  sc_cluster c = preset(cluster);
  sc_search_opts o = {.cluster = &c, .goal = goal, .global_batch = batch,
                      .dtype = SC_CLUSTER_FP32};
  return sc_search_run(bm, &o, r, d);
}

static void test_inference(void **state) {
  (void)state;
  sc_block_model bm;
  int64_t n;
  model_of(GPT_1P5B, &bm, &n);
  sc_search_result lat, thr;
  sc_diag d = {0};
  assert_int_equal(infer(&bm, "h100-sxm:8x1", SC_SEARCH_LATENCY, 8, &lat, &d), SC_OK);
  assert_int_equal(infer(&bm, "h100-sxm:8x1", SC_SEARCH_THROUGHPUT, 8, &thr, &d), SC_OK);
  assert_true(lat.n_top > 1 && thr.n_top > 1);
  for (int k = 0; k < 2; k++) {
    const sc_search_result *r = k ? &thr : &lat;
    assert_int_equal(r->pruned, r->pruned_heads + r->pruned_node + r->pruned_batch +
                                    r->pruned_microbatch + r->pruned_state + r->pruned_bound +
                                    r->pruned_fsdp + r->pruned_cp + r->pruned_ep +
                                    r->pruned_split);
    for (int32_t i = 0; i < r->n_top; i++) {
      const sc_search_cand *c = &r->top[i];
      assert_true(c->inference && c->fits);
      assert_true(c->pp * c->dp * c->cp * c->tp <= 8);
      assert_true(128 % (2 * c->cp) == 0);
      assert_true(c->ep <= 1); /* a dense model */
      assert_int_equal(c->fsdp, 1);
      assert_int_equal(c->zero, 0);
      assert_int_equal(c->recompute, SC_SEARCH_RECOMPUTE_NONE);
      assert_string_equal(c->schedule, "gpipe");
      assert_int_equal(bm.heads % c->tp, 0);
      assert_true(c->optimizer_s == 0 && c->recompute_s == 0 && c->fsdp_s == 0);
      if (c->pp == 1) assert_int_equal(c->microbatches, 1);
      /* latency: dp splits the 8; throughput: each replica serves 8 */
      int64_t served = c->micro_batch_size * c->microbatches * c->dp;
      assert_int_equal(served, k ? 8 * c->dp : 8);
      assert_int_equal(c->batch, served);
      double want = k ? c->step_s / (double)c->dp : c->step_s;
      assert_true(c->objective_s == want && c->step_s > 0);
      if (i) assert_true(r->top[i - 1].objective_s <= c->objective_s);
    }
  }
  /* examples per second: throughput's best at least latency's */
  assert_true((double)thr.top[0].batch / thr.top[0].step_s >=
              (double)lat.top[0].batch / lat.top[0].step_s);
  /* the forward alone is below the training step of the same mesh */
  sc_search_cand t = lat.top[0];
  t.inference = false;
  t.recompute = SC_SEARCH_RECOMPUTE_NONE;
  sc_cluster c = preset("h100-sxm:8x1");
  sc_search_opts o = {.cluster = &c, .global_batch = 8, .dtype = SC_CLUSTER_FP32, .adamw = true};
  assert_int_equal(sc_search_estimate(&bm, &o, &t, &d), SC_OK);
  assert_true(lat.top[0].step_s < t.step_s);
  /* batch 1 by latency: no replica to split it */
  sc_search_result one;
  assert_int_equal(infer(&bm, "h100-sxm:8x1", SC_SEARCH_LATENCY, 1, &one, &d), SC_OK);
  assert_true(one.n_top > 0 && one.pruned_batch > 0);
  for (int32_t i = 0; i < one.n_top; i++) assert_int_equal(one.top[i].dp, 1);
}

/* cp in the inference search: at batch 8 cp=2 computes 0.4-0.65 of one
 * rank's forward and adds the ring and the logits' gather as its cp time;
 * at batch 1 the search keeps cp candidates. Two candidates differing
 * only in cp are not of the same mesh (an axis of size 0 and one of 1
 * are; ZeRO and sequence parallelism do not count). */
static void test_inference_cp(void **state) {
  (void)state;
  sc_block_model bm;
  int64_t n;
  model_of(GPT_1P5B, &bm, &n);
  sc_cluster cl = preset("h100-sxm:8x1");
  sc_search_opts o = {.cluster = &cl, .goal = SC_SEARCH_LATENCY, .global_batch = 8,
                      .dtype = SC_CLUSTER_FP32};
  sc_search_cand one = {.dp = 1, .fsdp = 1, .tp = 1, .pp = 1, .cp = 1, .ep = 1,
                        .schedule = "gpipe", .virtual_stages = 1, .microbatches = 1,
                        .micro_batch_size = 8, .batch = 8, .inference = true};
  sc_search_cand two;
  cp_pair(&bm, &o, &one, &two, 0.65);
  assert_true(two.peak_activation_bytes < one.peak_activation_bytes);
  sc_diag d = {0};
  /* at batch 1 by latency (no replica to split it) the search keeps cp */
  sc_search_result r;
  assert_int_equal(infer(&bm, "h100-sxm:8x1", SC_SEARCH_LATENCY, 1, &r, &d), SC_OK);
  bool cp = false;
  for (int32_t i = 0; i < r.n_top; i++) cp |= r.top[i].cp > 1;
  assert_true(cp);
  assert_false(sc_search_same_mesh(&one, &two));
  sc_search_cand zero = one;
  zero.cp = 0;
  zero.ep = 0;
  assert_true(sc_search_same_mesh(&one, &zero));
  two.cp = 1;
  two.zero = 1;
  two.sequence_parallel = true;
  assert_true(sc_search_same_mesh(&one, &two));
}

/* A sequence that does not divide into 2·cp chunks (docs/planner.md, "The
 * space"): the vit sample's 17 tokens, no attention causal or masked, are
 * cut into cp padded blocks, so cp is searched and its estimate counts
 * the padded rows (cp=2: 9 of 17 a rank, cp=4: 5); GPT-2 is causal, its
 * 16 tokens searched up to cp=8 (16 chunks) and no further; a training
 * step whose labels keep the sequence is not padded. */
static void test_cp_padding(void **state) {
  (void)state;
  sc_block_model bm, gpt;
  int64_t n;
  model_of(SC_SOURCE_DIR "/samples/vit.onnx", &bm, &n);
  assert_int_equal(bm.seq, 17);
  assert_true(bm.attn_unmasked && !bm.token_outputs && bm.kv_bytes > 0);
  model_of(GPT2, &gpt, &n);
  assert_false(gpt.attn_unmasked);
  assert_true(gpt.token_outputs);
  sc_cluster cl = preset("h100-sxm:8x1");
  sc_search_opts o = {.cluster = &cl, .global_batch = 4, .dtype = SC_CLUSTER_FP32,
                      .adamw = true};
  sc_search_cand one = {.dp = 1, .fsdp = 1, .tp = 1, .pp = 1, .cp = 1, .ep = 1,
                        .schedule = "gpipe", .virtual_stages = 1, .microbatches = 1,
                        .micro_batch_size = 4, .batch = 4};
  sc_search_cand two = one, four = one;
  two.cp = 2;
  four.cp = 4;
  sc_diag d = {0};
  assert_int_equal(sc_search_estimate(&bm, &o, &one, &d), SC_OK);
  assert_int_equal(sc_search_estimate(&bm, &o, &two, &d), SC_OK);
  assert_int_equal(sc_search_estimate(&bm, &o, &four, &d), SC_OK);
  /* a model this small computes at the kernels' latencies: less, not half */
  assert_true(two.cp_s > 0 && two.compute_s < one.compute_s);
  /* the kept activations: 9 and 5 rows of 17 (the stream's; the
   * parameters' and the loss's are the same) */
  double r2 = (double)two.peak_activation_bytes / (double)one.peak_activation_bytes,
         r4 = (double)four.peak_activation_bytes / (double)one.peak_activation_bytes;
  assert_true(r2 > 0.9 * 9 / 17 && r2 < 1.1 * 9 / 17);
  assert_true(r4 > 0.9 * 5 / 17 && r4 < 1.1 * 5 / 17);
  /* one example a step on 8 devices, the batch of 1 leaving dp nothing:
   * cp=2 .. 8 are searched (not pruned: padded to 18, 18, 20, ..., 24);
   * were the attention masked, none would be */
  sc_search_result r, masked;
  assert_int_equal(run(&bm, "h100-sxm:8x1", 1, 0, &r, &d), SC_OK);
  bool cp = false;
  for (int32_t i = 0; i < r.n_top; i++) cp |= r.top[i].cp > 1;
  assert_true(cp);
  bm.attn_unmasked = false;
  assert_int_equal(run(&bm, "h100-sxm:8x1", 1, 0, &masked, &d), SC_OK);
  bm.attn_unmasked = true;
  for (int32_t i = 0; i < masked.n_top; i++) assert_int_equal(masked.top[i].cp, 1);
  assert_true(masked.pruned_cp > r.pruned_cp && masked.evaluated < r.evaluated);
  /* causal: 16 tokens divide into 2·8 chunks, not 2·16 */
  assert_int_equal(run(&gpt, "h100-sxm:8x4", 1, 0, &r, &d), SC_OK);
  for (int32_t i = 0; i < r.n_top; i++) assert_true(16 % (2 * r.top[i].cp) == 0);
  /* labels per token: the same vit model is not padded in training */
  bm.token_outputs = true;
  assert_int_equal(run(&bm, "h100-sxm:8x1", 1, 0, &r, &d), SC_OK);
  for (int32_t i = 0; i < r.n_top; i++) assert_true(17 % r.top[i].cp == 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_block_model), cmocka_unit_test(test_search_space),
      cmocka_unit_test(test_more_gpus), cmocka_unit_test(test_fewer_devices),
      cmocka_unit_test(test_budget), cmocka_unit_test(test_loss_memory),
      cmocka_unit_test(test_loss_split_at_tp1),
      cmocka_unit_test(test_batch_refused), cmocka_unit_test(test_cp_estimate), cmocka_unit_test(test_ep_estimate),
      cmocka_unit_test(test_etp_estimate),
      cmocka_unit_test(test_zero_stages),
      cmocka_unit_test(test_grouped_collectives), cmocka_unit_test(test_pipeline_bubble),
      cmocka_unit_test(test_inference), cmocka_unit_test(test_inference_cp),
      cmocka_unit_test(test_cp_padding), cmocka_unit_test(test_split_pruned),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
