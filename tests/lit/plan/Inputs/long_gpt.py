"""Writes OUT.onnx: a shape-only GPT (samples/make_gpt_shapes.py's graph,
samples/make_samples.py's build_gpt2_graph) of 2 layers with the given
sequence length, hidden size, heads and vocabulary, its weights an
external file that is never written (for plan, which needs shapes only;
tests/lit/plan/auto_cp.test).

    long_gpt.py OUT.onnx SEQ HIDDEN HEADS VOCAB
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "samples"))
import onnx  # noqa: E402
from make_gpt_shapes import build  # noqa: E402

out, (seq, hidden, heads, vocab) = sys.argv[1], map(int, sys.argv[2:6])
model, _ = build(dict(name="long_gpt", vocab=vocab, seq=seq, hidden=hidden, heads=heads, layers=2))
onnx.save(model, out)
