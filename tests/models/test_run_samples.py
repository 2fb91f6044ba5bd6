"""test_run_samples.py — `shardc run` on every sample model against onnxruntime.

For every samples/*.onnx with embedded weights (all but gpt_1p5b, whose
weights are not in the repository), on three seeded random inputs (batch
1, 3 and 3; gpt2 and resnet also once with --no-fuse):
  * inputs are written with numpy.save and passed as --input NAME=FILE.npy;
    float inputs are uniform in [-1, 1), token ids uniform in [0, vocab)
    (vocab read from the embedding table the ids index), attention masks
    all ones except, in the third case, the last 4 positions of row 0
    (padding);
  * `shardc run MODEL --dim batch=B --input ... --output-dir DIR` succeeds
    and writes DIR/<output>.npy for every graph output;
  * each output has onnxruntime's dtype and shape, contains no NaN, and
    matches within rtol 1e-4, atol 1e-5 (the project's float32 tolerance:
    shardc and onnxruntime sum in different orders).
Also the command line around it: missing inputs (exit 2, all missing names
listed), a .npy of the wrong shape or dtype (exit 1, naming the input and
both types), a broken .npy (exit 1), an --input name the model lacks (exit
2), usage errors (exit 2), --random-inputs (same seed: same outputs, with 1
and with 2 threads, bit for bit; another seed: other outputs) and the
one-line summary.

Environment: SHARDC (the binary), SC_SOURCE_DIR (the repo). Exit 0 on
success, 1 on any failure (all failures are listed).
"""
import glob
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper
from checks import check, failures

SHARDC = os.environ.get("SHARDC")
SRC = os.environ.get("SC_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
RTOL, ATOL = 1e-4, 1e-5
CASES = [(0, 1), (1, 3), (2, 3)]  # (seed, batch)
# also run unfused (--no-fuse: one kernel per node) on the first case of these
NO_FUSE = {"gpt2", "resnet"}
SKIP_NO_WEIGHTS = {"gpt_1p5b"}

NP_DTYPE = {1: np.float32, 6: np.int32, 7: np.int64, 9: np.bool_, 11: np.float64}


def run(args, timeout=300):
    return subprocess.run([SHARDC] + args, capture_output=True, text=True, timeout=timeout)


def vocab_of(model, input_name):
    """Rows of the embedding table that a Gather indexes with input_name."""
    inits = {t.name: t for t in model.graph.initializer}
    for n in model.graph.node:
        if n.op_type == "Gather" and len(n.input) > 1 and n.input[1] == input_name:
            if n.input[0] in inits:
                return int(inits[n.input[0]].dims[0])
    return 100


def make_inputs(model, batch, seed):
    rng = np.random.default_rng(seed)
    feeds = {}
    for inp in model.graph.input:
        tt = inp.type.tensor_type
        shape = [batch if d.dim_param else d.dim_value for d in tt.shape.dim]
        dt = NP_DTYPE[tt.elem_type]
        if np.issubdtype(dt, np.floating):
            a = rng.uniform(-1.0, 1.0, size=shape).astype(dt)
        elif "mask" in inp.name:
            a = np.ones(shape, dtype=dt)
            if seed == 2 and len(shape) == 2 and shape[1] > 4:
                a[0, -4:] = 0  # padding in row 0
        else:
            a = rng.integers(0, vocab_of(model, inp.name), size=shape).astype(dt)
        feeds[inp.name] = a
    return feeds


def compare(tag, got, want):
    if not check(got.shape == want.shape, f"{tag}: shape {got.shape}, onnxruntime {want.shape}"):
        return
    if not check(got.dtype == want.dtype, f"{tag}: dtype {got.dtype}, onnxruntime {want.dtype}"):
        return
    if np.issubdtype(got.dtype, np.floating):
        nan = int(np.isnan(got).sum())
        check(nan == 0, f"{tag}: {nan} NaN values")
        ok = np.allclose(got, want, rtol=RTOL, atol=ATOL, equal_nan=False)
        if not ok:
            err = np.abs(got.astype(np.float64) - want.astype(np.float64))
            bad = err > ATOL + RTOL * np.abs(want.astype(np.float64))
            i = np.unravel_index(np.argmax(err), err.shape)
            check(False, f"{tag}: {int(bad.sum())} of {got.size} values off; max |diff| "
                         f"{err.max():.3g} at {tuple(int(x) for x in i)} "
                         f"(shardc {got[i]!r}, onnxruntime {want[i]!r})")
    else:
        check(np.array_equal(got, want), f"{tag}: integer outputs differ")


def safe_name(name):
    s = "".join(c if c.isalnum() or c in "._-" else "_" for c in name)
    return "_" + s if not s or s[0] == "." else s


def test_model(path, tmp):
    name = os.path.splitext(os.path.basename(path))[0]
    model = onnx.load(path)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    out_names = [o.name for o in model.graph.output]
    cases = [(s, b, False) for s, b in CASES]
    if name in NO_FUSE:
        cases.append((CASES[0][0], CASES[0][1], True))
    for seed, batch, no_fuse in cases:
        tag = f"{name} seed {seed} batch {batch}{' --no-fuse' if no_fuse else ''}"
        n_failures = len(failures)
        feeds = make_inputs(model, batch, seed)
        d = os.path.join(tmp, f"{name}_{seed}{'_nofuse' if no_fuse else ''}")
        os.makedirs(d, exist_ok=True)
        args = ["run", path, "--dim", f"batch={batch}", "--output-dir", d, "--quiet"]
        if no_fuse:
            args.append("--no-fuse")
        for k, v in feeds.items():
            f = os.path.join(d, f"in_{safe_name(k)}.npy")
            np.save(f, v)
            args += ["--input", f"{k}={f}"]
        r = run(args)
        if not check(r.returncode == 0, f"{tag}: exit {r.returncode}: {r.stderr.strip()[:2000]}"):
            continue
        want = sess.run(out_names, feeds)
        for oname, w in zip(out_names, want):
            f = os.path.join(d, safe_name(oname) + ".npy")
            if not check(os.path.exists(f), f"{tag}: {f} not written"):
                continue
            compare(f"{tag}: output '{oname}'", np.load(f), w)
        print(f"ok   {tag}" if len(failures) == n_failures else f"FAIL {tag}")


def test_cli(tmp):
    mlp = os.path.join(SRC, "samples", "mlp.onnx")
    bert = os.path.join(SRC, "samples", "bert.onnx")
    # missing inputs: all names listed, exit 2
    r = run(["run", bert, "--output-dir", tmp])
    check(r.returncode == 2, f"missing inputs: exit {r.returncode}")
    check("input_ids" in r.stderr and "attention_mask" in r.stderr and "missing" in r.stderr,
          f"missing inputs: message lists the names: {r.stderr.strip()}")
    # wrong shape
    f = os.path.join(tmp, "x_bad.npy")
    np.save(f, np.random.default_rng(1).uniform(-1, 1, size=(2, 63)).astype(np.float32))
    r = run(["run", mlp, "--dim", "batch=2", "--input", f"x={f}", "--output-dir", tmp])
    check(r.returncode == 1, f"wrong shape: exit {r.returncode}")
    check("'x'" in r.stderr and "f32[2,63]" in r.stderr and "f32[2,64]" in r.stderr,
          f"wrong shape: message names the input and both shapes: {r.stderr.strip()}")
    # wrong dtype
    np.save(f, np.random.default_rng(1).uniform(-1, 1, size=(2, 64)).astype(np.float64))
    r = run(["run", mlp, "--dim", "batch=2", "--input", f"x={f}", "--output-dir", tmp])
    check(r.returncode == 1 and "f64[2,64]" in r.stderr and "f32[2,64]" in r.stderr,
          f"wrong dtype: exit {r.returncode}: {r.stderr.strip()}")
    # not a .npy file
    with open(f, "wb") as fh:
        fh.write(b"\x93NUMPY\x01\x00\xff\xff{'descr'")
    r = run(["run", mlp, "--input", f"x={f}", "--output-dir", tmp])
    check(r.returncode == 1 and "'x'" in r.stderr and "truncated" in r.stderr,
          f"broken .npy: exit {r.returncode}: {r.stderr.strip()}")
    # unknown input name
    r = run(["run", mlp, "--input", f"nope={f}", "--output-dir", tmp])
    check(r.returncode == 2 and "'nope'" in r.stderr and "x" in r.stderr,
          f"unknown input: exit {r.returncode}: {r.stderr.strip()}")
    # usage errors
    r = run(["run", mlp, "--threads", "0"])
    check(r.returncode == 2, f"--threads 0: exit {r.returncode}")
    r = run(["run", mlp, "--random-inputs"])
    check(r.returncode == 2, f"--random-inputs without a seed: exit {r.returncode}")
    # --random-inputs: reproducible, floats in [-1, 1), thread counts agree
    outs = []
    for i, threads in enumerate((1, 2, 2)):
        d = os.path.join(tmp, f"rand{i}")
        seed = "5" if i < 2 else "6"
        r = run(["run", mlp, "--dim", "batch=4", "--random-inputs", seed, "--threads",
                 str(threads), "--output-dir", d])
        if not check(r.returncode == 0, f"--random-inputs: exit {r.returncode}: {r.stderr}"):
            return
        check(r.stdout.startswith("y f32[4,10] ["), f"summary line: {r.stdout.strip()}")
        outs.append(np.load(os.path.join(d, "y.npy")))
    check(np.array_equal(outs[0], outs[1]), "--random-inputs 5: 1 and 2 threads differ")
    check(not np.array_equal(outs[1], outs[2]), "--random-inputs 5 and 6 give the same outputs")
    check(np.all(np.isfinite(outs[0])) and np.abs(outs[0]).max() > 0,
          "--random-inputs: outputs not finite or all zero")


def test_odd_outputs(tmp):
    """Output names needing sanitising (and colliding after it), an output
    that is a view of an input (Identity), one that folds to a constant
    (Shape) and one computed (Add + Relu)."""
    from onnx import helper, TensorProto
    x = helper.make_tensor_value_info("in/x", TensorProto.FLOAT, ["batch", 3])
    outs = [helper.make_tensor_value_info(n, t, None) for n, t in
            [("out/y:0", TensorProto.FLOAT), ("out_y_0", TensorProto.FLOAT),
             ("ident", TensorProto.FLOAT), ("shape", TensorProto.INT64)]]
    c = numpy_helper.from_array(np.array([0.5, -0.25, 1.0], dtype=np.float32), "c")
    nodes = [helper.make_node("Add", ["in/x", "c"], ["out/y:0"]),
             helper.make_node("Relu", ["out/y:0"], ["out_y_0"]),
             helper.make_node("Identity", ["in/x"], ["ident"]),
             helper.make_node("Shape", ["in/x"], ["shape"])]
    g = helper.make_graph(nodes, "odd", [x], outs, [c])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path = os.path.join(tmp, "odd.onnx")
    onnx.save(m, path)
    xv = np.random.default_rng(3).uniform(-1, 1, size=(2, 3)).astype(np.float32)
    f = os.path.join(tmp, "odd_x.npy")
    np.save(f, xv)
    d = os.path.join(tmp, "odd_out")
    r = run(["run", path, "--dim", "batch=2", "--input", f"in/x={f}", "--output-dir", d])
    if not check(r.returncode == 0, f"odd outputs: exit {r.returncode}: {r.stderr.strip()}"):
        return
    want = {"out_y_0.npy": xv + c_arr(c), "out_y_0_1.npy": np.maximum(xv + c_arr(c), 0),
            "ident.npy": xv, "shape.npy": np.array([2, 3], dtype=np.int64)}
    for fname, w in want.items():
        p = os.path.join(d, fname)
        if check(os.path.exists(p), f"odd outputs: {fname} not written ({os.listdir(d)})"):
            compare(f"odd outputs: {fname}", np.load(p), w)


def c_arr(t):
    return numpy_helper.to_array(t)


def main():
    if not SHARDC:
        print("SHARDC is not set")
        return 1
    models = sorted(glob.glob(os.path.join(SRC, "samples", "*.onnx")))
    check(len(models) >= 13, f"expected the 13 samples, found {len(models)}")
    with tempfile.TemporaryDirectory() as tmp:
        test_cli(tmp)
        test_odd_outputs(tmp)
        for m in models:
            name = os.path.splitext(os.path.basename(m))[0]
            if name in SKIP_NO_WEIGHTS:
                print(f"PARTIAL SKIP: {name}: its external weights are not in the repository")
                continue
            test_model(m, tmp)
    if failures:
        print(f"\n{len(failures)} failure(s):")
        for f in failures:
            print("  ", f)
        return 1
    print("all passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
