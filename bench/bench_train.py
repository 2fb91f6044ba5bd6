"""bench_train.py — shardc's training step against PyTorch eager on the CPU.

Figures printed (never fails on a time; `make bench` runs it): issue 9,
section 5 "Targets", as ratios against PyTorch CPU eager in the same run with
the same thread count. For each model, batch and thread count T:

  - step time: `shardc train MODEL --optimizer adamw --lr 1e-4 --threads T`
    (the `time_ms` of each --log-json line) against PyTorch doing the same
    step in eager mode with torch.set_num_threads(T): forward,
    F.cross_entropy(logits.view(-1, V), labels.view(-1)), backward,
    torch.optim.AdamW (PyTorch's defaults, as shardc's: betas 0.9, 0.999,
    eps 1e-8, weight decay 0.01) step, zero_grad. Both: the median over
    --steps steps after --warmup warm-up steps, the same batch every step.
  - peak memory: the peak RSS of the whole `shardc train` process (compiling
    included; GNU time's %M) and shardc's planned step memory, the arena
    (what `shardc train` allocates) plus the constants outside it, from
    `shardc plan --train --json`, whose classes (params, optimizer state,
    gradients, activations, workspace) at the plan's peak are printed
    below the table; PyTorch's peak RSS during the steps (a fresh
    process: the peak is reset through /proc/self/clear_refs once the model,
    the optimizer and the batch exist, and ru_maxrss is read after the
    steps) and its RSS just before the first step.

Models:
  gpt2        samples/gpt2.onnx (make_samples.py: 2 layers, d 64, 4 heads,
              vocabulary 1000, sequence 16) at batch 8;
  gpt2-small  GPT-2 small's shape (12 layers, d 768, 12 heads, vocabulary
              50257, sequence 128), seeded random weights, batch 1; exported
              once with samples/make_samples.py's export (TorchScript
              exporter, opset 17) into --cache (~650 MB, not committed) and
              reused.
PyTorch trains transformers' GPT2LMHeadModel (eager attention, as exported)
with the weights read from the ONNX file. The exporter writes GPT-2's tied
lm_head as its own initializer (transformer.wte.weight.T), the embedding's
exact transpose, which shardc ties back (docs/training.md#tied-weights):
both sides train one tied parameter. The step-1 losses are printed as a
check that both train the same model on the same batch.

--profile runs shardc's step once more with SHARDC_PROFILE=1 (docs/runtime.md)
and prints the top of its per-kernel table (the whole table goes to
CACHE/profile-MODEL-TT.txt). --smoke: the GPT-2 sample only,
3 steps, one thread count.

Runs under .venv-samples/bin/python (it needs torch; `make bench` installs it
with samples/install-torch.sh). shardc and PyTorch each run in their own
process; this one imports neither torch nor the model.

usage: bench_train.py [--shardc build/shardc] [--threads 2,1] [--steps N]
                      [--warmup W] [--only gpt2,gpt2-small] [--cache DIR]
                      [--profile] [--smoke]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(SRC, "samples"))

import numpy as np  # noqa: E402
from bench_inspect import run_capture  # noqa: E402

# name: (ONNX file or None: exported into the cache, config overrides of
# make_samples.gpt2_tiny_config, batch, sequence, default timed steps and warm-up)
GPT2_SMALL = dict(n_layer=12, n_embd=768, n_head=12, vocab_size=50257, n_positions=128)
MODELS = {
    "gpt2": (os.path.join(SRC, "samples", "gpt2.onnx"), {}, 8, 16, 8, 2),
    "gpt2-small": (None, GPT2_SMALL, 1, 128, 4, 1),
}
UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40,
         "KB": 1e3, "MB": 1e6, "GB": 1e9}


def vocab(over):
    return over.get("vocab_size", 1000)


# ---------------------------------------------------------------- workers
# Both run in a fresh process of this file (--worker), so that neither the
# export nor this process's memory is inside PyTorch's figures.

def torch_model(over, onnx_path):
    """GPT2LMHeadModel as make_samples.py builds it (the LM head tied to the
    embedding, as shardc ties the exporter's transposed copy back), with
    the ONNX file's weights (make_train_refs.module_ref: every float
    initializer but the tied copy is a parameter, NAME or NAME.T)."""
    import onnx
    import torch
    from onnx import numpy_helper
    from transformers import GPT2LMHeadModel
    import make_samples
    import make_train_refs
    model = make_samples.hf_model(GPT2LMHeadModel, make_samples.gpt2_tiny_config(**over))
    inits = {t.name: numpy_helper.to_array(t).copy() for t in onnx.load(onnx_path).graph.initializer
             if t.data_type == onnx.TensorProto.FLOAT}
    make_train_refs.module_ref(model, inits, None,
                               tied={"transformer.wte.weight.T": "transformer.wte.weight"})
    torch.use_deterministic_algorithms(False)  # module_ref's settings: not what is timed
    return model


def rss_kib(field):
    for ln in open("/proc/self/status"):
        if ln.startswith(field + ":"):
            return int(ln.split()[1])
    return 0


def worker_torch(a):
    """One PyTorch run: prints {"times_ms", "loss1", "rss_before", "peak", "peak_reset"}."""
    import ctypes
    import gc
    import resource
    import time
    import torch
    import torch.nn.functional as F
    torch.manual_seed(0)
    model = torch_model(a["over"], a["onnx"])
    torch.set_num_threads(a["threads"])
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=a["lr"])
    ids = torch.from_numpy(np.load(a["ids"]))
    labels = torch.from_numpy(np.load(a["labels"]))
    v = vocab(a["over"])
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)   # the ONNX file read above
    except OSError:
        pass
    rss_before = rss_kib("VmRSS") * 1024
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")                           # peak RSS := RSS now
        reset = True
    except OSError:
        reset = False
    times, loss1 = [], None
    for i in range(a["warmup"] + a["steps"]):
        t0 = time.perf_counter()
        logits = model(input_ids=ids, use_cache=False).logits
        loss = F.cross_entropy(logits.view(-1, v), labels.view(-1))
        loss.backward()
        opt.step()
        opt.zero_grad()
        times.append((time.perf_counter() - t0) * 1e3)
        if i == 0:
            loss1 = float(loss)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"times_ms": times, "loss1": loss1, "rss_before": rss_before,
                      "peak": max(peak, rss_before), "peak_reset": reset}))


def worker_export(a):
    """GPT-2 with the given config overrides, seeded random weights (perturbed
    as make_samples.py does, so no two initializers are equal), exported with
    make_samples.export (opset 17, symbolic batch, checked against
    onnxruntime) to a["onnx"]."""
    import torch
    from transformers import GPT2LMHeadModel
    import make_samples
    torch.manual_seed(9)
    model = make_samples.hf_model(GPT2LMHeadModel, make_samples.gpt2_tiny_config(**a["over"])).eval()
    make_samples.perturb(model, 90)
    ids = torch.randint(0, make_samples.VOCAB, (2, a["seq"]))
    tmp = a["onnx"] + ".tmp"
    make_samples.export(make_samples.LogitsOnly.make(model), (ids,), tmp, ["input_ids"], ["logits"])
    os.replace(tmp, a["onnx"])


def worker(kind, args):
    import warnings
    warnings.filterwarnings("ignore")
    {"torch": worker_torch, "export": worker_export}[kind](json.loads(args))


def spawn(kind, args):
    """Run a worker in a fresh process of this interpreter; its stdout."""
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", kind, json.dumps(args)],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=3600)
    if p.returncode != 0:
        raise RuntimeError(f"{kind} worker failed ({p.returncode}): "
                           f"{p.stderr.decode(errors='replace').strip()[-800:]}")
    return p.stdout.decode()


# ---------------------------------------------------------------- shardc

def arena_bytes(text):
    """The arena of `shardc train`'s line "memory: arena 4.40 GiB (N bytes), ..."
    (older builds print no byte count)."""
    m = re.search(r"memory: arena [^(,]*\(([0-9]+) bytes\)", text)
    if m:
        return int(m.group(1))
    m = re.search(r"memory: arena\s*([0-9.]+)\s*([KMGT]?i?B)\b", text)
    return float(m.group(1)) * UNITS[m.group(2)] if m else None


def shardc_plan(exe, path, batch):
    """`shardc plan --train --json` of the same step: the memory at the
    plan's peak by class, the arena (what `shardc train` allocates) and the
    constants outside it; None when this shardc has no `plan --train`."""
    p = subprocess.run([exe, "plan", path, "--train", "--dim", f"batch={batch}", "--optimizer",
                        "adamw", "--json"],
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=1800)
    try:
        return json.loads(p.stdout) if p.returncode == 0 else None
    except ValueError:
        return None


def shardc_train(exe, path, data, batch, steps, threads, folder, env=None, extra=()):
    """(per-step ms, step-1 loss, process peak RSS, arena bytes, trainable
    parameters, process seconds, stderr, "N of M" state tensors in place) of
    one `shardc train` process."""
    log = os.path.join(folder, "log.json")
    cmd = [exe, "train", path, "--data", f"input_ids={data['ids']}", "--labels", data["labels"],
           "--dim", f"batch={batch}", "--steps", str(steps), "--optimizer", "adamw",
           "--lr", "1e-4", "--log-json", log, "--threads", str(threads)] + list(extra)
    wall, rss, rc, out, err = run_capture(cmd, env=env)
    if rc != 0:
        raise RuntimeError(f"shardc train failed ({rc})")
    lines = [json.loads(ln) for ln in open(log) if ln.strip()]
    m = re.search(r"training ([0-9]+) parameters", out)
    inplace = re.search(r"([0-9]+ of [0-9]+) state tensors updated in place", out)
    return ([ln["time_ms"] for ln in lines], lines[0]["loss"], rss,
            arena_bytes(out), int(m.group(1)) if m else None, wall, err,
            inplace.group(1) if inplace else "?")


# ---------------------------------------------------------------- main

def model_file(name, cache):
    path, over, _, seq, _, _ = MODELS[name]
    if path:
        return path
    tag = "-".join(f"{k}{v}" for k, v in sorted(over.items()))
    path = os.path.join(cache, f"{name}-{tag}.onnx")
    if not os.path.exists(path):
        os.makedirs(cache, exist_ok=True)
        print(f"exporting {name} to {path} (once; reused from the cache)", flush=True)
        spawn("export", {"over": over, "seq": seq, "onnx": path})
    return path


def mib(x):
    return "     n/a" if x is None else f"{x / 2**20:8.1f}"


def ratio(a, b):
    return "  n/a" if a is None or not b else f"{a / b:5.2f}"


def mesh_rows(a, notes, name="gpt2", path=None):
    """A model's step on 2 thread-ranks (dp=2, fsdp=2 with and without the
    overlap of its collectives, tp=2; one thread each; the GPT-2 sample also
    pp=2) against one rank on 1 and 2 threads: what the collectives cost;
    for the sample, also the time `shardc plan --train` takes to build the
    step at dp=2 x tp=2 (import, train pass, partition, codegen; no JIT)."""
    p0, over, batch, seq, steps, warmup = MODELS[name]
    path = path or p0
    batch = max(batch, 2)  # split over 2 ranks
    steps = a.steps if a.steps is not None else steps
    warmup = a.warmup if a.warmup is not None else warmup
    print(f"\n{name}, batch {batch}: shardc's step on one rank and on 2 thread-ranks "
          "(median ms/step after the warm-up)")
    print(f"{'run':28s} {'ms/step':>8s} {'vs 1 rank, 2 threads':>21s}")
    with tempfile.TemporaryDirectory(prefix="sc-bench-mesh-") as d:
        rng = np.random.default_rng(0)
        data = {"ids": os.path.join(d, "ids.npy"), "labels": os.path.join(d, "labels.npy")}
        np.save(data["ids"], rng.integers(0, vocab(over), (batch, seq), dtype=np.int64))
        np.save(data["labels"], rng.integers(0, vocab(over), (batch, seq), dtype=np.int64))
        base = None
        rows = [("one rank, 2 threads", 2, ()), ("one rank, 1 thread", 1, ()),
                ("dp=2, 1 thread per rank", 1, ("--mesh", "dp=2")),
                ("fsdp=2, 1 thread per rank", 1, ("--mesh", "fsdp=2")),
                ("fsdp=2, --no-overlap", 1, ("--mesh", "fsdp=2", "--no-overlap")),
                ("tp=2, 1 thread per rank", 1, ("--mesh", "tp=2"))]
        if name == "gpt2":
            rows.append(("pp=2 1f1b M=4, 1 thread", 1,
                         ("--mesh", "pp=2", "--microbatches", "4", "--schedule", "1f1b")))
        for label, t, extra in rows:
            try:
                sc = shardc_train(a.shardc, path, data, batch, warmup + steps, t, d, extra=extra)
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                notes.append(f"{name} {label}: shardc FAILED: {e}")
                continue
            ms = statistics.median(sc[0][warmup:])
            base = base or ms
            print(f"{label:28s} {ms:8.2f} {ratio(ms, base):>21s}", flush=True)
    if name != "gpt2":
        return
    for mesh in (["dp=2,tp=2"], ["dp=2,tp=2,pp=2", "--microbatches", "4", "--schedule", "1f1b"]):
        t0 = time.monotonic()
        p = subprocess.run([a.shardc, "plan", path, "--train", "--dim", f"batch={batch}",
                            "--optimizer", "adamw", "--mesh"] + mesh,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600)
        notes.append(f"gpt2: `shardc plan --train --mesh {' '.join(mesh)}` (import, train pass, "
                     f"partition, codegen and memory plan; no JIT) took "
                     f"{time.monotonic() - t0:.2f} s (target: under 2 s)"
                     + ("" if p.returncode == 0 else " and FAILED"))
    big = os.path.join(SRC, "samples", "gpt_1p5b.onnx")
    t0 = time.monotonic()
    p = subprocess.run([a.shardc, "plan", big, "--train", "--no-weights", "--dim", "batch=64",
                        "--mesh", "fsdp=8,tp=8,pp=8", "--microbatches", "8", "--schedule", "1f1b"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600)
    notes.append(f"GPT 1.5B shape-only: `shardc plan --train --mesh fsdp=8,tp=8,pp=8` (512 ranks, "
                 f"1f1b, 8 microbatches) took {time.monotonic() - t0:.2f} s (target: under 3 s)"
                 + ("" if p.returncode == 0 else " and FAILED"))


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        return worker(sys.argv[2], sys.argv[3])
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shardc", default=os.environ.get("SHARDC", os.path.join(SRC, "build", "shardc")))
    ap.add_argument("--threads", default=",".join(dict.fromkeys([str(os.cpu_count() or 1), "1"])))
    ap.add_argument("--steps", type=int, help="timed steps (default: 8, gpt2-small 4)")
    ap.add_argument("--warmup", type=int, help="warm-up steps (default: 2, gpt2-small 1)")
    ap.add_argument("--only", default="", help="comma-separated: " + ",".join(MODELS))
    ap.add_argument("--cache", default=os.path.join(SRC, "build", "bench-cache"))
    ap.add_argument("--profile", action="store_true", help="SHARDC_PROFILE table of shardc's step")
    ap.add_argument("--smoke", action="store_true", help="the GPT-2 sample only, 3 steps")
    ap.add_argument("--mesh-small", action="store_true",
                    help="also GPT-2-small's step on 2 thread-ranks (dp, fsdp, tp; minutes)")
    ap.add_argument("--export-only", action="store_true",
                    help="only export the --only models into the cache (tests/gpu/run_all.py)")
    a = ap.parse_args()
    names = [s for s in a.only.split(",") if s] or list(MODELS)
    if a.export_only:
        for n in names:
            print(model_file(n, a.cache))
        return 0
    threads = [int(t) for t in a.threads.split(",") if t]
    if a.smoke:
        names, threads, a.steps, a.warmup = ["gpt2"], threads[:1], 2, 1
    for n in names:
        if n not in MODELS:
            sys.exit(f"unknown model {n!r} (have: {', '.join(MODELS)})")
    if not os.path.exists(a.shardc):
        print(f"no shardc binary at {a.shardc} (build first)")
        return 1

    print("shardc train --optimizer adamw --lr 1e-4 vs PyTorch eager (AdamW, cross_entropy); "
          "median of the steps after the warm-up, the same batch each step")
    head = (f"{'model':11s} {'batch':>5s} {'thr':>3s} {'shardc ms':>10s} {'torch ms':>9s} {'ratio':>5s} "
            f"{'sc peakRSS':>10s} {'pt peakRSS':>10s} {'pt RSS0':>8s} {'sc arena+const':>14s} "
            f"{'RSS ratio':>9s}   (memory in MiB)")
    print(head)
    rows, notes = [], []
    for name in names:
        try:
            path = model_file(name, a.cache)
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            notes.append(f"{name}: export FAILED: {str(e)[-300:]}")
            continue
        _, over, batch, seq, steps, warmup = MODELS[name]
        steps = a.steps if a.steps is not None else steps
        warmup = a.warmup if a.warmup is not None else warmup
        with tempfile.TemporaryDirectory(prefix="sc-bench-train-") as d:
            rng = np.random.default_rng(0)
            data = {"ids": os.path.join(d, "ids.npy"), "labels": os.path.join(d, "labels.npy")}
            np.save(data["ids"], rng.integers(0, vocab(over), (batch, seq), dtype=np.int64))
            np.save(data["labels"], rng.integers(0, vocab(over), (batch, seq), dtype=np.int64))
            plan = shardc_plan(a.shardc, path, batch)
            if plan:
                live = ", ".join(f"{k} {mib(v).strip()}" for k, v in plan["live"].items())
                notes.append(f"{name}: `shardc plan --train`, MiB at the peak (step {plan['peak_step']}, "
                             f"{str(plan['peak_origin'])[:60]}): {live}; arena {mib(plan['arena']).strip()}, "
                             f"constants {mib(plan['constants']).strip()}")
            for t in threads:
                sc = pt = None
                try:
                    sc = shardc_train(a.shardc, path, data, batch, warmup + steps, t, d)
                except (RuntimeError, subprocess.TimeoutExpired) as e:
                    notes.append(f"{name} T={t}: shardc FAILED: {e}")
                try:
                    pt = json.loads(spawn("torch", {
                        "over": over, "onnx": path, "ids": data["ids"], "labels": data["labels"],
                        "threads": t, "steps": steps, "warmup": warmup, "lr": 1e-4}))
                except (RuntimeError, subprocess.TimeoutExpired, ValueError) as e:
                    notes.append(f"{name} T={t}: PyTorch FAILED: {str(e)[-300:]}")
                sc_ms = statistics.median(sc[0][warmup:]) if sc else None
                pt_ms = statistics.median(pt["times_ms"][warmup:]) if pt else None
                planned = plan["total"] if plan else None
                rows.append(f"{name:11s} {batch:5d} {t:3d} "
                            f"{'n/a' if sc_ms is None else f'{sc_ms:.1f}':>10s} "
                            f"{'n/a' if pt_ms is None else f'{pt_ms:.1f}':>9s} {ratio(sc_ms, pt_ms)} "
                            f"{mib(sc and sc[2]):>10s} {mib(pt and pt['peak']):>10s} "
                            f"{mib(pt and pt['rss_before']):>8s} {mib(planned):>14s} "
                            f"{ratio(sc and sc[2], pt and pt['peak']):>9s}")
                print(rows[-1], flush=True)
                if sc and pt:
                    steps_s = sum(sc[0]) / 1e3
                    mins = min(sc[0][warmup:]), min(pt["times_ms"][warmup:])
                    notes.append(f"{name} T={t}: {steps} steps after {warmup} warm-up; min ms/step "
                                 f"shardc {mins[0]:.1f}, torch {mins[1]:.1f}; "
                                 f"step-1 loss shardc {sc[1]:.6f}, torch {pt['loss1']:.6f}; "
                                 f"shardc process {sc[5]:.1f} s, of which steps {steps_s:.1f} s "
                                 f"(the rest: import, compile, JIT); arena {mib(sc[3]).strip()} MiB "
                                 f"(`shardc train`); {sc[7]} state tensors in place"
                                 + ("" if pt["peak_reset"] else "; torch peak NOT reset (includes the load)"))
            if a.profile:
                env = dict(os.environ, SHARDC_PROFILE="1")
                try:
                    err = shardc_train(a.shardc, path, data, batch, warmup + steps, threads[0], d, env)[6]
                    os.makedirs(a.cache, exist_ok=True)
                    full = os.path.join(a.cache, f"profile-{name}-T{threads[0]}.txt")
                    with open(full, "w") as f:
                        f.write(err)
                    notes.append(f"{name} T={threads[0]}: SHARDC_PROFILE (top of the table; all of it "
                                 f"in {full})\n"
                                 + "\n".join(ln[:200] for ln in err.splitlines()[:16]))
                except (RuntimeError, subprocess.TimeoutExpired) as e:
                    notes.append(f"{name}: profile FAILED: {e}")
    if "gpt2" in names and not a.smoke:
        mesh_rows(a, notes)
    if "gpt2-small" in names and not a.smoke and a.mesh_small:
        mesh_rows(a, notes, "gpt2-small", model_file("gpt2-small", a.cache))
    print("\nsc peakRSS: `shardc train` process (import and compile included); pt peakRSS: the "
          "PyTorch process during the steps; pt RSS0: before the first step; sc arena+const: "
          "shardc's planned step memory; RSS ratio: sc/pt peak RSS")
    for n in notes:
        print("  " + n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
