"""plan/train_sp_collectives.test: a training step's tensor-parallel
collectives under --sequence-parallel are Megatron's, in count and bytes.

    sp_collectives.py model OUT.onnx      the GPT of make_samples.py's
                                          build_gpt2_graph (gpt_1p5b's graph,
                                          3-D MatMuls) at the size of TINY,
                                          shape only (external data not written)
    sp_collectives.py check PLAN.json PRECISION BATCH
                                          the plan's collectives (`plan --train
                                          --mesh tp=T --sequence-parallel
                                          --dim batch=BATCH --json`) against the
                                          formula below

With A = b·s·h bytes of one [b, s, h] activation in the products' dtype (fp32:
4, bf16: 2) and F = b·s·h·4 (the f32 stream outside the blocks), per step:
  ReduceScatter  4L of A: each block's two row-parallel outputs (forward) and
                 its two column-parallel inputs' gradients (backward); 2 of F:
                 the embedding's output, the LM head input's gradient
  AllGather      6L + 2 of A: each block's two column-parallel inputs
                 (forward, and again in the backward for the weights'
                 gradients: the step keeps the 1/tp piece, not the gathered
                 copy), its two row-parallel outputs' gradients (backward);
                 the LM head's input likewise, forward and backward (its
                 rows merged from [b, s/tp, h] keep the split, cast to the
                 products' dtype before they are gathered); 1 of F: the
                 embedding output's gradient, for the tied embedding's
                 masked scatter onto the rank's vocabulary rows
                 (Megatron's VocabParallelEmbedding backward; until
                 2026-12-07 a whole [V, h] f32 gradient, reduce-scattered)
  AllToAll       none
  AllReduce      only vectors and scalars (norm weights' and biases'
                 gradients, the cross-entropy's row maxima and sums, the
                 position embedding's gradient): less than F in all
(Korthikanti et al., "Reducing Activation Recomputation in Large Transformer
Models", 2022, section 4.2.2: g and g-bar, an all-gather and a
reduce-scatter, in place of each all-reduce; Megatron-LM's column-parallel
linear all-gathers its input again in the backward.) The sizes are exact: b, s, h,
L are the model's, the mesh's tp divides s."""
import json
import sys

TINY = dict(vocab=512, n_positions=64, n_embd=64, n_head=4, n_layer=2, seq=64)


def model(out):
    import os
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "samples"))
    import onnx
    from make_samples import build_gpt2_graph
    m, _ = build_gpt2_graph(TINY, external="sp_tiny.weights")
    onnx.save(m, out)


def check(path, precision, b):
    plan = json.load(open(path))
    c = TINY
    L, s, h = c["n_layer"], c["seq"], c["n_embd"]
    F = b * s * h * 4
    A = b * s * h * {"fp32": 4, "bf16": 2}[precision]
    want = {"ReduceScatter": (4 * L + 2, 4 * L * A + 2 * F),
            "AllGather": (6 * L + 3, (6 * L + 2) * A + F)}
    got = {c["op"]: c for c in plan["collectives"] if c["axes"] == "tp"}
    ok = True
    for op, (n, nbytes) in want.items():
        g = got.get(op)
        if not g or g["count"] != n or g["bytes"] != nbytes:
            print("%s over tp: %s, want count %d, bytes %d" % (
                op, g and (g["count"], g["bytes"]), n, nbytes))
            ok = False
    if "AllToAll" in got:
        print("AllToAll over tp: %s, want none" % got["AllToAll"])
        ok = False
    ar = got.get("AllReduce", {"bytes": 0})["bytes"]
    if ar >= F:
        print("AllReduce over tp: %d bytes, want less than one f32 activation, %d" % (ar, F))
        ok = False
    return ok


if __name__ == "__main__":
    if sys.argv[1:2] == ["model"]:
        model(sys.argv[2])
        sys.exit(0)
    ok = check(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    print("ok" if ok else "FAILS")
    sys.exit(0 if ok else 1)
