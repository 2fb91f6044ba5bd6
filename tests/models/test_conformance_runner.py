"""test_conformance_runner.py — the conformance runner's own rules.

tests/conformance/test_node_tests.py decides whether the ONNX node tests
pass; this checks that it cannot pass vacuously, on corpora made here (one
Abs test, with its data; one test of an op shardc does not have):
  * an empty corpus fails (exit 1, "no node tests");
  * a manifest that says `pass` for the Abs test passes (exit 0), with the
    unsupported-op test excluded by kind, not listed;
  * the Abs test missing from the manifest fails ("not in the manifest");
  * a manifest entry naming a test the corpus lacks fails ("no such test");
  * the Abs test marked xfail fails ("now passes");
  * partitioned: at --mesh dp=3 its [3,4] input is split (the summary
    counts 1 of 1 run split, exit 0); at dp=2 nothing divides, so it runs
    replicated and the run fails (0 split: below the floor);
  * --shard 0/2 runs the one counted test, --shard 1/2 has none and fails.

Environment: SHARDC, SC_SOURCE_DIR. Exit 0 on success, 1 on any failure.
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper
from checks import check, failures

SHARDC = os.environ.get("SHARDC")
SRC = os.environ.get("SC_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
RUNNER = os.path.join(SRC, "tests", "conformance", "test_node_tests.py")


def node_test(root, name, op):
    """One node test folder: y = op(x) on a [3,4] float input."""
    d = os.path.join(root, name)
    ds = os.path.join(d, "test_data_set_0")
    os.makedirs(ds)
    g = h.make_graph([h.make_node(op, ["x"], ["y"])], name,
                     [h.make_tensor_value_info("x", T.FLOAT, [3, 4])],
                     [h.make_tensor_value_info("y", T.FLOAT, [3, 4])])
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]),
              os.path.join(d, "model.onnx"))
    x = np.random.default_rng(3).uniform(-1, 1, (3, 4)).astype(np.float32)
    for fname, a, vname in (("input_0.pb", x, "x"), ("output_0.pb", np.abs(x), "y")):
        with open(os.path.join(ds, fname), "wb") as f:
            f.write(numpy_helper.from_array(a, vname).SerializeToString())


def runner(corpus, manifest_lines, tmp, extra=()):
    manifest = os.path.join(tmp, "manifest.txt")
    with open(manifest, "w") as f:
        f.write("".join(ln + "\n" for ln in manifest_lines))
    return subprocess.run([sys.executable, RUNNER, "--shardc", SHARDC, "--jobs", "1",
                           "--corpus", corpus, "--manifest", manifest, *extra],
                          capture_output=True, text=True, timeout=300)


def main():
    if not SHARDC:
        print("SHARDC is not set")
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        empty = os.path.join(tmp, "empty")
        os.makedirs(empty)
        r = runner(empty, [], tmp)
        check(r.returncode == 1 and "no node tests" in r.stdout,
              f"empty corpus: exit {r.returncode}: {r.stdout[-500:]}{r.stderr[-500:]}")

        corpus = os.path.join(tmp, "corpus")
        node_test(corpus, "test_abs_tiny", "Abs")
        node_test(corpus, "test_not_an_op", "NotAnOnnxOp")
        cases = [
            ("manifest matches", ["test_abs_tiny pass"], 0, "manifest: all statuses as expected"),
            ("test missing from the manifest", [], 1, "test_abs_tiny: not in the manifest"),
            ("manifest entry without a test", ["test_abs_tiny pass", "test_gone pass"], 1,
             "test_gone: in the manifest as pass, but no such test"),
            ("xfail that passes", ["test_abs_tiny xfail was wrong"], 1,
             "test_abs_tiny: marked xfail, now passes"),
            ("split at dp=3", ["test_abs_tiny pass"], 0, "1 of 1 tests ran split", "--mesh", "dp=3"),
            ("replicated at dp=2", ["test_abs_tiny pass"], 1, "fewer than the floor",
             "--mesh", "dp=2"),
            ("shard 0/2", ["test_abs_tiny pass"], 0, "shard 0/2: 1 of the 1 tests", "--shard", "0/2"),
            ("shard 1/2, empty", ["test_abs_tiny pass"], 1, "this shard has no test to run",
             "--shard", "1/2"),
        ]
        for what, lines, rc, needle, *extra in cases:
            r = runner(corpus, lines, tmp, extra)
            if check(r.returncode == rc and needle in r.stdout,
                     f"{what}: exit {r.returncode} (want {rc}), want '{needle}' in: "
                     f"{r.stdout[-800:]}{r.stderr[-500:]}"):
                print(f"ok: {what}: exit {rc}")
    if failures:
        print(f"{len(failures)} failures")
        return 1
    print("the conformance runner fails on an empty corpus and checks its manifest both ways")
    return 0


if __name__ == "__main__":
    sys.exit(main())
