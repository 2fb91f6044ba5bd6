"""bench_run.py — how fast the code shardc generates runs, against onnxruntime.

Figures printed (never fails on a time; `make bench` runs it):
  1. Latency of every sample (mlp, resnet, gpt2, bert, llama, vit) at batch 1
     and 8: shardc and onnxruntime, each the median of --runs runs after
     --warmup runs, with the same thread count (shardc --threads T,
     onnxruntime intra_op_num_threads=T, inter_op 1, graph optimisation
     level ORT_ENABLE_ALL), and the ratio
     shardc/ort. Target: <= 1.5x on gpt2 and bert.
  2. JIT compile time of each sample, and "model file to ready to run" for
     GPT-2 (import, passes, lowering, LLVM JIT). Target: < 1 s.
  4. (listed last, printed last) Real-size models (bench/real_models.py:
     GPT-2-small's shapes at sequence 128, ResNet-18 at 224x224, random
     weights) at batch 1 and 8, shardc against onnxruntime as in 1, median
     of --real-runs runs after 1 warm-up, in --real-rounds rounds that
     alternate which of the two runs first; the ratio is the median of the
     rounds' ratios (each round printed); target <= 1.0x. --skip-real
     leaves them out (building GPT-2-small takes ~20 s once; files are
     cached in --cache).
  3. CPU GEMM: a 1024x1024x1024 float32 MatMul model (built here with
     onnx.helper) through shardc and onnxruntime, in GFLOP/s (2*M*N*K / t),
     against the machine's peak, measured by bench/fma_peak.c (built here
     with cc -O3 -march=native: T threads of register-only FMA loops, 256-
     and 512-bit, the better taken; AMD's Zen 4 runs 512-bit FMAs at half
     the rate per instruction, so flags alone overstate it twofold), or,
     when that does not build, estimated as
       threads x GHz x FLOPs/cycle/core
     with GHz from /proc/cpuinfo ("cpu MHz", or the model name) and
     FLOPs/cycle from the CPU flags: AVX-512F+FMA 64, AVX2+FMA 32, AVX 16,
     else 8 (fp32, two FMA pipes assumed). Both are printed.

How shardc's run time excludes compilation. When `shardc run --help`
offers --repeat, shardc is run once per (model, batch) with
--repeat (warm-up + runs) and the per-run latency it prints is parsed (a
line with "median" and a time; a line with "compile" and a time gives the
compile figure). Otherwise, with --time-passes (which prints "compile X ms
(...), session Y ms (JIT Z ms), run W ms"), the median over several
processes of W (one cold run each: no warm-up, so an overestimate for
small models) is the latency and X + Y the compile time. Failing both, the
fallback is process timing: the median wall
time of whole `shardc run` processes minus the median of compile-only
processes (`shardc compile --target cpu`, or `shardc run` with no inputs
bound if compile is missing). That difference is coarse (process start,
.npy output writing and noise of a few ms are inside it) and is marked
"(process-time difference)".

usage: bench_run.py [--shardc build/shardc] [--threads T] [--runs N]
                    [--warmup W] [--only gpt2,bert] [--skip-gemm]
                    [--skip-real] [--real-runs N] [--real-rounds R]
                    [--real gpt2-small,resnet18]
                    [--cache DIR]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(SRC, "samples"))

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

SAMPLES = ["mlp", "resnet", "gpt2", "bert", "llama", "vit"]
TARGET_RATIO = {"gpt2": 1.5, "bert": 1.5}
TARGET_READY_S = 1.0
TARGET_REAL_RATIO = 1.0
UNIT = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0}


# ---------------------------------------------------------------- machine

def cpu_info():
    """(model name, MHz, flags) from /proc/cpuinfo (first processor)."""
    name, mhz, flags = "unknown CPU", None, set()
    try:
        for ln in open("/proc/cpuinfo"):
            k, _, v = ln.partition(":")
            k, v = k.strip(), v.strip()
            if k == "model name" and name == "unknown CPU":
                name = v
            elif k == "cpu MHz" and mhz is None:
                mhz = float(v)
            elif k == "flags" and not flags:
                flags = set(v.split())
    except OSError:
        pass
    m = re.search(r"@\s*([0-9.]+)\s*GHz", name)
    if m:  # the nominal clock in the name beats a momentary "cpu MHz"
        mhz = float(m.group(1)) * 1000
    return name, mhz, flags


def measured_peak(threads):
    """(GFLOP/s, note) of bench/fma_peak.c (register-only FMA loops on
    `threads` threads, built here with cc -O3 -march=native), or None when
    it cannot be built or run."""
    with tempfile.TemporaryDirectory(prefix="sc-peak-") as d:
        exe = os.path.join(d, "fma_peak")
        try:
            subprocess.run([os.environ.get("CC", "cc"), "-O3", "-march=native", "-pthread",
                            os.path.join(HERE, "fma_peak.c"), "-o", exe],
                           check=True, capture_output=True, timeout=60)
            out = subprocess.run([exe, str(threads)], check=True, capture_output=True,
                                 text=True, timeout=120).stdout
        except (OSError, subprocess.SubprocessError):
            return None
    got = {k: float(v) for k, v in (ln.split() for ln in out.splitlines() if ln.strip())}
    if not got:
        return None
    isa = max(got, key=got.get)
    detail = ", ".join(f"{k} {v:.0f}" for k, v in sorted(got.items()))
    return got[isa], (f"measured: {threads} thread(s) of register-only FMA loops "
                      f"(bench/fma_peak.c; {detail} GFLOP/s) = {got[isa]:.0f} GFLOP/s")


def peak_gflops(threads):
    """The peak that GEMM figures are compared with: measured when
    bench/fma_peak.c builds here, else estimated from the flags and clock
    (the estimate is printed too)."""
    est, est_note = estimated_peak(threads)
    m = measured_peak(threads)
    if m is None:
        return est, est_note + " (estimated: bench/fma_peak.c did not build or run)"
    return m[0], f"{m[1]}; estimated from the flags: {est_note}"


def estimated_peak(threads):
    name, mhz, flags = cpu_info()
    if "avx512f" in flags and "fma" in flags:
        fpc, isa = 64, "AVX-512 FMA"
    elif "avx2" in flags and "fma" in flags:
        fpc, isa = 32, "AVX2 FMA"
    elif "avx" in flags:
        fpc, isa = 16, "AVX"
    else:
        fpc, isa = 8, "SSE"
    ghz = (mhz or 2000.0) / 1000.0
    peak = threads * ghz * fpc
    note = (f"{name}: {threads} core(s) x {ghz:.2f} GHz"
            f"{'' if mhz else ' (assumed: no clock in /proc/cpuinfo)'} x {fpc} fp32 FLOPs/cycle "
            f"({isa}, 2 FMA pipes of {fpc // 4} lanes assumed) = {peak:.0f} GFLOP/s")
    return peak, note


# ---------------------------------------------------------------- inputs

def sample_feeds(model, batch, seed=1):
    """Seeded inputs as samples/check_samples.py makes them (ids within the
    vocabulary, masks of ones, normal floats)."""
    import check_samples
    return check_samples.make_feeds(model, batch, np.random.default_rng(seed))


# ---------------------------------------------------------------- onnxruntime

def ort_session(path, threads):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.log_severity_level = 3
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def ort_latency(path, feeds, threads, runs, warmup, sess=None):
    """Median seconds of `runs` runs after `warmup`, in sess or a new
    session of path."""
    sess = sess or ort_session(path, threads)
    for _ in range(warmup):
        sess.run(None, feeds)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        sess.run(None, feeds)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


# ---------------------------------------------------------------- shardc

class Shardc:
    def __init__(self, exe, threads):
        self.exe, self.threads = exe, threads
        self.help = self._help("run")
        self.has_run = "--output-dir" in self.help
        self.has_repeat = "--repeat" in self.help
        self.has_time = "--time-passes" in self.help
        self.has_compile = "--target" in self._help("compile")

    def _help(self, cmd):
        try:
            p = subprocess.run([self.exe, cmd, "--help"], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, timeout=30)
            return p.stdout.decode(errors="replace")
        except (OSError, subprocess.TimeoutExpired):
            return ""

    def _inputs(self, feeds, folder):
        args = []
        for name, arr in feeds.items():
            p = os.path.join(folder, re.sub(r"[^A-Za-z0-9_.-]", "_", name) + ".npy")
            np.save(p, arr)
            args += ["--input", f"{name}={p}"]
        return args

    def _run(self, cmd, timeout=600):
        t0 = time.perf_counter()
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
        dt = time.perf_counter() - t0
        text = p.stdout.decode(errors="replace") + p.stderr.decode(errors="replace")
        if p.returncode != 0:
            raise RuntimeError(f"exit {p.returncode}: {' '.join(cmd)}\n{text.strip()[-600:]}")
        return dt, text

    def run_cmd(self, path, feeds, dims, folder):
        cmd = [self.exe, "run", path, "--threads", str(self.threads),
               "--output-dir", os.path.join(folder, "out")]
        for k, v in dims.items():
            cmd += ["--dim", f"{k}={v}"]
        return cmd + self._inputs(feeds, folder)

    @staticmethod
    def _parse_time(text, word):
        """Seconds from the first line holding `word` and a number with a
        unit (e.g. 'run: median 1.234 ms over 20 runs')."""
        for ln in text.splitlines():
            if word in ln.lower():
                m = re.search(rf"{word}\D*?([0-9]+(?:\.[0-9]*)?(?:e[-+]?\d+)?)\s*(ns|us|µs|ms|s)\b",
                              ln.lower())
                if m:
                    return float(m.group(1)) * UNIT[m.group(2)]
        return None

    def latency(self, path, feeds, dims, runs, warmup):
        """(run seconds, compile seconds or None, method)."""
        with tempfile.TemporaryDirectory(prefix="sc-bench-") as d:
            cmd = self.run_cmd(path, feeds, dims, d)
            if self.has_repeat:
                extra = ["--repeat", str(runs)]
                if "--warmup" in self.help:
                    extra += ["--warmup", str(warmup)]
                _, text = self._run(cmd + extra)
                t = self._parse_time(text, "median")
                if t is not None:
                    return t, self._parse_time(text, "compile"), "shardc --repeat"
            if self.has_time:
                reps = [self.timed(cmd) for _ in range(max(3, runs // 4))]
                if all(r[0] is not None for r in reps):
                    return (statistics.median(r[0] for r in reps),
                            statistics.median(r[2] for r in reps),
                            f"--time-passes, 1 cold run per process x {len(reps)}")
            whole = [self._run(cmd)[0] for _ in range(max(3, runs // 4))]
            comp = self.compile_seconds(path, dims, max(3, runs // 4), d)
            return (max(0.0, statistics.median(whole) - comp), None,
                    "process-time difference")

    def timed(self, cmd):
        """(run s, compile+session s, JIT s, process wall s) of one process
        from the line `shardc run --time-passes` prints:
          compile X ms (...), session Y ms (JIT Z ms), run W ms on N threads"""
        wall, text = self._run(cmd + ["--time-passes", "--quiet"])
        m = re.search(r"compile ([0-9.]+) ms.*?session ([0-9.]+) ms \(JIT ([0-9.]+) ms\), "
                      r"run ([0-9.]+) ms", text)
        if not m:
            return None, None, None, wall
        c, ses, jit, run = (float(x) * 1e-3 for x in m.groups())
        return run, c + ses, jit, wall

    def compile_seconds(self, path, dims, runs, folder):
        """Median wall time of a compile-only process (see the file comment)."""
        if self.has_compile:
            cmd = [self.exe, "compile", path, "--target", "cpu", "-o",
                   os.path.join(folder, "artifact")]
        else:  # run with nothing to do but import and compile: no such mode
            return 0.0
        for k, v in dims.items():
            cmd += ["--dim", f"{k}={v}"]
        return statistics.median(self._run(cmd)[0] for _ in range(runs))

    def ready_seconds(self, path, feeds, dims):
        """Model file to ready to run: the compile figure shardc prints with
        --repeat 1, else a whole process run (an upper bound)."""
        with tempfile.TemporaryDirectory(prefix="sc-bench-") as d:
            cmd = self.run_cmd(path, feeds, dims, d)
            if self.has_repeat:
                _, text = self._run(cmd + ["--repeat", "1"])
                t = self._parse_time(text, "compile")
                if t is not None:
                    return t, "compile time printed by shardc"
            if self.has_time:
                reps = [self.timed(cmd) for _ in range(3)]
                if all(r[1] is not None for r in reps):
                    ready = statistics.median(r[1] for r in reps)
                    wall = statistics.median(r[3] for r in reps)
                    return ready, (f"passes+lowering+memplan+JIT from --time-passes, import not "
                                   f"included; whole process incl. import, run and output "
                                   f"files: {wall * 1e3:.1f} ms")
            return self._run(cmd)[0], "whole `shardc run` process (upper bound)"


# ---------------------------------------------------------------- GEMM

def gemm_model(path, n=1024):
    a = helper.make_tensor_value_info("A", TensorProto.FLOAT, [n, n])
    b = helper.make_tensor_value_info("B", TensorProto.FLOAT, [n, n])
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [n, n])
    g = helper.make_graph([helper.make_node("MatMul", ["A", "B"], ["Y"])], "gemm", [a, b], [y])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)
    rng = np.random.default_rng(7)
    return {"A": rng.standard_normal((n, n)).astype(np.float32),
            "B": rng.standard_normal((n, n)).astype(np.float32)}


# ---------------------------------------------------------------- main

def fmt_ms(t):
    return "   n/a  " if t is None else f"{t * 1e3:8.3f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shardc", default=os.environ.get("SHARDC", os.path.join(SRC, "build", "shardc")))
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--only", default="", help="comma-separated samples")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--skip-gemm", action="store_true")
    ap.add_argument("--skip-real", action="store_true")
    ap.add_argument("--real", default="gpt2-small,resnet18")
    ap.add_argument("--real-runs", type=int, default=5)
    ap.add_argument("--real-rounds", type=int, default=3)
    ap.add_argument("--cache", default=os.path.join(SRC, "build", "bench-models"))
    args = ap.parse_args()
    samples = [s for s in args.only.split(",") if s] or SAMPLES
    batches = [int(b) for b in args.batches.split(",")]

    sc = Shardc(args.shardc, args.threads)
    print(f"threads: {args.threads} (shardc --threads, onnxruntime intra_op_num_threads); "
          f"median of {args.runs} runs after {args.warmup} warm-up")
    if not sc.has_run:
        print(f"NOTE: {args.shardc} has no `run` command: only onnxruntime figures are printed")
    elif not sc.has_repeat and sc.has_time:
        print("NOTE: `shardc run` has no --repeat: shardc latency is the one cold run per "
              "process that --time-passes reports (median over processes; no warm-up, so "
              "it overstates steady-state latency, most for the smallest models)")
    elif not sc.has_repeat:
        print("NOTE: `shardc run` has no --repeat: shardc latency is a process-time "
              "difference (run - compile-only), coarse for these small models")

    print(f"\n1. latency (ms)          {'shardc':>8s} {'ort':>8s}  ratio  method")
    ratios = {}
    compile_s = {}
    for s in samples:
        path = os.path.join(SRC, "samples", s + ".onnx")
        model = onnx.load(path)
        for b in batches:
            feeds = sample_feeds(model, b)
            t_ort = ort_latency(path, feeds, args.threads, args.runs, args.warmup)
            t_sc, comp, method = None, None, ""
            if sc.has_run:
                try:
                    t_sc, comp, method = sc.latency(path, feeds, {"batch": b}, args.runs, args.warmup)
                except (RuntimeError, subprocess.TimeoutExpired) as e:
                    method = f"FAILED: {str(e).splitlines()[-1][:80]}"
            if comp is not None:
                compile_s.setdefault(s, comp)
            ratio = t_sc / t_ort if t_sc is not None and t_ort > 0 else None
            ratios[(s, b)] = ratio
            tgt = TARGET_RATIO.get(s)
            note = ""
            if tgt and ratio is not None:
                note = f"  (target <= {tgt}x: {'met' if ratio <= tgt else 'NOT met'})"
            rs = f"{ratio:5.2f}x" if ratio is not None else "  n/a "
            print(f"   {s:7s} batch {b:<3d}     {fmt_ms(t_sc)} {fmt_ms(t_ort)} {rs}  {method}{note}",
                  flush=True)

    if sc.has_run:
        print("\n2. compile time")
        for s in samples:
            path = os.path.join(SRC, "samples", s + ".onnx")
            if s in compile_s:
                print(f"   {s:7s} compile + JIT {compile_s[s] * 1e3:8.1f} ms (printed by shardc)")
            elif sc.has_compile:
                with tempfile.TemporaryDirectory() as d:
                    try:
                        t = sc.compile_seconds(path, {"batch": 1}, 3, d)
                        print(f"   {s:7s} `shardc compile --target cpu` process {t * 1e3:8.1f} ms")
                    except (RuntimeError, subprocess.TimeoutExpired) as e:
                        print(f"   {s:7s} compile FAILED: {str(e).splitlines()[-1][:80]}")
        path = os.path.join(SRC, "samples", "gpt2.onnx")
        try:
            t, how = sc.ready_seconds(path, sample_feeds(onnx.load(path), 1), {"batch": 1})
            print(f"   gpt2 model file to ready to run: {t * 1e3:.1f} ms ({how}); "
                  f"target < {TARGET_READY_S * 1e3:.0f} ms: {'met' if t < TARGET_READY_S else 'NOT met'}")
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            print(f"   gpt2 ready-to-run FAILED: {str(e).splitlines()[-1][:80]}")

    if not args.skip_gemm:
        n = 1024
        flops = 2.0 * n * n * n
        peak, peak_note = peak_gflops(args.threads)
        print(f"\n3. GEMM {n}x{n}x{n} float32 (peak {peak_note})")
        with tempfile.TemporaryDirectory(prefix="sc-gemm-") as d:
            path = os.path.join(d, "gemm.onnx")
            feeds = gemm_model(path, n)
            runs = max(5, args.runs // 2)
            t_ort = ort_latency(path, feeds, args.threads, runs, 2)
            print(f"   onnxruntime {flops / t_ort / 1e9:8.1f} GFLOP/s ({t_ort * 1e3:.2f} ms), "
                  f"{100 * flops / t_ort / 1e9 / peak:.0f}% of peak")
            if flops / t_ort / 1e9 > peak:
                print("   (above the peak: an estimated one assumes the clock in /proc/cpuinfo, "
                      "below the boost clock, or a measured one ran on a busy machine)")
            if sc.has_run:
                try:
                    t_sc, _, method = sc.latency(path, feeds, {}, runs, 2)
                    if t_sc > 0:
                        print(f"   shardc      {flops / t_sc / 1e9:8.1f} GFLOP/s ({t_sc * 1e3:.2f} ms), "
                              f"{100 * flops / t_sc / 1e9 / peak:.0f}% of peak [{method}]")
                    else:
                        print(f"   shardc: run time below the resolution of [{method}]")
                except (RuntimeError, subprocess.TimeoutExpired) as e:
                    print(f"   shardc GEMM FAILED: {str(e).splitlines()[-1][:80]}")
    if not args.skip_real and sc.has_run:
        real_section(sc, args, batches)
    return 0


def real_section(sc, args, batches):
    """Each (model, batch) in --real-rounds rounds, each the median of
    --real-runs runs after 1 warm-up of onnxruntime (one session for all
    rounds) and of shardc (a process per round), the two in turns (odd
    rounds onnxruntime first, even ones shardc first), so that a slow
    spell of a shared machine falls on both rather than on one; the ratio
    is the median of the rounds' ratios, and every round is printed."""
    import real_models
    print(f"\n4. real-size models (ms; median of {args.real_runs} runs after 1 warm-up, "
          f"{args.real_rounds} alternating rounds; ratio: median of the rounds'; "
          f"target <= {TARGET_REAL_RATIO}x)")
    for name in [s for s in args.real.split(",") if s]:
        path = real_models.model_path(name, args.cache)
        for b in batches:
            feeds = real_models.feeds(name, b)
            sess = ort_session(path, args.threads)
            rounds, method = [], ""
            try:
                for r in range(args.real_rounds):
                    t = {}
                    for who in (("ort", "sc") if r % 2 == 0 else ("sc", "ort")):
                        if who == "ort":
                            t[who] = ort_latency(path, feeds, args.threads, args.real_runs, 1, sess)
                        else:
                            t[who], _, method = sc.latency(path, feeds, {"batch": b},
                                                           args.real_runs, 1)
                    rounds.append((t["sc"], t["ort"]))
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                print(f"   {name:10s} batch {b:<3d} FAILED: {str(e).splitlines()[-1][:80]}")
                continue
            del sess
            r = statistics.median(a / o for a, o in rounds)
            t_sc = statistics.median(a for a, _ in rounds)
            t_ort = statistics.median(o for _, o in rounds)
            each = ", ".join(f"{a * 1e3:.1f}/{o * 1e3:.1f} {a / o:.2f}x" for a, o in rounds)
            print(f"   {name:10s} batch {b:<3d} {fmt_ms(t_sc)} {fmt_ms(t_ort)} {r:5.2f}x  {method}"
                  f"  (target <= {TARGET_REAL_RATIO}x: {'met' if r <= TARGET_REAL_RATIO else 'NOT met'})"
                  f"\n      rounds (shardc/onnxruntime ms): {each}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
