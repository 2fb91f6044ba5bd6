"""test_inspect.py — `shardc inspect` against the samples, onnx and onnxruntime.

For every samples/*.onnx (none skipped silently):
  * `shardc inspect MODEL --json --dim batch=2` succeeds and prints one JSON
    object;
  * "params" equals the element count of all initializers, computed here with
    the onnx package (Constant-node tensors are not parameters), and
    "param_bytes" their bytes;
  * the output shapes equal what onnxruntime produces on seeded random inputs
    at batch 2; for a model whose external weights are absent (gpt_1p5b) the
    run is replaced by the declared output shapes and a parameter count near
    1.5e9;
  * the per-block table: as many blocks as distinct layer indices in the
    initializer names, block + outside parameters adding up to the total; no
    blocks for the MLP and the ResNet;
  * the MLP's FLOPs equal the count from the rules in docs/ops.md, computed
    here from the ONNX file.
Also: --dot output renders with `dot -Tsvg`; a broken model exits 1 with
"shardc: error: FILE: node 'NAME' (Op): ..."; usage errors exit 2.

Environment: SHARDC (the binary), SC_SOURCE_DIR (the repo). Exit 0 on
success, 1 on any failure (all failures are listed).
"""
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import helper, numpy_helper, TensorProto
from checks import check, failures

SHARDC = os.environ.get("SHARDC")
SRC = os.environ.get("SC_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BATCH = 2


def run(args, **kw):
    return subprocess.run([SHARDC] + args, capture_output=True, text=True, timeout=300, **kw)


def numel(dims):
    n = 1
    for d in dims:
        n *= int(d)
    return n


def external_missing(model, path):
    base = os.path.dirname(path)
    for t in model.graph.initializer:
        if t.data_location == TensorProto.EXTERNAL:
            loc = {e.key: e.value for e in t.external_data}.get("location")
            if loc and not os.path.exists(os.path.join(base, loc)):
                return True
    return False


def declared_shape(vi, batch):
    out = []
    for d in vi.type.tensor_type.shape.dim:
        if d.HasField("dim_value"):
            out.append(d.dim_value)
        elif d.dim_param == "batch":
            out.append(batch)
        else:
            out.append(None)
    return out


def random_inputs(model, rng):
    init = {t.name for t in model.graph.initializer}
    feeds = {}
    for vi in model.graph.input:
        if vi.name in init:
            continue
        tt = vi.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else (BATCH if d.dim_param == "batch" else 1)
                 for d in tt.shape.dim]
        np_dtype = helper.tensor_dtype_to_np_dtype(tt.elem_type)
        if np.issubdtype(np_dtype, np.floating):
            feeds[vi.name] = rng.standard_normal(shape).astype(np_dtype)
        elif "mask" in vi.name:
            feeds[vi.name] = rng.integers(0, 2, size=shape).astype(np_dtype)
        else:
            feeds[vi.name] = rng.integers(1, 16, size=shape).astype(np_dtype)
    return feeds


def layer_indices(model):
    """Distinct layer indices in initializer names (h.N, layers.N, layer.N)."""
    idx = set()
    for t in model.graph.initializer:
        m = re.search(r"(?:^|\.)(?:h|layers|layer|blocks)\.(\d+)\.", t.name)
        if m:
            idx.add(int(m.group(1)))
    return idx


def mlp_flops(model, batch):
    """FLOPs by the rules of docs/ops.md: Gemm 2·M·K·N (+ M·N with C), one per
    output element for elementwise ops."""
    init = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    total = 0
    width = None
    for n in model.graph.node:
        if n.op_type == "Gemm":
            w = init[n.input[1]]
            trans_b = next((a.i for a in n.attribute if a.name == "transB"), 0)
            k, nn = (w.shape[1], w.shape[0]) if trans_b else w.shape
            total += 2 * batch * k * nn + (batch * nn if len(n.input) > 2 and n.input[2] else 0)
            width = nn
        elif n.op_type == "Relu":
            total += batch * width
        else:
            return None
    return total


# Composite ops of the IR and the contrib ops read as them (docs/ops.md).
COMPOSITE = {"Attention", "MultiHeadAttention", "RotaryEmbedding", "RNN", "GRU", "LSTM",
             "ConvTranspose", "TopK", "Einsum", "SoftmaxCrossEntropyLoss",
             "NegativeLogLikelihoodLoss"}


def test_sample(path):
    name = os.path.basename(path)
    model = onnx.load(path, load_external_data=False)
    absent = external_missing(model, path)
    args = ["inspect", path, "--json", "--dim", f"batch={BATCH}"] + (["--no-weights"] if absent else [])
    r = run(args)
    if not check(r.returncode == 0, f"{name}: inspect exited {r.returncode}: {r.stderr.strip()}"):
        return
    try:
        j = json.loads(r.stdout)
    except json.JSONDecodeError as e:
        check(False, f"{name}: output is not one JSON object: {e}")
        return

    params = sum(numel(t.dims) for t in model.graph.initializer)
    pbytes = sum(numel(t.dims) * np.dtype(helper.tensor_dtype_to_np_dtype(t.data_type)).itemsize
                 for t in model.graph.initializer)
    check(j["params"] == params, f"{name}: params {j['params']} != {params} (onnx)")
    check(j["param_bytes"] == pbytes, f"{name}: param_bytes {j['param_bytes']} != {pbytes}")
    check(sum(j["param_bytes_by_dtype"].values()) == pbytes, f"{name}: bytes by dtype do not add up")
    check(j["opset"] == next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")),
          f"{name}: opset {j['opset']}")
    check(sum(j["ops"].values()) == j["nodes"], f"{name}: op histogram does not add up to nodes")
    # Folding only removes nodes; a composite op (docs/ops.md) is replaced
    # by the several ops that define it, so a model with one may grow.
    grows = any(n.op_type in COMPOSITE for n in model.graph.node)
    check(0 < j["nodes"] and (grows or j["nodes"] <= j["nodes_before_fold"]),
          f"{name}: nodes {j['nodes']} / before {j['nodes_before_fold']}")
    check(j["flops"] > 0, f"{name}: flops {j['flops']}")
    la = j["largest_activation"]
    sizes = {"f32": 4, "f16": 2, "bf16": 2, "f64": 8, "i64": 8, "i32": 4, "i16": 2,
             "i8": 1, "u8": 1, "bool": 1}
    check(la is not None and la["bytes"] == numel(la["shape"]) * sizes.get(la["dtype"], -1),
          f"{name}: largest activation {la}")
    for vi, ji in zip(model.graph.input, j["inputs"]):
        want = declared_shape(vi, BATCH)
        check(ji["name"] == vi.name and all(w is None or w == s for w, s in zip(want, ji["shape"])),
              f"{name}: input {ji} vs declared {want}")

    # Blocks.
    idx = layer_indices(model)
    if idx:
        check(sorted(b["index"] for b in j["blocks"]) == sorted(idx),
              f"{name}: blocks {[b['index'] for b in j['blocks']]} != layers {sorted(idx)}")
        total = sum(b["params"] for b in j["blocks"]) + j["outside_blocks"]["params"]
        check(total == j["params"], f"{name}: block params add up to {total}, not {j['params']}")
        nodes = sum(b["nodes"] for b in j["blocks"]) + j["outside_blocks"]["nodes"]
        check(nodes == j["nodes"], f"{name}: block nodes add up to {nodes}, not {j['nodes']}")
        fl = [b["flops"] for b in j["blocks"]]
        check(max(fl) > 0 and min(fl) == max(fl), f"{name}: identical layers differ in FLOPs: {fl}")
    else:
        check(j["blocks"] == [], f"{name}: unexpected blocks {j['blocks']}")

    if name == "mlp.onnx":
        want = mlp_flops(model, BATCH)
        check(want is not None and j["flops"] == want, f"{name}: flops {j['flops']} != {want} (docs/ops.md rules)")

    got = [o["shape"] for o in j["outputs"]]
    if absent:
        want = [declared_shape(o, BATCH) for o in model.graph.output]
        check(got == want, f"{name}: output shapes {got} != declared {want}")
        check(1.35e9 <= params <= 1.65e9 and 1.35e9 <= j["params"] <= 1.65e9,
              f"{name}: params {j['params']} not about 1.5e9")
        print(f"ok {name}: params {j['params']}, outputs {got} (weights absent: no onnxruntime run)")
        return
    import onnxruntime as ort
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    outs = sess.run(None, random_inputs(model, np.random.default_rng(1234)))
    want = [list(o.shape) for o in outs]
    check(got == want, f"{name}: output shapes {got} != onnxruntime {want}")
    check(all(np.all(np.isfinite(o)) for o in outs if np.issubdtype(o.dtype, np.floating)),
          f"{name}: onnxruntime produced NaN/inf on the random inputs")
    print(f"ok {name}: params {j['params']}, flops {j['flops']}, outputs {got}, blocks {len(j['blocks'])}")


def test_dot(tmp):
    dot = shutil.which("dot")
    if not check(dot is not None, "graphviz `dot` is not installed"):
        return
    for sample in ("mlp.onnx", "gpt2.onnx"):
        out = os.path.join(tmp, sample + ".dot")
        r = run(["inspect", os.path.join(SRC, "samples", sample), "--dim", "batch=2", "--dot", out])
        if not check(r.returncode == 0, f"--dot {sample}: exit {r.returncode}: {r.stderr}"):
            continue
        text = open(out).read()
        check(text.startswith("digraph") and "->" in text, f"--dot {sample}: not a digraph with edges")
        d = subprocess.run([dot, "-Tsvg", out], capture_output=True, timeout=120)
        check(d.returncode == 0 and b"<svg" in d.stdout, f"dot -Tsvg {sample}: {d.stderr[:300]}")


def test_errors(tmp):
    # Inner dims 8 and 5 differ: an error naming the node.
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    w = numpy_helper.from_array(np.random.default_rng(7).standard_normal((5, 3)).astype(np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="bad_mm")],
                          "bad", [x], [y], [w])
    path = os.path.join(tmp, "bad.onnx")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    r = run(["inspect", path, "--dim", "batch=2"])
    check(r.returncode == 1, f"bad model: exit {r.returncode}, want 1")
    line = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ""
    check(re.fullmatch(r"shardc: error: " + re.escape(path) + r": node 'bad_mm' \(MatMul\): .+", line),
          f"bad model: error line {line!r}")

    mlp = os.path.join(SRC, "samples", "mlp.onnx")
    r = run(["inspect", mlp, "--dim", "nosuchdim=3"])
    check(r.returncode == 2 and "nosuchdim" in r.stderr, f"--dim unknown: exit {r.returncode} {r.stderr}")
    r = run(["inspect", mlp, "--frobnicate"])
    check(r.returncode == 2, f"unknown option: exit {r.returncode}")
    r = run(["frobnicate"])
    check(r.returncode == 2, f"unknown command: exit {r.returncode}")
    r = run(["inspect", os.path.join(tmp, "does-not-exist.onnx")])
    check(r.returncode == 1 and r.stderr.startswith("shardc: error: "), f"missing file: exit {r.returncode}")
    r = run(["--help"])
    check(r.returncode == 0 and "inspect" in r.stdout and "opt" in r.stdout, "--help lists the commands")


def main():
    if not SHARDC:
        print("SHARDC is not set", file=sys.stderr)
        return 1
    samples = sorted(glob.glob(os.path.join(SRC, "samples", "*.onnx")))
    check(len(samples) >= 13, f"expected the 13 samples, found {len(samples)}")
    for path in samples:
        try:
            test_sample(path)
        except Exception as e:  # a crash in one sample must not hide the others
            check(False, f"{os.path.basename(path)}: {type(e).__name__}: {e}")
    with tempfile.TemporaryDirectory() as tmp:
        test_dot(tmp)
        test_errors(tmp)
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
