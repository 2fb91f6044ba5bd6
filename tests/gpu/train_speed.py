"""train_speed.py — run-all's `train-speed` section: shardc's training step
against PyTorch's on the same GPU, the same model, weights and batches
(docs/cuda-backend.md, "Training speed against PyTorch").

For each model (samples/make_llama.py; `--tiny`, and always on the emulated
GPU, their tiny configs at batch 2):

  gpt2-small   12 layers, d 768, 12 heads, vocab 50257, seq 1024, batch 8
  llama-1p3b   d 2048, 24 layers, 16 heads, SwiGLU 5632, RMSNorm, rotary,
               vocab 32000, seq 2048, batch 4, untied head

the graph and its seeded weights are written into the run's scratch folder
(external data, never kept), then trained for warm-up + N steps on seeded
random token ids (the labels the ids shifted by one; step i takes rows
(i-1)·B … i·B-1 on both sides) by:

  shardc       `shardc train --device cuda --precision bf16 --optimizer adamw`,
               --recompute none (and selective for the Llama), and for the Llama
               the same with --precision fp8 (the row "shardc (fp8)":
               docs/training.md "FP8"; its tokens/s against bf16's); the step's
               wall time is its --log-json time_ms (the host's clock around
               the step: the batch in, the step, the loss and gradient norm
               read back)
  eager        tests/gpu/torch_ref.py: the same model in PyTorch eager,
               autocast(bfloat16), F.scaled_dot_product_attention, fused
               AdamW; the host's clock from before the batch's copy to after
               loss.item() and torch.cuda.synchronize()
  compile      the same through torch.compile; skipped, with the reason,
               when it fails or passes --compile-budget seconds

Figures per model and variant: the median step over the N steps after the
warm-up, tokens/s (B·S over it), MFU (make_llama.model_flops: 6·N_mm·tokens
+ 12·L·d·s·tokens, over the bf16 peak of the h200 cluster preset,
samples/clusters/h200.json), peak device memory (shardc: the arena plus the
weights' allocation, SHARDC_CUDA_VERBOSE's line, and the device memory the
session took; PyTorch: torch.cuda.max_memory_allocated and
max_memory_reserved), shardc's tokens/s over each PyTorch variant's, the
planner's predicted step for h200:1x1, and whether the first 3 losses agree
(|shardc − PyTorch| ≤ 1e-2 · |PyTorch|: bf16 keeps 8 significant bits, a
relative 2^-9 per rounding, and the two sides round in different places
(autocast's op lists against shardc's casts around each product) and sum
in different orders; the mean over B·S tokens averages those errors, so a
wrong model or weight is off by far more). Targets, printed as pass/miss
(information, never a failure): tokens/s ≥ 1.2× eager and ≥ 1.0× compile,
MFU ≥ 45 % on the 1.3B, peak memory ≤ PyTorch's. The fp8 row is set
against shardc's own bf16 row (--recompute none): tokens/s ratio and the
first losses' largest relative difference, information only (FP8 rounds
the products' operands to 3 or 2 mantissa bits: its losses are not held to
the bf16 tolerance, and it is not compared with PyTorch's bf16 runs).
Failures: a shardc run that fails, a non-finite loss, PyTorch eager
failing, the losses disagreeing.

Written to OUT/train-speed.json (every figure) and OUT/train-speed.md
(the table), OUT being run_all.py's --out, rewritten as each model is
done; a model, or a model's variant (--train-variants picks them: none,
selective, fp8, eager, compile), measured by an earlier run into the same
OUT stays there unless measured again, and an earlier variant is compared
with this run's as if measured with them (tests/gpu/device-check.sh
measures in several commands, the most wanted rows first).
"""
import json
import math
import os
import re
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(SRC, "samples"))

import make_llama  # noqa: E402

# model, batch, shardc's runs: (--recompute, --precision); the row's tag is
# the recompute setting for bf16, the precision otherwise
LLAMA_RUNS = (("none", "bf16"), ("selective", "bf16"), ("none", "fp8"))
REAL = [("gpt2-small", 8, (("none", "bf16"),)), ("llama-1p3b", 4, LLAMA_RUNS)]
TINY = [("gpt2-tiny", 2, (("none", "bf16"),)), ("llama-tiny", 2, LLAMA_RUNS)]
LR = 3e-4
LOSS_STEPS, LOSS_RTOL = 3, 1e-2
TARGETS = {"eager": 1.2, "compile": 1.0}   # shardc's tokens/s over the variant's
MFU_TARGET, MFU_MODEL = 0.45, "llama-1p3b"


def bf16_peak():
    """The bf16 peak FLOP/s of the h200 preset (samples/clusters/h200.json)."""
    with open(os.path.join(SRC, "samples", "clusters", "h200.json")) as f:
        return float(json.load(f)["gpu"]["peak_flops"]["bf16"])


def write_data(folder, name, c, batch, steps, seed=1234):
    """Seeded token ids [steps·B, S] and their labels (the next token): a
    new batch every step."""
    import numpy as np
    rng = np.random.default_rng(seed)
    t = rng.integers(0, c["vocab"], (steps * batch, c["seq"] + 1), dtype=np.int64)
    ids, labels = os.path.join(folder, name + ".ids.npy"), os.path.join(folder, name + ".labels.npy")
    np.save(ids, t[:, :-1])
    np.save(labels, t[:, 1:])
    return ids, labels


def median_after(values, warmup):
    rest = values[warmup:]
    return statistics.median(rest) if rest else None


def parse_verbose(stderr):
    """(arena, weights, taken) bytes of SHARDC_CUDA_VERBOSE's line, or Nones."""
    m = re.search(r"arena (\d+) bytes \(the plan's \d+\), weights (\d+) bytes; device memory "
                  r"taken since the context: (-?\d+)", stderr)
    return tuple(int(x) for x in m.groups()) if m else (None, None, None)


def json_lines(text):
    out = []
    for ln in text.splitlines():
        ln = ln.strip()
        if ln.startswith("{"):
            try:
                out.append(json.loads(ln))
            except ValueError:
                pass
    return out


def run_tag(recompute, precision):
    """A shardc row's tag: the recompute setting in bf16, else the precision."""
    return recompute if precision == "bf16" else precision


def step_options(batch, recompute, precision):
    """The options that shape shardc's training step: `train --device cuda`
    here, and `compile --train --target cuda` in make_cubins."""
    return ["--precision", precision, "--optimizer", "adamw", "--dim", f"batch={batch}",
            "--recompute", recompute]


def parse_kernels(stderr):
    """What SHARDC_CUDA_VERBOSE says of the kernels: the image loaded
    ("cubin": NVRTC's, "cached cubin": SHARDC_CUDA_CACHE's, "emulated"...)
    and, with SHARDC_CUDA_CACHE set, whether it holds the program's CUBIN."""
    m = re.search(r"\(sm_\d+\w*\), kernels ([\w ]+?), GEMM engine", stderr)
    c = re.search(r"kernels: the CUBIN of CUDA C [0-9a-f]+ is ((?:not )?in SHARDC_CUDA_CACHE)",
                  stderr)
    return (m.group(1) if m else None), (c.group(1) if c else None)


def run_shardc(ctx, model, c, batch, recompute, precision, ids, labels, steps, tmp):
    tag = run_tag(recompute, precision)
    log = os.path.join(tmp, f"{c['name']}.{tag}.log.jsonl")
    if os.path.exists(log):     # an earlier run's, in a --train-scratch folder
        os.remove(log)
    cmd = ([ctx.shardc, "train", model, "--device", "cuda"] +
           step_options(batch, recompute, precision) +
           ["--data", f"input_ids={ids}", "--labels", labels, "--steps", str(steps),
            "--lr", str(LR), "--log-json", log, "--log-every", str(10 ** 6)])
    t0 = time.time()
    r = ctx.sh(cmd, {"SHARDC_CUDA_VERBOSE": "1"}, timeout=ctx.cmd_timeout)
    wall = time.time() - t0
    rows = json_lines(open(log).read()) if os.path.exists(log) else []
    arena, weights, taken = parse_verbose(r.stderr)
    inplace = re.search(r"(\d+) of (\d+) state tensors updated in place", r.stdout)
    image, cached = parse_kernels(r.stderr)
    return dict(kernels=image, cubin_cache=cached,state_in_place=[int(x) for x in inplace.groups()] if inplace else None,side="shardc", variant=f"shardc ({tag})", precision=precision,
                recompute=recompute, rc=r.returncode,
                losses=[x["loss"] for x in rows], times_ms=[x["time_ms"] for x in rows],
                peak_bytes=arena + weights if arena is not None else None,
                peak_detail=f"arena {arena} + weights {weights}; device memory taken {taken}"
                if arena is not None else "no SHARDC_CUDA_VERBOSE line",
                taken_bytes=taken, wall_s=wall, error=r.stderr.strip()[-400:]
                if r.returncode else "")


def run_torch(ctx, model, batch, variant, ids, labels, steps):
    cmd = [ctx.python, os.path.join(HERE, "torch_ref.py"), model, "--ids", ids, "--labels",
           labels, "--batch", str(batch), "--steps", str(steps), "--lr", str(LR),
           "--variant", variant, "--device", ctx.torch_device]
    budget = ctx.compile_budget if variant == "compile" else ctx.cmd_timeout
    t0 = time.time()
    r = ctx.sh(cmd, timeout=budget)
    wall = time.time() - t0
    rows = json_lines(r.stdout)
    steps_ = [x for x in rows if "step" in x]
    done = next((x for x in rows if x.get("done")), {})
    err = r.stderr.strip()
    return dict(side="torch", variant=variant, rc=r.returncode,
                losses=[x["loss"] for x in steps_], times_ms=[x["time_ms"] for x in steps_],
                peak_bytes=done.get("max_memory_allocated"),
                peak_detail=f"max_memory_allocated {done.get('max_memory_allocated')}, "
                            f"max_memory_reserved {done.get('max_memory_reserved')}",
                reserved_bytes=done.get("max_memory_reserved"), torch=done.get("torch"),
                device=done.get("device"), wall_s=wall, budget_s=budget,
                timed_out=r.returncode == 124,
                no_torch="No module named 'torch'" in err,
                error=err[-400:] if r.returncode else "")


def host_state(res):
    """What the run said of its state (`shardc train`'s memory line): on a
    device without a host arena the parameters and optimizer state that are
    not updated in place go to the device and back every step, inside the
    step's time."""
    k = res.get("state_in_place")
    if not k:
        return ""
    return (f"; {k[0]} of {k[1]} state tensors updated in place" +
            (f" (the other {k[1] - k[0]} are copied in and out through host memory every step)"
             if k[0] < k[1] else ""))


def kernels_said(res):
    """The kernels' origin (the kit's CUBIN, or compiled by NVRTC in the run)."""
    if not res.get("kernels"):
        return ""
    return (f"; kernels {res['kernels']}" +
            (f", the program's CUBIN {res['cubin_cache']}" if res.get("cubin_cache") else ""))


def fmt_bytes(b):
    if b is None:
        return "—"
    return f"{b / 2**30:.2f} GiB" if b >= 2**30 else f"{b / 2**20:.1f} MiB"


def finish_figures(res, c, batch, warmup, peak):
    """Median step, tokens/s and MFU of one variant's run (in place)."""
    med = median_after(res["times_ms"], warmup)
    res["median_ms"] = med
    res["steps_measured"] = max(0, len(res["times_ms"]) - warmup)
    tokens = batch * c["seq"]
    flops, _ = make_llama.model_flops(c, tokens)
    res["tokens_per_s"] = tokens / (med / 1e3) if med else None
    res["mfu"] = flops / (med / 1e3) / peak if med else None


def losses_agree(a, b):
    """(agree, worst relative difference) over the first LOSS_STEPS losses."""
    n = min(LOSS_STEPS, len(a), len(b))
    if n < LOSS_STEPS:
        return False, None
    worst = 0.0
    for x, y in zip(a[:n], b[:n]):
        if x is None or y is None or not (math.isfinite(x) and math.isfinite(y)):
            return False, float("inf")
        worst = max(worst, abs(x - y) / abs(y))
    return worst <= LOSS_RTOL, worst


def predicted(ctx, model, batch, recompute, precision="bf16"):
    """The planner's step for h200:1x1 (datasheet peaks): (seconds, mfu)."""
    r = ctx.sh([ctx.shardc, "plan", model, "--no-weights", "--train", "--dim",
                f"batch={batch}", "--optimizer", "adamw", "--precision", precision,
                "--recompute",
                recompute, "--mesh", "dp=1", "--cluster", "h200:1x1", "--json"], timeout=300)
    try:
        p = json.loads(r.stdout)["predicted"]
        return p["step_time_s"], p["mfu"]
    except (ValueError, KeyError, TypeError):
        return None, None


class Context:
    """What the section needs from run_all.py: its command runner (with the
    deadline), the record function, the binaries and the options."""

    def __init__(self, **kw):
        self.__dict__.update(kw)


def run(ctx, tmp):
    models = TINY if ctx.tiny else REAL
    if ctx.models:
        want = set(ctx.models.split(","))
        models = [m for m in models if m[0] in want]
    warmup = ctx.warmup
    steps = warmup + ctx.steps
    peak = bf16_peak()
    folder = getattr(ctx, "scratch", None) or os.path.join(tmp, "train-speed")
    os.makedirs(folder, exist_ok=True)
    report = {"emulated": ctx.emulated, "tiny": ctx.tiny, "peak_bf16_flops": peak,
              "peak_source": "samples/clusters/h200.json gpu.peak_flops.bf16",
              "flops": "6*N_mm*tokens + 12*L*d*s*tokens (samples/make_llama.py model_flops)",
              "loss_check": f"first {LOSS_STEPS} losses, |shardc - torch| <= {LOSS_RTOL} * |torch|",
              "warmup": warmup, "steps": ctx.steps, "lr": LR, "models": []}
    want = set(ctx.variants.split(",")) if getattr(ctx, "variants", None) else None
    earlier = earlier_models(ctx.out, report)
    for name, batch, runs in models:
        if want is not None:
            runs = tuple(r for r in runs if run_tag(*r) in want)
        if ctx.past_deadline():
            ctx.record(f"train-speed.{name}", "skip", "past the --deadline")
            continue
        c = dict(make_llama.MODELS[name], name=name)
        t0 = time.time()
        path, reused = model_in(folder, name)
        ids, labels = write_data(folder, name, c, batch, steps)
        flops, n_mm = make_llama.model_flops(c, batch * c["seq"])
        n_params = sum(math.prod(s) for _, s in make_llama.param_shapes(c))
        ctx.record(f"train-speed.{name}.model", "info",
                   f"{n_params:,} parameters ({n_mm:,} in matrix products), batch {batch} x "
                   f"{c['seq']}, {flops / 1e12:.4g} TFLOP a step; "
                   f"{'graph and weights reused, data' if reused else 'graph, weights and data'}"
                   f" written in {time.time() - t0:.1f} s")
        m = {"model": name, "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
             "batch": batch, "seq": c["seq"], "parameters": n_params,
             "n_mm": n_mm, "flops_per_step": flops, "variants": []}
        shardc_runs, torch_runs = [], {}
        for rc, precision in runs:
            if ctx.past_deadline():
                break
            res = run_shardc(ctx, path, c, batch, rc, precision, ids, labels, steps, folder)
            finish_figures(res, c, batch, warmup, peak)
            res["predicted_s"], res["predicted_mfu"] = predicted(ctx, path, batch, rc,
                                                                 precision)
            finite = bool(res["losses"]) and all(
                x is not None and math.isfinite(x) for x in res["losses"])
            ok = res["rc"] == 0 and len(res["losses"]) == steps and finite
            res["ok"] = ok
            pred = (f"; planner (h200 datasheet) {res['predicted_s'] * 1e3:.4g} ms"
                    if res["predicted_s"] else "")
            ctx.record(f"train-speed.{name}.shardc.{run_tag(rc, precision)}",
                       "pass" if ok else "fail",
                       f"median {res['median_ms']:.2f} ms a step ({res['steps_measured']} after "
                       f"{warmup}), {res['tokens_per_s']:.0f} tokens/s, MFU "
                       f"{res['mfu'] * 100:.3g} %, peak {fmt_bytes(res['peak_bytes'])} "
                       f"({res['peak_detail']}); losses {res['losses'][:LOSS_STEPS]}; "
                       f"{res['wall_s']:.0f} s in all{pred}{host_state(res)}"
                       f"{kernels_said(res)}"
                       if ok and res["median_ms"] else
                       f"rc {res['rc']}, {len(res['losses'])} of {steps} steps, losses "
                       f"{res['losses'][:5]}: {res['error']}")
            m["variants"].append(res)
            if ok:
                shardc_runs.append(res)
        for variant in ("eager", "compile"):
            if want is not None and variant not in want:
                continue
            if ctx.past_deadline():
                break
            if ctx.torch_device is None:
                ctx.record(f"train-speed.{name}.{variant}", "skip", ctx.torch_why)
                m["variants"].append(dict(side="torch", variant=variant, error=ctx.torch_why))
                continue
            res = run_torch(ctx, path, batch, variant, ids, labels, steps)
            finish_figures(res, c, batch, warmup, peak)
            m["variants"].append(res)
            ok = res["rc"] == 0 and len(res["losses"]) == steps
            res["ok"] = ok
            if res["no_torch"]:
                ctx.record(f"train-speed.{name}.{variant}", "skip", "PyTorch is not installed")
                continue
            if not ok:
                why = (f"past its time budget of {res['budget_s']} s ({len(res['losses'])} "
                       f"steps done)" if res["timed_out"] else f"rc {res['rc']}: {res['error']}")
                # torch.compile is skipped with its reason; eager failing is a failure
                ctx.record(f"train-speed.{name}.{variant}",
                           "skip" if variant == "compile" else "fail",
                           f"PyTorch {variant}: {why}")
                continue
            torch_runs[variant] = res
            first = res["times_ms"][0] if res["times_ms"] else 0
            ctx.record(f"train-speed.{name}.{variant}", "info",
                       f"PyTorch {res['torch']} {variant} on {res['device']}: median "
                       f"{res['median_ms']:.2f} ms a step, {res['tokens_per_s']:.0f} tokens/s, "
                       f"MFU {res['mfu'] * 100:.3g} %, peak {fmt_bytes(res['peak_bytes'])} "
                       f"({res['peak_detail']}); first step {first / 1e3:.1f} s; losses "
                       f"{res['losses'][:LOSS_STEPS]}")
        keep_earlier(earlier.get(name), m, shardc_runs, torch_runs)
        compare(ctx, name, shardc_runs, torch_runs, m)
        report["models"].append(m)
        write_report(ctx.out, report)   # each model's figures kept as soon as measured
    write_report(ctx.out, report)
    ctx.record("train-speed.files", "info",
               f"{os.path.join(ctx.out, 'train-speed.json')}, "
               f"{os.path.join(ctx.out, 'train-speed.md')}")


def model_in(folder, name):
    """(folder/NAME.onnx, reused): the graph and its weights, written, or an
    earlier run's in the same folder (--train-scratch) when it finished
    writing them (NAME.written, made last): the 1.3B's 5.5 GB of weights took
    105 s to write on the development machine."""
    done = os.path.join(folder, name + ".written")
    if os.path.exists(done):
        return os.path.join(folder, name + ".onnx"), True
    path = make_llama.write_model(name, folder, seed=0)
    open(done, "w").close()
    return path, False


def earlier_models(out, report):
    """The models of an earlier OUT/train-speed.json of the same kind (emulated,
    tiny), by name: {} when there is none."""
    try:
        with open(os.path.join(out, "train-speed.json")) as f:
            old = json.load(f)
        if (old.get("emulated"), old.get("tiny")) != (report["emulated"], report["tiny"]):
            return {}
        return {m["model"]: m for m in old.get("models", [])}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def keep_earlier(old, m, shardc_runs, torch_runs):
    """The variants of a model that an earlier run into the same OUT measured
    and this one did not (tests/gpu/device-check.sh measures a model's
    variants in several commands, the most wanted first): kept in the
    model's rows, and compared with this run's as if measured with them."""
    if not old or old.get("batch") != m["batch"]:
        return
    mine = {v["variant"] for v in m["variants"]}
    for v in old.get("variants", []):
        if v["variant"] in mine:
            continue
        m["variants"].append(v)
        if not v.get("ok"):
            continue
        if v["side"] == "shardc":
            shardc_runs.append(v)
        else:
            torch_runs[v["variant"]] = v
    # shardc's rows in the order of the model's runs, then PyTorch's
    order = {"shardc (none)": 0, "shardc (selective)": 1, "shardc (fp8)": 2, "eager": 3,
             "compile": 4}
    m["variants"].sort(key=lambda v: order.get(v["variant"], 5))
    shardc_runs.sort(key=lambda v: order.get(v["variant"], 5))


def compare(ctx, name, shardc_runs, torch_runs, m):
    """shardc's ratios to each PyTorch variant, the loss agreement (a check)
    and the targets (information)."""
    m["comparisons"] = []
    bf16 = next((s for s in shardc_runs if s["precision"] == "bf16" and
                 s["recompute"] == "none"), None)
    for s in shardc_runs:
        tag = s["variant"].split("(")[1].rstrip(")")
        if s["precision"] != "bf16":
            compare_precision(ctx, name, s, bf16, m)
            continue
        for variant, t in torch_runs.items():
            ratio = s["tokens_per_s"] / t["tokens_per_s"] if t["tokens_per_s"] else None
            agree, worst = losses_agree(s["losses"], t["losses"])
            mem = (s["peak_bytes"] <= t["peak_bytes"]
                   if s["peak_bytes"] is not None and t["peak_bytes"] is not None else None)
            m["comparisons"].append(dict(shardc=s["variant"], torch=variant, ratio=ratio,
                                         losses_agree=agree, loss_rel_diff=worst,
                                         memory_le=mem))
            ctx.record(f"train-speed.{name}.{tag}.vs.{variant}.losses",
                       "pass" if agree else "fail",
                       f"first {LOSS_STEPS} losses: shardc {s['losses'][:LOSS_STEPS]}, PyTorch "
                       f"{t['losses'][:LOSS_STEPS]}, largest relative difference "
                       f"{worst if worst is None else f'{worst:.2e}'} (tolerance {LOSS_RTOL:g})",
                       rel_diff=worst)
            want = TARGETS[variant]
            line = (f"tokens/s {ratio:.2f}x PyTorch {variant} (target >= {want:g}x: "
                    f"{'pass' if ratio >= want else 'miss'}); peak memory "
                    f"{fmt_bytes(s['peak_bytes'])} against {fmt_bytes(t['peak_bytes'])} "
                    f"(target <=: {'pass' if mem else 'miss' if mem is not None else '?'})"
                    if ratio is not None else "no figure")
            ctx.record(f"train-speed.{name}.{tag}.vs.{variant}", "info", line, ratio=ratio)
        if name == MFU_MODEL and s["mfu"] is not None:
            ctx.record(f"train-speed.{name}.{tag}.mfu", "info",
                       f"MFU {s['mfu'] * 100:.1f} % (target >= {MFU_TARGET * 100:.0f} %: "
                       f"{'pass' if s['mfu'] >= MFU_TARGET else 'miss'})", mfu=s["mfu"])


def compare_precision(ctx, name, s, bf16, m):
    """A shardc row in another precision (fp8) against shardc's bf16 row:
    tokens/s ratio and the first losses' largest relative difference, as
    information."""
    tag = s["variant"].split("(")[1].rstrip(")")
    if bf16 is None or not bf16["tokens_per_s"] or not s["tokens_per_s"]:
        ctx.record(f"train-speed.{name}.{tag}.vs.bf16", "info", "no bf16 row to compare with")
        return
    ratio = s["tokens_per_s"] / bf16["tokens_per_s"]
    n = min(LOSS_STEPS, len(s["losses"]), len(bf16["losses"]))
    worst = max((abs(x - y) / abs(y) for x, y in zip(s["losses"][:n], bf16["losses"][:n])),
                default=None)
    m["comparisons"].append(dict(shardc=s["variant"], torch=None, against=bf16["variant"],
                                 ratio=ratio, losses_agree=None, loss_rel_diff=worst,
                                 memory_le=None))
    ctx.record(f"train-speed.{name}.{tag}.vs.bf16", "info",
               f"tokens/s {ratio:.2f}x shardc bf16 ({s['tokens_per_s']:.0f} against "
               f"{bf16['tokens_per_s']:.0f}); peak memory {fmt_bytes(s['peak_bytes'])} against "
               f"{fmt_bytes(bf16['peak_bytes'])}; first {n} losses within "
               f"{worst if worst is None else f'{worst:.2e}'} of bf16's", ratio=ratio,
               rel_diff=worst)


def write_report(out, report):
    """OUT/train-speed.json and .md. A model already in an earlier report
    there (one model per command, as on a machine with a time limit a
    command) is kept unless this run measured it again, so that two runs
    with --train-models make one table."""
    os.makedirs(out, exist_ok=True)
    try:
        with open(os.path.join(out, "train-speed.json")) as f:
            old = json.load(f)
        if (old.get("emulated"), old.get("tiny")) == (report["emulated"], report["tiny"]):
            mine = {m["model"] for m in report["models"]}
            report["models"] = [m for m in old.get("models", []) if m["model"] not in mine] + \
                report["models"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    with open(os.path.join(out, "train-speed.json"), "w") as f:
        json.dump(report, f, indent=1)
    lines = ["# Training speed: shardc against PyTorch", "",
             f"bf16 peak {report['peak_bf16_flops'] / 1e12:.1f} TFLOP/s ({report['peak_source']});"
             f" model FLOPs {report['flops']}; median step over {report['steps']} steps after "
             f"{report['warmup']} of warm-up, host wall time; losses: {report['loss_check']}."
             + (" Emulated GPU: the times say nothing of a GPU." if report["emulated"] else ""),
             ""]
    for m in report["models"]:
        lines += [f"## {m['model']} (batch {m['batch']} x {m['seq']}, {m['parameters']:,} "
                  f"parameters, {m['flops_per_step'] / 1e12:.4g} TFLOP a step; "
                  f"{m.get('date', '')})", "",
                  "| variant | step (ms) | tokens/s | MFU | peak memory | first losses | "
                  "planner (h200), ms |", "|---|---|---|---|---|---|---|"]
        for v in m["variants"]:
            if not v.get("median_ms"):
                why = " ".join(v.get("error", "").split())[:140].replace("|", "/")
                lines.append(f"| {v['variant']} | — | — | — | — | {why} | |")
                continue
            losses = ", ".join(f"{x:.4f}" for x in v["losses"][:LOSS_STEPS] if x is not None)
            pred = f"{v['predicted_s'] * 1e3:.4g}" if v.get("predicted_s") else ""
            lines.append(f"| {v['variant']} | {v['median_ms']:.2f} | {v['tokens_per_s']:.0f} | "
                         f"{v['mfu'] * 100:.3g} % | {fmt_bytes(v['peak_bytes'])} | {losses} | "
                         f"{pred} |")
        for v in m["variants"]:
            if v.get("state_in_place"):
                lines += ["", f"{v['variant']}: {host_state(v)[2:]}."]
        if m.get("comparisons"):
            lines += ["", "| shardc | against | tokens/s ratio | losses agree | memory <= |",
                      "|---|---|---|---|---|"]
            for cm in m["comparisons"]:
                r = f"{cm['ratio']:.2f}x" if cm["ratio"] is not None else "—"
                agree = ("—" if cm["losses_agree"] is None else
                         "yes" if cm["losses_agree"] else "no")
                lines.append(f"| {cm['shardc']} | {cm['torch'] or cm.get('against')} | {r} | "
                             f"{agree} | "
                             f"{'yes' if cm['memory_le'] else 'no' if cm['memory_le'] is not None else '—'} |")
        lines.append("")
    with open(os.path.join(out, "train-speed.md"), "w") as f:
        f.write("\n".join(lines))


def make_cubins(shardc, out, tiny, models=None, arch="sm_90", scratch=None):
    """The CUBINs of the section's shardc runs, compiled here by NVRTC
    (`shardc compile MODEL --train --target cuda --gpu-arch ARCH` with the
    runs' options, no GPU needed), filed for SHARDC_CUDA_CACHE as
    OUT/<SHA-256 of kernels.cu>.<arch>.cubin (the key under which the CUDA
    device looks a program's CUBIN up). The bundles themselves are not kept:
    their params.bin is the whole model's weights. Prints one line per run
    with NVRTC's time; returns [(model, tag, nvrtc seconds, cubin bytes)]."""
    import hashlib
    import shutil
    import subprocess
    import tempfile
    os.makedirs(out, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="cubins-", dir=scratch)
    made = []
    try:
        for name, batch, runs in TINY if tiny else REAL:
            if models and name not in models:
                continue
            path, _ = model_in(tmp, name)
            for recompute, precision in runs:
                tag = run_tag(recompute, precision)
                bundle = os.path.join(tmp, f"{name}.{tag}.bundle")
                t0 = time.time()
                r = subprocess.run([shardc, "compile", path, "--train", "--target", "cuda",
                                    "--gpu-arch", arch, "-o", bundle] +
                                   step_options(batch, recompute, precision),
                                   capture_output=True, text=True)
                if r.returncode != 0:
                    raise RuntimeError(f"compile {name} ({tag}): {r.stderr[-600:]}")
                m = re.search(r"NVRTC ([\d.]+) s", r.stderr)
                with open(os.path.join(bundle, "kernels.cu"), "rb") as f:
                    key = hashlib.sha256(f.read()).hexdigest()
                cubin = os.path.join(out, f"{key}.{arch}.cubin")
                shutil.copyfile(os.path.join(bundle, f"kernels.{arch}.cubin"), cubin)
                shutil.rmtree(bundle)
                made.append((name, tag, float(m.group(1)) if m else None,
                             os.path.getsize(cubin)))
                print(f"cubins: {name} ({tag}): NVRTC {made[-1][2]} s, CUBIN "
                      f"{made[-1][3] / 2**20:.1f} MiB, {time.time() - t0:.0f} s in all",
                      flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return made


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description="the train-speed runs' CUBINs, compiled ahead "
                                 "(make_cubins)")
    ap.add_argument("--make-cubins", metavar="DIR", required=True)
    ap.add_argument("--shardc", required=True)
    ap.add_argument("--tiny", action="store_true", help="the tiny configs")
    ap.add_argument("--train-models", help="comma-separated model names (default: all)")
    ap.add_argument("--gpu-arch", default="sm_90")
    ap.add_argument("--scratch", help="where the models are written (default: the temp folder)")
    a = ap.parse_args()
    make_cubins(a.shardc, a.make_cubins, a.tiny,
                set(a.train_models.split(",")) if a.train_models else None, a.gpu_arch,
                a.scratch)
