"""test_narrow_dtypes.py — float8, float4 and 4/2-bit integer tensors.

shardc holds the narrow types (ir/dtype.h) one byte per element and
computes on them in f32 (floats) or i8/u8 (integers). Checked here against
onnx's reference (onnx.reference: ml_dtypes' conversions, to_float8e8m0),
on seeded inputs:

  * Cast from f32 — every f16 bit pattern widened, plus 20,000 random f32
    bit patterns (NaN, infinities, subnormals, out of range) — and from f16
    to each narrow type, saturating and not (float8), every round_mode of
    f8e8m0: the same codes (any NaN for NaN);
  * Cast of every code of each narrow type (given as its .npy memory form:
    float codes as uint8, integers as int8/uint8 values) to f32 and f16;
  * QuantizeLinear / DequantizeLinear with narrow outputs and inputs,
    per tensor and per axis, with initializers stored packed (int4 and
    uint2 in raw_data, an odd element count; float4 in int32_data): equal
    to the reference;
  * the same Cast model on the emulated GPU (SHARDC_CUDA_EMU=1, when this
    shardc has the cuda target): bit-identical outputs to the CPU's;
  * refusals, each exit 1 naming what is wrong: a packed initializer with
    the wrong byte count, an input value outside int4's range, Add of
    int4 tensors (only casts, quantization and data movement take them).

Environment: SHARDC. Exit 0 on success, 1 on any failure.
"""
import os
import subprocess
import sys
import tempfile

import ml_dtypes
import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper
from onnx.reference import ReferenceEvaluator
from onnx.reference.ops.op_cast import cast_to
from checks import check, finish, has_cuda_target, refused_model, skip_part

SHARDC = os.environ.get("SHARDC")

FLOATS = {T.FLOAT8E4M3FN: ml_dtypes.float8_e4m3fn, T.FLOAT8E4M3FNUZ: ml_dtypes.float8_e4m3fnuz,
          T.FLOAT8E5M2: ml_dtypes.float8_e5m2, T.FLOAT8E5M2FNUZ: ml_dtypes.float8_e5m2fnuz,
          T.FLOAT4E2M1: ml_dtypes.float4_e2m1fn, T.FLOAT8E8M0: ml_dtypes.float8_e8m0fnu}
INTS = {T.INT4: (ml_dtypes.int4, np.int8), T.UINT4: (ml_dtypes.uint4, np.uint8),
        T.INT2: (ml_dtypes.int2, np.int8), T.UINT2: (ml_dtypes.uint2, np.uint8)}


def save(path, nodes, inputs, outputs, inits=(), opset=25):
    g = h.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
    onnx.save(m, path)
    return m


def run(work, path, arrays, extra=(), env=None, tag="out"):
    out = os.path.join(work, tag)
    cmd = [SHARDC, "run", path, "--output-dir", out, "--quiet"]
    for name, a in arrays.items():
        p = os.path.join(work, name + ".npy")
        np.save(p, a)
        cmd += ["--input", f"{name}={p}"]
    r = subprocess.run(cmd + list(extra), capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, **(env or {})))
    return r, out


def memory_form(a):
    """A narrow array as shardc reads and writes it in .npy."""
    name = str(a.dtype)
    if name.startswith("float"):
        return a.view(np.uint8)
    return a.astype(np.int8 if name.startswith("int") else np.uint8)


def same_codes(got, want, what):
    """got: shardc's .npy (memory form); want: the reference's narrow array."""
    g = np.asarray(got)
    w = memory_form(want)
    if not check(g.dtype == w.dtype and g.shape == w.shape,
                 f"{what}: {g.dtype}{list(g.shape)} vs {w.dtype}{list(w.shape)}"):
        return
    if str(want.dtype).startswith("float"):
        gv = g.view(want.dtype).astype(np.float64)
        both_nan = np.isnan(gv) & np.isnan(want.astype(np.float64))
        bad = (g != w) & ~both_nan
    else:
        bad = g != w
    check(not bad.any(), f"{what}: {int(bad.sum())}/{bad.size} codes differ, first at "
          f"{np.argmax(bad.ravel()) if bad.any() else -1}")


def cast_inputs(rng):
    f16 = np.arange(65536, dtype=np.uint16).view(np.float16).astype(np.float32)
    bits = rng.integers(0, 2**32, 20000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    return np.concatenate([f16, bits]).astype(np.float32)


def test_casts_to(work, rng):
    x = cast_inputs(rng)
    x16 = np.concatenate([np.arange(65536, dtype=np.uint16).view(np.float16)])
    cases = []  # (output name, to, attrs, source)
    for to in FLOATS:
        if to == T.FLOAT8E8M0:
            for mode in ("up", "down", "nearest"):
                for sat in (1, 0):
                    cases.append((f"e8m0_{mode}_{sat}", to, {"round_mode": mode, "saturate": sat}, "x"))
            continue
        for sat in ((1, 0) if to != T.FLOAT4E2M1 else (1,)):
            for src in ("x", "h"):
                cases.append((f"{T.DataType.Name(to)}_{sat}_{src}", to, {"saturate": sat}, src))
    for to in INTS:
        cases.append((f"{T.DataType.Name(to)}_x", to, {}, "xs"))
        cases.append((f"{T.DataType.Name(to)}_h", to, {}, "hs"))
    xs = x[np.abs(x) < 1e9]
    hs = x16[np.abs(x16.astype(np.float32)) < 6e4]
    src = {"x": x, "h": x16, "xs": xs, "hs": hs}
    nodes = [h.make_node("Cast", [s], [name], to=to, **attrs) for name, to, attrs, s in cases]
    ins = [h.make_tensor_value_info("x", T.FLOAT, [len(x)]),
           h.make_tensor_value_info("h", T.FLOAT16, [len(x16)]),
           h.make_tensor_value_info("xs", T.FLOAT, [len(xs)]),
           h.make_tensor_value_info("hs", T.FLOAT16, [len(hs)])]
    outs = [h.make_tensor_value_info(name, to, None) for name, to, _, _ in cases]
    path = os.path.join(work, "cast_to.onnx")
    save(path, nodes, ins, outs)
    r, out = run(work, path, src)
    if not check(r.returncode == 0, f"cast_to: {r.stderr.strip()}"):
        return path, src
    for name, to, attrs, s in cases:
        with np.errstate(all="ignore"):
            want = cast_to(src[s], to, bool(attrs.get("saturate", 1)), attrs.get("round_mode", "up"))
        if to == T.FLOAT8E8M0:  # 2^-127 itself is code 0 (the reference rounds it up)
            exact = src[s].view(np.uint32) & 0x7FFFFFFF == 0x00400000
            want = np.where(exact, np.uint8(0), want.view(np.uint8)).view(want.dtype)
        same_codes(np.load(os.path.join(out, name + ".npy")), want, f"Cast {s} to {name}")
    return path, src


def test_casts_from(work):
    nodes, ins, outs, arrays, want = [], [], [], {}, {}
    for to, dt in list(FLOATS.items()) + [(k, v[0]) for k, v in INTS.items()]:
        name = T.DataType.Name(to).lower()
        bits = 4 if to in (T.FLOAT4E2M1, T.INT4, T.UINT4) else 2 if to in (T.INT2, T.UINT2) else 8
        if to in FLOATS:
            codes = np.arange(2**bits, dtype=np.uint8).view(dt)
        else:
            lo = -(2 ** (bits - 1)) if dt in (ml_dtypes.int4, ml_dtypes.int2) else 0
            codes = np.arange(lo, lo + 2**bits).astype(dt)
        arrays[name] = memory_form(codes)
        ins.append(h.make_tensor_value_info(name, to, [codes.size]))
        for out_t, np_t in ((T.FLOAT, np.float32), (T.FLOAT16, np.float16)):
            o = f"{name}_{np_t.__name__}"
            nodes.append(h.make_node("Cast", [name], [o], to=out_t))
            outs.append(h.make_tensor_value_info(o, out_t, None))
            with np.errstate(over="ignore"):  # f8e8m0 beyond f16: inf
                want[o] = codes.astype(np_t)
    path = os.path.join(work, "cast_from.onnx")
    save(path, nodes, ins, outs)
    r, out = run(work, path, arrays, tag="from")
    if not check(r.returncode == 0, f"cast_from: {r.stderr.strip()}"):
        return
    for o, w in want.items():
        g = np.load(os.path.join(out, o + ".npy"))
        check(g.dtype == w.dtype and np.array_equal(g, w, equal_nan=True),
              f"Cast {o}: {g[:8]} vs {w[:8]}")


def packed(name, dtype, values, in_int32=False):
    """An initializer of a packed narrow type, as onnx writes it."""
    t = h.make_tensor(name, dtype, values.shape, values.ravel().tolist())
    if not in_int32:
        # make_tensor packs into int32_data; raw_data is the other form
        raw = np.array(t.int32_data, dtype=np.uint8).tobytes()
        t = h.make_tensor(name, dtype, values.shape, raw, raw=True)
    return t


def test_quantize(work, rng):
    x = rng.standard_normal((3, 7)).astype(np.float32) * 4
    s_axis = (rng.random(7).astype(np.float32) + 0.25)
    inits = [numpy_helper.from_array(s_axis, "s_axis"),
             numpy_helper.from_array(np.array(0.5, np.float32), "s"),
             numpy_helper.from_array(np.array(0.02, np.float32), "s_small"),
             packed("zp_i4", T.INT4, np.array([1, -2, 3, 0, -8, 7, 2], dtype=np.int8)),
             packed("zp_u2", T.UINT2, np.array([1], dtype=np.uint8).reshape([])),
             packed("w_i4", T.INT4, rng.integers(-8, 8, (3, 7)).astype(np.int8)),
             packed("w_f4", T.FLOAT4E2M1, np.array([0.5, -1.5, 6, -0.0, 3], dtype=np.float32)
                    .astype(ml_dtypes.float4_e2m1fn), in_int32=True)]
    # float8 zero point: a zero of the type, in raw bytes
    inits.append(h.make_tensor("zp_f8", T.FLOAT8E4M3FN, [], b"\x00", raw=True))
    nodes = [
        h.make_node("QuantizeLinear", ["x", "s_axis", "zp_i4"], ["q_i4"], axis=1),
        h.make_node("DequantizeLinear", ["q_i4", "s_axis", "zp_i4"], ["dq_i4"], axis=1),
        h.make_node("QuantizeLinear", ["x", "s", "zp_u2"], ["q_u2"]),
        h.make_node("QuantizeLinear", ["x", "s_small", "zp_f8"], ["q_f8"], saturate=0),
        h.make_node("QuantizeLinear", ["x", "s_small", "zp_f8"], ["q_f8s"]),
        h.make_node("DequantizeLinear", ["w_i4", "s_axis", "zp_i4"], ["dw_i4"], axis=1),
        h.make_node("DequantizeLinear", ["w_f4", "s"], ["dw_f4"]),
    ]
    outs = [h.make_tensor_value_info(n, t, None) for n, t in
            (("q_i4", T.INT4), ("dq_i4", T.FLOAT), ("q_u2", T.UINT2), ("q_f8", T.FLOAT8E4M3FN),
             ("q_f8s", T.FLOAT8E4M3FN), ("dw_i4", T.FLOAT), ("dw_f4", T.FLOAT))]
    path = os.path.join(work, "qdq.onnx")
    m = save(path, nodes, [h.make_tensor_value_info("x", T.FLOAT, [3, 7])], outs, inits)
    want = ReferenceEvaluator(m).run(None, {"x": x})
    r, out = run(work, path, {"x": x}, tag="qdq")
    if not check(r.returncode == 0, f"qdq: {r.stderr.strip()}"):
        return
    for v, w in zip(outs, want):
        g = np.load(os.path.join(out, v.name + ".npy"))
        if str(w.dtype) in ("float32", "float64"):
            check(g.shape == w.shape and np.allclose(g, w, rtol=1e-6, atol=0),
                  f"{v.name}: max err {np.abs(g - w).max() if g.shape == w.shape else 'shape'}")
        else:
            same_codes(g, w, v.name)


def test_emulated_gpu(work, path, src):
    if not has_cuda_target(SHARDC):
        skip_part("cast_to on the emulated GPU", "this shardc has no cuda target (no NVRTC)")
        return
    r, out_gpu = run(work, path, src, extra=["--device", "cuda", "--no-allow-tf32"],
                     env={"SHARDC_CUDA_EMU": "1"}, tag="gpu")
    if not check(r.returncode == 0, f"cast_to on the emulated GPU: {r.stderr.strip()}"):
        return
    out_cpu = os.path.join(work, "out")
    names = sorted(f for f in os.listdir(out_cpu) if f.endswith(".npy"))
    check(len(names) > 20, f"cast_to wrote {len(names)} outputs")
    for f in names:
        a, b = np.load(os.path.join(out_cpu, f)), np.load(os.path.join(out_gpu, f))
        check(a.dtype == b.dtype and np.array_equal(a, b), f"emulated GPU {f} differs from CPU")


def test_refusals(work):
    # a packed initializer with one byte too few
    t = h.make_tensor("w", T.INT4, [5], b"\x12\x34\x05", raw=True)
    t.raw_data = b"\x12\x34"
    g = h.make_graph([h.make_node("Cast", ["w"], ["y"], to=T.FLOAT)], "g", [],
                     [h.make_tensor_value_info("y", T.FLOAT, [5])], initializer=[t])
    refused_model(SHARDC, work, "short_i4", h.make_model(g, opset_imports=[h.make_opsetid("", 25)]),
                  ["'w'", "raw_data has 2 bytes", "need 3"])
    # arithmetic on int4
    g = h.make_graph([h.make_node("Add", ["a", "a"], ["y"], name="add4")], "g",
                     [h.make_tensor_value_info("a", T.INT4, [4])],
                     [h.make_tensor_value_info("y", T.INT4, [4])])
    refused_model(SHARDC, work, "add_i4", h.make_model(g, opset_imports=[h.make_opsetid("", 25)]),
                  ["add4", "Add", "i4", "only casts"])
    # an input value outside int4's range
    path = os.path.join(work, "id4.onnx")
    save(path, [h.make_node("Cast", ["a"], ["y"], to=T.FLOAT)],
         [h.make_tensor_value_info("a", T.INT4, [3])], [h.make_tensor_value_info("y", T.FLOAT, [3])])
    r, _ = run(work, path, {"a": np.array([1, 9, -2], np.int8)}, tag="bad")
    check(r.returncode == 1 and "input 'a'" in r.stderr and "element 1" in r.stderr
          and "not a i4 value" in r.stderr, f"int4 input 9: exit {r.returncode}: {r.stderr}")


def main():
    if not SHARDC:
        print("SHARDC not set")
        return 1
    rng = np.random.default_rng(11)
    work = tempfile.mkdtemp(prefix="sc-narrow-")
    path, src = test_casts_to(work, rng)
    test_casts_from(work)
    test_quantize(work, rng)
    test_emulated_gpu(work, path, src)
    test_refusals(work)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
