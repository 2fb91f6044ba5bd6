"""test_context_parallel.py — context parallelism (`--mesh cp=N`, ring
attention; docs/context-parallel.md) equals the single-rank run.

GPT-2 (a position embedding; its causal mask kept beside the causal flag)
and Llama (rotary embeddings, grouped kv heads, an exactly causal mask)
inference with seeded random token ids (the whole vocabulary), batch 2,
sequence 16, and vit_pool (no causal mask: a ViT without the class token,
16 patch tokens mean-pooled; seeded images uniform in [-1, 1)) at cp=2,
cp=4, tp=2 x cp=2 and cp=3 (16 tokens padded to 18), its pooling a
pending sum over cp (each rank's mean of its tokens scaled by 1/cp:
nothing computed whole; padded, a sum weighted 1/16 on the tokens and 0
on the padding), and vit (16 patches and the class token: 17 tokens, no
causal mask) at cp=2, cp=4, cp=8, tp=2 x cp=2, pp=2 x cp=2 and dp=2 x cp=2, its
sequence padded to the next multiple of cp (18, 20, 24) with the padding
rows' keys masked out in every ring step and the class token's selection
a sum weighted 1 on its row (a pending sum over cp):
  * `shardc run --mesh M` for M in cp=2, cp=4, tp=2 x cp=2, pp=2 x cp=2
    (GPT-2 and Llama also tp=2 x cp=2 with --sequence-parallel: the norms
    on each cp rank's tokens split again over tp, the row-parallel
    products' sums reduce-scattered onto them; GPT-2 also dp=2 x cp=2: the
    batch split over dp, the sequence over cp, nothing computed whole; GPT-2 and vit also cp=8: 16 tokens in 16
    chunks of one, vit's 17 padded to 24, 8 thread-ranks)
    writes logits of the single-rank run's dtype and shape, no NaN, within
    rtol 1e-4, atol 1e-5 of it (test_partition.py's tolerance: the ring
    merges each query row's softmax from blocks by log-sum-exp, a different
    order of the same sums; measured: at most 5e-7);
  * the attention really runs as a ring: GPT-2's partitioned graph
    (--print-after=localize) holds, at cp=N, 2 layers x 2 (keys, values) x
    (N - 1) steps shifted Send/Recv pairs and no whole attention;
  * vit's padding is stated by `plan --mesh cp=N` ("sequence 17 padded to
    18 for cp=2: 1 masked key") and every block of its ring reads its
    step's key mask (without the masks the logits move by 5e-2);
  * `shardc compile --mesh cp=2 -o DIR` writes an artifact (its programs'
    shifted Send/Recv in the bundle's JSON) that `shardc run DIR` runs equal
    to the single-rank run;
  * `shardc plan --mesh cp=N` reports the ring's Send bytes per rank equal
    to the formula of docs/context-parallel.md (sc_cp_ring_bytes): (N - 1)
    hops x batch x kv heads x S/N rows x (d + dv) x 4 bytes, per layer
    (GPT-2: 2 layers, 4 heads of 16);
  * what is not built is refused with a clear error, never a wrong answer:
    a causal model's sequence that does not divide into 2·cp chunks (GPT-2
    at cp=3: naming the lengths that do; padding is for attention without
    a causal mask). Training under cp: test_train_cp.py.

Environment: SHARDC, SC_SOURCE_DIR. Exit 0 on success, 1 on any failure.
"""
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import onnx

sys.path.insert(0, os.path.dirname(__file__))
from test_run_samples import make_inputs, compare, safe_name  # noqa: E402
from checks import check, failures  # noqa: E402

SHARDC = os.environ.get("SHARDC")
SRC = os.environ.get("SC_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
MESHES = {"gpt2": ["cp=2", "cp=4", "cp=8", "tp=2,cp=2", "pp=2,cp=2", "dp=2,cp=2",
                   "tp=2,cp=2 --sequence-parallel"],
          "llama": ["cp=2", "cp=4", "tp=2,cp=2", "pp=2,cp=2", "tp=2,cp=2 --sequence-parallel"],
          "vit_pool": ["cp=2", "cp=4", "tp=2,cp=2", "cp=3"],
          "vit": ["cp=2", "cp=4", "cp=8", "tp=2,cp=2", "pp=2,cp=2", "dp=2,cp=2"]}
# meshes that must warn of a fallback: mesh -> a substring of the warning
# (none: dp beside cp splits the batch and the sequence on their own dims)
FALLBACKS = {}
# what a model's cp run may compute whole (a warned fallback, correct):
# nothing (vit_pool's mean over the tokens is a pending sum over cp)
WHOLE = {}
BATCH = 2


def run(args):
    env = dict(os.environ)
    env.setdefault("SHARDC_COMM_TIMEOUT", "60")
    return subprocess.run([SHARDC] + args, capture_output=True, text=True, timeout=600, env=env)


def logits(d):
    return np.load(os.path.join(d, safe_name("logits") + ".npy"))


def model_run(tmp, name):
    """(the model, the base arguments of `run` with its seeded inputs)"""
    path = os.path.join(SRC, "samples", name + ".onnx")
    model = onnx.load(path, load_external_data=False)
    args = ["run", path, "--dim", f"batch={BATCH}"]
    for k, v in make_inputs(model, BATCH, 41).items():
        feed = os.path.join(tmp, f"{name}_{safe_name(k)}.npy")
        np.save(feed, v)
        args += ["--input", f"{k}={feed}"]
    return model, args


def test_model(tmp, name, meshes):
    _, base = model_run(tmp, name)
    one = os.path.join(tmp, name + "_one")
    os.makedirs(one)
    r = run(base + ["--output-dir", one])
    if not check(r.returncode == 0, f"{name} one rank: exit {r.returncode}: {r.stderr[-2000:]}"):
        return
    want = logits(one)
    for mesh in meshes:
        tag = f"{name} --mesh {mesh}"
        d = os.path.join(tmp, name + "_" + re.sub(r"[^a-z0-9]+", "_", mesh))
        os.makedirs(d)
        r = run(base + ["--output-dir", d, "--mesh"] + mesh.split())
        if not check(r.returncode == 0, f"{tag}: exit {r.returncode}: {r.stderr[-2000:]}"):
            continue
        compare(f"{tag} logits", logits(d), want)
        warned = [ln for ln in r.stderr.splitlines()
                  if "warning" in ln and "cp_zigzag'" in ln and "logits" not in ln]
        want_fb = FALLBACKS.get(mesh)
        check((want_fb is None and not warned) or
              (want_fb is not None and any(want_fb in ln for ln in warned)),
              f"{tag}: fallback warnings {warned}, want {want_fb}")
        # (the outputs' inverse permutation is gathered by design)
        whole = [ln for ln in r.stderr.splitlines()
                 if "computes the node whole" in ln and "logits" not in ln]
        check(all(any(w in ln for w in WHOLE.get(name, [])) for ln in whole),
              f"{tag}: nodes computed whole {whole}, allowed {WHOLE.get(name, [])}")
        print(f"ok: {tag}")


def test_rings(tmp):
    _, base = model_run(tmp, "gpt2")
    for n in (2, 4):
        r = run(base + ["--output-dir", tmp, "--mesh", f"cp={n}", "--print-after=localize"])
        ir = r.stdout + r.stderr
        shifted = ir.count("shift = 1")
        check(r.returncode == 0 and shifted == 2 * 2 * 2 * (n - 1),
              f"cp={n}: {shifted} shifted Send/Recv in the partitioned graph, "
              f"want {2 * 2 * 2 * (n - 1)}")
        whole = [ln for ln in ir.splitlines() if "= FusedAttention(" in ln and "/ring/" not in ln]
        check(not whole, f"cp={n}: an attention left whole: {whole[:1]}")


def test_padding(tmp):
    """vit's 17 tokens padded to the next multiple of cp: `plan` states it,
    and every block of the ring (at cp=N, 2 layers x N steps) reads its
    step's key mask"""
    _, base = model_run(tmp, "vit")
    path = os.path.join(SRC, "samples", "vit.onnx")
    for n, padded in ((2, 18), (4, 20)):
        r = run(["plan", path, "--dim", f"batch={BATCH}", "--mesh", f"cp={n}"])
        want = (f"sequence 17 padded to {padded} for cp={n}: {padded - 17} masked "
                f"key{'s' if padded - 17 > 1 else ''}")
        check(r.returncode == 0 and want in r.stdout,
              f"vit plan cp={n}: want '{want}': {r.stdout[-600:]} {r.stderr[-600:]}")
        r = run(base + ["--output-dir", tmp, "--mesh", f"cp={n}", "--print-after=localize"])
        ir = r.stdout + r.stderr
        blocks = [ln for ln in ir.splitlines() if "= FusedAttention(" in ln and "/ring/" in ln]
        masked = [ln for ln in blocks if "/ring/key_mask_" in ln]
        check(r.returncode == 0 and len(blocks) == 2 * n and masked == blocks,
              f"vit cp={n}: {len(masked)} of {len(blocks)} ring blocks masked, want {2 * n}")
    print("ok: vit padded (plan and the ring's key masks)")


def test_artifact(tmp):
    _, base = model_run(tmp, "gpt2")
    art, one, got = (os.path.join(tmp, k) for k in ("art", "art_one", "art_run"))
    os.makedirs(one)
    os.makedirs(got)
    feed = base[base.index("--input"):base.index("--input") + 2]
    r1 = run(base + ["--output-dir", one])
    r2 = run(["compile", base[1], "--dim", f"batch={BATCH}", "--mesh", "cp=2", "-o", art])
    r3 = run(["run", art, "--output-dir", got] + feed) if r2.returncode == 0 else r2
    if check(r1.returncode == 0 and r3.returncode == 0,
             f"compile --mesh cp=2 and run it: {r2.stderr[-1000:]} {r3.stderr[-1000:]}"):
        compare("gpt2 artifact cp=2 logits", logits(got), logits(one))
        print("ok: gpt2 compile --mesh cp=2, run the artifact")


def test_ring_bytes(tmp):
    path = os.path.join(SRC, "samples", "gpt2.onnx")
    layers, kvh, d, seq = 2, 4, 16, 16
    for n in (2, 4):
        r = run(["plan", path, "--dim", f"batch={BATCH}", "--mesh", f"cp={n}"])
        sends = [ln.split() for ln in r.stdout.splitlines() if ln.split()[1:3] == ["Send", "cp"]]
        want = (n - 1) * BATCH * kvh * (seq // n) * (d + d) * 4 * layers
        got = float(sends[0][4]) * 1024 if sends and sends[0][5] == "KiB" else None
        check(r.returncode == 0 and got == want,
              f"plan cp={n}: the ring's Send bytes {sends}, want {want} (the formula)")


def test_refusals(tmp):
    _, base = model_run(tmp, "gpt2")
    # a causal model's sequence is not padded: one that does not divide
    # into 2·cp chunks is refused
    cases = [(base + ["--mesh", "cp=3"],
              "sequence length 16 does not divide into 2·cp = 6 chunks (cp=3); "
              "lengths that do: 12 or 18")]
    for args, needle in cases:
        r = run(args + ["--output-dir", tmp])
        check(r.returncode == 2 and needle in r.stderr,  # a usage error, as dp's batch
              f"{args[1:]}: exit {r.returncode}, want a refusal with '{needle}': "
              f"{r.stderr[-1000:]}")


def main():
    if not SHARDC:
        print("SHARDC is not set")
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        for name, meshes in MESHES.items():
            test_model(tmp, name, meshes)
        test_rings(tmp)
        test_padding(tmp)
        test_ring_bytes(tmp)
        test_artifact(tmp)
        test_refusals(tmp)
    if failures:
        print(f"{len(failures)} failures")
        return 1
    print("context-parallel runs equal the single-rank run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
