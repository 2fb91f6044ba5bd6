"""bench_planner.py — how fast `shardc plan --train --auto` searches.

Figures printed (never fails on a time; `make bench` runs it), for GPTs of
Megatron-LM's shapes, shape-only (--no-weights: the weights are never
written), bf16 and AdamW:
  gpt_1p5b   samples/gpt_1p5b.onnx (48 layers, hidden 1600, seq 128) on
             h100-sxm:8x2, global batch 64 (no target);
  gpt_7b     32 layers, hidden 4096, 32 heads, seq 2048, on h100-sxm:8x8,
             global batch 512: target search < 0.2 s;
  gpt_175b   96 layers, hidden 12288, 96 heads, seq 2048, on
             h100-sxm:8x128 (1,024 GPUs), global batch 1536: target < 2 s.
For each, the median of N runs of: the search (every round of it: the
block model's candidates, enumerated, pruned, estimated), the block model
(import of the forward graph and its measurement), the exact evaluation
(compiling and predicting the chosen plan), the process's wall time; the
candidates evaluated and pruned; the chosen plan and the estimate's error
against the exact step; and the ratio of the search time to its target
(below 1: within it). A run where no plan fits still reports its times
(from shardc's closing note).

The 7B and 175B models come from samples/make_gpt_shapes.py when it is
there; else this script builds them with samples/make_samples.py's GPT-2
graph generator (GPT-2's vocabulary of 50,257, external weights not
written) into a temporary folder.

usage: bench_planner.py [--shardc build/shardc] [--runs N]
"""
import argparse
import json
import os
import re
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_inspect import run_capture, SRC  # noqa: E402

SHAPES = {
    "gpt_7b": dict(vocab=50257, n_positions=2048, n_embd=4096, n_head=32, n_layer=32, seq=2048),
    "gpt_175b": dict(vocab=50257, n_positions=2048, n_embd=12288, n_head=96, n_layer=96,
                     seq=2048),
}


def make_model(name, folder):
    path = os.path.join(folder, name + ".onnx")
    sys.path.insert(0, os.path.join(SRC, "samples"))
    import onnx
    from make_samples import build_gpt2_graph
    model, _ = build_gpt2_graph(SHAPES[name], external=name + ".weights")
    onnx.save(model, path)
    return path


NOTE = re.compile(r"(\d+) candidates evaluated, (\d+) pruned; block model ([\d.]+) s, "
                  r"search ([\d.]+) s, exact evaluation ([\d.]+) s")


def one(shardc, model, cluster, batch):
    cmd = [shardc, "plan", model, "--train", "--auto", "--cluster", cluster, "--global-batch",
           str(batch), "--precision", "bf16", "--optimizer", "adamw", "--json"]
    wall, _, rc, out, err = run_capture(cmd)
    if rc == 0:
        a = json.loads(out)["auto"]
        ch = a["chosen"]
        return dict(wall=wall, search=a["search_time_s"], model=a["block_model_time_s"],
                    exact=a["exact_time_s"], evaluated=a["candidates_evaluated"],
                    pruned=a["candidates_pruned"], chosen=ch["options"],
                    error=ch["estimate_error"],
                    step=ch["predicted"]["step_time_s"], fits=True)
    m = NOTE.search(err)
    if not m:
        return None
    return dict(wall=wall, evaluated=int(m.group(1)), pruned=int(m.group(2)),
                model=float(m.group(3)), search=float(m.group(4)), exact=float(m.group(5)),
                chosen="no plan fits: " + err.strip().splitlines()[-1][-300:], fits=False)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shardc", default=os.path.join(SRC, "build", "shardc"))
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    print("bench_planner: shardc plan --train --auto (bf16, AdamW), median of %d runs"
          % args.runs)
    with tempfile.TemporaryDirectory() as tmp:
        gen = os.path.join(SRC, "samples", "make_gpt_shapes.py")
        print("  models: %s" % ("samples/make_gpt_shapes.py" if os.path.exists(gen) else
                                "built here with make_samples.build_gpt2_graph (shape-only)"))
        cases = [("gpt_1p5b", os.path.join(SRC, "samples", "gpt_1p5b.onnx"), "h100-sxm:8x2", 64,
                  None),
                 ("gpt_7b", make_model("gpt_7b", tmp), "h100-sxm:8x8", 512, 0.2),
                 ("gpt_175b", make_model("gpt_175b", tmp), "h100-sxm:8x128", 1536, 2.0)]
        for name, model, cluster, batch, target in cases:
            runs = [one(args.shardc, model, cluster, batch) for _ in range(args.runs)]
            runs = [r for r in runs if r]
            if not runs:
                print("  %-9s failed" % name)
                continue
            med = {k: statistics.median(r[k] for r in runs)
                   for k in ("wall", "search", "model", "exact")}
            r = runs[0]
            print("  %-9s on %s, global batch %d: search %.4f s, block model %.4f s, exact "
                  "evaluation %.3f s, process %.3f s; %d evaluated, %d pruned"
                  % (name, cluster, batch, med["search"], med["model"], med["exact"],
                     med["wall"], r["evaluated"], r["pruned"]))
            if target:
                print("            search / target %.1f s: %.4f; (block model + search) / "
                      "target: %.4f" % (target, med["search"] / target,
                                        (med["search"] + med["model"]) / target))
            if r["fits"]:
                print("            chosen: %s; exact step %.4f s; estimate error %+.1f %%"
                      % (r["chosen"], r["step"], 100 * r["error"]))
            else:
                print("            %s" % r["chosen"])


if __name__ == "__main__":
    main()
