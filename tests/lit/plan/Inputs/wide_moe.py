"""Writes OUT.onnx: the MoE sample (samples/moe.onnx, docs/moe.md) with
each expert's hidden size widened to F (w1, w3 [8, 64, F], w2 [8, F, 64]),
the experts' weights external data in a file that is never written (for
plan, which needs shapes only; tests/lit/plan/auto_ep.test). Nothing else
changes: 2 layers of 8 experts, top-2, capacity 5, sequence 16.

    wide_moe.py OUT.onnx F
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "samples"))
import onnx  # noqa: E402
from make_samples import external_initializer  # noqa: E402

out, f = sys.argv[1], int(sys.argv[2])
sample = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "samples", "moe.onnx")
model = onnx.load(sample)
inits = model.graph.initializer
offset = 0
for i, t in enumerate(inits):
    if len(t.dims) != 3 or ".block_sparse_moe.w" not in t.name:
        continue
    e, a, b = t.dims
    shape = [e, a, f] if t.name.endswith((".w1", ".w3")) else [e, f, b]
    ext, offset = external_initializer(t.name, shape, "wide_moe.weights", offset, 4096)
    inits.remove(t)
    inits.insert(i, ext)
onnx.save(model, out)
