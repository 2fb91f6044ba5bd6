#!/usr/bin/env python3
"""test_gather_range.py — token ids outside the vocabulary, on every mesh.

ONNX Gather takes indices in [-n, n) (negative ones count from the end); onnxruntime
rejects any other. shardc checks run-time indices before the lookup (a CHECK step,
codegen/program.h) and constant ones at compile time, so an out-of-range id is the same
error — exit 1, naming the Gather node and the index — on one rank, with a tensor-parallel
(vocabulary-parallel, masked) embedding, with data parallelism, with a pipeline, with a
padded vocabulary (tp=3 does not divide 1000), and from compiled bundles of both kinds.
Ids -1 and vocab-1 still run and equal onnxruntime's logits (rtol 1e-4, atol 1e-5: the
partitioned runs reorder float sums).

Also a small model: a Gather whose constant indices are out of range fails at compile
time naming the node, whether constant folding evaluates it (constant data) or not.

Usage (ctest sets SHARDC and SC_SOURCE_DIR): test_gather_range.py [-v]
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

SHARDC = os.path.abspath(os.environ.get("SHARDC", "build/shardc"))
SRC = os.path.abspath(os.environ.get("SC_SOURCE_DIR",
                                     os.path.join(os.path.dirname(__file__), "..", "..")))
GPT2 = os.path.join(SRC, "samples", "gpt2.onnx")
VOCAB = 1000
GATHER = "node '/m/transformer/wte/Gather' (Gather)"
MESHES = [[], ["--mesh", "tp=2"], ["--mesh", "dp=2"], ["--mesh", "tp=2,pp=2"],
          ["--mesh", "tp=3"]]
failures = []


def check(name, ok, detail=""):
    if not ok:
        failures.append("%s: %s" % (name, detail))
    if "-v" in sys.argv or not ok:
        print("%s %s %s" % ("ok  " if ok else "FAIL", name, detail if not ok else ""))


def run(args, cwd):
    p = subprocess.run([SHARDC] + args, cwd=cwd, capture_output=True, text=True, timeout=300)
    return p.returncode, p.stderr


def ids_with(tmp, name, value):
    ids = np.random.RandomState(7).randint(0, VOCAB, size=(2, 16)).astype(np.int64)
    ids[1, 5] = value
    path = os.path.join(tmp, name + ".npy")
    np.save(path, ids)
    return ids, path


def test_gpt2(tmp):
    so = ort.SessionOptions()
    so.log_severity_level = 4  # the rejections below are expected: no log lines
    sess = ort.InferenceSession(GPT2, so)
    for value in (VOCAB, -VOCAB - 1):
        _, path = ids_with(tmp, "bad%d" % value, value)
        try:
            sess.run(None, {"input_ids": np.load(path)})
            check("onnxruntime rejects id %d" % value, False, "it ran")
        except Exception:  # noqa: BLE001 — onnxruntime's own error type
            pass
        want = "index %d out of range [-%d, %d)" % (value, VOCAB, VOCAB)
        for mesh in MESHES:
            name = "id %d %s" % (value, " ".join(mesh) or "one rank")
            rc, err = run(["run", GPT2, "--dim", "batch=2", "--input", "input_ids=" + path,
                           "--output-dir", os.path.join(tmp, "out_bad"), "--quiet"] + mesh, tmp)
            last = err.strip().splitlines()[-1] if err.strip() else ""
            check(name, rc == 1 and GATHER in last and want in last, "rc=%d %r" % (rc, err))
        check("no output for a failed run", not os.path.exists(os.path.join(tmp, "out_bad")))
    for value in (-1, VOCAB - 1):
        ids, path = ids_with(tmp, "ok%d" % value, value)
        ref = sess.run(None, {"input_ids": ids})[0]
        for mi, mesh in enumerate(MESHES):
            name = "id %d %s" % (value, " ".join(mesh) or "one rank")
            out = os.path.join(tmp, "out%d_%d" % (value, mi))
            rc, err = run(["run", GPT2, "--dim", "batch=2", "--input", "input_ids=" + path,
                           "--output-dir", out, "--quiet"] + mesh, tmp)
            if rc != 0:
                check(name, False, "rc=%d %s" % (rc, err))
                continue
            y = np.load(os.path.join(out, "logits.npy"))
            check(name, y.shape == ref.shape and not np.isnan(y).any() and
                  np.allclose(y, ref, rtol=1e-4, atol=1e-5),
                  "max abs diff %g" % float(np.abs(y - ref).max()))


def test_bundles(tmp):
    _, bad = ids_with(tmp, "bundle_bad", VOCAB)
    for mesh, label in (([], "bundle"), (["--mesh", "tp=2"], "partitioned bundle")):
        d = os.path.join(tmp, label.replace(" ", "_"))
        rc, err = run(["compile", GPT2, "--dim", "batch=2", "-o", d] + mesh, tmp)
        check("compile " + label, rc == 0, err)
        rc, err = run(["run", d, "--input", "input_ids=" + bad, "--quiet", "--output-dir",
                       os.path.join(tmp, "bout")], tmp)
        check(label + " rejects id %d" % VOCAB, rc == 1 and GATHER in err, "rc=%d %r" % (rc, err))


def gather_model(path, data_const, indices):
    inits = [numpy_helper.from_array(np.array(indices, dtype=np.int64), "idx")]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])]
    if data_const:
        inits.append(numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3),
                                             "data"))
    else:
        inputs.append(helper.make_tensor_value_info("data", TensorProto.FLOAT, [4, 3]))
    nodes = [helper.make_node("Gather", ["data", "idx"], ["g"], name="my_gather", axis=0),
             helper.make_node("Add", ["g", "x"], ["y"], name="add")]
    g = helper.make_graph(nodes, "g", inputs,
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def test_constant_indices(tmp):
    for data_const in (True, False):
        for idx, ok in (([1, 4], False), ([1, -5], False), ([-4, 3], True)):
            path = os.path.join(tmp, "g_%d_%d.onnx" % (data_const, idx[1]))
            gather_model(path, data_const, idx)
            rc, err = run(["run", path, "--random-inputs", "1", "--quiet", "--output-dir",
                           os.path.join(tmp, "gout")], tmp)
            name = "constant indices %s, %s data" % (idx, "constant" if data_const else "input")
            if ok:
                check(name, rc == 0, err)
            else:
                check(name, rc == 1 and "node 'my_gather' (Gather)" in err and
                      "index %d out of range [-4, 4)" % idx[1] in err, "rc=%d %r" % (rc, err))


def main():
    with tempfile.TemporaryDirectory() as tmp:
        for t in (test_gpt2, test_bundles, test_constant_indices):
            sub = os.path.join(tmp, t.__name__)
            os.mkdir(sub)
            t(sub)
    if failures:
        print("%d failure(s)" % len(failures))
        return 1
    print("all Gather range cases pass")
    return 0


if __name__ == "__main__":
    sys.exit(main())
