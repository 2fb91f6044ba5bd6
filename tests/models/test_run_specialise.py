"""test_run_specialise.py — `shardc run` specialises to shape-determining inputs.

When a shape depends on the contents of a graph input (docs/runtime.md,
"specialisation"), `shardc run` makes that input a constant holding the
--input data and compiles again. Checked here, against NumPy on seeded
random data:

  * Reshape whose target shape is a graph input: output equals
    x.reshape(shape), the note "input 's' determines shapes" is printed,
    for two different shape values (the program follows the given value);
  * Slice with starts/ends/axes as graph inputs (three inputs frozen in turn);
  * CumSum whose axis is a graph input (the lowering needs it constant);
  * a Pad's pads and a Range's limit computed from graph inputs: traced back
    to those inputs, each specialised in turn;
  * the shape input given with the wrong dtype is an error naming it (exit 1,
    no crash); without --input for it (even with --random-inputs, which is
    never used to specialise) the compile error naming it (exit 1).

Environment: SHARDC. Exit 0 on success, 1 on any failure.
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from checks import check, failures

SHARDC = os.environ.get("SHARDC")


def model(path, nodes, inputs, outputs, opset=18):
    g = h.make_graph(nodes, "g", inputs, outputs)
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", opset)]), path)


def run(work, m, arrays, extra=()):
    cmd = [SHARDC, "run", m, "--output-dir", os.path.join(work, "out"), "--quiet"]
    for name, a in arrays.items():
        p = os.path.join(work, name + ".npy")
        np.save(p, a)
        cmd += ["--input", f"{name}={p}"]
    p = subprocess.run(cmd + list(extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=60)
    return p.returncode, p.stderr.decode(errors="replace")


def output(work, name):
    return np.load(os.path.join(work, "out", name + ".npy"))


def main():
    if not SHARDC:
        print("SHARDC not set")
        return 1
    rng = np.random.default_rng(7)
    work = tempfile.mkdtemp(prefix="sc-spec-")
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)

    # Reshape(x, s) with s a graph input, two values of s
    m = os.path.join(work, "reshape.onnx")
    model(m, [h.make_node("Reshape", ["x", "s"], ["y"])],
          [h.make_tensor_value_info("x", T.FLOAT, [2, 3, 4]),
           h.make_tensor_value_info("s", T.INT64, [2])],
          [h.make_tensor_value_info("y", T.FLOAT, None)])
    for s in ([4, -1], [-1, 12]):
        rc, err = run(work, m, {"x": x, "s": np.array(s, np.int64)})
        check(rc == 0, f"reshape {s}: exit {rc}: {err}")
        check("input 's' determines shapes: compiled for its given value" in err,
              f"reshape {s}: no specialisation note in {err!r}")
        if rc == 0:
            y = output(work, "y")
            check(y.shape == x.reshape(s).shape and np.array_equal(y, x.reshape(s)),
                  f"reshape {s}: got shape {y.shape}")

    # wrong dtype for the shape input: an error naming it
    rc, err = run(work, m, {"x": x, "s": np.array([4, 6], np.int32)})
    check(rc == 1 and "input 's'" in err, f"int32 shape: exit {rc}: {err}")
    # shape input not given (random inputs are never used to specialise): the
    # compile error naming it
    rc, err = run(work, m, {"x": x}, ["--random-inputs", "1"])
    check(rc == 1 and "input 's' must be a constant" in err, f"missing s: exit {rc}: {err}")

    # Slice with three shape inputs
    m = os.path.join(work, "slice.onnx")
    model(m, [h.make_node("Slice", ["x", "st", "en", "ax"], ["y"])],
          [h.make_tensor_value_info("x", T.FLOAT, [2, 3, 4]),
           h.make_tensor_value_info("st", T.INT64, [2]),
           h.make_tensor_value_info("en", T.INT64, [2]),
           h.make_tensor_value_info("ax", T.INT64, [2])],
          [h.make_tensor_value_info("y", T.FLOAT, None)])
    rc, err = run(work, m, {"x": x, "st": np.array([1, 0], np.int64),
                            "en": np.array([3, -1], np.int64),
                            "ax": np.array([1, 2], np.int64)})
    check(rc == 0, f"slice: exit {rc}: {err}")
    if rc == 0:
        check(np.array_equal(output(work, "y"), x[:, 1:3, 0:-1]), "slice: wrong values")

    # CumSum with its axis a graph input
    m = os.path.join(work, "cumsum.onnx")
    model(m, [h.make_node("CumSum", ["x", "a"], ["y"], reverse=1)],
          [h.make_tensor_value_info("x", T.FLOAT, [2, 3, 4]),
           h.make_tensor_value_info("a", T.INT32, [])],
          [h.make_tensor_value_info("y", T.FLOAT, None)])
    rc, err = run(work, m, {"x": x, "a": np.array(1, np.int32)})
    check(rc == 0 and "input 'a' determines shapes" in err, f"cumsum: exit {rc}: {err}")
    if rc == 0:
        want = np.flip(np.cumsum(np.flip(x, 1), axis=1), 1)
        check(np.allclose(output(work, "y"), want, rtol=1e-5, atol=1e-6),
              "cumsum: wrong values")

    # Pad whose pads are computed from a graph input (a target length minus
    # the static length, both sides): traced back to the input 't', which is
    # specialised; and a Range whose limit is a computed value of 'n'
    m = os.path.join(work, "computed.onnx")
    model(m, [h.make_node("Shape", ["x"], ["sh"], start=2),
              h.make_node("Sub", ["t", "sh"], ["extra"]),
              h.make_node("Concat", ["z2", "extra", "z2", "extra"], ["pads"], axis=0),
              h.make_node("Pad", ["x", "pads"], ["y"]),
              h.make_node("Mul", ["n", "two"], ["lim"]),
              h.make_node("Range", ["zero", "lim", "one"], ["r"])],
          [h.make_tensor_value_info("x", T.FLOAT, [2, 3, 4]),
           h.make_tensor_value_info("t", T.INT64, [1]),
           h.make_tensor_value_info("n", T.INT64, [])],
          [h.make_tensor_value_info("y", T.FLOAT, None),
           h.make_tensor_value_info("r", T.INT64, None)])
    g = onnx.load(m)
    g.graph.initializer.extend([
        onnx.numpy_helper.from_array(np.zeros(2, np.int64), "z2"),
        onnx.numpy_helper.from_array(np.array(2, np.int64), "two"),
        onnx.numpy_helper.from_array(np.array(0, np.int64), "zero"),
        onnx.numpy_helper.from_array(np.array(1, np.int64), "one")])
    onnx.save(g, m)
    rc, err = run(work, m, {"x": x, "t": np.array([7], np.int64), "n": np.array(3, np.int64)})
    check(rc == 0 and "input 't' determines shapes" in err and "input 'n' determines shapes" in err,
          f"computed operands: exit {rc}: {err}")
    if rc == 0:
        check(np.array_equal(output(work, "y"), np.pad(x, [(0, 0), (0, 0), (3, 3)])),
              "computed pads: wrong values")
        check(np.array_equal(output(work, "r"), np.arange(6)), "computed range: wrong values")

    print("ok" if not failures else f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
