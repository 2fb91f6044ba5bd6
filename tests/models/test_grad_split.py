"""test_grad_split.py — a large tied gradient reduce-scattered part by part,
in chunks of rows (passes/partition/bucket.c, sc_partition_split_grad_sums;
docs/training.md, ZeRO-3).

A shape-only GPT (samples/make_samples.py's build_gpt2_graph: d 512, 1
layer, sequence 16) with a vocabulary of 16,383, which 2 does not divide, so
fsdp splits its tied embedding [16383, 512] (33.5 MB, above the 25 MiB
bucket cap) along its columns. The embedding's gradient is the LM head's
product plus the lookup's scatter-add; the LM head's part is made at the
start of the backward, the lookup's at its end.

  - the plan (`shardc plan --train --mesh fsdp=2`, the IR after the last
    pass, fuse): no whole [16383, 512] gradient is ever made (no such value pending
    over fsdp); the LM head's part is 2 products of rows (8,192 and 8,191),
    each reduce-scattered along dim 1 before the block's backward (before any
    gradient of transformer.h.0); the lookup's part 2 scatter-adds into
    8,193 and 8,192 rows (one row where the others' updates land), each
    reduce-scattered; the step reduce-scatters the embedding twice (its bytes
    once more, and the 2 extra rows);
  - numbers: 2 AdamW steps from the same --init and --seed on one rank, at
    fsdp=2, fsdp=2 --zero 2 and dp=2 x fsdp=2 (HSDP) give losses and
    gradient norms within rtol 2e-5 of one rank's (test_train_dist.py's
    tolerance: the sums run in other orders), finite.
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import shutil

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "samples"))
from checks import check, finish  # noqa: E402

SHARDC = os.environ.get("SHARDC")
VOCAB, D, SEQ, BATCH = 16383, 512, 16, 4


def run(args, timeout=600):
    return subprocess.run([SHARDC] + args, capture_output=True, text=True, timeout=timeout)


def main():
    if not SHARDC:
        print("SHARDC is not set")
        return 1
    import onnx
    from make_samples import build_gpt2_graph
    tmp = tempfile.mkdtemp(prefix="sc_grad_split_")
    model, _ = build_gpt2_graph(dict(vocab=VOCAB, n_positions=SEQ, n_embd=D, n_head=D // 64,
                                     n_layer=1, seq=SEQ), external="absent.weights")
    path = os.path.join(tmp, "gpt_shapes.onnx")
    onnx.save(model, path)
    rng = np.random.default_rng(11)
    ids, lab = os.path.join(tmp, "ids.npy"), os.path.join(tmp, "lab.npy")
    np.save(ids, rng.integers(0, VOCAB, (BATCH, SEQ)).astype(np.int64))
    np.save(lab, rng.integers(0, VOCAB, (BATCH, SEQ)).astype(np.int64))

    # the plan: the IR after the last pass
    p = run(["plan", path, "--train", "--no-weights", "--dim", f"batch={BATCH}", "--mesh",
             "fsdp=2", "--print-after=all"])
    if check(p.returncode == 0, f"plan: {p.stderr[-800:]}"):
        ir = p.stderr[p.stderr.rfind("// ----- IR after"):]
        lines = ir.splitlines()
        whole = [ln for ln in lines if re.search(rf"f32\[{VOCAB},{D}\] shard<\[_,_\] partial", ln)]
        check(not whole, f"a whole gradient of the embedding is made: {whole[:2]}")
        early = [k for k, ln in enumerate(lines) if "= ReduceScatter(" in ln and "/early/" in ln]
        late = [k for k, ln in enumerate(lines) if "= ReduceScatter(" in ln and "/late/" in ln]
        rows = [re.search(r": f32\[(\d+),", lines[k]) for k in early + late]
        got = [int(m.group(1)) if m else -1 for m in rows]
        # each piece is [rows, 256]: the LM head's chunks, then the lookup's with one row more
        check(got == [8192, 8191, 8193, 8192],
              f"reduce-scattered chunks' rows {got}, want [8192, 8191, 8193, 8192]")
        first_block = next((k for k, ln in enumerate(lines) if "%grad:transformer.h.0." in ln),
                           len(lines))
        check(len(early) == 2 and max(early) < first_block,
              f"the LM head's chunks at lines {early}, the block's first gradient at {first_block}")
        gemms = [ln for ln in lines if "/early/" in ln and "= Gemm(" in ln]
        check(len(gemms) == 2 and all(f"f32[{r},{D}]" in g for r, g in zip((8192, 8191), gemms)),
              f"the LM head's product by rows: {gemms}")
    p = run(["plan", path, "--train", "--no-weights", "--dim", f"batch={BATCH}", "--mesh",
             "fsdp=2"])
    m = re.search(r"ReduceScatter\s+fsdp\s+2\s+(\d+)\s+\d+\s+(\d+)", p.stdout)
    emb = VOCAB * D * 4
    if check(p.returncode == 0 and m, f"plan's collectives: {p.stdout[-800:]} {p.stderr[-400:]}"):
        # every parameter once (4 bytes an element), the embedding once more
        # and the lookup's 2 chunks' extra rows
        params = int(re.search(r"([\d,]+) parameters", p.stdout).group(1).replace(",", ""))
        want = 4 * params + emb + 2 * D * 4
        check(int(m.group(2)) == want, f"reduce-scattered {m.group(2)} bytes, want {want}")

    # the numbers
    base = [path, "--no-weights", "--init", "*=normal:0.02", "--seed", "5", "--dim",
            f"batch={BATCH}", "--data", f"input_ids={ids}", "--labels", lab, "--steps", "2",
            "--optimizer", "adamw", "--quiet"]
    ref = None
    for k, mesh in enumerate([[], ["--mesh", "fsdp=2"], ["--mesh", "fsdp=2", "--zero", "2"],
                              ["--mesh", "dp=2,fsdp=2"]]):
        what = " ".join(mesh) or "one rank"
        log = os.path.join(tmp, f"log{k}.json")
        p = run(["train"] + base + mesh + ["--log-json", log])
        if not check(p.returncode == 0, f"{what}: {p.stderr[-800:]}"):
            continue
        rows = [json.loads(line) for line in open(log)]
        got = [(r.get("loss"), r.get("grad_norm")) for r in rows]
        flat = [x for pair in got for x in pair]
        if not check(len(got) == 2 and all(x is not None and np.isfinite(x) for x in flat),
                     f"{what}: losses and norms {got}"):
            continue
        if ref is None:
            ref = flat
            continue
        rel = max(abs(a - b) / abs(b) for a, b in zip(flat, ref))
        print(f"{what:24s} loss/norm rel diff {rel:.2e}")
        check(rel <= 2e-5, f"{what}: {flat} against one rank's {ref}")
    shutil.rmtree(tmp, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
