#!/usr/bin/env python3
"""make_bad_models.py — writes hostile and malformed ONNX files for the bad-input tests.

Each case is one model in its own folder, OUT/m/<case>/model.onnx (plus whatever files
the case needs beside it, e.g. weights.bin or a symlink). OUT/secret.bin sits outside
every model folder; the path-escape cases point external data at it, so a tool that
follows them would read it (it is sized to make the read "succeed"). Nothing here is
committed: the test calls build_cases() into a temporary folder at test time.

Each case records what the tool must do with it (see Case): fail with exit status 1 and
one diagnostic line ("error"), fail naming a node ("error" with node=...), succeed ("ok"),
or either of those two without crashing ("either", for random corruption that may leave a
valid model). Building uses the onnx helper API where it can express the damage and raw
protobuf bytes where it cannot (bad enums, nesting onnx refuses to build).

Usage: make_bad_models.py OUTDIR   (writes the cases and OUTDIR/manifest.json)
"""
import json
import os
import random
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8
SEED = 20240611
# A refusal of an escaping external-data path must say why.
ESCAPE_RE = r"outside|inside the model"
SECRET_BYTES = bytes((i * 37 + 11) & 0xFF for i in range(48))  # 3x4 float32


class Case:
    """expect: "error" (exit 1, one line 'shardc: error: PATH: ...'), "ok" (exit 0),
    "either" (exit 0 or 1, and if 1 the same one-line format).
    nodes: for node-level errors, the acceptable (name, op_type) pairs, one of which must
    appear as "node 'NAME' (OP):". msg_re: a regex the diagnostic must match
    (case-insensitive). escape: external data points outside the model folder; the tool
    must refuse it without opening the target (checked with strace when present)."""

    def __init__(self, name, expect, nodes=None, msg_re=None, escape=False, what=""):
        self.name = name
        self.expect = expect
        self.nodes = nodes or []
        self.msg_re = msg_re
        self.escape = escape
        self.what = what
        self.path = None

    def to_json(self):
        return {"name": self.name, "expect": self.expect, "nodes": self.nodes,
                "msg_re": self.msg_re, "escape": self.escape, "what": self.what,
                "path": self.path}


# ---------------------------------------------------------------- helpers

def _rng():
    return np.random.default_rng(SEED)


def _model(nodes, inputs, outputs, inits=(), opset=OPSET, extra_opsets=()):
    g = helper.make_graph(nodes, "bad", inputs, outputs, initializer=list(inits))
    ops = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in extra_opsets]
    m = helper.make_model(g, opset_imports=ops, producer_name="make_bad_models")
    m.ir_version = IR_VERSION
    return m


def _vi(name, dims, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, dims)


def base_model():
    """A small valid model: y = Relu(MatMul(x[2,3], W[3,4])), W embedded."""
    w = _rng().standard_normal((3, 4)).astype(np.float32) + 0.5
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"),
             helper.make_node("Relu", ["h"], ["y"], name="relu")]
    return _model(nodes, [_vi("x", [2, 3])], [_vi("y", [2, 4])],
                  [numpy_helper.from_array(w, "W")])


def _w_model(w_tensor):
    """base_model with W replaced by the given TensorProto (named W)."""
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"),
             helper.make_node("Relu", ["h"], ["y"], name="relu")]
    return _model(nodes, [_vi("x", [2, 3])], [_vi("y", [2, 4])], [w_tensor])


def _raw_tensor(name, dtype, dims, raw):
    t = TensorProto()
    t.name = name
    t.data_type = dtype
    t.dims.extend(dims)
    t.raw_data = raw
    return t


def _ext_tensor(location, offset=None, length=None, dims=(3, 4)):
    t = TensorProto()
    t.name = "W"
    t.data_type = TensorProto.FLOAT
    t.dims.extend(dims)
    t.data_location = TensorProto.EXTERNAL
    kv = [("location", location)]
    if offset is not None:
        kv.append(("offset", str(offset)))
    if length is not None:
        kv.append(("length", str(length)))
    for k, v in kv:
        e = t.external_data.add()
        e.key = k
        e.value = v
    return t


def _varint(n):
    out = bytearray()
    n &= (1 << 64) - 1
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field_bytes(num, payload):
    return _varint((num << 3) | 2) + _varint(len(payload)) + payload


def _field_varint(num, v):
    return _varint(num << 3) + _varint(v)


def _nested_graphs(depth):
    """GraphProto bytes { node { op_type "If" attribute { then_branch: g { ... } } } }
    nested depth times; built from the inside out by lengths (no quadratic copying)."""
    name_type = _field_bytes(1, b"then_branch") + _field_varint(20, 5)
    op = _field_bytes(4, b"If")
    prefixes, length = [], 0
    for _ in range(depth):
        attr_len = len(name_type) + len(_varint((6 << 3) | 2)) + len(_varint(length)) + length
        node_len = len(op) + len(_varint((5 << 3) | 2)) + len(_varint(attr_len)) + attr_len
        prefixes.append(_varint((1 << 3) | 2) + _varint(node_len) + op
                        + _varint((5 << 3) | 2) + _varint(attr_len) + name_type
                        + _varint((6 << 3) | 2) + _varint(length))
        length = len(_varint((1 << 3) | 2)) + len(_varint(node_len)) + node_len
    data = b"".join(reversed(prefixes))
    assert len(data) == length
    return data


def _parses(data):
    m = onnx.ModelProto()
    try:
        m.ParseFromString(data)
        return True
    except Exception:
        return False


# ---------------------------------------------------------------- the cases

def build_cases(out):
    """Writes every case under out/ and returns the list of Case objects."""
    out = os.path.abspath(out)
    os.makedirs(os.path.join(out, "m"), exist_ok=True)
    with open(os.path.join(out, "secret.bin"), "wb") as f:
        f.write(SECRET_BYTES)
    cases = []

    def add(case, model=None, data=None, files=None):
        d = os.path.join(out, "m", case.name)
        os.makedirs(d, exist_ok=True)
        case.path = os.path.join(d, "model.onnx")
        if model is not None:
            data = model.SerializeToString()
        with open(case.path, "wb") as f:
            f.write(data)
        for fname, content in (files or {}).items():
            with open(os.path.join(d, fname), "wb") as f:
                f.write(content)
        cases.append(case)
        return d

    base = base_model()
    base_bytes = base.SerializeToString()
    rnd = random.Random(SEED)

    # -- controls: these must succeed, or the error checks below prove nothing
    add(Case("control_valid", "ok", what="the valid base model"), base)

    # -- not ONNX at all
    for frac in (0.1, 0.37, 0.5, 0.77, 0.95):
        cut = int(len(base_bytes) * frac)
        data = base_bytes[:cut]
        add(Case("truncated_%02d" % int(frac * 100), "error" if not _parses(data) else "either",
                 what="first %d of %d bytes" % (cut, len(base_bytes))), data=data)
    add(Case("truncated_last_byte", "error", what="all but the last byte"),
        data=base_bytes[:-1])
    for i in range(8):
        b = bytearray(base_bytes)
        for _ in range(1 + i % 4):
            pos = rnd.randrange(len(b))
            b[pos] ^= 1 << rnd.randrange(8)
        add(Case("bitflip_%d" % i, "either", what="%d seeded bit flips" % (1 + i % 4)),
            data=bytes(b))
    add(Case("random_bytes", "error", what="4096 seeded random bytes"),
        data=bytes(rnd.randrange(256) for _ in range(4096)))
    add(Case("empty_file", "error", what="0 bytes"), data=b"")
    add(Case("text_file", "error", what="a text file"),
        data=b"this is not an ONNX model\nit is a text file\n")
    add(Case("no_graph", "error", what="ModelProto with opsets but no graph"),
        data=_field_varint(1, IR_VERSION) + _field_bytes(8, _field_varint(2, OPSET)))
    # 50,000 levels of If -> then_branch graph -> If ...: protobuf decoders that recurse
    # without a limit overflow the stack.
    add(Case("deep_nesting", "error", what="If/then_branch nested 50,000 deep"),
        data=_field_varint(1, IR_VERSION) + _field_bytes(7, _nested_graphs(50000))
        + _field_bytes(8, _field_varint(2, OPSET)))

    # -- wrong-typed fields
    w = _rng().standard_normal((3, 4)).astype(np.float32)
    add(Case("dtype_999", "error", what="initializer data_type 999"),
        _w_model(_raw_tensor("W", 999, [3, 4], w.tobytes())))
    add(Case("dtype_undefined", "error", what="initializer data_type 0 (UNDEFINED)"),
        _w_model(_raw_tensor("W", 0, [3, 4], w.tobytes())))
    t = TensorProto()
    t.name, t.data_type = "W", TensorProto.FLOAT
    t.dims.extend([3, 4])
    t.int64_data.extend(range(12))
    add(Case("float_in_int64_data", "error", what="FLOAT tensor carrying int64_data"),
        _w_model(t))
    tr_nodes = [helper.make_node("Transpose", ["x"], ["y"], name="tr", perm=1.0)]
    add(Case("attr_perm_float", "error", nodes=[["tr", "Transpose"]],
             what="Transpose perm given as a FLOAT"),
        _model(tr_nodes, [_vi("x", [2, 3])], [_vi("y", [3, 2])]))
    n = helper.make_node("Transpose", ["x"], ["y"], name="tr")
    a = n.attribute.add()
    a.name, a.type = "perm", onnx.AttributeProto.FLOAT
    a.ints.extend([1, 0])
    add(Case("attr_type_disagrees", "error", nodes=[["tr", "Transpose"]],
             what="perm: type FLOAT but the ints field set"),
        _model([n], [_vi("x", [2, 3])], [_vi("y", [3, 2])]))
    n = helper.make_node("Transpose", ["x"], ["y"], name="tr", perm=[0, 5])
    add(Case("attr_perm_out_of_range", "error", nodes=[["tr", "Transpose"]],
             what="perm [0, 5] on a rank-2 input"),
        _model([n], [_vi("x", [2, 3])], [_vi("y", [3, 2])]))

    # -- sizes
    big = 1 << 40
    add(Case("huge_dims_input", "error", what="graph input [2^40, 2^40]"),
        _model([helper.make_node("Relu", ["x"], ["y"], name="relu")],
               [_vi("x", [big, big])], [_vi("y", [big, big])]))
    add(Case("huge_dims_initializer", "error", what="initializer [2^40, 2^40], 16 bytes"),
        _w_model(_raw_tensor("W", TensorProto.FLOAT, [big, big], b"\0" * 16)))
    add(Case("negative_dim_initializer", "error", what="initializer dims [-1, 4]"),
        _w_model(_raw_tensor("W", TensorProto.FLOAT, [-1, 4], w.tobytes()[:16])))
    add(Case("negative_dim_input", "error", what="graph input dim_value -5"),
        _model([helper.make_node("Relu", ["x"], ["y"], name="relu")],
               [_vi("x", [-5, 3])], [_vi("y", [-5, 3])]))
    add(Case("numel_overflow_int64", "error", what="initializer [2^31, 2^31, 2^31]"),
        _w_model(_raw_tensor("W", TensorProto.FLOAT, [1 << 31] * 3, w.tobytes())))
    add(Case("numel_just_over_int64", "error", what="initializer [3037000500, 3037000500]"),
        _w_model(_raw_tensor("W", TensorProto.FLOAT, [3037000500, 3037000500], w.tobytes())))
    add(Case("bytes_overflow_int64", "error", what="initializer 2^61 float elements"),
        _w_model(_raw_tensor("W", TensorProto.FLOAT, [1 << 31, 1 << 30], w.tobytes())))
    add(Case("raw_data_short", "error", what="[3,4] float with 40 raw bytes"),
        _w_model(_raw_tensor("W", TensorProto.FLOAT, [3, 4], w.tobytes()[:40])))
    add(Case("raw_data_long", "error", what="[3,4] float with 52 raw bytes"),
        _w_model(_raw_tensor("W", TensorProto.FLOAT, [3, 4], w.tobytes() + b"\1\2\3\4")))
    for cnt in (11, 13):
        t = TensorProto()
        t.name, t.data_type = "W", TensorProto.FLOAT
        t.dims.extend([3, 4])
        t.float_data.extend([0.5] * cnt)
        add(Case("float_data_%d_of_12" % cnt, "error", what="[3,4] with %d float_data" % cnt),
            _w_model(t))
    add(Case("rank9_input", "error", what="graph input of rank 9"),
        _model([helper.make_node("Relu", ["x"], ["y"], name="relu")],
               [_vi("x", [1] * 9)], [_vi("y", [1] * 9)]))
    add(Case("rank9_initializer", "error", what="initializer of rank 9"),
        _model([helper.make_node("Relu", ["c"], ["y"], name="relu")], [],
               [_vi("y", [1] * 9)],
               [_raw_tensor("c", TensorProto.FLOAT, [1] * 9, b"\0\0\x80\x3f")]))

    # -- graph structure
    add(Case("cycle", "error", nodes=[["A", "Add"], ["B", "Relu"]], what="A -> B -> A"),
        _model([helper.make_node("Add", ["x", "b"], ["a"], name="A"),
                helper.make_node("Relu", ["a"], ["b"], name="B")],
               [_vi("x", [2, 3])], [_vi("b", [2, 3])]))
    add(Case("self_loop", "error", nodes=[["L", "Add"]], what="node reading its own output"),
        _model([helper.make_node("Add", ["x", "l"], ["l"], name="L")],
               [_vi("x", [2, 3])], [_vi("l", [2, 3])]))
    add(Case("dangling_input", "error", nodes=[["n1", "Add"]], what="reads 'ghost'"),
        _model([helper.make_node("Add", ["x", "ghost"], ["y"], name="n1")],
               [_vi("x", [2, 3])], [_vi("y", [2, 3])]))
    add(Case("duplicate_output", "error", nodes=[["n1", "Relu"], ["n2", "Neg"]],
             what="two nodes produce 'y'"),
        _model([helper.make_node("Relu", ["x"], ["y"], name="n1"),
                helper.make_node("Neg", ["x"], ["y"], name="n2")],
               [_vi("x", [2, 3])], [_vi("y", [2, 3])]))
    add(Case("output_overwrites_input", "error", nodes=[["n1", "Relu"]],
             what="a node produces the graph input 'x'"),
        _model([helper.make_node("Relu", ["x"], ["x"], name="n1")],
               [_vi("x", [2, 3])], [_vi("x", [2, 3])]))
    add(Case("undefined_graph_output", "error", what="graph output 'z' defined by nobody"),
        _model([helper.make_node("Relu", ["x"], ["y"], name="relu")],
               [_vi("x", [2, 3])], [_vi("z", [2, 3])]))
    add(Case("duplicate_initializer", "error", what="two initializers named W"),
        _model([helper.make_node("MatMul", ["x", "W"], ["y"], name="mm")],
               [_vi("x", [2, 3])], [_vi("y", [2, 4])],
               [numpy_helper.from_array(w, "W"), numpy_helper.from_array(w, "W")]))
    add(Case("too_many_inputs", "error", nodes=[["r", "Relu"]], what="Relu with 2 inputs"),
        _model([helper.make_node("Relu", ["x", "x"], ["y"], name="r")],
               [_vi("x", [2, 3])], [_vi("y", [2, 3])]))
    add(Case("unknown_op", "error", nodes=[["foo", "FooBar"]], what="op 'FooBar'"),
        _model([helper.make_node("FooBar", ["x"], ["y"], name="foo")],
               [_vi("x", [2, 3])], [_vi("y", [2, 3])]))
    # internal ops (collectives) exist in the ops table but never come from a file
    add(Case("internal_op", "error", nodes=[["ar", "AllReduce"]], what="op 'AllReduce'"),
        _model([helper.make_node("AllReduce", ["x"], ["y"], name="ar", axes=["tp"])],
               [_vi("x", [2, 3])], [_vi("y", [2, 3])]))
    add(Case("unknown_domain", "error", nodes=[["ev", "Relu"]], what="Relu in 'com.evil'"),
        _model([helper.make_node("Relu", ["x"], ["y"], name="ev", domain="com.evil")],
               [_vi("x", [2, 3])], [_vi("y", [2, 3])], extra_opsets=[("com.evil", 1)]))
    # model-local functions (inlined at import) and old-opset forms (adapters)
    fops = [helper.make_opsetid("", OPSET), helper.make_opsetid("custom", 1)]
    rec = helper.make_function("custom", "Rec", ["X"], ["Y"],
                               [helper.make_node("Rec", ["X"], ["Y"], domain="custom")], fops, [])
    m = _model([helper.make_node("Rec", ["x"], ["y"], name="r", domain="custom")],
               [_vi("x", [2, 3])], [_vi("y", [2, 3])], extra_opsets=[("custom", 1)])
    m.functions.append(rec)
    add(Case("function_recursive", "error", nodes=[["r", "Rec"]], msg_re="function 'Rec'.*nest",
             what="a function calling itself"), m)
    und = helper.make_function("custom", "Und", ["X"], ["Y"],
                               [helper.make_node("Add", ["X", "nowhere"], ["Y"], name="a")],
                               fops, [])
    m = _model([helper.make_node("Und", ["x"], ["y"], name="u", domain="custom")],
               [_vi("x", [2, 3])], [_vi("y", [2, 3])], extra_opsets=[("custom", 1)])
    m.functions.append(und)
    add(Case("function_undefined", "error", nodes=[["u", "Und"]], msg_re="neither an input",
             what="a function body reading an undefined name"), m)
    bn = [helper.make_tensor(n, TensorProto.FLOAT, [3], [1.0, 1.0, 1.0]) for n in "sbmv"]
    add(Case("batchnorm_spatial0", "error", nodes=[["bn", "BatchNormalization"]],
             msg_re="spatial = 0", what="BatchNormalization spatial = 0 (opset 7)"),
        _model([helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"],
                                 name="bn", spatial=0)],
               [_vi("x", [2, 3, 4])], [_vi("y", [2, 3, 4])], bn, opset=7))
    for ops in (6, 99):  # shardc reads opsets 7 to 25
        add(Case("opset_%d" % ops, "error", msg_re="opset", what="default opset %d" % ops),
            _model([helper.make_node("Relu", ["x"], ["y"], name="r")],
                   [_vi("x", [2, 3])], [_vi("y", [2, 3])], opset=ops))

    # -- shapes and folding
    shape = numpy_helper.from_array(np.array([4, 2], np.int64), "shape")
    add(Case("reshape_mismatch", "error", nodes=[["rs", "Reshape"]], what="[2,3] -> [4,2]"),
        _model([helper.make_node("Reshape", ["x", "shape"], ["y"], name="rs")],
               [_vi("x", [2, 3])], [_vi("y", [4, 2])], [shape]))
    add(Case("matmul_mismatch", "error", nodes=[["mm", "MatMul"]], what="[2,3] x [4,5]"),
        _model([helper.make_node("MatMul", ["a", "b"], ["y"], name="mm")],
               [_vi("a", [2, 3]), _vi("b", [4, 5])], [_vi("y", [2, 5])]))
    table = numpy_helper.from_array(np.array([2, 3, 6, 1, 6], np.int64), "table")
    for label, idx in (("gather_oob", [1, 7]), ("gather_oob_negative", [-6, 1])):
        add(Case(label, "error", nodes=[["g", "Gather"]],
                 what="Gather index %s of 5 feeding a Reshape shape (folded)" % idx),
            _model([helper.make_node("Gather", ["table", "idx"], ["s"], name="g", axis=0),
                    helper.make_node("Reshape", ["x", "s"], ["y"], name="rs")],
                   [_vi("x", [2, 3])], [_vi("y", [3, 2])],
                   [table, numpy_helper.from_array(np.array(idx, np.int64), "idx")]))
    add(Case("identity_graph", "ok", what="0 nodes, the output is the input"),
        _model([], [_vi("x", [2, 3])], [_vi("x", [2, 3])]))
    n_chain = 200000
    chain = [helper.make_node("Relu" if i % 2 else "Neg", ["x" if i == 0 else "t%d" % (i - 1)],
                              ["y" if i == n_chain - 1 else "t%d" % i], name="n%d" % i)
             for i in range(n_chain)]
    add(Case("chain_200k", "ok", what="200,000-node chain (must be fast)"),
        _model(chain, [_vi("x", [2, 3])], [_vi("y", [2, 3])]))

    # -- op attributes and inputs from hostile models (node-level errors; "either" where
    # the model is valid ONNX and a clean refusal is as good as an answer)
    def one(label, expect, node, op, inputs, in_vis, out_dims, inits=(), what="", **attrs):
        n = helper.make_node(op, inputs, ["y"], name=node, **attrs)
        add(Case(label, expect, nodes=[[node, op]] if expect == "error" else None, what=what),
            _model([n], in_vis, [_vi("y", out_dims)], list(inits)))

    def i64(name, vals):
        return numpy_helper.from_array(np.array(vals, np.int64), name)

    one("empty_required_input", "error", "a", "Add", ["x", ""], [_vi("x", [2, 3])], [2, 3],
        what="Add with input 2 omitted ('')")
    n = helper.make_node("Relu", ["x"], [""], name="r")
    add(Case("empty_required_output", "error", nodes=[["r", "Relu"]],
             what="Relu whose only output is ''"),
        _model([n, helper.make_node("Neg", ["x"], ["y"], name="n")],
               [_vi("x", [2, 3])], [_vi("y", [2, 3])]))
    one("matmul_scalar", "error", "mm", "MatMul", ["a", "b"],
        [_vi("a", []), _vi("b", [])], [], what="MatMul of two scalars")
    one("concat_axis_oob", "error", "cc", "Concat", ["x", "x"], [_vi("x", [2, 3])], [2, 6],
        axis=5, what="Concat axis 5 on rank 2")
    one("gather_axis_oob", "error", "g", "Gather", ["x", "i"], [_vi("x", [2, 3])], [2, 3],
        [i64("i", [0])], axis=3, what="Gather axis 3 on rank 2")
    one("transpose_perm_dup", "error", "tr", "Transpose", ["x"], [_vi("x", [2, 3])], [2, 2],
        perm=[0, 0], what="perm [0, 0]")
    one("reshape_two_minus_one", "error", "rs", "Reshape", ["x", "s"], [_vi("x", [2, 3])],
        [2, 3], [i64("s", [-1, -1])], what="shape [-1, -1]")
    one("reshape_minus_one_zero_size", "either", "rs", "Reshape", ["x", "s"],
        [_vi("x", [2, 0])], [0, 0], [i64("s", [-1, 0])],
        what="[2,0] to [-1, 0] (-1 would divide by 0)")
    one("split_sizes_mismatch", "error", "sp", "Split", ["x", "s"], [_vi("x", [2, 3])],
        [2, 1], [i64("s", [1, 1])], what="split [1,1] of a dim of 3")
    one("unsqueeze_axis_int64_min", "error", "u", "Unsqueeze", ["x", "a"], [_vi("x", [2, 3])],
        [1, 2, 3], [i64("a", [-(1 << 63)])], what="axes [INT64_MIN]")
    one("slice_extreme_steps", "either", "sl", "Slice", ["x", "st", "en", "ax", "sp"],
        [_vi("x", [10])], [1],
        [i64("st", [(1 << 63) - 1]), i64("en", [-(1 << 63)]), i64("ax", [0]),
         i64("sp", [-(1 << 63)])], what="starts INT64_MAX, ends/steps INT64_MIN")
    one("cast_to_999", "error", "c", "Cast", ["x"], [_vi("x", [2, 3])], [2, 3], to=999,
        what="Cast to=999")
    one("conv_zero_stride", "error", "cv", "Conv", ["x", "w"], [_vi("x", [1, 1, 4, 4])],
        [1, 1, 4, 4],
        [numpy_helper.from_array(np.ones((1, 1, 3, 3), np.float32), "w")],
        strides=[0, 0], what="Conv strides [0, 0]")
    one("pool_kernel_huge", "error", "mp", "MaxPool", ["x"], [_vi("x", [1, 1, 4, 4])],
        [1, 1, 1, 1], kernel_shape=[1 << 62, 1 << 62], what="MaxPool kernel 2^62")
    one("pad_huge", "either", "pd", "Pad", ["x", "p"], [_vi("x", [2, 3])], [2, 3],
        [i64("p", [1 << 62, 1 << 62, 1 << 62, 1 << 62])], what="pads 2^62")
    one("fold_huge_constant_of_shape", "either", "cos", "ConstantOfShape", ["s"], [], [],
        [i64("s", [1 << 20, 1 << 20])], what="a 2^40-element constant (4 TiB)")
    add(Case("fold_huge_range", "either", what="Range(0, 2^45, 1)"),
        _model([helper.make_node("Range", ["a", "b", "c"], ["y"], name="rg")], [],
               [_vi("y", [1 << 45], TensorProto.INT64)],
               [numpy_helper.from_array(np.array(v, np.int64), k)
                for k, v in (("a", 0), ("b", 1 << 45), ("c", 1))]))
    one("fold_huge_expand", "either", "ex", "Expand", ["v", "s"], [], [1 << 22, 1 << 22],
        [numpy_helper.from_array(np.array([1.5], np.float32), "v"),
         i64("s", [1 << 22, 1 << 22])], what="Expand a scalar to 2^44 elements")
    add(Case("duplicate_node_names", "ok", what="two nodes named 'n' (renamed, not an error)"),
        _model([helper.make_node("Relu", ["x"], ["h"], name="n"),
                helper.make_node("Neg", ["h"], ["y"], name="n")],
               [_vi("x", [2, 3])], [_vi("y", [2, 3])]))

    # -- external data
    wbytes = _rng().standard_normal((3, 4)).astype(np.float32).tobytes()
    assert len(wbytes) == len(SECRET_BYTES)
    ok = {"weights.bin": wbytes}
    add(Case("ext_control_valid", "ok", what="valid external data weights.bin"),
        _w_model(_ext_tensor("weights.bin", 0, 48)), files=ok)
    add(Case("ext_dotdot_passwd", "error", escape=True, msg_re=ESCAPE_RE,
             what="location ../../etc/passwd"),
        _w_model(_ext_tensor("../../etc/passwd", 0, 48)), files=ok)
    add(Case("ext_dotdot_secret", "error", escape=True, msg_re=ESCAPE_RE,
             what="location ../../secret.bin (exists, right size)"),
        _w_model(_ext_tensor("../../secret.bin", 0, 48)), files=ok)
    add(Case("ext_dotdot_middle", "error", escape=True, msg_re=ESCAPE_RE,
             what="location sub/../../../secret.bin"),
        _w_model(_ext_tensor("sub/../../../secret.bin", 0, 48)), files=ok)
    add(Case("ext_abs_passwd", "error", escape=True, msg_re=ESCAPE_RE,
             what="location /etc/passwd"),
        _w_model(_ext_tensor("/etc/passwd", 0, 48)), files=ok)
    add(Case("ext_abs_secret", "error", escape=True, msg_re=ESCAPE_RE,
             what="absolute location of secret.bin"),
        _w_model(_ext_tensor(os.path.join(out, "secret.bin"), 0, 48)), files=ok)
    d = add(Case("ext_symlink_out", "error", escape=True, msg_re=ESCAPE_RE,
                 what="weights.bin is a symlink to ../../secret.bin"),
            _w_model(_ext_tensor("weights.bin", 0, 48)))
    os.symlink(os.path.join("..", "..", "secret.bin"), os.path.join(d, "weights.bin"))
    add(Case("ext_offset_past_end", "error", what="offset 64 in a 48-byte file"),
        _w_model(_ext_tensor("weights.bin", 64, 48)), files=ok)
    add(Case("ext_length_past_end", "error", what="offset 16 + length 48 > 48 bytes"),
        _w_model(_ext_tensor("weights.bin", 16, 48)), files=ok)
    add(Case("ext_length_wrong", "error", what="length 44 for a 48-byte tensor"),
        _w_model(_ext_tensor("weights.bin", 0, 44)), files=ok)
    add(Case("ext_negative_offset", "error", what="offset -8"),
        _w_model(_ext_tensor("weights.bin", -8, 48)), files=ok)
    add(Case("ext_offset_overflow", "error", what="offset 2^64-1"),
        _w_model(_ext_tensor("weights.bin", (1 << 64) - 1, 48)), files=ok)
    add(Case("ext_offset_garbage", "error", what="offset '12abc'"),
        _w_model(_ext_tensor("weights.bin", "12abc", 48)), files=ok)
    add(Case("ext_missing_file", "error", what="location nothere.bin",
             msg_re=r"'nothere.bin': not found \(--no-weights reads the model's shapes"),
        _w_model(_ext_tensor("nothere.bin", 0, 48)), files=ok)
    add(Case("ext_empty_location", "error", what="location ''"),
        _w_model(_ext_tensor("", 0, 48)), files=ok)
    d = add(Case("ext_directory", "error", what="location names a folder"),
            _w_model(_ext_tensor("sub", 0, 48)))
    os.mkdir(os.path.join(d, "sub"))
    # Opening a FIFO for reading blocks until a writer comes: a tool that opens
    # before checking the file type hangs (the 10 s timeout catches it).
    d = add(Case("ext_fifo", "error", what="weights.bin is a named pipe"),
            _w_model(_ext_tensor("weights.bin", 0, 48)))
    os.mkfifo(os.path.join(d, "weights.bin"))
    d = add(Case("ext_symlink_loop", "error", what="weights.bin -> a -> weights.bin"),
            _w_model(_ext_tensor("weights.bin", 0, 48)))
    os.symlink("a", os.path.join(d, "weights.bin"))
    os.symlink("weights.bin", os.path.join(d, "a"))
    d = add(Case("ext_symlink_inside", "ok", what="weights.bin -> data/w.bin (inside)"),
            _w_model(_ext_tensor("weights.bin", 0, 48)))
    os.mkdir(os.path.join(d, "data"))
    with open(os.path.join(d, "data", "w.bin"), "wb") as f:
        f.write(wbytes)
    os.symlink(os.path.join("data", "w.bin"), os.path.join(d, "weights.bin"))

    # -- the model path itself
    c = Case("model_is_directory", "error", what="the model path is a folder")
    add(c, data=b"")
    os.remove(c.path)
    os.mkdir(c.path)
    c = Case("model_fifo", "error", what="the model path is a named pipe")
    add(c, data=b"")
    os.remove(c.path)
    os.mkfifo(c.path)
    c = Case("model_missing", "error", what="the model file does not exist")
    add(c, data=b"")
    os.remove(c.path)
    return cases


def main(argv):
    if len(argv) != 2:
        print("usage: make_bad_models.py OUTDIR", file=sys.stderr)
        return 2
    cases = build_cases(argv[1])
    with open(os.path.join(argv[1], "manifest.json"), "w") as f:
        json.dump([c.to_json() for c in cases], f, indent=1)
    for c in cases:
        print("%-28s %-6s %s" % (c.name, c.expect, c.what))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
