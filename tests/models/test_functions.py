"""test_functions.py — model-local functions (ModelProto.functions), inlined
at import (frontend/onnx_functions.c), against onnxruntime.

The model (opset 17, built with onnx.helper, checked by onnx.checker):
  Scale(X; alpha = 2.0) = X * Constant(value_float = @alpha)   (a default in
      FunctionProto.attribute_proto, which this build's schema does not
      know: read from the unknown fields)
  LinearAct(X, W, B; beta) -> (Y, Z): Z = X @ W, Y = Scale(Tanh(Z + B);
      alpha = @beta)   (a function calling a function)
  main: (h, z) = LinearAct(x, w1, b1; beta = 0.5) named "layer1";
        (y, _) = LinearAct(h, w2, b2) unnamed, beta not given, so Scale
        takes its own default; z2 = Scale(z).
`shardc run` on seeded random x (uniform [-1, 1), never zero) must give
onnxruntime's y and z2 within rtol 1e-5, atol 1e-6, no NaN; the imported
graph (`inspect --print-after=bind-dims`) names the expanded nodes after
their call ("layer1/mm", "layer1/scale/mul", "LinearAct_1/add" for the
unnamed call, "sz/mul").
Errors, each exit 1 naming the function and (where there is one) the node:
a function that calls itself ("nest deeper"), a body node reading a name
neither its input nor made before it, a call with more inputs than the
function declares, two functions of one name.

Environment: SHARDC, SC_PYTHON's venv with onnx and onnxruntime. Exit 0 on
success, 1 on any failure.
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import AttributeProto, TensorProto as T, helper
from checks import check, finish, refused_model

SHARDC = os.environ.get("SHARDC")
OPSETS = [helper.make_opsetid("", 17), helper.make_opsetid("custom", 1)]


def ref_attr(name, ref, kind=AttributeProto.FLOAT):
    a = AttributeProto()
    a.name, a.ref_attr_name, a.type = name, ref, kind
    return a


def scale_function():
    c = helper.make_node("Constant", [], ["a"], name="alpha_const")
    c.attribute.append(ref_attr("value_float", "alpha"))
    mul = helper.make_node("Mul", ["X", "a"], ["Y"], name="mul")
    f = helper.make_function("custom", "Scale", ["X"], ["Y"], [c, mul], OPSETS, [])
    default = AttributeProto()
    default.name, default.type, default.f = "alpha", AttributeProto.FLOAT, 2.0
    f.attribute_proto.append(default)
    return f


def linear_function():
    mm = helper.make_node("MatMul", ["X", "W"], ["Z"], name="mm")
    add = helper.make_node("Add", ["Z", "B"], ["s"], name="add")
    th = helper.make_node("Tanh", ["s"], ["t"])
    sc = helper.make_node("Scale", ["t"], ["Y"], domain="custom", name="scale")
    sc.attribute.append(ref_attr("alpha", "beta"))
    return helper.make_function("custom", "LinearAct", ["X", "W", "B"], ["Y", "Z"],
                                [mm, add, th, sc], OPSETS, ["beta"])


def model(rng, functions, nodes=None):
    n1 = helper.make_node("LinearAct", ["x", "w1", "b1"], ["h", "z"], domain="custom",
                          name="layer1", beta=0.5)
    n2 = helper.make_node("LinearAct", ["h", "w2", "b2"], ["y", "unused"], domain="custom")
    n3 = helper.make_node("Scale", ["z"], ["z2"], domain="custom", name="sz")
    inits = [helper.make_tensor(n, T.FLOAT, s, rng.uniform(-1, 1, s).astype(np.float32).ravel())
             for n, s in (("w1", [8, 16]), ("b1", [16]), ("w2", [16, 4]), ("b2", [4]))]
    g = helper.make_graph(nodes or [n1, n2, n3], "functions",
                          [helper.make_tensor_value_info("x", T.FLOAT, [3, 8])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [3, 4]),
                           helper.make_tensor_value_info("z2", T.FLOAT, [3, 16])], inits)
    return helper.make_model(g, opset_imports=OPSETS, functions=functions)


def shardc(*args):
    return subprocess.run([SHARDC] + list(args), capture_output=True, text=True, timeout=120)


def main():
    if not SHARDC:
        print("SHARDC not set")
        return 1
    rng = np.random.default_rng(20261202)
    with tempfile.TemporaryDirectory() as tmp:
        m = model(rng, [scale_function(), linear_function()])
        onnx.checker.check_model(m)
        path = os.path.join(tmp, "fn.onnx")
        onnx.save(m, path)
        x = rng.uniform(-1, 1, (3, 8)).astype(np.float32)
        np.save(os.path.join(tmp, "x.npy"), x)
        want = dict(zip(["y", "z2"], ort.InferenceSession(path).run(None, {"x": x})))
        out = os.path.join(tmp, "out")
        r = shardc("run", path, "--input", f"x={tmp}/x.npy", "--output-dir", out)
        if check(r.returncode == 0, f"run: exit {r.returncode}: {r.stderr.strip()}"):
            for name, w in want.items():
                got = np.load(os.path.join(out, name + ".npy"))
                check(got.shape == w.shape and not np.isnan(got).any() and
                      np.allclose(got, w, rtol=1e-5, atol=1e-6),
                      f"{name}: max |diff| {np.max(np.abs(got - w)):.3g} against onnxruntime")
            print(f"ok: functions inlined: y and z2 equal onnxruntime's (Scale's default "
                  f"alpha from attribute_proto, LinearAct calling Scale)")
        r = shardc("inspect", path, "--print-after=bind-dims")
        check(r.returncode == 0 and all(f'"{n}"' in r.stderr for n in
                                        ("layer1/mm", "layer1/scale/mul", "LinearAct_1/add",
                                         "sz/mul")),
              f"inspect: the expanded nodes are named after their call: {r.stderr[:400]}")

        # errors name the function and the node
        rec = helper.make_node("Rec", ["X"], ["Y"], domain="custom", name="again")
        rec_f = helper.make_function("custom", "Rec", ["X"], ["Y"], [rec], OPSETS, [])
        call = helper.make_node("Rec", ["x"], ["y"], domain="custom", name="r")
        refused_model(SHARDC, tmp, "recursive", model(rng, [rec_f], [call]), ["'Rec'", "nest deeper"])
        bad = helper.make_node("Add", ["X", "nowhere"], ["Y"], name="adds")
        bad_f = helper.make_function("custom", "Bad", ["X"], ["Y"], [bad], OPSETS, [])
        call = helper.make_node("Bad", ["x"], ["y"], domain="custom", name="b")
        refused_model(SHARDC, tmp, "undefined", model(rng, [bad_f], [call]),
                ["function 'Bad'", "node 'adds'", "'nowhere'"])
        call = helper.make_node("Scale", ["x", "x"], ["y"], domain="custom", name="two")
        refused_model(SHARDC, tmp, "too_many_inputs", model(rng, [scale_function()], [call]),
                ["'two'", "'Scale'", "2 inputs"])
        refused_model(SHARDC, tmp, "twice", model(rng, [scale_function(), scale_function()]),
                ["function 'Scale'", "defined twice"])
        # long names nested and doubled at every level: bounded, not exhausted
        long = "n" * 20000
        fns = [helper.make_function("custom", "F19", ["X"], ["Y"],
                                    [helper.make_node("Relu", ["X"], ["Y"], name=long)],
                                    OPSETS, [])]
        for k in range(18, -1, -1):
            body = [helper.make_node(f"F{k + 1}", ["X"], ["A"], domain="custom", name=long + "a"),
                    helper.make_node(f"F{k + 1}", ["A"], ["Y"], domain="custom", name=long + "b")]
            fns.append(helper.make_function("custom", f"F{k}", ["X"], ["Y"], body, OPSETS, []))
        call = helper.make_node("F0", ["x"], ["y"], domain="custom", name=long)
        refused_model(SHARDC, tmp, "name_bomb", model(rng, fns, [call]), ["MiB of names"])
    return finish()


if __name__ == "__main__":
    sys.exit(main())
