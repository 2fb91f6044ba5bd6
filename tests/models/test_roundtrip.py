#!/usr/bin/env python3
"""ONNX import -> export -> import round trip, checked by onnx itself.

How it runs (no CLI subcommand exports yet, so the C unit test does the work):
  1. builds small models with onnx.helper into a fresh temporary folder (every
     dtype as raw_data and as typed fields, Constant nodes of each kind,
     symbolic dims, omitted optional inputs, attributes of several kinds,
     external data) and copies the committed samples/*.onnx next to them;
  2. runs the unit-test binary $SC_BINARY_DIR/tests/test_frontend restricted
     to test_roundtrip_dir (SC_TEST_FILTER), which imports each model, exports
     it with sc_onnx_export, imports the export and compares the two graphs;
  3. checks every exported file with onnx.checker.check_model(full_check=True),
     compares it with its source (nodes, inputs, every constant's bytes) and,
     where onnxruntime can run the source, runs both on the same seeded random
     inputs: the outputs must be identical (same graph, same kernels: tolerance
     0; NaN fails).
Models the import rewrites (below opset 13: the version adapters; with
com.microsoft ops) export the IR's reading, not the source's nodes: below
opset 13 the export is checked by onnx.checker and runs in onnxruntime like
the source (rtol 1e-5, atol 1e-6); with contrib ops it holds composites of
later opsets (Attention 23), which the model's opset does not define, so
only the graph round trip of step 2 applies.
A missing test binary is a failure, not a skip.
"""
import glob
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SRC = os.environ.get("SC_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("SC_BINARY_DIR", os.path.join(SRC, "build"))
rng = np.random.default_rng(1234)
failures = []


def fail(msg):
    print("FAIL:", msg)
    failures.append(msg)


def opset(v=17):
    return [helper.make_opsetid("", v)]


DTYPES = [np.float32, np.float16, np.float64, np.int8, np.int16, np.int32, np.int64,
          np.uint8, np.uint16, np.uint32, np.uint64, np.bool_]


def rand_array(dt, shape):
    if dt == np.bool_:
        return rng.integers(0, 2, shape).astype(np.bool_)
    if np.issubdtype(dt, np.floating):
        return (rng.standard_normal(shape) * 3).astype(dt)
    info = np.iinfo(dt)
    return rng.integers(info.min, info.max, shape, dtype=dt, endpoint=True)


def model_dtypes(path):
    inits, nodes, outs = [], [], []
    for k, dt in enumerate(DTYPES):
        for raw in (True, False):
            name = f"w_{np.dtype(dt).name}_{'raw' if raw else 'typed'}"
            a = rand_array(dt, (2, 3))
            if raw:
                t = numpy_helper.from_array(a, name)
            else:
                t = helper.make_tensor(name, helper.np_dtype_to_tensor_dtype(a.dtype),
                                       a.shape, a.flatten().tolist(), raw=False)
            inits.append(t)
            nodes.append(helper.make_node("Identity", [name], [name + "_o"], name=f"id{k}{raw}"))
            outs.append(helper.make_tensor_value_info(name + "_o", t.data_type, [2, 3]))
    # bfloat16: typed (int32_data holds the bits) and raw
    bits = rng.integers(0, 1 << 16, 6, dtype=np.uint16)
    bits[(bits & 0x7f80) == 0x7f80] &= 0x3fff  # no NaN/Inf patterns
    t1 = helper.make_tensor("bf_typed", TensorProto.BFLOAT16, [6], [0] * 6)
    del t1.int32_data[:]
    t1.int32_data.extend(int(b) for b in bits)
    t2 = helper.make_tensor("bf_raw", TensorProto.BFLOAT16, [6], bits.tobytes(), raw=True)
    for t in (t1, t2):
        inits.append(t)
        nodes.append(helper.make_node("Identity", [t.name], [t.name + "_o"]))
        outs.append(helper.make_tensor_value_info(t.name + "_o", TensorProto.BFLOAT16, [6]))
    g = helper.make_graph(nodes, "dtypes", [], outs, inits)
    onnx.save(helper.make_model(g, opset_imports=opset(), ir_version=8), path)


def model_ops(path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    w = numpy_helper.from_array(rand_array(np.float32, (4, 4)), "w")
    nodes = [
        helper.make_node("Constant", [], ["shape"], value_ints=[-1, 2, 2]),
        helper.make_node("Constant", [], ["half"], value_float=0.5),
        helper.make_node("Constant", [], ["lo"], value=numpy_helper.from_array(
            np.array(-1.25, np.float32))),
        helper.make_node("Constant", [], ["pads"], value_ints=[0, 1, 0, 1]),
        helper.make_node("Constant", [], ["scale"], value_floats=[2.0, -1.5, 0.25, 4.0]),
        helper.make_node("Gemm", ["x", "w"], ["g"], alpha=0.75, transB=1),
        helper.make_node("LeakyRelu", ["g"], ["lr"], alpha=0.125),
        helper.make_node("Mul", ["lr", "scale"], ["m"]),
        helper.make_node("Clip", ["m", "lo", ""], ["c"]),
        helper.make_node("Reshape", ["c", "shape"], ["r"]),
        helper.make_node("Transpose", ["r"], ["t"], perm=[0, 2, 1]),
        helper.make_node("Mul", ["t", "half"], ["y"]),
        helper.make_node("Pad", ["x", "pads"], ["p"], mode="reflect"),
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("ConstantOfShape", ["s"], ["cs"],
                         value=numpy_helper.from_array(np.array([3], np.int64))),
    ]
    # unnamed nodes get generated names, which must survive the round trip
    # (duplicate names are covered by the C test: onnxruntime refuses them)
    for n in nodes[5:8]:
        n.name = ""
    nodes[9].name = "reshape"
    g = helper.make_graph(nodes, "ops", [x], [
        helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 2, 2]),
        helper.make_tensor_value_info("p", TensorProto.FLOAT, ["batch", 6]),
        helper.make_tensor_value_info("cs", TensorProto.INT64, ["batch", 4])], [w])
    onnx.save(helper.make_model(g, opset_imports=opset(18), ir_version=8), path)


def model_external(path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 8])
    w1 = numpy_helper.from_array(rand_array(np.float32, (8, 8)), "w1")
    w2 = numpy_helper.from_array(rand_array(np.float32, (8, 5)), "w2")
    b = numpy_helper.from_array(rand_array(np.float32, (5,)), "b")
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="mm1"),
             helper.make_node("Relu", ["h"], ["hr"], name="relu"),
             helper.make_node("MatMul", ["hr", "w2"], ["h2"], name="mm2"),
             helper.make_node("Add", ["h2", "b"], ["y"], name="add")]
    g = helper.make_graph(nodes, "ext", [x],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 5])],
                          [w1, w2, b])
    m = helper.make_model(g, opset_imports=opset(), ir_version=8)
    onnx.save(m, path, save_as_external_data=True, all_tensors_to_one_file=True,
              location="external.bin", size_threshold=0)


def constants_of(model, model_dir, load):
    """name -> numpy array (or None when the data is external and absent)."""
    out = {}
    for t in model.graph.initializer:
        out[t.name] = t
    for n in model.graph.node:
        if n.op_type == "Constant":
            a = n.attribute[0]
            if a.name == "value":
                t = onnx.TensorProto()
                t.CopyFrom(a.t)
            elif a.name == "value_float":
                t = numpy_helper.from_array(np.array(a.f, np.float32))
            elif a.name == "value_floats":
                t = numpy_helper.from_array(np.array(a.floats, np.float32))
            elif a.name == "value_int":
                t = numpy_helper.from_array(np.array(a.i, np.int64))
            else:
                t = numpy_helper.from_array(np.array(a.ints, np.int64))
            out[n.output[0]] = t
    arrays = {}
    for name, t in out.items():
        ext = {e.key: e.value for e in t.external_data}
        if t.data_location == TensorProto.EXTERNAL:
            f = os.path.join(model_dir, ext["location"])
            if not load or not os.path.exists(f):
                arrays[name] = ("absent", tuple(t.dims), t.data_type, ext.get("location"),
                                int(ext.get("offset", 0)))
                continue
            onnx.external_data_helper.load_external_data_for_tensor(t, model_dir)
        arrays[name] = numpy_helper.to_array(t)
    return arrays


def shape_of(vi):
    return [d.dim_param if d.HasField("dim_param") else
            (d.dim_value if d.HasField("dim_value") else None)
            for d in vi.type.tensor_type.shape.dim]


def compare(src_path, out_path):
    name = os.path.basename(src_path)
    src = onnx.load(src_path, load_external_data=False)
    out = onnx.load(out_path, load_external_data=False)
    src_nodes = [n for n in src.graph.node if n.op_type != "Constant"]
    if [n.op_type for n in src_nodes] != [n.op_type for n in out.graph.node]:
        fail(f"{name}: node ops differ")
        return
    names = set()
    for a, b in zip(src_nodes, out.graph.node):
        if a.name and a.name not in names and a.name != b.name:
            fail(f"{name}: node name {a.name!r} became {b.name!r}")
        names.add(a.name)
        if list(a.input) != list(b.input) or list(a.output) != list(b.output):
            fail(f"{name}: node {a.name!r} edges differ")
        if sorted(x.name for x in a.attribute) != sorted(x.name for x in b.attribute):
            fail(f"{name}: node {a.name!r} attributes differ")
        for x in a.attribute:
            y = next(y for y in b.attribute if y.name == x.name)
            if helper.get_attribute_value(x) != helper.get_attribute_value(y) and \
                    x.type != onnx.AttributeProto.TENSOR:
                fail(f"{name}: attribute {x.name} differs")
    src_in = [i for i in src.graph.input if i.name not in {t.name for t in src.graph.initializer}]
    if [(i.name, shape_of(i)) for i in src_in] != [(i.name, shape_of(i)) for i in out.graph.input]:
        fail(f"{name}: graph inputs differ")
    if [o.name for o in src.graph.output] != [o.name for o in out.graph.output]:
        fail(f"{name}: graph outputs differ")
    sc = constants_of(src, os.path.dirname(src_path), True)
    oc = constants_of(out, os.path.dirname(out_path), False)
    for k, v in oc.items():
        if k not in sc:
            fail(f"{name}: exported constant {k} not in the source")
            continue
        s = sc[k]
        if isinstance(s, tuple) or isinstance(v, tuple):
            if s != v:
                fail(f"{name}: absent constant {k}: {s} vs {v}")
        elif s.dtype != v.dtype or s.shape != v.shape or s.tobytes() != v.tobytes():
            fail(f"{name}: constant {k} differs")
    used = {i for n in src_nodes for i in n.input} | {o.name for o in src.graph.output}
    missing = [k for k in sc if k in used and k not in oc]
    if missing:
        fail(f"{name}: constants lost: {missing[:5]}")


def rewritten(path):
    """How the import rewrites a model (None: it reads it as it is). A model
    below opset 13 is read through the version adapters; com.microsoft ops
    become IR ops, some of them composites of later opsets (Attention 23).
    The export writes the IR's reading, so its nodes are not the source's."""
    m = onnx.load(path, load_external_data=False)
    if any(n.domain == "com.microsoft" for n in m.graph.node):
        return "contrib"
    if next(o.version for o in m.opset_import if o.domain in ("", "ai.onnx")) < 13:
        return "adapted"
    return None


def ort_same(src_path, out_path, rtol=0.0, atol=0.0):
    try:
        import onnxruntime as ort
    except ImportError:
        print(f"PARTIAL SKIP: {os.path.basename(src_path)}: no onnxruntime to compare outputs")
        return
    name = os.path.basename(src_path)
    # onnxruntime's graph optimizer off: what it fuses depends on the shape
    # information in the file (value_info), which the export need not keep;
    # unoptimised, the same graph runs the same kernels.
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        s1 = ort.InferenceSession(src_path, so, providers=["CPUExecutionProvider"])
    except Exception as e:  # e.g. absent external weights
        print(f"  {name}: onnxruntime cannot load the source ({str(e)[:80]}); not run")
        return
    s2 = ort.InferenceSession(out_path, so, providers=["CPUExecutionProvider"])
    feeds = {}
    for i in s1.get_inputs():
        shape = [d if isinstance(d, int) else 2 for d in i.shape]
        if "float" in i.type:
            feeds[i.name] = rng.standard_normal(shape).astype(np.float32)
        elif "int64" in i.type:
            feeds[i.name] = rng.integers(0, 2, shape).astype(np.int64)  # ids, masks
        elif "int32" in i.type:
            feeds[i.name] = rng.integers(0, 2, shape).astype(np.int32)
        elif "bool" in i.type:
            feeds[i.name] = rng.integers(0, 2, shape).astype(np.bool_)
        else:
            print(f"  {name}: input type {i.type} not fed; not run")
            return
    try:
        r1 = s1.run(None, feeds)
    except Exception as e:  # e.g. bfloat16 outputs have no numpy type
        print(f"  {name}: onnxruntime cannot run the source ({str(e)[:80]}); not compared")
        return
    r2 = s2.run(None, feeds)
    for a, b in zip(r1, r2):
        a, b = np.asarray(a), np.asarray(b)
        if a.dtype.kind == "f" and (np.isnan(a).any() or np.isnan(b).any()):
            fail(f"{name}: NaN in outputs")
        elif a.shape != b.shape or not (np.array_equal(a, b) if rtol == atol == 0 else
                                        np.allclose(a, b, rtol=rtol, atol=atol)):
            fail(f"{name}: onnxruntime outputs differ")
    print(f"  {name}: onnxruntime outputs %s (%d outputs)"
          % ("identical" if rtol == atol == 0 else "equal within rtol %g, atol %g" % (rtol, atol),
             len(r1)))


def placeholders(out_path):
    """Sparse stand-ins for absent external files, so the checker can look."""
    m = onnx.load(out_path, load_external_data=False)
    need = {}
    for t in m.graph.initializer:
        if t.data_location == TensorProto.EXTERNAL:
            e = {x.key: x.value for x in t.external_data}
            end = int(e.get("offset", 0)) + int(e.get("length", 0))
            need[e["location"]] = max(need.get(e["location"], 0), end)
    for loc, size in need.items():
        p = os.path.join(os.path.dirname(out_path), loc)
        if not os.path.exists(p):
            with open(p, "wb") as f:
                f.truncate(size)


def main():
    exe = os.path.join(BIN, "tests", "test_frontend")
    if not os.path.exists(exe):
        print(f"test binary {exe} not found (build the tests first)")
        return 1
    tmp = tempfile.mkdtemp(prefix="sc_roundtrip_")
    try:
        src_dir, out_dir = os.path.join(tmp, "in"), os.path.join(tmp, "out")
        os.makedirs(src_dir)
        os.makedirs(out_dir)
        model_dtypes(os.path.join(src_dir, "dtypes.onnx"))
        model_ops(os.path.join(src_dir, "ops.onnx"))
        model_external(os.path.join(src_dir, "external.onnx"))
        for f in sorted(glob.glob(os.path.join(SRC, "samples", "*.onnx"))):
            shutil.copy(f, src_dir)
        for f in sorted(glob.glob(os.path.join(src_dir, "*.onnx"))):
            try:  # the sources themselves are valid (absent weights aside)
                onnx.checker.check_model(f, full_check=True)
            except onnx.checker.ValidationError as e:
                if "not regular file" not in str(e):
                    raise
        env = dict(os.environ, SC_TEST_FILTER="test_roundtrip_dir",
                   SC_ROUNDTRIP_IN=src_dir, SC_ROUNDTRIP_OUT=out_dir)
        r = subprocess.run([exe], env=env, capture_output=True, text=True, timeout=500)
        print(r.stdout[-4000:], r.stderr[-4000:])
        if r.returncode != 0 or "test_roundtrip_dir" not in r.stdout + r.stderr:
            fail(f"test_frontend roundtrip_dir exited {r.returncode}")
            return 1
        srcs = sorted(glob.glob(os.path.join(src_dir, "*.onnx")))
        for s in srcs:
            o = os.path.join(out_dir, os.path.basename(s))
            if not os.path.exists(o):
                fail(f"{o} was not written")
                continue
            how = rewritten(s)
            if how == "contrib":  # the C test compared the two imports; the
                # file holds composites (Attention) of opsets above the model's
                print(f"  {os.path.basename(o)}: contrib ops rewritten on import: "
                      "graph round trip only")
                continue
            placeholders(o)
            try:
                onnx.checker.check_model(o, full_check=True)
                print(f"  {os.path.basename(o)}: onnx.checker ok")
            except Exception as e:
                fail(f"{os.path.basename(o)}: onnx.checker: {str(e)[:300]}")
            if how == "adapted":  # the IR's reading, at the model's opset
                ort_same(s, o, rtol=1e-5, atol=1e-6)
                continue
            compare(s, o)
            ort_same(s, o)
        if len(srcs) < 3:
            fail("too few models")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
