"""test_composite_ops.py — the composite ops (ir/ops.def, flag
SC_OPF_COMPOSITE; expanded by passes/composite.c during infer-shapes) and
the com.microsoft attention ops the frontend maps onto them, inside small
models where their operands are computed values (not graph inputs), against
onnxruntime.

Each case runs through `shardc run` (--no-fuse and fused) and onnxruntime on
the same seeded inputs (floats uniform in ±[0.05, 2), never zero); outputs
equal within rtol 1e-4, atol 1e-5, no NaN:
  attention_gqa_causal  3-D Q/K/V from projections, 4 query heads over 2
      key/value heads, is_causal, an output projection (opset 23);
  attention_past_mask   4-D, past_key/past_value, a boolean mask, softcap,
      all four outputs (qk_matmul_output_mode 3), at opset 24 (a mask
      shorter than the keys, which onnxruntime refuses, is in the node
      tests);
  attention_window      opset 25's left/right windows with nonpad_kv_seqlen;
  rotary_*              RotaryEmbedding: 3-D with position_ids, partial and
      interleaved; 4-D with per-token caches;
  ms_mha                com.microsoft MultiHeadAttention: bias, a [B, T]
      int32 key_padding_mask with padded keys, attention_bias,
      unidirectional (opset 17);
  ms_attention          com.microsoft Attention (BERT's packed QKV weights,
      bias, a [B, T] mask_index) at opset 14;
  ms_rotary             com.microsoft RotaryEmbedding, position_ids [B, S]
      and [1] (the first position);
  lstm_bidirectional_lens, gru_reverse_lens_lbr0/1, rnn_activations
      the recurrences (unrolled): per-sequence lengths, both directions,
      initial states, peepholes, clip, both linear_before_reset forms,
      activations with alpha and beta (layout 1, which onnxruntime
      refuses, is in the node tests);
  conv_transpose_*      ConvTranspose: a 2x upsampling after a Conv, and
      groups of 3 output channels with strides, asymmetric pads,
      output_padding, dilation and bias;
  topk_*                TopK: ties (lower index first), largest and
      smallest, an int32 input, opset 9's k attribute;
  einsum                Einsum: attention scores, broadcast ellipsis batch
      matmul, a three-operand chain, a diagonal, implicit outputs, a trace;
  small_ops_opset11/13, hardmax_opset11_3d  Hardmax (before opset 13 over
      the 2-D coercion), LpNormalization, MeanVarianceNormalization, LRN,
      EyeLike;
  lp_pool_opset11       LpPool: p 2 with strides and pads, p 1 with
      SAME_UPPER, p 3 over 1-D windows;
  col2im                Col2Im of computed columns: 2 channels, strides,
      asymmetric pads, a dilation, a row the strides leave uncovered;
  max_unpool_opset11    MaxUnpool at windows' maxima (output_shape: only
      the node tests, where onnx's reference and onnxruntime differ);
  affine_grid           AffineGrid of computed thetas, 2-D, and 3-D with
      align_corners;
  grid_sample_opset16, grid_sample_volumetric_opset20   GridSample at
      computed coordinates (some beyond [-1, 1]): bilinear, bicubic and
      nearest with zeros, border and reflection padding and both
      align_corners; 5-D linear and nearest; cubic with border padding
      against onnx's reference evaluator (onnxruntime differs there);
  dft_opset17, dft_stft_opset20   DFT (real forward, onesided, a
      dft_length that pads and one that cuts, complex inverse along axis 1
      of 4-D, axis as an input) and STFT with a Hann window;
  control_flow_opset17  If (condition from shapes, branches reading outer
      values), Loop (trip count, carried value, scan output), Scan (state,
      a backward scan input, an output stacked along axis 1 in reverse);
  det_deform_roi@reference, mel_ml@reference  Det of matrices needing pivots,
      DeformConv (offset groups, mask, bias, pads, strides), RoiAlign (rois
      given at run time), MelWeightMatrix, Binarizer, ArrayFeatureExtractor;
  flex_attention@reference, adam@reference  FlexAttention with grouped
      heads and score/prob modifiers; Adam over two tensors;
  data_dependent_opset11  Compress (computed x, an axis and flattened),
      NonMaxSuppression (computed scores, thresholds), Unique (rows sorted;
      elements unsorted with all outputs), NonZero of a computed mask: the
      values that shape them given at run time;
  reverse_sequence_opset10, tensor_scatter_opset24   ReverseSequence over
      either axis with run-time lengths; TensorScatter, linear and circular,
      with per-row write positions;
  int_products_opset13  MatMulInteger (per-column zero points),
      ConvInteger (pads; onnxruntime takes only per-tensor zero points
      there), QLinearMatMul,
      QLinearConv (per-channel weight scales, bias, strides) on computed
      codes;
  maxpool_indices_opset12   (not a composite op) MaxPool's Indices output
      with pads, strides, dilations, both storage orders, 1-D and 3-D, and
      MaxPool of uint8;
  qdq_opset13, dynamic_quantize_opset11   QuantizeLinear and
      DequantizeLinear per tensor (uint8) and per axis (int8, zero points
      per channel), the codes and the round trip; DynamicQuantizeLinear's
      codes, scale and zero point;
  sce_loss, nll_loss    SoftmaxCrossEntropyLoss (weights, ignore_index, the
      log_prob output) and NegativeLogLikelihoodLoss (reduction none, a
      [N, C, d] input) on computed scores.
Trained: a model computing its own loss (GQA Attention, then
SoftmaxCrossEntropyLoss with class weights and an ignored label) takes one
SGD step with `shardc train --loss output:ce --lr 1`: the step's loss
equals onnxruntime's (rtol 1e-4), and the 4 largest weight changes (the
gradient) equal central finite differences of onnxruntime's loss within 2%.
Refused with an error naming the node and the reason: a 3-D Attention
without q_num_heads; MultiHeadAttention with packed QKV; a key_padding_mask
that is not a graph input.

Environment: SHARDC. Exit 0 on success, 1 on any failure.
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnxruntime as ort
from onnx import TensorProto as T, helper
from safetensors.numpy import load_file
from checks import check, equals_onnxruntime, finish, gradient_matches_fd, refused_model

SHARDC = os.environ.get("SHARDC")
MS = "com.microsoft"


def rand(rng, shape):
    return (rng.uniform(0.05, 2.0, shape) * rng.choice([-1.0, 1.0], shape)).astype(np.float32)


def vi(name, shape, t=T.FLOAT):
    return helper.make_tensor_value_info(name, t, shape)


def model(name, nodes, inputs, outputs, inits=(), opset=23, ms=False, domains=()):
    g = helper.make_graph(nodes, name, inputs, outputs, list(inits))
    ops = [helper.make_opsetid("", opset)] + ([helper.make_opsetid(MS, 1)] if ms else [])
    ops += [helper.make_opsetid(d, 1) for d in domains]
    return helper.make_model(g, opset_imports=ops)


def cases(rng):
    def w(name, shape, scale=0.3):
        return helper.make_tensor(name, T.FLOAT, shape, (rand(rng, shape) * scale).ravel())

    n = helper.make_node
    out = []
    # GQA over projections
    out.append(("attention_gqa_causal", model("gqa", [
        n("MatMul", ["x", "wq"], ["q"]), n("MatMul", ["x", "wk"], ["k"]),
        n("MatMul", ["x", "wv"], ["v"]),
        n("Attention", ["q", "k", "v"], ["a"], q_num_heads=4, kv_num_heads=2, is_causal=1),
        n("MatMul", ["a", "wo"], ["y"])],
        [vi("x", [2, 5, 16])], [vi("y", [2, 5, 16])],
        [w("wq", [16, 16]), w("wk", [16, 8]), w("wv", [16, 8]), w("wo", [16, 16])]), {}))
    # 4-D with a cache, a short boolean mask, softcap, every output
    out.append(("attention_past_mask", model("past", [
        n("Relu", ["q0"], ["q"]),
        n("Attention", ["q", "k", "v", "m", "pk", "pv"], ["y", "pko", "pvo", "qk"],
          softcap=2.0, qk_matmul_output_mode=3)],
        [vi("q0", [1, 2, 3, 4]), vi("k", [1, 2, 3, 4]), vi("v", [1, 2, 3, 4]),
         vi("m", [3, 5], T.BOOL), vi("pk", [1, 2, 2, 4]), vi("pv", [1, 2, 2, 4])],
        [vi("y", [1, 2, 3, 4]), vi("pko", [1, 2, 5, 4]), vi("pvo", [1, 2, 5, 4]),
         vi("qk", [1, 2, 3, 5])], opset=24),
        {"m": np.array([[1, 0, 1, 1, 0], [1, 1, 0, 1, 1], [0, 1, 1, 1, 1]], bool)}))
    out.append(("attention_window", model("window", [
        n("Attention", ["q", "k", "v", "", "", "", "len"], ["y"], is_causal=1,
          left_window_size=2, right_window_size=0)],
        [vi("q", [2, 2, 3, 4]), vi("k", [2, 2, 6, 4]), vi("v", [2, 2, 6, 4]),
         vi("len", [2], T.INT64)], [vi("y", [2, 2, 3, 4])], opset=25),
        {"len": np.array([6, 4], np.int64)}))
    pos = np.array([[0, 3, 1, 5], [2, 2, 7, 0]], np.int64)
    out.append(("rotary_3d_partial_interleaved", model("rot3", [
        n("Add", ["x0", "x0"], ["x"]),
        n("RotaryEmbedding", ["x", "c", "s", "p"], ["y"], num_heads=2, interleaved=1,
          rotary_embedding_dim=4)],
        [vi("x0", [2, 4, 16]), vi("c", [8, 2]), vi("s", [8, 2]), vi("p", [2, 4], T.INT64)],
        [vi("y", [2, 4, 16])]), {"p": pos}))
    out.append(("rotary_4d_token_caches", model("rot4", [
        n("RotaryEmbedding", ["x", "c", "s"], ["y"])],
        [vi("x", [2, 3, 4, 6]), vi("c", [2, 4, 3]), vi("s", [2, 4, 3])],
        [vi("y", [2, 3, 4, 6])]), {}))
    kpm = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], np.int32)
    out.append(("ms_mha", model("mha", [
        n("MatMul", ["x", "wq"], ["q"]), n("MatMul", ["x", "wk"], ["k"]),
        n("MatMul", ["x", "wv"], ["v"]),
        n("MultiHeadAttention", ["q", "k", "v", "b", "kpm", "ab"], ["y"], domain=MS,
          num_heads=2, unidirectional=1)],
        [vi("x", [2, 5, 8]), vi("kpm", [2, 5], T.INT32), vi("ab", [1, 2, 5, 5])],
        [vi("y", [2, 5, 8])], [w("wq", [8, 8]), w("wk", [8, 8]), w("wv", [8, 8]),
                                w("b", [24])], opset=17, ms=True), {"kpm": kpm}))
    out.append(("ms_attention", model("bert_attn", [
        n("Attention", ["x", "w", "b", "mask"], ["y"], domain=MS, num_heads=2)],
        [vi("x", [2, 5, 8]), vi("mask", [2, 5], T.INT32)], [vi("y", [2, 5, 8])],
        [w("w", [8, 24]), w("b", [24])], opset=14, ms=True), {"mask": kpm}))
    for name, p in (("ms_rotary", pos), ("ms_rotary_offset", np.array([3], np.int64))):
        out.append((name, model("msrot", [
            n("RotaryEmbedding", ["x", "p", "c", "s"], ["y"], domain=MS, num_heads=2)],
            [vi("x", [2, 4, 16]), vi("p", list(p.shape), T.INT64), vi("c", [8, 4]),
             vi("s", [8, 4])], [vi("y", [2, 4, 16])], opset=17, ms=True), {"p": p}))
    # the recurrences, unrolled: lengths per sequence, both directions,
    # initial states, peepholes, clip, the batch-first layout, activations
    S, B, I, H = 5, 3, 4, 3
    lens = np.array([5, 2, 4], np.int32)
    out.append(("lstm_bidirectional_lens", model("lstm", [
        n("LSTM", ["x", "W", "R", "B", "lens", "h0", "c0", "P"], ["y", "yh", "yc"],
          hidden_size=H, direction="bidirectional", clip=3.0)],
        [vi("x", [S, B, I]), vi("lens", [B], T.INT32), vi("h0", [2, B, H]), vi("c0", [2, B, H])],
        [vi("y", [S, 2, B, H]), vi("yh", [2, B, H]), vi("yc", [2, B, H])],
        [w("W", [2, 4 * H, I]), w("R", [2, 4 * H, H]), w("B", [2, 8 * H]), w("P", [2, 3 * H])],
        opset=14), {"lens": lens}))
    for lbr in (0, 1):
        out.append((f"gru_reverse_lens_lbr{lbr}", model("gru", [
            n("GRU", ["x", "W", "R", "B", "lens"], ["y", "yh"], hidden_size=H,
              direction="reverse", linear_before_reset=lbr)],
            [vi("x", [S, B, I]), vi("lens", [B], T.INT32)],
            [vi("y", [S, 1, B, H]), vi("yh", [1, B, H])],
            [w("W", [1, 3 * H, I]), w("R", [1, 3 * H, H]), w("B", [1, 6 * H])], opset=14),
            {"lens": lens}))
    out.append(("rnn_activations", model("rnn", [
        n("RNN", ["x", "W", "R", "B"], ["y", "yh"], hidden_size=H, direction="bidirectional",
          activations=["LeakyRelu", "HardSigmoid"], activation_alpha=[0.2, 0.3],
          activation_beta=[0.4])],
        [vi("x", [S, B, I])], [vi("y", [S, 2, B, H]), vi("yh", [2, B, H])],
        [w("W", [2, H, I]), w("R", [2, H, H]), w("B", [2, 2 * H])], opset=14), {}))
    # ConvTranspose: a decoder's 2x upsampling after a Conv; groups with
    # several output channels each, pads, output_padding, dilation, bias
    out.append(("conv_transpose_upsample", model("up", [
        n("Conv", ["x", "wc"], ["h"], pads=[1, 1, 1, 1]), n("Relu", ["h"], ["hr"]),
        n("ConvTranspose", ["hr", "wt", "bt"], ["y"], strides=[2, 2], kernel_shape=[2, 2])],
        [vi("x", [2, 3, 6, 5])], [vi("y", [2, 16, 12, 10])],
        [w("wc", [8, 3, 3, 3]), w("wt", [8, 16, 2, 2]), w("bt", [16])], opset=17), {}))
    out.append(("conv_transpose_groups", model("ctg", [
        n("ConvTranspose", ["x", "wt", "bt"], ["y"], strides=[3, 2], pads=[1, 0, 2, 1],
          output_padding=[1, 1], dilations=[1, 2], group=2)],
        [vi("x", [1, 4, 4, 5])], [vi("y", [1, 6, 10, 13])],
        [w("wt", [4, 3, 3, 3]), w("bt", [6])], opset=17), {}))
    # TopK: ties (small integers as floats), both directions, an int32
    # input, and opset 9's k attribute
    ties = rng.integers(-3, 4, (2, 3, 40)).astype(np.float32)
    out.append(("topk_ties", model("topk", [
        n("Mul", ["x", "two"], ["s"]), n("Constant", [], ["k"], value_ints=[7]),
        n("TopK", ["s", "k"], ["v", "i"]),
        n("TopK", ["x", "k1"], ["v2", "i2"], axis=1, largest=0)],
        [vi("x", [2, 3, 40])],
        [vi("v", [2, 3, 7]), vi("i", [2, 3, 7], T.INT64), vi("v2", [2, 2, 40]),
         vi("i2", [2, 2, 40], T.INT64)],
        [helper.make_tensor("two", T.FLOAT, [], [2.0]),
         helper.make_tensor("k1", T.INT64, [1], [2])], opset=13), {"x": ties}))
    out.append(("topk_int32", model("topki", [
        n("TopK", ["x", "k"], ["v", "i"], axis=0, largest=0)],
        [vi("x", [30, 4], T.INT32)], [vi("v", [5, 4], T.INT32), vi("i", [5, 4], T.INT64)],
        [helper.make_tensor("k", T.INT64, [1], [5])], opset=13),
        {"x": rng.integers(-5, 5, (30, 4)).astype(np.int32)}))
    out.append(("topk_opset9", model("topk9", [n("TopK", ["x"], ["v", "i"], k=3)],
                                     [vi("x", [4, 10])],
                                     [vi("v", [4, 3]), vi("i", [4, 3], T.INT64)], opset=9), {}))
    # Einsum: contractions, batch and broadcast ellipsis, implicit output,
    # diagonals, sums, three operands, spaces
    out.append(("einsum", model("einsum", [
        n("Einsum", ["q", "k"], ["s"], equation="b h q d, b h k d -> b h q k"),
        n("Einsum", ["a", "b"], ["mm"], equation="...ij,...jk->...ik"),
        n("Einsum", ["a2", "w1", "w2"], ["chain"], equation="abc,cd,de->abe"),
        n("Einsum", ["sq"], ["diag"], equation="...ii->...i"),
        n("Einsum", ["a2", "w1"], ["impl"], equation="abc,cd"),
        n("Einsum", ["sq"], ["tr"], equation="bii")],
        [vi("q", [2, 3, 4, 5]), vi("k", [2, 3, 6, 5]), vi("a", [2, 1, 3, 4]), vi("b", [1, 5, 4, 6]),
         vi("a2", [2, 3, 4]), vi("sq", [3, 5, 5])],
        [vi("s", [2, 3, 4, 6]), vi("mm", [2, 5, 3, 6]), vi("chain", [2, 3, 6]),
         vi("diag", [3, 5]), vi("impl", [2, 3, 5]), vi("tr", [3])],
        [w("w1", [4, 5]), w("w2", [5, 6])], opset=13), {}))
    # the small definitions, Hardmax also at opset 11 (its 2-D coercion)
    for op in (11, 13):
        out.append((f"small_ops_opset{op}", model("small", [
            n("Hardmax", ["x"], ["hm"], axis=1), n("LpNormalization", ["x"], ["lp"], axis=1, p=1),
            n("MeanVarianceNormalization", ["x4"], ["mvn"]),
            n("LRN", ["x4"], ["lrn"], size=3, alpha=1e-3, beta=0.5, bias=2.0),
            n("EyeLike", ["x"], ["eye"], k=1)],
            [vi("x", [3, 5]), vi("x4", [2, 5, 3, 4])],
            [vi("hm", [3, 5]), vi("lp", [3, 5]), vi("mvn", [2, 5, 3, 4]), vi("lrn", [2, 5, 3, 4]),
             vi("eye", [3, 5])], opset=op), {}))
    # LpPool: p 2 (the default) with strides and pads, p 1 with auto_pad
    # SAME_UPPER, p 3 over 1-D windows
    out.append(("lp_pool_opset11", model("lpp", [
        n("LpPool", ["x4"], ["l2"], kernel_shape=[2, 3], strides=[1, 2], pads=[1, 0, 0, 1]),
        n("LpPool", ["x4"], ["l1"], kernel_shape=[3, 3], auto_pad="SAME_UPPER", p=1),
        n("LpPool", ["x3"], ["l3"], kernel_shape=[3], p=3)],
        [vi("x4", [2, 3, 5, 6]), vi("x3", [2, 3, 7])],
        [vi("l2", [2, 3, 5, 3]), vi("l1", [2, 3, 5, 6]), vi("l3", [2, 3, 5])], opset=11), {}))
    # Col2Im: 2 channels of 2x2 blocks, strides, asymmetric pads, a dilation,
    # and an image row the strides leave uncovered at the end
    out.append(("col2im", model("c2i", [
        n("MatMul", ["x", "w"], ["cols"]),
        n("Col2Im", ["cols", "img", "blk"], ["y"], strides=[2, 2], pads=[1, 0, 0, 1],
          dilations=[1, 2])],
        [vi("x", [2, 8, 5])], [vi("y", [2, 2, 6, 6])],
        [w("w", [5, 9]), helper.make_tensor("img", T.INT64, [2], [6, 6]),
         helper.make_tensor("blk", T.INT64, [2], [2, 2])], opset=18), {}))
    # MaxUnpool: X computed, I the flat indices of each 2x2 window's maximum
    # (as MaxPool's Indices, which shardc does not compute) of a [2,3,4,6]
    # image, strides 2. (With an output_shape, onnx's reference and its node
    # tests place the inferred-shape result at the start of the larger
    # output, which shardc follows; onnxruntime reads the indices in the
    # larger shape instead, so that case is left to the node tests.)
    xi = rng.standard_normal((2, 3, 4, 6))
    ind = np.zeros((2, 3, 2, 3), np.int64)
    for b, ch, i, j in np.ndindex(2, 3, 2, 3):
        win = xi[b, ch, 2 * i:2 * i + 2, 2 * j:2 * j + 2]
        di, dj = np.unravel_index(np.argmax(win), (2, 2))
        ind[b, ch, i, j] = ((b * 3 + ch) * 4 + 2 * i + di) * 6 + 2 * j + dj
    out.append(("max_unpool_opset11", model("mup", [
        n("Relu", ["x"], ["r"]),
        n("MaxUnpool", ["r", "ind"], ["y"], kernel_shape=[2, 2], strides=[2, 2])],
        [vi("x", [2, 3, 2, 3]), vi("ind", [2, 3, 2, 3], T.INT64)],
        [vi("y", [2, 3, 4, 6])], opset=11), {"ind": ind}))
    # AffineGrid of computed thetas, 2-D without and 3-D with align_corners
    out.append(("affine_grid", model("ag", [
        n("Tanh", ["t2"], ["th2"]), n("Tanh", ["t3"], ["th3"]),
        n("AffineGrid", ["th2", "s2"], ["g2"]),
        n("AffineGrid", ["th3", "s3"], ["g3"], align_corners=1)],
        [vi("t2", [2, 2, 3]), vi("t3", [2, 3, 4])],
        [vi("g2", [2, 4, 5, 2]), vi("g3", [2, 3, 4, 5, 3])],
        [helper.make_tensor("s2", T.INT64, [4], [2, 3, 4, 5]),
         helper.make_tensor("s3", T.INT64, [5], [2, 3, 3, 4, 5])], opset=20), {}))
    out.append(("hardmax_opset11_3d", model("hm3", [n("Hardmax", ["x"], ["y"], axis=1)],
                                           [vi("x", [2, 3, 4])], [vi("y", [2, 3, 4])], opset=11),
                {}))
    # QuantizeLinear / DequantizeLinear of computed values: per tensor to
    # uint8 (a zero point of 128; both the codes and the round trip are
    # outputs), per axis to int8 (axis 1, a zero point per channel), and
    # DynamicQuantizeLinear's three outputs
    out.append(("qdq_opset13", model("qdq", [
        n("Tanh", ["x"], ["t"]),
        n("QuantizeLinear", ["t", "s", "z"], ["q"]),
        n("DequantizeLinear", ["q", "s", "z"], ["d"]),
        n("Mul", ["x", "x"], ["x2"]),
        n("QuantizeLinear", ["x2", "sc", "zc"], ["qc"], axis=1),
        n("DequantizeLinear", ["qc", "sc", "zc"], ["dc"], axis=1)],
        [vi("x", [2, 3, 7])],
        [vi("q", [2, 3, 7], T.UINT8), vi("d", [2, 3, 7]), vi("qc", [2, 3, 7], T.INT8),
         vi("dc", [2, 3, 7])],
        [helper.make_tensor("s", T.FLOAT, [], [0.0078]),
         helper.make_tensor("z", T.UINT8, [], [128]),
         helper.make_tensor("sc", T.FLOAT, [3], [0.01, 0.02, 0.035]),
         helper.make_tensor("zc", T.INT8, [3], [-20, 0, 7])], opset=13), {}))
    out.append(("dynamic_quantize_opset11", model("dq", [
        n("Sin", ["x"], ["t"]), n("DynamicQuantizeLinear", ["t"], ["y", "ys", "yz"])],
        [vi("x", [4, 6])],
        [vi("y", [4, 6], T.UINT8), vi("ys", []), vi("yz", [], T.UINT8)], opset=11), {}))
    # GridSample of a computed image at computed coordinates (some beyond
    # [-1, 1]): every mode with each padding, both align_corners
    gs = []
    for j, (mode, pad, ac) in enumerate([("bilinear", "zeros", 0), ("bilinear", "border", 1),
                                        ("bicubic", "reflection", 1),
                                        ("nearest", "reflection", 0), ("nearest", "zeros", 1),
                                        ("bilinear", "reflection", 0), ("bicubic", "zeros", 0)]):
        gs.append(n("GridSample", ["img", "grid"], [f"y{j}"], mode=mode, padding_mode=pad,
                    align_corners=ac))
    out.append(("grid_sample_opset16", model("gs", [
        n("Relu", ["x"], ["img"]), n("Tanh", ["g0"], ["gt"]), n("Mul", ["gt", "k"], ["grid"])] + gs,
        [vi("x", [2, 3, 5, 6]), vi("g0", [2, 4, 7, 2])],
        [vi(f"y{j}", [2, 3, 4, 7]) for j in range(len(gs))],
        [helper.make_tensor("k", T.FLOAT, [], [1.3])], opset=16), {}))
    out.append(("grid_sample_volumetric_opset20", model("gs3", [
        n("Relu", ["x"], ["img"]), n("Tanh", ["g0"], ["grid"]),
        n("GridSample", ["img", "grid"], ["y0"], mode="linear", align_corners=1),
        n("GridSample", ["img", "grid"], ["y1"], mode="nearest", padding_mode="border")],
        [vi("x", [1, 2, 3, 4, 5]), vi("g0", [1, 2, 3, 4, 3])],
        [vi("y0", [1, 2, 2, 3, 4]), vi("y1", [1, 2, 2, 3, 4])], opset=20), {}))
    # cubic with border padding: onnxruntime clamps otherwise than the spec
    # (up to 0.1 apart); against onnx's reference evaluator instead
    out.append(("grid_sample_cubic_border_opset20@reference", model("gsc", [
        n("Relu", ["x"], ["img"]), n("Tanh", ["g0"], ["gt"]), n("Mul", ["gt", "k"], ["grid"]),
        n("GridSample", ["img", "grid"], ["y0"], mode="cubic", padding_mode="border"),
        n("GridSample", ["img", "grid"], ["y1"], mode="cubic", padding_mode="border",
          align_corners=1)],
        [vi("x", [2, 3, 5, 6]), vi("g0", [2, 4, 7, 2])],
        [vi("y0", [2, 3, 4, 7]), vi("y1", [2, 3, 4, 7])],
        [helper.make_tensor("k", T.FLOAT, [], [1.3])], opset=20), {}))
    # DFT and STFT of computed signals: real forward (full, onesided, a
    # dft_length that pads and one that cuts), complex inverse along axis 1
    # of a 4-D input; STFT with a window
    out.append(("dft_opset17", model("dft17", [
        n("Tanh", ["x"], ["s"]),
        n("DFT", ["s"], ["y0"], axis=1),
        n("DFT", ["s", "l12"], ["y1"], axis=1, onesided=1),
        n("DFT", ["s", "l5"], ["y2"], axis=1),
        n("Tanh", ["z"], ["zc"]),
        n("DFT", ["zc"], ["y3"], axis=1, inverse=1)],
        [vi("x", [2, 8, 1]), vi("z", [2, 6, 3, 2])],
        [vi("y0", [2, 8, 2]), vi("y1", [2, 7, 2]), vi("y2", [2, 5, 2]), vi("y3", [2, 6, 3, 2])],
        [helper.make_tensor("l12", T.INT64, [], [12]), helper.make_tensor("l5", T.INT64, [], [5])],
        opset=17), {}))
    out.append(("dft_stft_opset20", model("dft20", [
        n("Sin", ["x"], ["s"]),
        n("DFT", ["s", "", "ax"], ["y0"]),
        n("STFT", ["s2", "step", "win"], ["y1"]),
        n("Sin", ["x2"], ["s2"])],
        [vi("x", [3, 4, 10, 1]), vi("x2", [2, 40, 1])],
        [vi("y0", [3, 4, 10, 2]), vi("y1", [2, 7, 9, 2])],
        [helper.make_tensor("ax", T.INT64, [], [2]), helper.make_tensor("step", T.INT64, [], [4]),
         helper.make_tensor("win", T.FLOAT, [16], np.hanning(16).astype(np.float32))],
        opset=20), {}))
    # ReverseSequence of computed values with lengths given at run time, time
    # axis 0 and 1; TensorScatter of a computed update into a cache, linear
    # and circular, per-row write positions
    out.append(("reverse_sequence_opset10", model("rs", [
        n("Neg", ["x"], ["xn"]),
        n("ReverseSequence", ["xn", "lt"], ["y0"], batch_axis=1, time_axis=0),
        n("Transpose", ["xn"], ["xt"], perm=[1, 0, 2]),
        n("ReverseSequence", ["xt", "lt"], ["y1"], batch_axis=0, time_axis=1)],
        [vi("x", [5, 3, 2]), vi("lt", [3], T.INT64)],
        [vi("y0", [5, 3, 2]), vi("y1", [3, 5, 2])], opset=10),
        {"lt": np.array([5, 2, 1], np.int64)}))
    # the ops whose output shape follows input values, given at run time
    # (`shardc run` specialises to them): Compress of a computed tensor
    # along an axis and flattened, NonMaxSuppression of boxes and of scores
    # computed from an input (two classes, a score threshold), Unique of
    # rows (sorted) and of elements (in first-occurrence order, all four
    # outputs), NonZero of a computed mask
    out.append(("data_dependent_opset11", model("dd", [
        n("Neg", ["x"], ["xn"]),
        n("Compress", ["xn", "cond"], ["c0"], axis=1),
        n("Compress", ["xn", "cond"], ["c1"]),
        n("Sigmoid", ["s"], ["sg"]),
        n("NonMaxSuppression", ["boxes", "sg", "maxb", "iou", "sth"], ["sel"]),
        n("Unique", ["u"], ["uy"], axis=0),
        n("Unique", ["u"], ["vy", "vi", "vinv", "vc"], sorted=0),
        n("Greater", ["xn", "zero"], ["pos"]),
        n("NonZero", ["pos"], ["nz"])],
        [vi("x", [3, 5]), vi("cond", [4], T.BOOL), vi("s", [1, 2, 6]), vi("boxes", [1, 6, 4]),
         vi("u", [5, 2], T.INT64)],
        [vi("c0", None), vi("c1", None), vi("sel", None, T.INT64), vi("uy", None, T.INT64),
         vi("vy", None, T.INT64), vi("vi", None, T.INT64), vi("vinv", None, T.INT64),
         vi("vc", None, T.INT64), vi("nz", None, T.INT64)],
        [helper.make_tensor("maxb", T.INT64, [1], [3]), helper.make_tensor("iou", T.FLOAT, [1], [0.2]),
         helper.make_tensor("sth", T.FLOAT, [1], [0.3]), helper.make_tensor("zero", T.FLOAT, [], [0.0])],
        opset=11),
        {"cond": np.array([True, False, True, True]),
         "u": np.array([[3, 1], [0, 2], [3, 1], [-4, 9], [0, 2]], np.int64),
         "x": np.array([[1, -2, 3, -4, 5], [-6, 7, -8, 9, -1], [2, -3, 4, -5, 6]], np.float32)}))
    # control flow, its subgraphs inlined: an If whose condition comes from
    # shapes (its branches read x from outside), a Loop with a trip count,
    # a carried value, a scan output and a condition the body keeps, and a
    # Scan with a state, two scan inputs (one backwards) and a scan output
    # stacked along axis 1 in reverse
    f = T.FLOAT
    then_g = helper.make_graph([n("Relu", ["x"], ["t0"]), n("Mul", ["t0", "x"], ["t1"])], "then",
                               [], [vi("t1", None)])
    else_g = helper.make_graph([n("Neg", ["x"], ["e1"])], "else", [], [vi("e1", None)])
    body = helper.make_graph([
        n("Identity", ["c_in"], ["c_out"]),
        n("Mul", ["v_in", "half"], ["vh"]), n("Add", ["vh", "x"], ["v_out"]),
        n("ReduceSum", ["v_out"], ["s_out"], keepdims=0)], "body",
        [vi("i", [], T.INT64), vi("c_in", [], T.BOOL), vi("v_in", None)],
        [vi("c_out", [], T.BOOL), vi("v_out", None), vi("s_out", None)],
        [helper.make_tensor("half", f, [], [0.5])])
    sbody = helper.make_graph([
        n("Add", ["st", "a_t"], ["st1"]), n("Mul", ["st1", "b_t"], ["o_t"])], "sbody",
        [vi("st", [4]), vi("a_t", [4]), vi("b_t", [4])], [vi("st1", [4]), vi("o_t", [4])])
    out.append(("control_flow_opset17", model("cf", [
        n("Size", ["x"], ["sz"]), n("Equal", ["sz", "twelve"], ["is12"]),
        n("If", ["is12"], ["y"], then_branch=then_g, else_branch=else_g),
        n("Loop", ["trip", "yes", "y"], ["v_last", "sums"], body=body),
        n("Scan", ["s0", "a", "b"], ["s_last", "o"], body=sbody, num_scan_inputs=2,
          scan_input_directions=[0, 1], scan_output_axes=[1], scan_output_directions=[1])],
        [vi("x", [3, 4]), vi("s0", [4]), vi("a", [5, 4]), vi("b", [5, 4])],
        [vi("y", [3, 4]), vi("v_last", [3, 4]), vi("sums", [4]), vi("s_last", [4]),
         vi("o", [4, 5])],
        [helper.make_tensor("twelve", T.INT64, [], [12]), helper.make_tensor("trip", T.INT64, [], [4]),
         helper.make_tensor("yes", T.BOOL, [], [True])], opset=17), {}))
    # FlexAttention (ai.onnx.preview) with grouped heads, a causal score_mod
    # and a prob_mod; the training domain's Adam over two tensors (against
    # onnx's reference: onnxruntime has neither)
    smod = helper.make_graph([
        n("Trilu", ["ones"], ["tri"], upper=0), n("Cast", ["tri"], ["keep"], to=T.BOOL),
        n("Where", ["keep", "scores", "ninf"], ["masked"])], "causal",
        [vi("scores", [1, 4, 3, 3])], [vi("masked", [1, 4, 3, 3])],
        [helper.make_tensor("ones", T.INT64, [3, 3], [1] * 9), helper.make_tensor("ninf", f, [], [-1e9])])
    pmod = helper.make_graph([n("Mul", ["p", "k"], ["pk"])], "scale", [vi("p", [1, 4, 3, 3])],
                             [vi("pk", [1, 4, 3, 3])], [helper.make_tensor("k", f, [], [0.75])])
    out.append(("flex_attention@reference", model("fa", [
        n("Tanh", ["q0"], ["q"]),
        n("FlexAttention", ["q", "k", "v"], ["y"], domain="ai.onnx.preview", score_mod=smod,
          prob_mod=pmod)],
        [vi("q0", [1, 4, 3, 8]), vi("k", [1, 2, 3, 8]), vi("v", [1, 2, 3, 5])], [vi("y", [1, 4, 3, 5])],
        opset=26, domains=["ai.onnx.preview"]), {}))
    out.append(("adam@reference", model("ad", [
        n("Adam", ["r", "t", "x1", "x2", "g1", "g2", "v1", "v2", "h1", "h2"],
          ["x1n", "x2n", "v1n", "v2n", "h1n", "h2n"], domain="ai.onnx.preview.training",
          alpha=0.9, beta=0.99, epsilon=1e-3, norm_coefficient=0.01, norm_coefficient_post=0.02)],
        [vi("r", []), vi("t", [], T.INT64), vi("x1", [3]), vi("x2", [2, 2]), vi("g1", [3]),
         vi("g2", [2, 2]), vi("v1", [3]), vi("v2", [2, 2]), vi("h1", [3]), vi("h2", [2, 2])],
        [vi("x1n", [3]), vi("x2n", [2, 2]), vi("v1n", [3]), vi("v2n", [2, 2]), vi("h1n", [3]),
         vi("h2n", [2, 2])], opset=26, domains=["ai.onnx.preview.training"]),
        {"r": np.array(0.1, np.float32), "t": np.array(3, np.int64),
         "h1": np.abs(rand(rng, [3])), "h2": np.abs(rand(rng, [2, 2]))}))
    # Det of computed matrices (pivoting needed: a zero on the diagonal),
    # DeformConv with two offset groups, a mask, a bias, pads and strides,
    # RoiAlign (avg, half_pixel; rois given at run time), MelWeightMatrix,
    # and ai.onnx.ml's Binarizer and ArrayFeatureExtractor
    out.append(("det_deform_roi@reference", model("ddr", [
        n("Mul", ["m", "perm"], ["mp"]), n("Det", ["mp"], ["det"]),
        n("Tanh", ["x"], ["xt"]),
        n("DeformConv", ["xt", "w", "off", "b", "mask"], ["dc"], offset_group=2, pads=[1, 1, 1, 1],
          strides=[2, 1]),
        n("RoiAlign", ["xt", "rois", "bidx"], ["ra"], output_height=3, output_width=2,
          sampling_ratio=0, spatial_scale=0.5)],
        [vi("m", [2, 3, 3]), vi("x", [2, 4, 5, 6]), vi("off", [2, 36, 3, 6]),
         vi("mask", [2, 18, 3, 6]), vi("rois", [3, 4]), vi("bidx", [3], T.INT64)],
        [vi("det", [2]), vi("dc", [2, 3, 3, 6]), vi("ra", [3, 4, 3, 2])],
        [helper.make_tensor("perm", T.FLOAT, [3, 3], [0, 1, 1, 1, 0, 1, 1, 1, 1]),
         w("w", [3, 4, 3, 3]), w("b", [3])], opset=22),
        {"rois": np.array([[0, 0, 9, 7], [2, 1, 7, 9], [1.5, 2.5, 4, 6]], np.float32),
         "bidx": np.array([0, 1, 1], np.int64)}))
    out.append(("mel_ml@reference", model("mm", [
        n("MelWeightMatrix", ["nb", "dl", "sr", "lo", "hi"], ["mel"]),
        n("Binarizer", ["x"], ["bz"], domain="ai.onnx.ml", threshold=0.25),
        n("ArrayFeatureExtractor", ["x", "ix"], ["fe"], domain="ai.onnx.ml")],
        [vi("x", [3, 5]), vi("ix", [2], T.INT64)],
        [vi("mel", [17, 6]), vi("bz", [3, 5]), vi("fe", [3, 2])],
        [helper.make_tensor("nb", T.INT64, [], [6]), helper.make_tensor("dl", T.INT64, [], [32]),
         helper.make_tensor("sr", T.INT64, [], [16000]), helper.make_tensor("lo", T.FLOAT, [], [100]),
         helper.make_tensor("hi", T.FLOAT, [], [6000])], opset=17, domains=["ai.onnx.ml"]),
        {"ix": np.array([4, 1], np.int64)}))
    out.append(("tensor_scatter_opset24", model("ts", [
        n("Tanh", ["u"], ["ut"]),
        n("TensorScatter", ["cache", "ut", "wi"], ["y0"]),
        n("TensorScatter", ["cache", "ut", "wi"], ["y1"], mode="circular")],
        [vi("cache", [2, 3, 6, 4]), vi("u", [2, 3, 3, 4]), vi("wi", [2], T.INT64)],
        [vi("y0", [2, 3, 6, 4]), vi("y1", [2, 3, 6, 4])], opset=24),
        {"wi": np.array([1, 3], np.int64)}))
    # the integer products on computed codes (QuantizeLinear of computed
    # values): MatMulInteger with per-column zero points, ConvInteger with
    # per-output-channel weight zero points and pads, QLinearMatMul, and
    # QLinearConv with per-channel weight scales, a bias and strides (uint8
    # codes throughout: onnxruntime's uint8 x int8 kernels saturate their
    # 16-bit pair sums, up to 45 codes off onnx's reference, which shardc
    # equals; the node tests cover int8)
    s_ = lambda nm, v, t=T.FLOAT: helper.make_tensor(nm, t, [] if np.ndim(v) == 0 else
                                                     [len(v)], np.atleast_1d(v))
    out.append(("int_products_opset13", model("ip", [
        n("QuantizeLinear", ["a", "sa", "za"], ["qa"]),
        n("QuantizeLinear", ["b", "sb", "zb"], ["qb"]),
        n("QuantizeLinear", ["x", "sa", "za"], ["qx"]),
        n("QuantizeLinear", ["w", "sb", "zb"], ["qw"]),
        n("MatMulInteger", ["qa", "qb", "za", "zbc"], ["y0"]),
        n("QLinearMatMul", ["qa", "sa", "za", "qb", "sb", "zb", "sy", "zy"], ["y1"]),
        n("ConvInteger", ["qx", "qw", "za", "zb"], ["y2"], pads=[1, 0, 1, 1]),
        n("QLinearConv", ["qx", "sa", "za", "qw", "swc", "zb", "sy", "zy", "bias"], ["y3"],
          strides=[2, 1], pads=[1, 1, 1, 1])],
        [vi("a", [2, 3, 5]), vi("b", [5, 4]), vi("x", [2, 3, 6, 5]), vi("w", [4, 3, 3, 2])],
        [vi("y0", [2, 3, 4], T.INT32), vi("y1", [2, 3, 4], T.UINT8),
         vi("y2", [2, 4, 6, 5], T.INT32), vi("y3", [2, 4, 3, 6], T.UINT8)],
        [s_("sa", 0.02), s_("za", 128, T.UINT8), s_("sb", 0.015), s_("zb", 131, T.UINT8),
         s_("zbc", [130, 125, 128, 133], T.UINT8), s_("sy", 0.05), s_("zy", 100, T.UINT8),
         s_("swc", [0.015, 0.02, 0.01, 0.03]), s_("bias", [100, -50, 0, 7], T.INT32)],
        opset=13), {}))
    # MaxPool's Indices (an ARGMAX beside the MAX in the pool kernel): pads,
    # strides, dilations, both storage orders, 1-D and 3-D; MaxPool of uint8
    out.append(("maxpool_indices_opset12", model("mpi", [
        n("Tanh", ["x"], ["t"]),
        n("MaxPool", ["t"], ["y0", "i0"], kernel_shape=[3, 2], strides=[2, 1], pads=[1, 0, 1, 1]),
        n("MaxPool", ["t"], ["y1", "i1"], kernel_shape=[2, 2], dilations=[2, 1], storage_order=1),
        n("Sin", ["x1"], ["s1"]),
        n("MaxPool", ["s1"], ["y2", "i2"], kernel_shape=[3], strides=[2], pads=[1, 1]),
        n("Cos", ["x3"], ["s3"]),
        n("MaxPool", ["s3"], ["y3", "i3"], kernel_shape=[2, 2, 2], strides=[2, 1, 2]),
        n("Mul", ["x", "k"], ["xs"]), n("Abs", ["xs"], ["xa"]), n("Cast", ["xa"], ["u"], to=T.UINT8),
        n("MaxPool", ["u"], ["y4"], kernel_shape=[2, 3], pads=[0, 1, 1, 1])],
        [vi("x", [2, 3, 7, 6]), vi("x1", [2, 2, 9]), vi("x3", [1, 2, 4, 5, 6])],
        [vi("y0", [2, 3, 4, 6]), vi("i0", [2, 3, 4, 6], T.INT64),
         vi("y1", [2, 3, 5, 5]), vi("i1", [2, 3, 5, 5], T.INT64),
         vi("y2", [2, 2, 5]), vi("i2", [2, 2, 5], T.INT64),
         vi("y3", [1, 2, 2, 4, 3]), vi("i3", [1, 2, 2, 4, 3], T.INT64),
         vi("y4", [2, 3, 7, 6], T.UINT8)],
        [helper.make_tensor("k", T.FLOAT, [], [100.0])], opset=12), {}))
    lab = np.array([[1, 3, 0], [2, 2, 4]], np.int64)
    out.append(("sce_loss", model("sce", [
        n("MatMul", ["x", "w"], ["s0"]), n("Transpose", ["s0"], ["s"], perm=[0, 2, 1]),
        n("SoftmaxCrossEntropyLoss", ["s", "lab", "cw"], ["loss", "logp"], ignore_index=2)],
        [vi("x", [2, 3, 4]), vi("lab", [2, 3], T.INT64)],
        [vi("loss", []), vi("logp", [2, 5, 3])], [w("w", [4, 5]), w("cw", [5], 1.0)],
        opset=13), {"lab": lab}))
    out.append(("nll_loss", model("nll", [
        n("LogSoftmax", ["x"], ["lp"], axis=1),
        n("NegativeLogLikelihoodLoss", ["lp", "lab"], ["loss"], reduction="none")],
        [vi("x", [2, 5, 3]), vi("lab", [2, 3], T.INT64)], [vi("loss", [2, 3])],
        opset=13), {"lab": lab}))
    return out


def train_check(rng, tmp):
    """One SGD step through Attention and SoftmaxCrossEntropyLoss against
    finite differences of onnxruntime's loss."""
    def w(name, shape):
        return helper.make_tensor(name, T.FLOAT, shape, (rand(rng, shape) * 0.3).ravel())
    n = helper.make_node
    m = model("train", [
        n("MatMul", ["x", "wq"], ["q"]), n("MatMul", ["x", "wk"], ["k"]),
        n("MatMul", ["x", "wv"], ["v"]),
        n("Attention", ["q", "k", "v"], ["a"], q_num_heads=4, kv_num_heads=2, is_causal=1),
        n("MatMul", ["a", "wo"], ["s0"]), n("Transpose", ["s0"], ["s"], perm=[0, 2, 1]),
        n("SoftmaxCrossEntropyLoss", ["s", "lab", "cw"], ["ce"], ignore_index=1)],
        [vi("x", [2, 5, 8]), vi("lab", [2, 5], T.INT64)], [vi("ce", [])],
        [w("wq", [8, 8]), w("wk", [8, 4]), w("wv", [8, 4]), w("wo", [8, 6]),
         helper.make_tensor("cw", T.FLOAT, [6], rng.uniform(0.5, 1.5, 6))])
    feeds = {"x": rand(rng, [2, 5, 8]), "lab": rng.integers(0, 6, (2, 5)).astype(np.int64)}
    path = os.path.join(tmp, "train.onnx")
    with open(path, "wb") as f:
        f.write(m.SerializeToString())
    args = []
    for k, v in feeds.items():
        np.save(os.path.join(tmp, k + ".npy"), v)
        args += ["--data", f"{k}={os.path.join(tmp, k + '.npy')}"]
    ck, log = os.path.join(tmp, "ck"), os.path.join(tmp, "log.jsonl")
    freeze = ["--freeze", "cw"]
    p = subprocess.run([SHARDC, "train", path, "--loss", "output:ce", "--steps", "1",
                        "--optimizer", "sgd", "--lr", "1", "--save", ck, "--log-json", log,
                        "--quiet"] + freeze + args, capture_output=True, text=True, timeout=300)
    if not check(p.returncode == 0, f"train: {p.stderr[-600:]}"):
        return

    def loss(model_proto):
        return float(ort.InferenceSession(model_proto.SerializeToString()).run(None, feeds)[0])
    step = json.loads(open(log).readline())
    want = loss(m)
    check(abs(step["loss"] - want) <= 1e-6 + 1e-4 * abs(want),
          f"train: step loss {step['loss']} vs onnxruntime {want}")
    saved = load_file(os.path.join(ck, "weights.safetensors"))
    worst = gradient_matches_fd("train", m, saved, loss, 0.02, 1e-4, per_weight=2)
    print(f"ok: train: step loss {step['loss']:.6f}, 4 gradients within {100 * worst:.3f}% of "
          f"finite differences")


def main():
    if not SHARDC:
        print("SHARDC not set")
        return 1
    rng = np.random.default_rng(20261202)
    with tempfile.TemporaryDirectory() as tmp:
        for name, m, fixed in cases(rng):
            feeds = {}
            for i in m.graph.input:
                shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
                feeds[i.name] = fixed[i.name] if i.name in fixed else rand(rng, shape)
            ref = name.endswith("@reference")
            equals_onnxruntime(SHARDC, tmp, name.split("@")[0], m, feeds, 1e-4, 1e-5, reference=ref)
        train_check(rng, tmp)
        n = helper.make_node
        refused_model(SHARDC, tmp, "no_heads", model("nh", [
            n("Attention", ["q", "k", "v"], ["y"], name="attn0")],
            [vi("q", [1, 3, 8]), vi("k", [1, 3, 8]), vi("v", [1, 3, 8])],
            [vi("y", [1, 3, 8])]), ["attn0", "q_num_heads"])
        # a loop whose exit depends on run-time data is not unrolled
        wbody = helper.make_graph([
            n("Mul", ["v_in", "v_in"], ["v_out"]), n("ReduceSum", ["v_out"], ["sm"], keepdims=0),
            n("Less", ["sm", "lim"], ["c_out"])], "wb",
            [vi("i", [], T.INT64), vi("c_in", [], T.BOOL), vi("v_in", [3])],
            [vi("c_out", [], T.BOOL), vi("v_out", [3])], [helper.make_tensor("lim", T.FLOAT, [], [100.0])])
        refused_model(SHARDC, tmp, "while_data", model("wd", [
            n("Loop", ["", "go", "v"], ["vf"], body=wbody, name="while0")],
            [vi("v", [3])], [vi("vf", [3])], [helper.make_tensor("go", T.BOOL, [], [True])],
            opset=17), ["while0", "computed from run-time data"])
        # a data-dependent shape without the data (inspect has no inputs)
        refused_model(SHARDC, tmp, "nms_no_data", model("nm", [
            n("NonMaxSuppression", ["boxes", "scores"], ["sel"], name="nms0")],
            [vi("boxes", [1, 6, 4]), vi("scores", [1, 2, 6])], [vi("sel", None, T.INT64)],
            opset=11), ["nms0", "'boxes' must be a constant"])
        refused_model(SHARDC, tmp, "packed", model("pk", [
            n("MultiHeadAttention", ["qkv"], ["y"], domain=MS, num_heads=2)],
            [vi("qkv", [1, 3, 2, 3, 4])], [vi("y", [1, 3, 8])], opset=17, ms=True),
            ["MultiHeadAttention", "packed"])
        refused_model(SHARDC, tmp, "computed_mask", model("cm", [
            n("Not", ["m0"], ["m"]),
            n("MultiHeadAttention", ["q", "k", "v", "", "m"], ["y"], domain=MS, num_heads=2)],
            [vi("q", [1, 3, 8]), vi("k", [1, 3, 8]), vi("v", [1, 3, 8]),
             vi("m0", [1, 3], T.BOOL)], [vi("y", [1, 3, 8])], opset=17, ms=True),
            ["MultiHeadAttention", "input 4", "graph input"])
    return finish()


if __name__ == "__main__":
    sys.exit(main())
