"""test_calibrate.py — `shardc calibrate --device cpu --quick -o FILE` on this
machine (docs/planner.md, section 5).

  * it exits 0 within 60 s and writes a profile that parses as JSON with
    every key of the format (docs/planner.md, "The profile file"), and that
    shardc itself reads back strictly: `shardc plan --train --cluster
    cpu:local@FILE --mesh dp=2` predicts a step time (before, cpu:local is
    "uncalibrated"); measured with the threads dp=2's ranks get
    (max(1, cores // 2)), its sync rows are those of the rank counts that
    get as many; the default (all cores a rank) writes none, and a row of
    a profile of other threads a rank changes no prediction;
  * every figure is positive and finite, and sane: each GEMM rate at most
    cores x frequency x 64 FLOP/cycle x 2 (64: two 16-lane fp32 FMA pipes of
    AVX-512, the widest x86 has; 2: the turbo over the base frequency that
    /proc/cpuinfo reports — this test's 2-core AMD EPYC reports 2.6 GHz and
    bench/fma_peak.c measures 516 GFLOP/s, 99 FLOP/cycle at that clock), and
    its seconds equal to 2mnk / rate; the memory bandwidth between 0.5 GB/s
    and 1 TB/s; the step overhead under 1 ms; the local communicator's
    latency under 10 ms a hop, its bandwidth between 1 MB/s and 1 TB/s, its
    groups up to at least 2 ranks;
  * `--device cuda` without a driver exits 1 saying so ("calibrate --device
    cuda: no CUDA driver"; the GPU's measurement: tests/gpu); a
    profile that cannot be written exits 1 naming its path once; a bad
    option exits 2.

Environment: SHARDC, SC_SOURCE_DIR. Exit 0 on success, 1 on any failure.
"""
import json
import re
import math
import os
import subprocess
import sys
import tempfile
import time

from checks import check, finish

SHARDC = os.environ.get("SHARDC")
SRC = os.environ.get("SC_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))


def cpu_hz():
    """The highest frequency /proc/cpuinfo or cpufreq report, in Hz."""
    best = 0.0
    try:
        for ln in open("/proc/cpuinfo"):
            if ln.startswith("cpu MHz"):
                best = max(best, float(ln.split(":")[1]) * 1e6)
    except OSError:
        pass
    try:
        best = max(best, float(open("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")
                               .read()) * 1e3)
    except (OSError, ValueError):
        pass
    return best or 5e9  # unknown: 5 GHz, above any x86 part's base clock


def positive(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def main():
    gpt2 = os.path.join(SRC, "samples", "gpt2.onnx")
    with tempfile.TemporaryDirectory(prefix="sc-calibrate-") as d:
        prof = os.path.join(d, "profile.json")
        plan = [SHARDC, "plan", gpt2, "--train", "--dim", "batch=8", "--mesh", "dp=2"]
        r = subprocess.run(plan + ["--cluster", "cpu:local"], capture_output=True, text=True,
                           timeout=300)
        check("uncalibrated" in r.stdout + r.stderr,
              f"cpu:local without a profile should say uncalibrated: {r.stdout[-300:]}")

        # the threads each of dp=2's ranks gets (runtime/dist_train.c): the
        # profile's rates and sync rows are for ranks of that many threads
        cores = os.cpu_count() or 1
        t2 = max(1, cores // 2)
        t0 = time.monotonic()
        r = subprocess.run([SHARDC, "calibrate", "--device", "cpu", "--quick", "--threads",
                            str(t2), "-o", prof], capture_output=True, text=True, timeout=120)
        took = time.monotonic() - t0
        print(f"calibrate --quick took {took:.1f} s")
        if not check(r.returncode == 0, f"calibrate exit {r.returncode}: {r.stderr[-2000:]}"):
            return finish()
        check(took < 60, f"calibrate --quick took {took:.1f} s (want a few seconds)")
        p = json.load(open(prof))
        check(set(p) == {"format", "device", "gemm", "memory_bytes_per_s",
                         "memory_thread_bytes_per_s", "step_overhead_s", "kernel", "attention",
                         "comms", "sync", "calibrate_s"}, f"profile keys {sorted(p)}")
        # one thread's streaming bandwidth: positive; the pool's own figure
        # when the rank has one thread (the same measurement)
        mt = p.get("memory_thread_bytes_per_s", 0)
        check(positive(mt) and (p["device"]["threads"] > 1 or mt == p["memory_bytes_per_s"]),
              f"memory_thread_bytes_per_s {mt} (pool {p['memory_bytes_per_s']})")
        # the fused attention's model: a row per dtype and direction, three
        # positive seconds each, under 100 us (a sanity bound: a Debug build
        # under AddressSanitizer measured 1.2 us a row, an optimised build
        # at most 0.22 us); the backward (scores twice, four products)
        # dearer than the forward at GPT-2 small's head (128 x 64, causal)
        att = {(a["dtype"], a["grad"]): a for a in p.get("attention", [])}
        check(set(att) == {("fp32", False), ("fp32", True), ("bf16", False), ("bf16", True)},
              f"attention rows {sorted(att)}")
        for a in att.values():
            check(set(a) == {"dtype", "grad", "row_s", "score_s", "mac_s"} and
                  all(positive(a[k]) and a[k] < 1e-4 for k in ("row_s", "score_s", "mac_s")),
                  f"attention {a}")
        def attn_s(a):  # profile.h's features of 128 causal rows, d 64 (blocks of 64)
            scores = 64 * 64 + 64 * 128
            return a["row_s"] * 128 + a["score_s"] * scores + a["mac_s"] * scores * 128
        for dt in ("fp32", "bf16"):
            if (dt, False) in att and (dt, True) in att:
                check(attn_s(att[(dt, True)]) > attn_s(att[(dt, False)]),
                      f"attention {dt}: the backward not dearer than the forward")
        # the CPU's kernel model: four positive seconds per feature, a
        # transcendental function dearer than a float operation
        kern = p.get("kernel", {})
        check(set(kern) == {"row_s", "op_s", "transcendental_s", "gather_s"} and
              all(positive(v) and v < 1e-6 for v in kern.values()), f"kernel {kern}")
        check(kern.get("transcendental_s", 0) > kern.get("op_s", 1),
              f"kernel: a transcendental ({kern.get('transcendental_s')}) not above an op "
              f"({kern.get('op_s')})")
        check(p["format"] == "shardc-profile-1", f"format {p['format']}")
        dev = p["device"]
        check(dev["threads"] == t2, f"device threads {dev['threads']}, want {t2}")
        check(dev["kind"] == "cpu" and dev["name"] and 1 <= dev["threads"] <= cores,
              f"device {dev}")
        bound = cores * cpu_hz() * 64 * 2
        dtypes = set()
        for g in p["gemm"]:
            dtypes.add(g["dtype"])
            ok = all(positive(g[k]) for k in ("m", "n", "k", "seconds", "flops_per_s"))
            check(ok and g["flops_per_s"] < bound,
                  f"GEMM {g}: rate not positive or above {bound / 1e9:.0f} GFLOP/s")
            if ok:
                want = 2 * g["m"] * g["n"] * g["k"] / g["seconds"]
                check(abs(g["flops_per_s"] - want) <= 1e-9 * want, f"GEMM {g}: rate != 2mnk/s")
        check(dtypes == {"fp32", "bf16"}, f"GEMM dtypes {dtypes}")
        layouts = {(g.get("trans_a", False), g.get("trans_b", False)) for g in p["gemm"]}
        check(layouts == {(False, False), (False, True), (True, False)},
              f"GEMM layouts {sorted(layouts)}: want nn, nt and tn")
        check(len(p["gemm"]) >= 8, f"{len(p['gemm'])} GEMM rows")
        bw = p["memory_bytes_per_s"]
        check(positive(bw) and 0.5e9 <= bw <= 1e12, f"memory bandwidth {bw}")
        so = p["step_overhead_s"]
        check(positive(so) and so < 1e-3, f"step overhead {so}")
        local = [c for c in p["comms"] if c["name"] == "local"]
        if check(len(local) == 1, f"comms {p['comms']}"):
            c = local[0]
            check(positive(c["latency_s"]) and c["latency_s"] < 1e-2, f"local latency {c}")
            check(positive(c["bandwidth_bytes_per_s"]) and
                  1e6 <= c["bandwidth_bytes_per_s"] <= 1e12, f"local bandwidth {c}")
            check(positive(c["overhead_s"]) and c["max_ranks"] >= 2, f"local {c}")
            # ranks that compute and meet: a row for each group of
            # 2..max_ranks whose ranks the runtime gives the profile's
            # threads (max(1, cores // R)), a positive call cost under 10
            # ms (a sanity bound), a compute factor of at least 1 (never
            # faster than alone); when written, a cost per second computed
            # before the meeting of at most R - 1 (waiting for every other
            # rank's compute in turn) and its cap under 10 ms
            sync = {y["ranks"]: y for y in p.get("sync", [])}
            want = {n for n in range(2, c["max_ranks"] + 1) if max(1, cores // n) == t2}
            check(2 in want and set(sync) == want, f"sync rows {sorted(sync)}, want {sorted(want)}")
            for y in sync.values():
                check({"ranks", "call_s", "stretch"} <= set(y) <=
                      {"ranks", "call_s", "call_per_compute", "call_max_s", "stretch"} and
                      positive(y["call_s"]) and y["call_s"] < 1e-2 and
                      1 <= y["stretch"] <= 1e3 and
                      0 < y.get("call_per_compute", 1) <= y["ranks"] - 1 and
                      0 < y.get("call_max_s", 1e-3) < 1e-2, f"sync {y}")
        check(positive(p["calibrate_s"]) and p["calibrate_s"] <= took + 1,
              f"calibrate_s {p['calibrate_s']} against {took:.1f} s measured outside")
        for k, v in (("GEMM rows", len(p["gemm"])), ("memory GB/s", bw / 1e9),
                     ("step overhead us", so * 1e6)):
            print(f"  {k}: {v:.3g}")

        # shardc reads it back strictly and predicts a time with it
        r = subprocess.run(plan + ["--cluster", f"cpu:local@{prof}"], capture_output=True,
                           text=True, timeout=300)
        check(r.returncode == 0 and "step time:" in r.stdout and "uncalibrated" not in r.stdout,
              f"plan with the profile: exit {r.returncode}: {r.stdout[-500:]} {r.stderr[-500:]}")

        # the sync rows, used: with a row for 2 ranks of stretch 2 and a
        # call of 1 ms, dp=2's compute grows, by less than 1.98x (the ranks
        # sleep through the calls, so fewer than 2 compute at once:
        # codegen/dist_sim.c, SHARE_ROUNDS), and its exposed
        # communication grows by at least 1 ms (a synchronous all-reduce
        # of the loss waits its whole time); a row for another count
        # changes nothing
        def predicted(prof_json, cmd=plan):
            path = os.path.join(d, "edited.json")
            json.dump(prof_json, open(path, "w"))
            r = subprocess.run(cmd + ["--json", "--cluster", f"cpu:local@{path}"],
                               capture_output=True, text=True, timeout=300)
            check(r.returncode == 0, f"plan --json: exit {r.returncode}: {r.stderr[-500:]}")
            return json.loads(r.stdout)["predicted"]["breakdown"] if r.returncode == 0 else None
        base = predicted(dict(p, sync=[{"ranks": 3, "call_s": 1e-3, "stretch": 2.0}]))
        slow = predicted(dict(p, sync=[{"ranks": 2, "call_s": 1e-3, "stretch": 2.0}]))
        if base and slow:
            check(1.01 * base["compute_s"] < slow["compute_s"] < 1.98 * base["compute_s"],
                  f"stretch 2: compute {slow['compute_s']} against {base['compute_s']} (want "
                  f"between 1.01x and 1.98x)")
            check(sum(slow["exposed_comm_s"].values()) >= sum(base["exposed_comm_s"].values()) +
                  1e-3, f"call 1 ms: comm {slow['exposed_comm_s']} against "
                  f"{base['exposed_comm_s']}")
            if "sync" in p:
                none = predicted({k: v for k, v in p.items() if k != "sync"})
                check(none == base, f"a row for 3 ranks changed dp=2: {none} against {base}")
            # a profile of another thread count a rank: its row for 2 ranks
            # is not what dp=2's ranks do, and changes nothing
            other = dict(p, device=dict(p["device"], threads=t2 + 1))
            none = predicted(dict(other, sync=[{"ranks": 3, "call_s": 1e-3, "stretch": 2.0}]))
            used = predicted(dict(other, sync=[{"ranks": 2, "call_s": 1e-3, "stretch": 2.0}]))
            check(none == used, f"a row of {t2 + 1} threads a rank changed dp=2: {used} "
                                f"against {none}")

        # a pipeline's ranks idle through their bubbles and hand-offs, so
        # its compute is stretched by the share of the ranks busy at once
        # (codegen/dist_sim.c, SHARE_ROUNDS): more than without the row,
        # less than all of its stretch
        # (each pipeline rank's compute, from the text report's table: the
        # JSON's breakdown is the critical rank's, which may change)
        pipe = plan[:plan.index("--mesh")] + ["--mesh", "pp=2", "--microbatches", "4",
                                              "--schedule", "1f1b"]

        def pipe_compute(prof_json):
            path = os.path.join(d, "edited.json")
            json.dump(prof_json, open(path, "w"))
            r = subprocess.run(pipe + ["--cluster", f"cpu:local@{path}"], capture_output=True,
                               text=True, timeout=300)
            unit = {"s": 1, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
            rows = re.findall(r"^  (\d+) +\d+ +([0-9.]+) (s|ms|us|ns) ", r.stdout, re.M)
            check(r.returncode == 0 and len(rows) == 2,
                  f"pp=2 plan: exit {r.returncode}, rows {rows}: {r.stdout[-500:]}")
            return [float(v) * unit[u] for _, v, u in rows] if len(rows) == 2 else None
        base = pipe_compute(dict(p, sync=[{"ranks": 3, "call_s": 1e-3, "stretch": 2.0}]))
        slow = pipe_compute(dict(p, sync=[{"ranks": 2, "call_s": 1e-3, "stretch": 2.0}]))
        print(f"pp=2 compute a rank, stretch 1 / 2 at 2 ranks: {base} / {slow}")
        for q in range(2 if base and slow else 0):
            check(1.01 * base[q] < slow[q] < 1.98 * base[q],
                  f"pp=2, stretch 2 at 2 ranks: pipeline rank {q}'s compute {slow[q]} against "
                  f"{base[q]} (want between 1.01x and 1.98x)")

        # a GPU's measurement: tests/gpu/test_calibrate_cuda.py; without a
        # driver it fails cleanly (the emulated GPU is not asked for here)
        e = dict(os.environ, SHARDC_CUDA_EMU="0")
        r = subprocess.run([SHARDC, "calibrate", "--device", "cuda", "--quick"],
                           capture_output=True, text=True, timeout=600, env=e)
        check(r.returncode == 0 or (r.returncode == 1 and "calibrate --device cuda: " in r.stderr
                                    and ("no CUDA" in r.stderr or "CUDA backend" in r.stderr)),
              f"--device cuda: exit {r.returncode}: {r.stderr}")
        # all the cores a rank (the default): no rank count of 2 or more
        # gets that many threads, so no sync rows (2 ranks of 2 threads
        # each on 2 cores measured a call cost below zero and a compute
        # factor of 114 where none is run)
        if cores > 1:
            allc = os.path.join(d, "all-cores.json")
            r = subprocess.run([SHARDC, "calibrate", "--device", "cpu", "--quick", "-o", allc],
                               capture_output=True, text=True, timeout=120)
            if check(r.returncode == 0, f"calibrate (all cores): exit {r.returncode}"):
                q = json.load(open(allc))
                check(q["device"]["threads"] == cores and not q.get("sync"),
                      f"all cores: threads {q['device']['threads']}, sync {q.get('sync')}")
                check("no row" in r.stderr + r.stdout, "calibrate does not say why no sync rows")
        bad = os.path.join(d, "no-such-dir", "p.json")
        r = subprocess.run([SHARDC, "calibrate", "--quick", "--quiet", "-o", bad],
                           capture_output=True, text=True, timeout=120)
        check(r.returncode == 1 and r.stderr.count(bad) == 1 and "calibrate.ir" not in r.stderr,
              f"-o into a missing folder: exit {r.returncode}: {r.stderr}")
        r = subprocess.run([SHARDC, "calibrate", "--bogus"], capture_output=True, text=True,
                           timeout=60)
        check(r.returncode == 2 and "--bogus" in r.stderr, f"--bogus: exit {r.returncode}")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
