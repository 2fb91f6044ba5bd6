"""checks.py — what the tests in this folder share to report: each calls
check(cond, what) for every requirement (a failure is printed at once and
listed in `failures`) and exits 1 at the end when `failures` is not empty
(finish()). A part that cannot run here (no NVRTC, no mpirun, ...) is
reported with skip_part(what, why); a test none of whose parts can run
returns skip_all(why): 77, which ctest reports as skipped. refused(...)
checks that shardc refuses a model file, refused_model(...) an onnx model,
and equals_onnxruntime(...) that `shardc run` computes what onnxruntime
does; run_shardc(...) runs the command line and captures its output."""
import os
import re
import subprocess

failures = []
checked = 0
skipped = []  # "what: why" of each part not run


def skip_part(what, why):
    """Records and prints a part of the test that did not run, and why."""
    skipped.append(f"{what}: {why}")
    print(f"PARTIAL SKIP: {what}: {why}")


def skip_all(why):
    """Prints why nothing of the test can run here; returns 77 (the exit
    status ctest reports as skipped)."""
    print(f"SKIPPED: {why}")
    return 77


def has_cuda_target(shardc):
    """Whether shardc was built with the CUDA emitter (NVRTC): SHARDC_CUDA on
    in its build folder's CMake cache and nvrtc.h present (as lit's
    shardc-cuda feature). Without a cache beside it, assumed so (a failing
    compile then says why)."""
    cache = os.path.join(os.path.dirname(os.path.abspath(shardc)), "CMakeCache.txt")
    if not os.path.exists(cache):
        return True
    text = open(cache).read()
    home = re.search(r"^SHARDC_CUDA_HOME:PATH=(.*)$", text, re.M)
    home = home.group(1) if home else "/usr/local/cuda"
    return "SHARDC_CUDA:BOOL=ON" in text and os.path.exists(os.path.join(home, "include", "nvrtc.h"))


def run_shardc(shardc, args, env=None, timeout=300):
    """Runs `shardc args...` with env's variables added to this process's
    environment; the CompletedProcess, stdout and stderr as text."""
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([shardc] + list(args), capture_output=True, text=True,
                          timeout=timeout, env=e)


def fake_cuda_summary(log):
    """The emulated GPU's closing counts ({"violations": 0, "launches": ...}):
    the last "summary:" line of the fake driver's log (SHARDC_FAKE_CUDA_LOG);
    {} when it wrote none."""
    counts = {}
    with open(log) as f:
        for line in f:
            if line.startswith("summary:"):
                counts = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", line)}
    return counts


def check(cond, what):
    """Records and prints `what` as a failure when cond is false; returns cond."""
    global checked
    checked += 1
    if not cond:
        failures.append(what)
        print("FAIL:", what)
    return cond


def refused(shardc, path, needles, what):
    """`shardc inspect path` must exit 1 with every string of needles in its
    message (and no crash)."""
    r = subprocess.run([shardc, "inspect", path], capture_output=True, text=True, timeout=60)
    return check(r.returncode == 1 and all(n in r.stderr for n in needles),
                 f"{what}: exit {r.returncode}, want 1 naming {needles}: {r.stderr.strip()}")


def finish():
    """The exit status: 1 (after a count) when a check failed; else 77 when
    parts were skipped and nothing was checked; else 0 (the skipped parts
    listed again)."""
    if failures:
        print(f"{len(failures)} failure(s)")
        return 1
    if skipped and not checked:
        return skip_all("every part skipped: " + "; ".join(skipped))
    if skipped:
        print(f"PARTIAL SKIP: {len(skipped)} part(s) not run: " + "; ".join(skipped))
    print(f"ok ({checked} checks)")
    return 0


def refused_model(shardc, tmp, name, m, needles):
    """refused() on the onnx ModelProto m, saved as TMP/NAME.onnx."""
    import onnx
    path = os.path.join(tmp, name + ".onnx")
    onnx.save(m, path)
    return refused(shardc, path, needles, name)


def equals_onnxruntime(shardc, tmp, name, m, feeds, rtol, atol, reference=False):
    """Saves m as TMP/NAME.onnx and runs it on feeds (name -> array) in
    onnxruntime (or, with reference, onnx's ReferenceEvaluator: for what
    onnxruntime computes otherwise than the ONNX spec) and through `shardc
    run`, with --no-fuse and fused: every output must have the reference's
    shape, no NaN, and lie within rtol/atol of it. Prints "ok: NAME ..."
    when all of that holds."""
    import numpy as np
    import onnx
    import onnxruntime as ort
    path = os.path.join(tmp, name + ".onnx")
    onnx.save(m, path)
    if reference:
        from onnx.reference import ReferenceEvaluator
        want = ReferenceEvaluator(m).run(None, feeds)
    else:
        want = ort.InferenceSession(path).run(None, feeds)
    args = []
    for k, v in feeds.items():
        np.save(os.path.join(tmp, f"{name}_{k}.npy"), v)
        args += ["--input", f"{k}={tmp}/{name}_{k}.npy"]
    n_fail = len(failures)
    for extra in (["--no-fuse"], []):
        out = os.path.join(tmp, name + "_out" + "".join(extra))
        r = subprocess.run([shardc, "run", path, "--output-dir", out] + args + extra,
                           capture_output=True, text=True, timeout=120)
        what = f"{name} {' '.join(extra)}".strip()
        if not check(r.returncode == 0, f"{what}: exit {r.returncode}: {r.stderr.strip()}"):
            continue
        for o, w in zip(m.graph.output, want):
            got = np.load(os.path.join(out, o.name + ".npy"))
            same = got.shape == w.shape
            check(same and not np.isnan(got).any() and np.allclose(got, w, rtol=rtol, atol=atol),
                  f"{what}: output {o.name}: {got.shape} vs {w.shape}, max |diff| "
                  f"{np.max(np.abs(got - w)) if same else 'n/a'}")
    if len(failures) == n_fail:
        print(f"ok: {name} equals {'onnx.reference' if reference else 'onnxruntime'}")


def gradient_matches_fd(what, m, saved, loss, rel, abs_tol, per_weight=1, n=4):
    """A one-step SGD run at lr 1 changed each initializer of the onnx
    ModelProto m into saved[name] (its gradient is the change): the n
    largest changes (taking per_weight per initializer) must equal central
    finite differences of loss(m) (a float, e.g. onnxruntime's loss) within
    rel relative plus abs_tol. m is restored. Returns the worst relative
    difference."""
    import numpy as np
    from onnx import numpy_helper
    init = {t.name: t for t in m.graph.initializer}
    cand = []
    for k, w1 in saved.items():
        g = (numpy_helper.to_array(init[k]).astype(np.float64) - w1.astype(np.float64)).reshape(-1)
        for i in np.argsort(-np.abs(g), kind="stable")[:per_weight]:
            cand.append((abs(g[i]), k, int(i), g[i]))
    cand.sort(reverse=True)
    worst = 0.0
    for _, k, i, g in cand[:n]:
        t = init[k]
        w0 = numpy_helper.to_array(t).astype(np.float32)
        h = 1e-2 * max(1.0, abs(float(w0.reshape(-1)[i])))
        ls = []
        for sgn in (1, -1):
            w = w0.copy().reshape(-1)
            w[i] += sgn * h
            t.CopyFrom(numpy_helper.from_array(w.reshape(w0.shape), k))
            ls.append(loss(m))
        t.CopyFrom(numpy_helper.from_array(w0, k))
        fd = (ls[0] - ls[1]) / (2 * h)
        worst = max(worst, abs(g - fd) / max(abs(fd), 1e-12))
        check(np.isfinite(g) and abs(g - fd) <= rel * abs(fd) + abs_tol,
              f"{what}: dL/d{k}[{i}] = {g:.6g}, finite differences {fd:.6g}")
    return worst


def comm_traces_match(folder):
    """The collective traces a run wrote with SHARDC_COMM_TRACE=folder
    (runtime/comm.h): within every group, every member made the same
    collectives (op, count, dtype) in the same order, and every send from
    rank a to rank b with a tag matches b's receives from a with that tag,
    in order. Returns (ok, what differs, number of calls read)."""
    colls, sends, recvs, calls = {}, {}, {}, 0
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".trace"):
            continue
        with open(os.path.join(folder, name)) as f:
            for line in f:
                w = line.split()
                if len(w) < 5:
                    return False, f"{name}: malformed line {line!r}", calls
                calls += 1
                gid, me, op, rest = w[0], int(w[1][1:]), w[2], tuple(w[3:5])
                if op in ("send", "recv"):
                    peer, tag = int(w[5]), int(w[6])
                    key = (gid, me, peer, tag) if op == "send" else (gid, peer, me, tag)
                    (sends if op == "send" else recvs).setdefault(key, []).append(rest)
                else:
                    colls.setdefault(gid, {}).setdefault(me, []).append((op,) + rest)
    for gid, members in colls.items():
        seqs = list(members.values())
        if any(s != seqs[0] for s in seqs):
            ranks = sorted(members)
            first = next(i for i in range(max(map(len, seqs)))
                         if len({tuple(s[i]) if i < len(s) else None for s in seqs}) > 1)
            return False, (f"group {gid}: ranks {ranks} differ at call {first}: " +
                           "; ".join(f"r{r}: {members[r][first] if first < len(members[r]) else 'none'}"
                                     for r in ranks)), calls
    for key in set(sends) | set(recvs):
        if sends.get(key, []) != recvs.get(key, []):
            return False, (f"group {key[0]}: rank {key[1]} -> {key[2]} tag {key[3]}: sent "
                           f"{sends.get(key, [])[:3]}..., received {recvs.get(key, [])[:3]}..."), calls
    return True, "", calls


def has_avx512():
    """Whether oneDNN may use its AVX-512 kernels here: the CPU reports
    AVX-512 (F, BW, VL, DQ: oneDNN's avx512_core) and ONEDNN_MAX_CPU_ISA, if
    set, does not hold it to less."""
    isa = os.environ.get("ONEDNN_MAX_CPU_ISA", "ALL").upper()
    if isa not in ("ALL", "DEFAULT") and not isa.startswith("AVX512"):
        return False
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split() for line in f if line.startswith("flags")), [])
    except OSError:
        return False
    return all(x in flags for x in ("avx512f", "avx512bw", "avx512vl", "avx512dq"))


def has_avx2():
    """Whether this CPU reports AVX2 (oneDNN then has JIT convolutions)."""
    try:
        with open("/proc/cpuinfo") as f:
            return any(line.startswith("flags") and " avx2" in line for line in f)
    except OSError:
        return False


def within(got, want, tol, what):
    """Checks that array got has want's shape, no NaN, and differs from
    want (float64) by at most tol times want's largest magnitude."""
    import numpy as np
    if not check(got.shape == want.shape, f"{what}: shape {got.shape}, want {want.shape}"):
        return False
    ok = check(not np.isnan(got).any(), f"{what}: NaN")
    scale = float(np.max(np.abs(want))) if want.size else 0.0
    err = float(np.max(np.abs(got.astype(np.float64) - want))) if want.size else 0.0
    return check(err <= tol * scale, f"{what}: max error {err:.3g} over largest {scale:.3g} "
                 f"(tolerance {tol:g} of it)") and ok


def same_steps(tag, ref_log, log, steps, tol, ref_name):
    """Checks that two `shardc train --log-json` logs have `steps` steps
    each whose loss and gradient norm are finite and agree within
    tol |ref| + 1e-6, and prints the worst relative difference."""
    import json
    import math
    ra = [json.loads(line) for line in open(ref_log)]
    rb = [json.loads(line) for line in open(log)]
    if not check(len(ra) == len(rb) == steps, f"{tag}: {len(rb)} and {len(ra)} steps logged"):
        return
    worst = 0.0
    for a, b in zip(ra, rb):
        for k in ("loss", "grad_norm"):
            x, y = a[k], b[k]
            good = (x is not None and y is not None and math.isfinite(x) and math.isfinite(y)
                    and abs(x - y) <= tol * abs(x) + 1e-6)
            check(good, f"{tag}: step {a['step']} {k} {y}, {ref_name} {x}")
            if good:
                worst = max(worst, abs(x - y) / max(abs(x), 1e-30))
    print(f"ok   {tag}: {steps} steps, losses {rb[0]['loss']:.6f} .. {rb[-1]['loss']:.6f}, "
          f"worst relative difference {worst:.2e} (tolerance {tol:g})")
