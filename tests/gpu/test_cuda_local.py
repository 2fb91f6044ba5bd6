"""--comm cuda-local: a mesh's thread-ranks sharing one GPU, their collectives on
the GPU (runtime/comm_cuda_local.c), against the CPU's thread-ranks.

On the emulated GPU (SHARDC_CUDA_EMU=1, the fake driver), or on a real one with
SC_CUDA_REAL=1 (tests/gpu/run-all.sh):
  - `shardc train samples/gpt2.onnx --device cuda --comm cuda-local` at dp=2,
    fsdp=2 (ZeRO-3, prefetch), tp=2, pp=2 (2 microbatches; the 1f1b, gpipe,
    interleaved with 2 virtual stages and zb-h1 schedules), dp=2 x tp=2
    and cp=2 (ring attention: each hop a send_recv step started on the
    communication stream before the previous step's attention blocks),
    2 AdamW steps: every loss and gradient norm within rtol 2e-5 of the CPU's
    thread-ranks (test_cuda_emulated.py's tolerance); every final weight of the
    checkpoint (--save) within 2e-2 of its largest change over the run and every
    optimizer-state tensor within 2e-2 of its largest magnitude (test_train_dist's
    tolerance for AdamW, which turns rounding-level gradient differences into
    update differences); and on the emulated GPU every tensor bit-identical to
    the same run with the host's `local` communicator (both add the ranks'
    contributions in rank order, in f32);
  - `shardc run` at tp=2, pp=2 (the pipeline's hand-offs are SEND/RECV steps:
    cuda-local's staged device copies) and cp=2 (the ring's send_recv steps,
    the same staged copies): every output within 1e-5 of its largest
    magnitude, step by step on every run (no CUDA graph: start-up says so);
  - the ranks' collective traces match (SHARDC_COMM_TRACE), the fake driver
    reports no violation (its race check sees every device buffer a rank reads
    of another's), and its log shows the reduction kernels (sc_comm_reduce_*)
    where the mesh reduces: the collectives ran on the GPU, not as host
    functions;
  - --comm cuda-local without --device cuda is a usage error (exit 2).
"""
import os
import re
import sys
import tempfile

import numpy as np
import onnx
from onnx import numpy_helper

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "models"))
from checks import check, comm_traces_match, finish  # noqa: E402
from test_cuda_emulated import (REAL, close, emulated, losses, not_runnable,  # noqa: E402
                                outputs, same_files, shardc, summary)
from test_train_dist import load_ckpt  # noqa: E402

SAMPLES = os.path.join(os.environ.get("SC_SOURCE_DIR",
                                      os.path.join(os.path.dirname(__file__), "..", "..")),
                       "samples")
GPT2 = os.path.join(SAMPLES, "gpt2.onnx")
RTOL = 2e-5
WTOL = 2e-2  # of each weight's update over the run (test_train_dist.py's, for AdamW)
NOTE = "--comm cuda-local runs without CUDA graphs"


def reductions(log):
    """Launches of the communicator's reduction kernels in the fake's log."""
    if REAL:
        return None
    with open(log) as f:
        return sum(1 for line in f if "launch sc_comm_reduce_" in line)


def train(tmp, name, mesh, data, init):
    out = {}
    # the CPU's thread-ranks, the emulated GPU's thread-ranks with the host's
    # `local` communicator (host functions on the streams; not on a real GPU),
    # and cuda-local
    runs = (("cpu", "cpu", []), ("cuda-host", "cuda", []),
            ("cuda-local", "cuda", ["--comm", "cuda-local"]))
    for kind, dev, comm in runs:
        if REAL and kind == "cuda-host":
            continue
        tag = f"{name}.{kind}"
        lj, ck, fl = (os.path.join(tmp, tag + ".jsonl"), os.path.join(tmp, tag + ".ck"),
                      os.path.join(tmp, tag + ".fake.log"))
        traces = os.path.join(tmp, tag + ".traces")
        os.makedirs(traces)
        r = shardc(["train", GPT2, "--steps", "2", "--log-json", lj, "--save", ck, "--quiet",
                    "--device", dev, "--no-allow-tf32", "--dim", "batch=4", "--optimizer", "adamw"] + data + mesh
                   + comm, dict(emulated(fl), SHARDC_COMM_TRACE=traces))
        if not check(r.returncode == 0, f"train {name} ({kind}): {r.stderr[-500:]}"):
            return
        ok, why, calls = comm_traces_match(traces)
        check(ok and calls > 0, f"train {name} ({kind}): collective traces ({calls}): {why}")
        out[kind] = {"log": losses(lj), "ck": ck, "fake": fl, "stderr": r.stderr}
    a, b = out["cpu"]["log"], out["cuda-local"]["log"]
    if not check(len(a) == len(b) == 2, f"train {name}: {len(b)} steps logged, want 2"):
        return
    for x, y in zip(a, b):
        for k in ("loss", "grad_norm"):
            check(np.isfinite(y[k]) and abs(x[k] - y[k]) <= RTOL * abs(x[k]),
                  f"train {name}: step {x['step']} {k} {y[k]} vs cpu {x[k]}")
    for group in ("weights", "optimizer"):
        wa, wb = load_ckpt(out["cpu"]["ck"], group), load_ckpt(out["cuda-local"]["ck"], group)
        wh = load_ckpt(out["cuda-host"]["ck"], group) if "cuda-host" in out else None
        check(sorted(wa) == sorted(wb) and wa, f"train {name}: {group} tensors differ")
        for k, x in wa.items():
            y = wb.get(k)
            if y is None or not check(x.shape == y.shape, f"train {name}: {k} shape"):
                continue
            if not check(np.isfinite(y).all(), f"train {name}: {group} {k} not finite"):
                continue
            x64 = x.astype(np.float64)
            scale = (np.abs(x64 - init[k]).max() if group == "weights" and k in init
                     else np.abs(x64).max())
            err = float(np.abs(x64 - y).max())
            check(err <= WTOL * scale + 1e-9,
                  f"train {name}: {group} '{k}' differs from the CPU's by {err:.3g} "
                  f"(scale {scale:.3g})")
            if wh is not None:
                check(np.array_equal(wh.get(k), y),
                      f"train {name}: {group} '{k}' differs from the local communicator's")
    c = summary(out["cuda-local"]["fake"])
    check(c.get("violations", -1) == 0, f"train {name}: fake driver violations {c}")
    n = reductions(out["cuda-local"]["fake"])
    if "pp=2" not in mesh:  # the training pipeline's hand-offs go through the host
        check(NOTE in out["cuda-local"]["stderr"], f"train {name}: no note about CUDA graphs")
        check(n is None or n > 0, f"train {name}: no reduction kernel ran on the GPU")


def copied(log):
    """Bytes the fake driver's executed copies moved, by direction."""
    out = {"htod": 0, "dtoh": 0, "dtod": 0}
    with open(log) as f:
        for line in f:
            m = re.match(r"run stream=\d+ copy (\d+) (\w+)", line)
            if m:
                out[m.group(2)] += int(m.group(1))
    return out


def resident_pipeline(tmp, data):
    """A pipeline's state kept on the device (runtime/pipe_rank.h's store):
    2 steps saved and resumed for 2 more give the files of 4 steps straight,
    byte for byte, with no fake driver violation; and each step copies at
    least the rank's state from the store into the pieces' slots on the
    device (dtod), which the pipeline copying its state through the host
    never did (measured 544,768 dtod bytes a step against 2 MB of state)."""
    d = os.path.join(tmp, "resident-pp")
    os.makedirs(d)
    base = ["train", GPT2, "--device", "cuda", "--no-allow-tf32", "--comm", "cuda-local", "--dim", "batch=4",
            "--optimizer", "adamw", "--mesh", "pp=2", "--microbatches", "2", "--schedule",
            "1f1b", "-q"] + data
    counts = {}
    for tag, more in (("s2", ["--steps", "2"]), ("s4", ["--steps", "4"]),
                      ("resumed", ["--steps", "4", "--resume", os.path.join(d, "s2.ck")])):
        log = os.path.join(d, tag + ".log")
        r = shardc(base + more + ["--save", os.path.join(d, tag + ".ck")], emulated(log))
        if not check(r.returncode == 0, f"resident pipeline {tag}: {r.stderr[-400:]}"):
            return
        c = summary(log)
        check(c.get("violations", -1) == 0, f"resident pipeline {tag}: violations {c}")
        counts[tag] = None if REAL else copied(log)
    ck4 = os.path.join(d, "s4.ck")
    check(same_files(ck4, os.path.join(d, "resumed.ck")),
          "resident pipeline: 2 steps resumed for 2 more differ from 4 steps straight")
    if REAL:
        return
    state = sum(a.nbytes for g in ("weights", "optimizer") for a in load_ckpt(ck4, g).values())
    per = {k: (counts["s4"][k] - counts["s2"][k]) / 2 for k in counts["s4"]}
    print(f"resident pipeline: per step {per} bytes copied; state {state} bytes")
    check(per["dtod"] >= state,
          f"resident pipeline: {per['dtod']:.0f} bytes copied on the device a step, fewer than "
          f"the state's {state}: the state does not live on the device")


def run(tmp, mesh):
    base = ["run", GPT2, "--dim", "batch=4", "--random-inputs", "7", "-q", "--mesh", mesh]
    cpu, gpu = os.path.join(tmp, f"run.{mesh}.cpu"), os.path.join(tmp, f"run.{mesh}.cuda")
    r = shardc(base + ["--output-dir", cpu])
    if not check(r.returncode == 0, f"run {mesh} on cpu: {r.stderr[-300:]}"):
        return
    log, traces = os.path.join(tmp, f"run.{mesh}.log"), os.path.join(tmp, f"run.{mesh}.traces")
    os.makedirs(traces)
    r = shardc(base + ["--device", "cuda", "--no-allow-tf32", "--comm", "cuda-local", "--repeat", "3",
                       "--output-dir", gpu], dict(emulated(log), SHARDC_COMM_TRACE=traces))
    if not check(r.returncode == 0, f"run {mesh} on cuda-local: {r.stderr[-500:]}"):
        return
    close(outputs(cpu), outputs(gpu), f"run {mesh} (cuda-local)")
    ok, why, calls = comm_traces_match(traces)
    check(ok and calls > 0, f"run {mesh}: collective traces ({calls}): {why}")
    c = summary(log)
    check(c.get("violations", -1) == 0, f"run {mesh}: fake driver violations {c}")
    if not REAL:
        check(c.get("graphs", -1) == 0, f"run {mesh}: a graph was captured: {c}")
    check(NOTE in r.stderr, f"run {mesh}: no note about CUDA graphs: {r.stderr[-300:]}")
    n = reductions(log)
    if n is not None:
        check((n > 0) == mesh.startswith("tp"), f"run {mesh}: {n} reduction kernels")


def main():
    rc = not_runnable()
    if rc is not None:
        return rc
    with tempfile.TemporaryDirectory() as tmp:
        r = shardc(["run", GPT2, "--dim", "batch=2", "--random-inputs", "1", "--mesh", "dp=2",
                    "--comm", "cuda-local", "--output-dir", os.path.join(tmp, "usage")])
        check(r.returncode == 2 and "--comm cuda-local needs --device cuda" in r.stderr,
              f"--comm cuda-local on the CPU: exit {r.returncode}: {r.stderr[-300:]}")
        for mesh in ("tp=2", "pp=2", "cp=2"):
            run(tmp, mesh)
        rng = np.random.default_rng(11)
        ids, lab = os.path.join(tmp, "ids.npy"), os.path.join(tmp, "lab.npy")
        np.save(ids, rng.integers(0, 1000, (8, 16)).astype(np.int64))
        np.save(lab, rng.integers(0, 1000, (8, 16)).astype(np.int64))
        data = ["--data", "input_ids=" + ids, "--labels", lab]
        init = {t.name: numpy_helper.to_array(t).astype(np.float64)
                for t in onnx.load(GPT2).graph.initializer}
        for mesh in (["--mesh", "dp=2"], ["--mesh", "fsdp=2"], ["--mesh", "tp=2"],
                     ["--mesh", "pp=2", "--microbatches", "2", "--schedule", "1f1b"],
                     ["--mesh", "pp=2", "--microbatches", "2", "--schedule", "gpipe"],
                     ["--mesh", "pp=2", "--microbatches", "2", "--schedule", "interleaved",
                      "--virtual-stages", "2"],
                     ["--mesh", "pp=2", "--microbatches", "2", "--schedule", "zb-h1"],
                     ["--mesh", "dp=2,tp=2"], ["--mesh", "cp=2"]):
            train(tmp, re.sub(r"[^\w=,]", "_", " ".join(mesh[1:])), mesh, data, init)
        resident_pipeline(tmp, data)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
