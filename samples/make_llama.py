#!/usr/bin/env python3
"""make_llama.py — the models of the GPU training speed comparison
(tests/gpu/train_speed.py) as training-ready ONNX graphs, with seeded random
weights written as external data, so that shardc and PyTorch
(tests/gpu/torch_ref.py) train exactly the same model from the same files.

Two families, each at its real size and at a tiny size for tests:

  llama-1p3b   a Llama-style decoder built here with onnx.helper: d 2048,
               24 layers, 16 heads (head 128), SwiGLU MLP with hidden 5632
               (TinyLlama's: 8/3·d rounded up to a multiple of 256), RMSNorm
               (eps 1e-5), rotary embeddings (theta 10000, the two halves
               rotated as transformers' rotate_half), vocabulary 32000,
               sequence 2048, an untied LM head: 1,364,297,728 parameters
  llama-tiny   the same graph at d 64, 2 layers, 4 heads, hidden 176,
               vocabulary 512, sequence 32
  gpt2-small   GPT-2 small (12 layers, d 768, 12 heads, vocabulary 50257,
               sequence 1024, tied head) from make_samples.build_gpt2_graph,
               the generator of gpt_1p5b: 124,439,808 parameters
  gpt2-tiny    the same at d 64, 2 layers, 4 heads, vocabulary 512,
               sequence 32

The Llama graph, op for op (opset 23, IR 10; the batch dim is symbolic,
`batch`, everything else fixed):
  Gather(model.embed_tokens.weight, input_ids), then per layer
  RMSNormalization(input_layernorm) → q/k/v MatMuls → Reshape to heads and
  Transpose to [B, H, S, 128] → q and k rotated (Mul by the cos table, Add
  the halves swapped by Slice, Neg and Concat times the sin table) →
  MatMul(q, kᵀ), Div by √128, Where on the causal mask (float32's minimum),
  Softmax, MatMul by v → Transpose, Reshape → o_proj MatMul → residual Add;
  RMSNormalization(post_attention_layernorm) → gate and up MatMuls →
  gate·Sigmoid(gate)·up → down MatMul → residual Add; then
  RMSNormalization(model.norm) and MatMul(lm_head.weight).
Every weight of a MatMul is stored [in, out] (GPT-2's Conv1D layout; the
names are transformers' LlamaForCausalLM's, whose nn.Linear holds [out, in]).
The rotary tables are Constants computed by `rope_tables`, which
torch_ref.py calls too. RMSNormalization is the opset-23 op (one row
kernel and its gradient in shardc); RotaryEmbedding (opset 23) is not used:
shardc's training has no gradient through it before its expansion, and
the expansion needs position ids, so the rotation is written out here.

The model's config is in the ONNX file's metadata (`shardc.config`, JSON),
so a reader needs nothing but the file. Weights: every initializer is
external data in NAME.weights beside NAME.onnx (offsets aligned to 4096
bytes, state order), written by `write_weights`: norms' weights 1, biases
0, every other tensor N(0, 0.02) from numpy's default_rng([seed, i]) for
the i-th initializer, so one tensor's values do not depend on the others.
The real sizes are written where they run (tests/gpu/train_speed.py on the
GPU machine: 0.5 GB for gpt2-small, 5.5 GB for llama-1p3b), never
committed.

usage: make_llama.py MODEL --out DIR [--seed N] [--no-weights]
  writes DIR/MODEL.onnx and DIR/MODEL.weights (DIR is required: the real
  sizes' weights are gigabytes, kept out of the source tree); --no-weights
  writes the graph only (shape-only, as gpt_1p5b), enough for
  `shardc plan --train --no-weights`.
"""
import argparse
import json
import math
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
OPSET = 23
ALIGN = 4096

LLAMA_1P3B = dict(family="llama", vocab=32000, d=2048, n_layer=24, n_head=16, ffn=5632,
                  seq=2048, theta=10000.0, eps=1e-5)
LLAMA_TINY = dict(LLAMA_1P3B, vocab=512, d=64, n_layer=2, n_head=4, ffn=176, seq=32)
GPT2_SMALL = dict(family="gpt2", vocab=50257, n_positions=1024, n_embd=768, n_head=12,
                  n_layer=12, seq=1024)
GPT2_TINY = dict(GPT2_SMALL, vocab=512, n_positions=32, n_embd=64, n_head=4, n_layer=2, seq=32)
MODELS = {"gpt2-small": GPT2_SMALL, "llama-1p3b": LLAMA_1P3B,
          "gpt2-tiny": GPT2_TINY, "llama-tiny": LLAMA_TINY}


def llama_param_shapes(c):
    """(name, shape) of every Llama parameter, in state order; MatMul
    weights [in, out]."""
    d, f, v = c["d"], c["ffn"], c["vocab"]
    out = [("model.embed_tokens.weight", [v, d])]
    for i in range(c["n_layer"]):
        p = "model.layers.%d." % i
        out += [(p + "input_layernorm.weight", [d]),
                (p + "self_attn.q_proj.weight", [d, d]),
                (p + "self_attn.k_proj.weight", [d, d]),
                (p + "self_attn.v_proj.weight", [d, d]),
                (p + "self_attn.o_proj.weight", [d, d]),
                (p + "post_attention_layernorm.weight", [d]),
                (p + "mlp.gate_proj.weight", [d, f]),
                (p + "mlp.up_proj.weight", [d, f]),
                (p + "mlp.down_proj.weight", [f, d])]
    out += [("model.norm.weight", [d]), ("lm_head.weight", [d, v])]
    return out


def param_shapes(c):
    if c["family"] == "llama":
        return llama_param_shapes(c)
    sys.path.insert(0, HERE)
    import make_samples
    return make_samples.gpt2_param_shapes(c)


def rope_tables(c):
    """cos and sin [seq, head] float32: position p, frequency j < head/2 is
    theta^(-2j/head), the table holding the frequencies twice (transformers'
    cat(freqs, freqs)), computed in float64 and rounded once."""
    hd = c["d"] // c["n_head"]
    inv = c["theta"] ** (-np.arange(0, hd, 2, dtype=np.float64) / hd)
    ang = np.outer(np.arange(c["seq"], dtype=np.float64), inv)
    ang = np.concatenate([ang, ang], axis=1)
    return np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)


def model_flops(c, tokens):
    """The model FLOPs of a training step of `tokens` tokens (forward and
    backward): 6·N_mm·tokens + 12·L·d·s·tokens, where N_mm counts the
    weights of every matrix product (the layers' projections and the LM
    head; not the input or position embeddings, the norms or the biases)
    and the second term is the attention's two products, Q·Kᵀ and P·V, at
    2·s·d FLOPs a token and layer each forward, times 3 for the backward,
    over the whole s×s square (the causal half is not taken off, as PaLM's
    and Megatron-LM's MFU count it)."""
    if c["family"] == "llama":
        d, L = c["d"], c["n_layer"]
        n_mm = L * (4 * d * d + 3 * d * c["ffn"]) + d * c["vocab"]
    else:
        d, L = c["n_embd"], c["n_layer"]
        n_mm = L * (12 * d * d) + d * c["vocab"]
    return 6 * n_mm * tokens + 12 * L * d * c["seq"] * tokens, n_mm


def build_llama_graph(c, external=None, align=ALIGN):
    """The Llama LM (logits only) as an ONNX ModelProto whose initializers
    are external data in `external` (location, offset, length; the file is
    not written here: `write_weights`). Returns (model, data bytes)."""
    import onnx
    from onnx import TensorProto, helper
    d, H, L, S, V = c["d"], c["n_head"], c["n_layer"], c["seq"], c["vocab"]
    hd = d // H
    assert hd * H == d and hd % 2 == 0
    nodes, inits = [], []
    offset = 0
    import make_samples
    for name, shape in llama_param_shapes(c):
        t, offset = make_samples.external_initializer(name, shape, external, offset, align)
        inits.append(t)

    def const(name, arr):
        nodes.append(helper.make_node("Constant", [], [name], name=name,
                                      value=onnx.numpy_helper.from_array(np.asarray(arr), name)))
        return name

    n = [0]

    def op(op_type, inputs, **attrs):
        n[0] += 1
        out = "/%s_%d_out" % (op_type, n[0])
        nodes.append(helper.make_node(op_type, inputs, [out], name=out[:-4], **attrs))
        return out

    cos, sin = rope_tables(c)
    cos, sin = const("rope_cos", cos), const("rope_sin", sin)
    causal = const("causal_mask", np.tril(np.ones((S, S), dtype=bool)).reshape(1, 1, S, S))
    mask_value = const("mask_value", np.array(np.finfo(np.float32).min, dtype=np.float32))
    scale = const("attn_scale", np.array(math.sqrt(hd), dtype=np.float32))
    heads_shape = const("heads_shape", np.array([0, 0, H, hd], dtype=np.int64))
    merge_shape = const("merge_shape", np.array([0, 0, d], dtype=np.int64))
    axis3 = const("axis3", np.array([3], dtype=np.int64))
    h0, h1, h2 = (const("half_%d" % i, np.array([v], dtype=np.int64))
                  for i, v in enumerate((0, hd // 2, hd)))

    def rmsnorm(x, w):
        return op("RMSNormalization", [x, w], axis=-1, epsilon=c["eps"])

    def heads(x):  # [B, S, d] -> [B, H, S, hd]
        return op("Transpose", [op("Reshape", [x, heads_shape])], perm=[0, 2, 1, 3])

    def rotate(x):  # x·cos + rotate_half(x)·sin, rotate_half(x) = [-x2, x1]
        x1 = op("Slice", [x, h0, h1, axis3])
        x2 = op("Slice", [x, h1, h2, axis3])
        half = op("Concat", [op("Neg", [x2]), x1], axis=3)
        return op("Add", [op("Mul", [x, cos]), op("Mul", [half, sin])])

    h = op("Gather", ["model.embed_tokens.weight", "input_ids"], axis=0)
    for i in range(L):
        p = "model.layers.%d." % i
        a = rmsnorm(h, p + "input_layernorm.weight")
        q = rotate(heads(op("MatMul", [a, p + "self_attn.q_proj.weight"])))
        k = rotate(heads(op("MatMul", [a, p + "self_attn.k_proj.weight"])))
        v = heads(op("MatMul", [a, p + "self_attn.v_proj.weight"]))
        w = op("Div", [op("MatMul", [q, op("Transpose", [k], perm=[0, 1, 3, 2])]), scale])
        w = op("Softmax", [op("Where", [causal, w, mask_value])], axis=-1)
        ctx = op("Reshape", [op("Transpose", [op("MatMul", [w, v])], perm=[0, 2, 1, 3]),
                             merge_shape])
        h = op("Add", [h, op("MatMul", [ctx, p + "self_attn.o_proj.weight"])])
        m = rmsnorm(h, p + "post_attention_layernorm.weight")
        gate = op("MatMul", [m, p + "mlp.gate_proj.weight"])
        up = op("MatMul", [m, p + "mlp.up_proj.weight"])
        act = op("Mul", [op("Mul", [gate, op("Sigmoid", [gate])]), up])
        h = op("Add", [h, op("MatMul", [act, p + "mlp.down_proj.weight"])])
    h = rmsnorm(h, "model.norm.weight")
    nodes.append(helper.make_node("MatMul", [h, "lm_head.weight"], ["logits"],
                                  name="/lm_head/MatMul"))
    graph = helper.make_graph(
        nodes, "llama_lm",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", S])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", S, V])],
        initializer=inits)
    model = helper.make_model(graph, producer_name="shardc samples/make_llama.py",
                              opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 10
    return model, offset


def build_graph(c, external):
    """(model, data bytes) of either family, external data in `external`."""
    if c["family"] == "llama":
        model, total = build_llama_graph(c, external)
    else:
        sys.path.insert(0, HERE)
        import make_samples
        model, total = make_samples.build_gpt2_graph(c, external=external, align=ALIGN)
    ent = model.metadata_props.add()
    ent.key, ent.value = "shardc.config", json.dumps(c, sort_keys=True)
    return model, total


def init_value(name, shape, rng):
    """A parameter's initial value: norms' weights 1, biases 0, the rest
    N(0, 0.02)."""
    if name.endswith("norm.weight") or name.endswith((".ln_1.weight", ".ln_2.weight",
                                                      "ln_f.weight")):
        return np.ones(shape, np.float32)
    if name.endswith(".bias"):
        return np.zeros(shape, np.float32)
    return rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02)


def external_layout(model):
    """[(name, shape, location, offset, length)] of the model's external
    initializers, from the ONNX file's own entries."""
    out = []
    for t in model.graph.initializer:
        e = {x.key: x.value for x in t.external_data}
        out.append((t.name, list(t.dims), e["location"], int(e["offset"]), int(e["length"])))
    return out


def write_weights(model, folder, seed):
    """Writes the external data file(s) of `model` into `folder`: each
    initializer at its offset, from default_rng([seed, i])."""
    files = {}
    try:
        for i, (name, shape, loc, off, length) in enumerate(external_layout(model)):
            if loc not in files:
                files[loc] = open(os.path.join(folder, loc), "wb")
            a = init_value(name, shape, np.random.default_rng([seed, i]))
            assert a.dtype == np.float32 and a.nbytes == length, (name, a.nbytes, length)
            f = files[loc]
            f.seek(off)
            a.tofile(f)
        for f in files.values():   # the file ends at the last tensor's padded end
            end = max(off + (length + ALIGN - 1) // ALIGN * ALIGN
                      for _, _, loc, off, length in external_layout(model))
            f.truncate(end)
    finally:
        for f in files.values():
            f.close()


def load_weights(onnx_path):
    """{name: float32 array [shape]} of a model written here, read (memory
    mapped) from its external data at the offsets its ONNX file records:
    what torch_ref.py trains from. Needs onnx and numpy only."""
    import onnx
    m = onnx.load(onnx_path, load_external_data=False)
    folder = os.path.dirname(os.path.abspath(onnx_path))
    out = {}
    for name, shape, loc, off, length in external_layout(m):
        if length != 4 * math.prod(shape):
            raise ValueError("%s: initializer %s: length %d is not 4 x %s" %
                             (onnx_path, name, length, shape))
        out[name] = np.memmap(os.path.join(folder, loc), np.float32, "r", off, tuple(shape))
    return out


def read_config(onnx_path):
    """The config a model written here carries in its metadata."""
    import onnx
    m = onnx.load(onnx_path, load_external_data=False)
    for p in m.metadata_props:
        if p.key == "shardc.config":
            return json.loads(p.value)
    raise ValueError("%s: no shardc.config metadata (not written by make_llama.py)" % onnx_path)


def write_model(name, folder, seed=0, weights=True):
    """Writes folder/NAME.onnx (and NAME.weights); returns the ONNX path."""
    import onnx
    c = MODELS[name]
    model, _ = build_graph(c, name + ".weights")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, name + ".onnx")
    onnx.save(model, path)
    if weights:
        write_weights(model, folder, seed)
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", choices=sorted(MODELS))
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-weights", action="store_true")
    a = ap.parse_args()
    path = write_model(a.model, a.out, a.seed, not a.no_weights)
    c = MODELS[a.model]
    n = sum(math.prod(s) for _, s in param_shapes(c))
    print("%s: %d parameters%s" % (path, n, "" if a.no_weights else
                                    ", weights in " + a.model + ".weights"))


if __name__ == "__main__":
    main()
