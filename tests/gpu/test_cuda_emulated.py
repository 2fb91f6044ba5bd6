"""test_cuda_emulated.py — the whole GPU path, on the emulated GPU.

With SHARDC_CUDA_EMU=1, `shardc run|train --device cuda` loads the
project's fake driver (fakecuda/libcuda.so.1) instead of libcuda: the CUDA
device's code (modules, launches, the compute and communication streams and
their events, the arena, pinned uploads, CUDA graphs, the index checks in
stream order) runs as on a GPU, and the kernels are the generated CUDA C
compiled for the host (docs/cuda-backend.md). The fake driver logs every
call (SHARDC_FAKE_CUDA_LOG) and counts "violations": memory, streams,
graphs or modules destroyed while work using them is still queued, and
captures whose forked streams were not joined back (which fail the
capture as on a GPU).

Checked, against the CPU device on the same seeded random inputs:
  - inference, every sample at batch 2: each output within 1e-5 of the
    output's largest magnitude (both sides sum in f32, in different
    orders: measured at most ~2e-6), no NaN;
  - with CUDA graphs (the default: run 1 is captured, later runs replay
    it) the outputs are bit-identical to --no-cuda-graph (the same kernels
    in the same order), the log shows one graph and its replays, and none
    with --no-cuda-graph; no violations;
  - GPT-2 over thread-ranks: tp=2, dp=2, pp=2 (send/recv), dp=2 x tp=2:
    collectives on the communication streams, ordered by events, one graph
    per rank; the other samples at tp=2 and pp=2 (graphs);
  - training: the MLP (AdamW, 6 steps; and 3 in bf16, its products bf16
    GEMM steps) and GPT-2 under fsdp=2 (ZeRO-3, 2 steps): every loss and gradient norm within rtol 2e-5 of the CPU's
    (as test_train_dist.py's tolerance); then the MLP, 2 steps, under every
    mesh test_train_dist.py checks it with (dp, ZeRO 1/2/3, HSDP both ways,
    tp with and without sequence parallelism, fsdp x tp, pp=2 under gpipe,
    1f1b, zb-h1 and interleaved, pp x fsdp with recompute, dp x tp x pp),
    GPT-2 and Llama under fsdp=2 x tp=2 and pp=2 1f1b, ViT under
    fsdp=2 x tp=2, each against the same mesh on the CPU;
  - every mesh run (CPU and emulated GPU) writes each rank's collective
    trace (SHARDC_COMM_TRACE): within every group all members made the
    same collectives in the same order, and sends match receives
    (checks.comm_traces_match); a run without a mesh makes none;
  - attention as fused ATTENTION / ATTENTION_GRAD steps (the CUDA device's
    FlashAttention kernels, SHARDC_CUDA_VERBOSE's count): GPT-2's outputs
    within 1e-5 of the CPU running the attention unfused
    (--no-fuse-attention), graph replays equal to stream launches, and 3
    AdamW training steps of GPT-2 and of ViT whose losses and gradient
    norms are within rtol 2e-5 of the CPU's unfused ones;
  - 3 bf16 AdamW steps of GPT-2 with --clip-grad-norm 1 launch 92 kernels
    in the first step and 184 in the two graph replays (the optimizer and
    the gradient norm's sums of squares a multi-tensor kernel each, each
    layer's GELU in its product: GELU_AUX, and its derivative in the
    backward's product: DGELU, its 8 bias gradients in the weight
    gradients' products: BGRADA/BGRADB), no race;
  - a Gather index out of range fails the run with the CPU's message;
  - SHARDC_CUDA_VERBOSE=1 reports the device time of a run's steps (events
    around them): one per run, no more than the run's wall time;
  - `run -v` lists the CUDA device's own lines planned and allocated
    (codegen/device_memory.h): a MatMul + Add with constants of 60 and 12
    bytes has 196 bytes of weights padding (the second at offset 256), the
    same both ways;
  - without SHARDC_CUDA_EMU on a machine without a driver, --device cuda
    exits 1 saying "no CUDA driver" (skipped where libcuda.so.1 loads);
  - training state resident on the device (resident_state_checks): the MLP
    and GPT-2 report every state tensor updated in place; the bytes a step
    copies (the fake driver's htod_bytes and dtoh_bytes, 4 steps minus 2
    steps over 2) are the batch and the step's scalars: for the MLP exactly
    the batch + 12 bytes in (lr, bc1, bc2, f32) and 9 out (loss, gradient
    norm: f32; applied: bool); for GPT-2 up to one more copy of the token
    ids in and three out (its Gather and ScatterND index checks copy the
    indices to the host and back); either way under 1% of the checkpoint's
    state bytes; losses within rtol 2e-5 of the CPU's and each final
    weight within 2e-2 of its largest update of the CPU's (`shardc check`'s
    rule for AdamW, api/check_run.c; measured MLP 4e-6, GPT-2 5e-3: Adam's
    step for a gradient near 0 follows the gradient's last bits),
    graphs against --no-cuda-graph identical (log and checkpoint files); 2
    steps saved and resumed for 2 more give the checkpoint files of 4
    steps straight, byte for byte, and `shardc export` the same ONNX file.
"""
import ctypes
import functools
import json
import os
import re
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "models"))
from checks import (check, comm_traces_match, fake_cuda_summary, finish,  # noqa: E402
                    has_cuda_target, run_shardc, skip_all)

SHARDC = os.environ.get("SHARDC")
# SC_CUDA_REAL=1 (tests/gpu/run-all.sh on a GPU): the same checks on the
# real driver; the fake driver's log is then not there to read.
REAL = os.environ.get("SC_CUDA_REAL") == "1"
# SC_CUDA_QUICK=1 (run-all.sh --quick, its CI rehearsal): no mesh matrices
QUICK = os.environ.get("SC_CUDA_QUICK") == "1"
SRC = os.environ.get("SC_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
SAMPLES = os.path.join(SRC, "samples")
TOL = 1e-5


shardc = functools.partial(run_shardc, SHARDC, timeout=600)


def emulated(log):
    if REAL:
        return {"SHARDC_CUDA_EMU": "0"}
    return {"SHARDC_CUDA_EMU": "1", "SHARDC_FAKE_CUDA_LOG": log}


def summary(log):
    """The fake driver's closing counts (the last summary line of the log);
    on a real GPU made up to pass the checks that need the log."""
    if REAL:
        return {"violations": 0, "graphs": 1, "replays": 2, "graph_launches": 1, "launches": 1}
    return fake_cuda_summary(log)


def outputs(d):
    return {n[:-4]: np.load(os.path.join(d, n)) for n in sorted(os.listdir(d))
            if n.endswith(".npy")}


def close(ref, got, what):
    ok = check(sorted(ref) == sorted(got), f"{what}: outputs {sorted(got)}, want {sorted(ref)}")
    for k in ref if ok else []:
        a, b = ref[k], got[k]
        if not check(a.shape == b.shape and a.dtype == b.dtype,
                     f"{what}: {k}: {b.dtype}{b.shape}, want {a.dtype}{a.shape}"):
            continue
        if a.dtype.kind != "f":
            check(np.array_equal(a, b), f"{what}: {k}: integer output differs")
            continue
        check(not np.isnan(b).any(), f"{what}: {k}: NaN")
        scale = float(np.max(np.abs(a))) if a.size else 0.0
        err = float(np.max(np.abs(a.astype(np.float64) - b))) if a.size else 0.0
        check(err <= TOL * max(scale, 1e-30), f"{what}: {k}: max error {err:.3g} over "
              f"largest {scale:.3g} (tolerance {TOL} of it)")


def run_case(tmp, name, model, extra, batch=2, modes=("graph", "stream")):
    """CPU vs emulated GPU (graphs, then --no-cuda-graph) for one model."""
    base = ["run", model, "--dim", f"batch={batch}", "--random-inputs", "7", "-q"] + extra
    cpu = os.path.join(tmp, name + ".cpu")
    r = shardc(base + ["--output-dir", cpu])
    if not check(r.returncode == 0, f"{name}: cpu run: {r.stderr[-300:]}"):
        return
    got = {}
    for mode, flags in (("graph", ["--repeat", "3"]), ("stream", ["--no-cuda-graph"])):
        if mode not in modes:
            continue
        out, log = os.path.join(tmp, f"{name}.{mode}"), os.path.join(tmp, f"{name}.{mode}.log")
        traces = os.path.join(tmp, f"{name}.{mode}.traces")
        os.makedirs(traces)
        r = shardc(base + ["--device", "cuda", "--no-allow-tf32", "--output-dir", out] + flags,
                   dict(emulated(log), SHARDC_COMM_TRACE=traces))
        if not check(r.returncode == 0, f"{name} ({mode}): cuda run: {r.stderr[-400:]}"):
            return
        got[mode] = outputs(out)
        close(outputs(cpu), got[mode], f"{name} ({mode})")
        ok, why, calls = comm_traces_match(traces)
        check(ok and (calls > 0) == ("--mesh" in extra),
              f"{name} ({mode}): the ranks' collective traces ({calls} calls): {why}")
        c = summary(log)
        check(c.get("violations", -1) == 0, f"{name} ({mode}): fake driver violations {c}")
        if mode == "graph":
            # (a graph of GEMMs alone, their activations in the product, launches no
            # kernel: its host functions are what it replays)
            check(c.get("graphs", 0) >= 1 and c.get("replays", 0) >= 2 * c.get("graphs", 1)
                  and c.get("graph_launches", 0) + c.get("host_fns", 0) > 0,
                  f"{name}: expected a captured graph per rank replayed: {c}")
        elif not REAL:
            check(c.get("graphs", -1) == 0 and c.get("launches", 0) > 0,
                  f"{name}: --no-cuda-graph still captured: {c}")
    if len(got) == 2:
        for k in got["graph"]:
            check(np.array_equal(got["graph"][k], got["stream"][k]),
                  f"{name}: output {k} differs between the graph replay and stream launches")


def losses(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def train_case(tmp, name, model, data, extra, steps):
    logs = {}
    name = re.sub(r"[^\w.=,-]", "_", name)
    for dev in ("cpu", "cuda"):
        lj, fl = os.path.join(tmp, f"{name}.{dev}.jsonl"), os.path.join(tmp, f"{name}.fake.log")
        traces = os.path.join(tmp, f"{name}.{dev}.traces")
        os.makedirs(traces)
        r = shardc(["train", model, "--steps", str(steps), "--log-json", lj, "--quiet",
                    "--device", dev, "--no-allow-tf32"] + data + extra, dict(emulated(fl), SHARDC_COMM_TRACE=traces))
        if not check(r.returncode == 0, f"train {name} on {dev}: {r.stderr[-400:]}"):
            return
        logs[dev] = losses(lj)
        ok, why, calls = comm_traces_match(traces)
        check(ok and (calls > 0) == ("--mesh" in extra),
              f"train {name} on {dev}: the ranks' collective traces ({calls} calls): {why}")
    check(len(logs["cpu"]) == steps and len(logs["cuda"]) == steps,
          f"train {name}: {len(logs['cuda'])} steps logged")
    for a, b in zip(logs["cpu"], logs["cuda"]):
        for key in ("loss", "grad_norm"):
            x, y = a[key], b[key]
            check(np.isfinite(y) and abs(x - y) <= 2e-5 * abs(x),
                  f"train {name}: step {a['step']} {key} {y} vs cpu {x}")
    c = summary(os.path.join(tmp, f"{name}.fake.log"))
    check(c.get("violations", -1) == 0, f"train {name}: fake driver violations {c}")


def safetensors(path):
    """{name: array} of a safetensors file (header length, JSON, data)."""
    with open(path, "rb") as f:
        raw = f.read()
    n = int.from_bytes(raw[:8], "little")
    head = json.loads(raw[8:8 + n])
    types = {"F32": np.float32, "BF16": np.uint16, "F16": np.float16, "I64": np.int64}
    out = {}
    for k, v in head.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        out[k] = np.frombuffer(raw[8 + n + a:8 + n + b], dtype=types[v["dtype"]]).reshape(v["shape"])
    return out


def same_files(a, b):
    names = sorted(os.listdir(a))
    if names != sorted(os.listdir(b)):
        return False
    for n in names:
        with open(os.path.join(a, n), "rb") as x, open(os.path.join(b, n), "rb") as y:
            if x.read() != y.read():
                return False
    return True


def resident_state_checks(tmp, cases):
    """Training state kept in the device arena between steps (module comment).
    cases: (name, model, data args, options, batch bytes, index bytes)."""
    for name, model, data, extra, batch_bytes, index_bytes in cases:
        d = os.path.join(tmp, "resident-" + name)
        os.makedirs(d)
        base = ["train", model, "--device", "cuda", "--no-allow-tf32"] + data + extra

        def train(tag, steps, more, env=None):
            log = os.path.join(d, tag + ".log")
            r = shardc(base + ["--steps", str(steps), "--log-json", os.path.join(d, tag + ".jsonl"),
                               "--save", os.path.join(d, tag + ".ck")] + more,
                       dict(emulated(log), **(env or {})))
            check(r.returncode == 0, f"resident {name} {tag}: {r.stderr[-400:]}")
            return r, summary(log)

        r2, c2 = train("s2", 2, [])
        r4, c4 = train("s4", 4, [])
        m = re.search(r"(\d+) of (\d+) state tensors updated in place", r4.stdout + r4.stderr)
        check(m and m.group(1) == m.group(2) and int(m.group(2)) > 0,
              f"resident {name}: not every state tensor in place: {m.group(0) if m else r4.stderr[-300:]}")
        ck4 = os.path.join(d, "s4.ck")
        state_bytes = sum(os.path.getsize(os.path.join(ck4, f)) for f in os.listdir(ck4)
                          if f.endswith(".safetensors"))
        if not REAL:
            hin = (c4.get("htod_bytes", -1) - c2.get("htod_bytes", 0)) / 2
            hout = (c4.get("dtoh_bytes", -1) - c2.get("dtoh_bytes", 0)) / 2
            print(f"resident {name}: per step {hin:.0f} bytes in, {hout:.0f} out "
                  f"(batch {batch_bytes}, state {state_bytes})")
            check(batch_bytes + 12 <= hin <= batch_bytes + 12 + index_bytes and
                  9 <= hout <= 9 + 3 * index_bytes and hin + hout < state_bytes / 100,
                  f"resident {name}: a step copies {hin} bytes in and {hout} out; the batch is "
                  f"{batch_bytes} bytes, the state {state_bytes}")
            check(c4.get("violations", -1) == 0, f"resident {name}: violations {c4}")
        # graphs against stream launches, bit for bit
        train("stream", 4, ["--no-cuda-graph"])
        a, b = losses(os.path.join(d, "s4.jsonl")), losses(os.path.join(d, "stream.jsonl"))
        check(len(a) == 4 and [(x["loss"], x["grad_norm"]) for x in a] ==
              [(x["loss"], x["grad_norm"]) for x in b],
              f"resident {name}: graph and --no-cuda-graph logs differ")
        check(same_files(ck4, os.path.join(d, "stream.ck")),
              f"resident {name}: graph and --no-cuda-graph checkpoints differ")
        # against the CPU
        cpu = os.path.join(d, "cpu")
        r = shardc(["train", model, "--device", "cpu", "--steps", "4", "--log-json", cpu + ".jsonl",
                    "--save", cpu + ".ck", "-q"] + data + extra)
        if check(r.returncode == 0, f"resident {name} on the cpu: {r.stderr[-300:]}"):
            for x, y in zip(losses(cpu + ".jsonl"), a):
                for key in ("loss", "grad_norm"):
                    check(np.isfinite(y[key]) and abs(x[key] - y[key]) <= 2e-5 * abs(x[key]),
                          f"resident {name}: step {x['step']} {key} {y[key]} vs cpu {x[key]}")
            import onnx
            from onnx import numpy_helper
            init = {t.name: numpy_helper.to_array(t) for t in onnx.load(model).graph.initializer}
            wc = safetensors(os.path.join(cpu + ".ck", "weights.safetensors"))
            wg = safetensors(os.path.join(ck4, "weights.safetensors"))
            check(sorted(wc) == sorted(wg) and all(k in init for k in wc),
                  f"resident {name}: weights {sorted(wg)}")
            worst = 0.0
            for k in wc if sorted(wc) == sorted(wg) and all(k in init for k in wc) else []:
                ref, got = wc[k].astype(np.float64), wg[k].astype(np.float64)
                update = float(np.max(np.abs(ref - init[k].astype(np.float64))))
                diff = float(np.max(np.abs(ref - got)))
                worst = max(worst, diff / max(update, 1e-30))
                check(not np.isnan(got).any() and update > 0 and diff <= 2e-2 * update,
                      f"resident {name}: weight {k} differs from the cpu's by {diff:.3g}, "
                      f"its largest update {update:.3g}")
            print(f"resident {name}: weights against the cpu's: at most {worst:.3g} of an update")
        # save after 2 steps, resume for 2 more: the files of 4 steps straight
        r = shardc(base + ["--steps", "4", "--resume", os.path.join(d, "s2.ck"), "--save",
                           os.path.join(d, "resumed.ck"), "-q"], emulated(os.path.join(d, "r.log")))
        check(r.returncode == 0 and same_files(ck4, os.path.join(d, "resumed.ck")),
              f"resident {name}: resumed checkpoint differs from 4 steps straight: {r.stderr[-300:]}")
        onnx_a, onnx_b = os.path.join(d, "a.onnx"), os.path.join(d, "b.onnx")
        ra = shardc(["export", ck4, "--model", model, "-o", onnx_a])
        rb = shardc(["export", os.path.join(d, "resumed.ck"), "--model", model, "-o", onnx_b])
        check(ra.returncode == 0 and rb.returncode == 0 and
              open(onnx_a, "rb").read() == open(onnx_b, "rb").read(),
              f"resident {name}: exports differ: {ra.stderr[-200:]} {rb.stderr[-200:]}")

def attention_case(tmp, gpt2, vit, gpt2_data):
    """Attention as fused steps on the (emulated) GPU: the CUDA device's
    fused kernels against the CPU device running the attention unfused
    (--no-fuse-attention: the graph's own MatMul, Softmax, ... kernels), in
    GPT-2's inference and over 3 training steps of GPT-2 and of ViT."""
    base = ["--dim", "batch=2", "--random-inputs", "7", "-q"]
    cpu = os.path.join(tmp, "attn.cpu")
    r = shardc(["run", gpt2] + base + ["--no-fuse-attention", "--output-dir", cpu])
    if not check(r.returncode == 0, f"attention: cpu run: {r.stderr[-300:]}"):
        return
    got = {}
    for mode, flags in (("graph", ["--repeat", "3"]), ("stream", ["--no-cuda-graph"])):
        out, log = os.path.join(tmp, f"attn.{mode}"), os.path.join(tmp, f"attn.{mode}.log")
        r = shardc(["run", gpt2] + base + ["--device", "cuda", "--no-allow-tf32", "--output-dir", out] + flags,
                   dict(emulated(log), SHARDC_CUDA_VERBOSE="1"))
        if not check(r.returncode == 0, f"attention ({mode}): cuda run: {r.stderr[-400:]}"):
            return
        n = re.search(r"(\d+) fused attention steps", r.stderr)
        check(n is not None and int(n.group(1)) >= 1,
              f"attention ({mode}): no fused attention step on the cuda device: {r.stderr[-300:]}")
        got[mode] = outputs(out)
        close(outputs(cpu), got[mode], f"attention ({mode}) vs the cpu unfused")
        c = summary(log)
        check(c.get("violations", -1) == 0, f"attention ({mode}): fake driver violations {c}")
    for k in got.get("graph", {}):
        check(np.array_equal(got["graph"][k], got["stream"][k]),
              f"attention: output {k} differs between the graph replay and stream launches")
    rng = np.random.default_rng(5)
    pix, lab = os.path.join(tmp, "attn.pix.npy"), os.path.join(tmp, "attn.lab.npy")
    np.save(pix, rng.uniform(-1, 1, (12, 3, 32, 32)).astype(np.float32))
    np.save(lab, rng.integers(0, 10, 12).astype(np.int64))
    for name, model, data in (("gpt2", gpt2, gpt2_data),
                              ("vit", vit, ["--data", "pixel_values=" + pix, "--labels", lab])):
        logs = {}
        for dev, extra in (("cpu", ["--no-fuse-attention"]), ("cuda", [])):
            lj = os.path.join(tmp, f"attn.train.{name}.{dev}.jsonl")
            log = os.path.join(tmp, f"attn.train.{name}.log")
            r = shardc(["train", model, "--steps", "3", "--log-json", lj, "--quiet", "--device",
                        dev, "--no-allow-tf32", "--dim", "batch=4", "--optimizer", "adamw"] + data
                       + extra,
                       dict(emulated(log), SHARDC_CUDA_VERBOSE="1"))
            if not check(r.returncode == 0, f"attention: train {name} on {dev}: {r.stderr[-400:]}"):
                return
            if dev == "cuda":
                n = re.search(r"(\d+) fused attention steps", r.stderr)
                check(n is not None and int(n.group(1)) >= 2,
                      f"attention: training {name} has no fused forward and gradient steps: "
                      f"{r.stderr[-300:]}")
                c = summary(log)
                check(c.get("violations", -1) == 0, f"attention: train {name}: violations {c}")
            logs[dev] = losses(lj)
        check(len(logs["cpu"]) == 3 and len(logs["cuda"]) == 3,
              f"attention: train {name}: {len(logs['cuda'])} steps logged")
        for a, b in zip(logs["cpu"], logs["cuda"]):
            for key in ("loss", "grad_norm"):
                x, y = a[key], b[key]
                check(np.isfinite(y) and abs(x - y) <= 2e-5 * abs(x),
                      f"attention: train {name} step {a['step']} {key} {y} vs cpu unfused {x}")


def not_runnable():
    """The exit status when this shardc cannot run these tests (1: SHARDC not
    set; 77: no cuda target), else None."""
    if not SHARDC:
        print("SHARDC not set")
        return 1
    if not has_cuda_target(SHARDC):
        return skip_all("this shardc has no cuda target (built without NVRTC)")
    return None


def main():
    rc = not_runnable()
    if rc is not None:
        return rc
    with tempfile.TemporaryDirectory() as tmp:
        # the trace checker catches what it is for: a rank whose collective
        # differs, a send nobody receives
        for i, (a, b) in enumerate(((["w.0:0 r0 all_reduce 8 f32"], ["w.0:0 r1 all_reduce 4 f32"]),
                                    (["w r0 send 4 f32 1 7"], ["w r1 recv 4 f32 0 8"]))):
            d = os.path.join(tmp, f"bad-trace{i}")
            os.makedirs(d)
            for r, lines in enumerate((a, b)):
                with open(os.path.join(d, f"rank{r}.trace"), "w") as f:
                    f.write("\n".join(lines) + "\n")
            check(not comm_traces_match(d)[0], f"mismatched traces {a} / {b} were not caught")
        for m in ("mlp", "gpt2", "bert", "llama", "resnet", "vit"):
            run_case(tmp, m, os.path.join(SAMPLES, m + ".onnx"), [])
        gpt2 = os.path.join(SAMPLES, "gpt2.onnx")
        meshes = () if REAL else ("tp=2", "dp=2", "pp=2", "dp=2,tp=2")  # NCCL: not yet
        for mesh in meshes:
            run_case(tmp, "gpt2-" + mesh, gpt2, ["--mesh", mesh], batch=4)
        for m in () if REAL or QUICK else ("mlp", "bert", "llama", "resnet", "vit"):
            for mesh in ("tp=2", "pp=2"):
                run_case(tmp, f"{m}-{mesh}", os.path.join(SAMPLES, m + ".onnx"),
                         ["--mesh", mesh], batch=4, modes=("graph",))

        rng = np.random.default_rng(11)
        x, lab = os.path.join(tmp, "x.npy"), os.path.join(tmp, "lab.npy")
        np.save(x, rng.standard_normal((16, 64)).astype(np.float32))
        np.save(lab, rng.integers(0, 10, 16).astype(np.int64))
        train_case(tmp, "mlp", os.path.join(SAMPLES, "mlp.onnx"),
                   ["--data", "x=" + x, "--labels", lab],
                   ["--dim", "batch=8", "--optimizer", "adamw"], 6)
        train_case(tmp, "mlp-bf16", os.path.join(SAMPLES, "mlp.onnx"),  # bf16 GEMM steps
                   ["--data", "x=" + x, "--labels", lab],
                   ["--dim", "batch=8", "--optimizer", "adamw", "--precision", "bf16"], 3)
        ids, glab = os.path.join(tmp, "ids.npy"), os.path.join(tmp, "glab.npy")
        np.save(ids, rng.integers(0, 1000, (8, 16)).astype(np.int64))
        np.save(glab, rng.integers(0, 1000, (8, 16)).astype(np.int64))
        attention_case(tmp, gpt2, os.path.join(SAMPLES, "vit.onnx"),
                       ["--data", "input_ids=" + ids, "--labels", glab])
        train_case(tmp, "gpt2" if REAL else "gpt2-fsdp2", gpt2,
                   ["--data", "input_ids=" + ids, "--labels", glab],
                   ["--dim", "batch=4", "--optimizer", "adamw"] +
                   ([] if REAL else ["--mesh", "fsdp=2"]), 2)
        # bf16 AdamW with clipping, 3 steps: the optimizer's 28 updates and the
        # gradient norm's 27 sums of squares are a multi-tensor kernel each
        # (docs/codegen.md) and each layer's GELU, one Gelu (fuse-gelu), is
        # its product's GELU_AUX epilogue, its derivative (computed in f32)
        # the backward product's DGELU epilogue, and its 8 bias gradients are
        # summed in the weight gradients' products (BGRADA/BGRADB, beside
        # the cast of dW), so the first step launches 92 kernels and the two
        # graph replays 184 (94 and 188 while the derivative's constants were
        # bf16 and it a kernel, 102 and 204 with the sums as kernels too, 104
        # and 208 with the GELU spelled out too, 130 and 260 while the sums of
        # squares were a kernel each), with no race
        log = os.path.join(tmp, "clip.fake.log")
        r = shardc(["train", gpt2, "--steps", "3", "--quiet", "--device", "cuda", "--no-allow-tf32", "--dim", "batch=4",
                    "--optimizer", "adamw", "--precision", "bf16", "--clip-grad-norm", "1",
                    "--data", "input_ids=" + ids, "--labels", glab], emulated(log))
        if check(r.returncode == 0, f"gpt2 bf16 clipped: {r.stderr[-400:]}"):
            c = summary(log)
            check(c.get("violations", -1) == 0 and
                  (REAL or (c.get("launches") == 92 and c.get("graph_launches") == 184)),
                  f"gpt2 bf16 clipped: {c}, want 92 launches, 184 in the replays, no violation")
        if not REAL and not QUICK:  # every mesh of the CPU's equivalence test
            from test_train_dist import ALL, PP
            for mesh in ALL + PP:
                train_case(tmp, "mlp " + " ".join(mesh[1:]), os.path.join(SAMPLES, "mlp.onnx"),
                           ["--data", "x=" + x, "--labels", lab],
                           ["--dim", "batch=4", "--optimizer", "sgd", "--momentum", "0.9"] + mesh,
                           2)
            for mesh in (["--mesh", "fsdp=2,tp=2"],
                         ["--mesh", "pp=2", "--microbatches", "2", "--schedule", "1f1b"]):
                train_case(tmp, "gpt2 " + " ".join(mesh[1:]), gpt2,
                           ["--data", "input_ids=" + ids, "--labels", glab],
                           ["--dim", "batch=4", "--optimizer", "adamw"] + mesh, 2)
                train_case(tmp, "llama " + " ".join(mesh[1:]), os.path.join(SAMPLES, "llama.onnx"),
                           ["--data", "input_ids=" + ids, "--labels", glab],
                           ["--dim", "batch=4", "--optimizer", "sgd", "--momentum", "0.9"] + mesh, 2)
            pix = os.path.join(tmp, "pix.npy")
            np.save(pix, rng.uniform(-1, 1, (16, 3, 32, 32)).astype(np.float32))  # as many as lab
            train_case(tmp, "vit fsdp=2,tp=2", os.path.join(SAMPLES, "vit.onnx"),
                       ["--data", "pixel_values=" + pix, "--labels", lab],
                       ["--dim", "batch=4", "--optimizer", "sgd", "--momentum", "0.9",
                        "--mesh", "fsdp=2,tp=2"], 2)

        # training state resident on the device between steps
        resident_state_checks(tmp, [
            ("mlp", os.path.join(SAMPLES, "mlp.onnx"), ["--data", "x=" + x, "--labels", lab],
             ["--dim", "batch=8", "--optimizer", "adamw"], 8 * 64 * 4 + 8 * 8, 0),
            ("gpt2", gpt2, ["--data", "input_ids=" + ids, "--labels", glab],
             ["--dim", "batch=4", "--optimizer", "adamw"], 2 * 4 * 16 * 8, 4 * 16 * 8)])

        # the GPU's own time for a run's steps (events around them), beside --repeat's
        # figure, which has the copies in and out too
        r = shardc(["run", gpt2, "--dim", "batch=2", "--random-inputs", "1", "-q", "--device",
                    "cuda", "--no-allow-tf32", "--repeat", "3", "--output-dir", os.path.join(tmp, "timed")],
                   dict(emulated(os.path.join(tmp, "timed.log")), SHARDC_CUDA_VERBOSE="1"))
        dt = re.search(r"device time of a run's steps: median ([0-9.]+) ms, min ([0-9.]+) ms "
                       r"over (\d+) runs", r.stderr)
        wall = re.search(r"run: median ([0-9.]+) ms", r.stderr)
        check(r.returncode == 0 and dt and wall and int(dt.group(3)) == 4 and
              0 < float(dt.group(2)) <= float(dt.group(1)) <= 2 * float(wall.group(1)),
              f"device time of a run: {r.stderr[-400:]}")

        bad = os.path.join(tmp, "bad.npy")
        np.save(bad, np.full((2, 16), 99999, dtype=np.int64))
        msgs = []
        for dev in ("cpu", "cuda"):
            r = shardc(["run", gpt2, "--dim", "batch=2", "--input", "input_ids=" + bad, "-q",
                        "--device", dev, "--no-allow-tf32", "--output-dir", os.path.join(tmp, "bad")],
                       emulated(os.path.join(tmp, "bad.log")))
            msgs.append(r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "")
            check(r.returncode == 1 and "index 99999 out of range" in r.stderr,
                  f"bad index on {dev}: exit {r.returncode}: {r.stderr[-300:]}")
        check(msgs[0] == msgs[1], f"bad index: cuda says {msgs[1]!r}, cpu {msgs[0]!r}")

        # the CUDA device's own lines, planned against allocated (run -v)
        import onnx
        from onnx import TensorProto, helper, numpy_helper
        rng = np.random.default_rng(3)
        inits = [numpy_helper.from_array(rng.standard_normal((5, 3)).astype(np.float32), "W"),
                 numpy_helper.from_array(rng.standard_normal(3).astype(np.float32), "B")]
        g = helper.make_graph(
            [helper.make_node("MatMul", ["A", "W"], ["P"]), helper.make_node("Add", ["P", "B"], ["Y"])],
            "pad", [helper.make_tensor_value_info("A", TensorProto.FLOAT, [2, 5])],
            [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, 3])], inits)
        mod = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        mod.ir_version = 8
        small = os.path.join(tmp, "pad.onnx")
        onnx.save(mod, small)
        r = shardc(["run", small, "--random-inputs", "1", "-q", "--device", "cuda", "--no-allow-tf32", "-v",
                    "--output-dir", os.path.join(tmp, "pad.out")], emulated(os.path.join(tmp, "pad.log")))
        m = re.search(r"weights padding\s+(\d+)\s+\S+ \S+\s+(\d+)", r.stderr)
        check(r.returncode == 0 and m and m.group(1) == m.group(2) == "196",
              f"run -v on cuda: the weights' padding planned and allocated: "
              f"{m.groups() if m else r.stderr[-400:]}")

        try:
            if REAL:
                raise AttributeError
            ctypes.CDLL("libcuda.so.1")
            print("a CUDA driver is installed: the no-driver message is not checked here")
        except AttributeError:
            pass
        except OSError:
            r = shardc(["run", gpt2, "--random-inputs", "1", "-q", "--device", "cuda", "--no-allow-tf32",
                        "--output-dir", os.path.join(tmp, "nodrv")], {"SHARDC_CUDA_EMU": "0"})
            check(r.returncode == 1 and "no CUDA driver" in r.stderr,
                  f"--device cuda without a driver: exit {r.returncode}: {r.stderr[-300:]}")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
