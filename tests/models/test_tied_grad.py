"""test_tied_grad.py — a tied embedding's lookup adds its gradient into the
LM head's, in place, and trains as the zero-filled scatter and sum did.

autodiff's Gather rule (passes/grad_rules.c) scatter-adds the lookup's rows
into the gradient sum its table already has (the tied LM head's product
comes first in the backward) instead of into a zero-filled table that is
then added. The previous form is kept in a twin of the model: the lookup
reads the table through an Identity, whose gradient is the only reader of
the lookup's, so the rule there has no sum to add into and builds the
zero-filled scatter and the Add as before. Both are GPT-2-shaped models
built as samples/make_samples.py builds its shape-only GPTs (tied
embedding and LM head), weights from `--init` (the same values in both:
they hash the parameter's name), ids seeded random.

Checked:
  - training (3 SGD steps, batch 4 of 16 tokens, vocabulary 512) on one
    rank, tp=2 (the vocabulary-parallel table: the rows are added into
    each rank's part of the LM head's gradient, masked), fsdp=2 (ZeRO-3:
    each rank adds its rows into its pending sum), dp=2, fsdp=2 x tp=2 and
    pp=2 with 2 microbatches (the LM head's part accumulated on its own
    rank and handed over once per step, the lookup's rows into zeros):
    the model and its twin log the same losses and gradient norms within
    rtol 2e-5 (test_train_dist's tolerance: a row read k times sums
    (s + u1) + u2 ... instead of s + (u1 + u2 ...), fp32 rounding), and
    end with the same weights within 2e-4 of the largest update (test_
    train_dist's for SGD); with ids that never repeat in a batch the two
    are bit-identical on one rank (s + u is s + (0 + u) exactly);
  - the plan (`shardc plan --train --json`, one rank, vocabulary 16,384, d
    64, batch 1): the twin's peak is the embedding's gradient, with two
    whole tables of gradient live (the LM head's and the scatter's, which
    the memory plan lets take the zero-filled table's storage); the model's
    is lower by at least one whole table (V x d x 4 bytes) less the
    logits' gradient (B x S x V x 4), which is what is live at the LM
    head's backward, its peak now.
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "samples"))
from checks import check, finish  # noqa: E402
from test_train_dist import load_ckpt  # noqa: E402

SHARDC = os.environ.get("SHARDC")
STEPS = 3
INIT = ["--no-weights", "--init", "*ln_*.weight=ones", "--init", "*ln_f.weight=ones",
        "--init", "*.bias=zeros", "--init", "*=normal:0.05", "--seed", "5"]
MESHES = [[], ["--mesh", "tp=2"], ["--mesh", "fsdp=2"], ["--mesh", "dp=2"],
          ["--mesh", "fsdp=2,tp=2"], ["--mesh", "pp=2", "--microbatches", "2"]]


def models(tmp, vocab, seq, layers):
    """(tied, twin): the model and its twin reading the table through an
    Identity, written into tmp."""
    import onnx
    from onnx import helper
    from make_samples import build_gpt2_graph
    c = dict(vocab=vocab, n_positions=seq, n_embd=64, n_head=4, n_layer=layers, seq=seq)
    model, _ = build_gpt2_graph(c, external="absent.weights")
    tied = os.path.join(tmp, f"tied_{vocab}.onnx")
    onnx.save(model, tied)
    g = model.graph
    n_lookups = 0
    for n in g.node:
        if n.op_type == "Gather" and n.input[0] == "transformer.wte.weight":
            n.input[0] = "wte_lookup"
            n_lookups += 1
    assert n_lookups == 1
    g.node.insert(0, helper.make_node("Identity", ["transformer.wte.weight"], ["wte_lookup"],
                                      name="/wte_lookup"))
    twin = os.path.join(tmp, f"twin_{vocab}.onnx")
    onnx.save(model, twin)
    return tied, twin


def train(model, args, tmp, tag):
    log, ck = os.path.join(tmp, tag + ".jsonl"), os.path.join(tmp, tag + "_ck")
    p = subprocess.run([SHARDC, "train", model] + args + ["--log-json", log, "--save", ck],
                       capture_output=True, text=True, timeout=600)
    if not check(p.returncode == 0, f"{tag}: exit {p.returncode}: {p.stderr[-800:]}"):
        return None
    return [json.loads(line) for line in open(log)], load_ckpt(ck, "weights")


def plan(model, args):
    p = subprocess.run([SHARDC, "plan", model, "--train", "--json"] + args,
                       capture_output=True, text=True, timeout=300)
    if not check(p.returncode == 0, f"plan {model}: {p.stderr[-800:]}"):
        return None
    return json.loads(p.stdout)


def data(tmp, tag, ids, vocab, rng):
    f, lab = os.path.join(tmp, tag + "_ids.npy"), os.path.join(tmp, tag + "_lab.npy")
    np.save(f, ids.astype(np.int64))
    np.save(lab, rng.integers(0, vocab, ids.shape).astype(np.int64))
    return ["--data", f"input_ids={f}", "--labels", lab]


def main():
    if not SHARDC:
        print("SHARDC is not set")
        return 1
    tmp = tempfile.mkdtemp(prefix="sc_tied_grad_")
    vocab, seq, batch = 512, 16, 4
    tied, twin = models(tmp, vocab, seq, 2)
    rng = np.random.default_rng(41)
    ids = rng.integers(0, vocab, (2 * batch, seq))
    check(any(len(np.unique(ids[k:k + batch])) < batch * seq for k in (0, batch)),
          "the seeded ids repeat a token within a batch")
    common = ["--dim", f"batch={batch}", "--steps", str(STEPS), "--threads", "1",
              "--optimizer", "sgd", "--lr", "0.1", "--quiet"] + INIT
    common += data(tmp, "rep", ids, vocab, rng)
    init = None
    for k, mesh in enumerate(MESHES):
        what = " ".join(mesh) or "one rank"
        a = train(twin, common + mesh, tmp, f"twin{k}")
        b = train(tied, common + mesh, tmp, f"tied{k}")
        if a is None or b is None:
            continue
        if init is None:
            p = subprocess.run([SHARDC, "train", tied] + common + ["--steps", "0", "--save",
                               os.path.join(tmp, "init_ck")], capture_output=True, text=True,
                               timeout=600)
            if check(p.returncode == 0, f"--steps 0: {p.stderr[-500:]}"):
                init = load_ckpt(os.path.join(tmp, "init_ck"), "weights")
        (la, wa), (lb, wb) = a, b
        check(len(la) == len(lb) == STEPS, f"{what}: {len(la)}, {len(lb)} steps logged")
        worst = 0.0
        for x, y in zip(la, lb):
            for key in ("loss", "grad_norm"):
                u, v = x[key], y[key]
                ok = u is not None and v is not None and np.isfinite(v) and \
                    abs(u - v) <= 2e-5 * abs(u) + 1e-7
                check(ok, f"{what}: step {x['step']} {key} {v} vs {u} (the zero-filled form)")
                if ok:
                    worst = max(worst, abs(u - v) / max(abs(u), 1e-30))
        werr = 0.0
        for name, w in wa.items():
            v = wb.get(name)
            if not check(v is not None and v.shape == w.shape and np.isfinite(v).all(),
                         f"{what}: weight {name} missing, reshaped or not finite"):
                continue
            scale = np.abs(w.astype(np.float64) - init[name]).max() if init else 0.0
            err = np.abs(w.astype(np.float64) - v).max()
            check(err <= 2e-4 * scale + 1e-9,
                  f"{what}: weight {name} differs by {err:.3g} (update {scale:.3g})")
            werr = max(werr, err / scale if scale > 0 else 0.0)
        print(f"{what}: losses and gradient norms within {worst:.2g} relative, "
              f"weights within {werr:.2g} of the update")

    # ids that never repeat within a batch: the same bits on one rank
    perm = np.concatenate([rng.permutation(vocab)[:batch * seq] for _ in range(2)])
    uniq = ["--dim", f"batch={batch}", "--steps", str(STEPS), "--threads", "1",
            "--optimizer", "sgd", "--lr", "0.1", "--quiet"] + INIT
    uniq += data(tmp, "uniq", perm.reshape(2 * batch, seq), vocab, rng)
    a, b = train(twin, uniq, tmp, "twin_u"), train(tied, uniq, tmp, "tied_u")
    if a is not None and b is not None:
        keys = ("step", "loss", "grad_norm")
        check([[e[k] for k in keys] for e in a[0]] == [[e[k] for k in keys] for e in b[0]],
              f"unrepeated ids: logs differ: {b[0]} vs {a[0]}")
        diff = [n for n in a[1] if a[1][n].tobytes() != b[1].get(n, np.zeros(0)).tobytes()]
        check(not diff, f"unrepeated ids: weights not bit-identical: {diff[:4]}")
        print("unrepeated ids: bit-identical logs and weights on one rank")

    # the plan: one whole table fewer at the embedding's gradient
    vocab, seq = 16384, 16
    tied, twin = models(tmp, vocab, seq, 1)
    args = ["--no-weights", "--optimizer", "sgd", "--dim", "batch=1"]
    a, b = plan(twin, args), plan(tied, args)
    if a is not None and b is not None:
        table = vocab * 64 * 4
        logits = 1 * seq * vocab * 4
        live = a["live"]
        check("/Gather" in a["peak_origin"] and "grad" in a["peak_origin"],
              f"twin: peak at {a['peak_origin']}, not the lookup's gradient")
        check(live["workspace"] + live["gradients"] >= 2 * table,
              f"twin: {live} at the peak, not two whole tables of gradient")
        drop = a["peak_live"] - b["peak_live"]
        check(table - logits <= drop <= table,
              f"peak {a['peak_live']} -> {b['peak_live']}: {drop} bytes, not one table "
              f"({table}) less the logits' gradient ({logits})")
        print(f"plan, vocabulary {vocab}: peak {a['peak_live']} -> {b['peak_live']} bytes "
              f"({drop}; a table is {table}), now at {b['peak_origin']}")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
