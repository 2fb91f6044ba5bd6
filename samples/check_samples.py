#!/usr/bin/env python3
"""Check the sample ONNX models in samples/ (needs only onnx, onnxruntime, numpy).

    .venv/bin/python samples/check_samples.py             # check, one line per model
    .venv/bin/python samples/check_samples.py --markdown  # also print README tables
    .venv/bin/python samples/check_samples.py --update-readme  # rewrite them in README.md

For each model with embedded weights: onnx.checker.check_model (full check) passes,
and onnxruntime runs it at batch 1 and batch 3 on seeded random inputs
(input_ids uniform in [0, vocab), attention_mask all ones, float inputs normal)
with finite outputs whose first dimension is the batch.

A model whose weights are external data that is not present (gpt_1p5b) is only
loaded as a graph (load_external_data=False); it is checked with onnx.checker
against a sparse all-zero stand-in of its data file in a temporary folder, and
with strict shape inference.

Parameter count = sum of the element counts of the graph's initializers.
Exits non-zero when a check fails; the last line is "N passed, N failed".
"""

import argparse
import collections
import math
import os
import shutil
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto

HERE = os.path.dirname(os.path.abspath(__file__))
SAMPLES = ["mlp", "resnet", "gpt2", "bert", "llama", "vit", "vit_pool", "gpt_1p5b",
           "gpt2_opset11", "bert_opset11", "vit_opset11", "gpt2_dynamo", "bert_ortopt",
           "gpt2_ortopt", "moe"]
BATCHES = (1, 3)


def dtype_name(elem_type):
    return TensorProto.DataType.Name(elem_type).lower()


def dims(vi):
    out = []
    for d in vi.type.tensor_type.shape.dim:
        out.append(d.dim_param if d.HasField("dim_param") else d.dim_value)
    return out


def describe(vi):
    return "%s %s[%s]" % (vi.name, dtype_name(vi.type.tensor_type.elem_type),
                          ",".join(str(d) for d in dims(vi)))


def graph_inputs(m):
    inits = {t.name for t in m.graph.initializer}
    return [vi for vi in m.graph.input if vi.name not in inits]


def param_count(m):
    return sum(math.prod(t.dims) for t in m.graph.initializer)


def opset(m):
    return next(o.version for o in m.opset_import if o.domain in ("", "ai.onnx"))


def op_histogram(m):
    return collections.Counter(n.op_type for n in m.graph.node)


def is_external(m):
    return any(t.data_location == TensorProto.EXTERNAL for t in m.graph.initializer)


def vocab_of(m, input_name):
    """Rows of the embedding table that Gathers with this input (else 1000)."""
    inits = {t.name: t for t in m.graph.initializer}
    for n in m.graph.node:
        if n.op_type == "Gather" and len(n.input) == 2 and n.input[1] == input_name \
                and n.input[0] in inits:
            return inits[n.input[0]].dims[0]
    return 1000


def make_feeds(m, batch, rng):
    feeds = {}
    for vi in graph_inputs(m):
        shape = [batch if isinstance(d, str) else d for d in dims(vi)]
        et = vi.type.tensor_type.elem_type
        if et == TensorProto.INT64:
            if "mask" in vi.name:
                feeds[vi.name] = np.ones(shape, np.int64)
            else:
                feeds[vi.name] = rng.integers(0, vocab_of(m, vi.name), shape, dtype=np.int64)
        elif et == TensorProto.FLOAT:
            feeds[vi.name] = rng.standard_normal(shape).astype(np.float32)
        else:
            raise ValueError("no input generator for %s" % describe(vi))
    return feeds


def check_external(path, m):
    """checker + strict shape inference without the (absent) external data."""
    locs, end = set(), 0
    for t in m.graph.initializer:
        ext = {e.key: e.value for e in t.external_data}
        locs.add(ext["location"])
        end = max(end, int(ext.get("offset", 0)) + int(ext["length"]))
    with tempfile.TemporaryDirectory() as d:
        shutil.copy(path, d)
        for loc in locs:
            with open(os.path.join(d, loc), "wb") as f:
                f.truncate(end)       # sparse: takes no disk space
        onnx.checker.check_model(os.path.join(d, os.path.basename(path)))
    inferred = onnx.shape_inference.infer_shapes(m, check_type=True, strict_mode=True)
    for vi in inferred.graph.output:
        assert vi.type.tensor_type.HasField("shape"), vi.name
    return locs


def check_one(name, d):
    import onnxruntime as ort
    path = os.path.join(d, name + ".onnx")
    m = onnx.load(path, load_external_data=False)
    head = "%-9s opset %d, %d params, %d bytes, in: %s; out: %s" % (
        name, opset(m), param_count(m), os.path.getsize(path),
        ", ".join(describe(v) for v in graph_inputs(m)),
        ", ".join(describe(v) for v in m.graph.output))
    if is_external(m):
        locs = check_external(path, m)
        return m, head + "; graph only (external data %s not loaded): ok" % ", ".join(sorted(locs))
    onnx.checker.check_model(path, full_check=True)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    for b in BATCHES:
        outs = sess.run(None, make_feeds(m, b, rng))
        for vi, o in zip(m.graph.output, outs):
            if not np.isfinite(o).all():
                raise AssertionError("%s: non-finite values at batch %d" % (vi.name, b))
            want = tuple(b if isinstance(x, str) else x for x in dims(vi))
            if o.shape != want:   # the batch, or a scalar (moe's aux_loss)
                raise AssertionError("%s: shape %s at batch %d" % (vi.name, o.shape, b))
    return m, head + "; onnxruntime batch %s: ok" % ",".join(map(str, BATCHES))


def markdown(name, m, d):
    path = os.path.join(d, name + ".onnx")
    hist = op_histogram(m)
    lines = ["#### %s" % name, "",
             "| | |", "|---|---|",
             "| opset | %d |" % opset(m),
             "| parameters (initializer elements) | %s |" % format(param_count(m), ","),
             "| file size | %s bytes |" % format(os.path.getsize(path), ","),
             "| inputs | %s |" % "; ".join("`%s`" % describe(v) for v in graph_inputs(m)),
             "| outputs | %s |" % "; ".join("`%s`" % describe(v) for v in m.graph.output),
             "| nodes | %d |" % sum(hist.values()),
             "| ops | %s |" % ", ".join("%s ×%d" % (k, v) for k, v in sorted(hist.items())),
             ""]
    return "\n".join(lines)


BEGIN, END = "<!-- BEGIN check_samples.py --update-readme -->", "<!-- END check_samples.py -->"


def update_readme(path, tables):
    text = open(path, encoding="utf-8").read()
    i, j = text.index(BEGIN) + len(BEGIN), text.index(END)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text[:i] + "\n\n" + tables + "\n" + text[j:])
    print("updated %s" % path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", help="samples to check (default: all)")
    ap.add_argument("--dir", default=HERE)
    ap.add_argument("--markdown", action="store_true", help="print README tables too")
    ap.add_argument("--update-readme", action="store_true",
                    help="rewrite the generated part of samples/README.md")
    a = ap.parse_args()
    passed, failed, md, union = 0, 0, [], set()
    for name in a.names or SAMPLES:
        try:
            m, line = check_one(name, a.dir)
            print(line, flush=True)
            passed += 1
            union |= set(op_histogram(m))
            md.append(markdown(name, m, a.dir))
        except Exception as e:  # report and go on
            print("%-9s FAILED: %s: %s" % (name, type(e).__name__, e), flush=True)
            failed += 1
    tables = "\n".join(md) + "\nUnion of ops over all samples (%d): %s.\n" % (
        len(union), ", ".join(sorted(union)))
    if a.markdown:
        print()
        print(tables)
    if a.update_readme and not failed and not a.names:
        update_readme(os.path.join(HERE, "README.md"), tables)
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
