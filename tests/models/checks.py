"""checks.py — what the tests in this folder share to report: each calls
check(cond, what) for every requirement (a failure is printed at once and
listed in `failures`) and exits 1 at the end when `failures` is not empty
(finish()). refused(...) checks that shardc refuses a model file,
refused_model(...) an onnx model, and equals_onnxruntime(...) that `shardc
run` computes what onnxruntime does."""
import os
import subprocess

failures = []


def check(cond, what):
    """Records and prints `what` as a failure when cond is false; returns cond."""
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
    """The exit status: 1 (after a count) when a check failed, else 0."""
    if failures:
        print(f"{len(failures)} failure(s)")
        return 1
    print("ok")
    return 0


def refused_model(shardc, tmp, name, m, needles):
    """refused() on the onnx ModelProto m, saved as TMP/NAME.onnx."""
    import onnx
    path = os.path.join(tmp, name + ".onnx")
    onnx.save(m, path)
    return refused(shardc, path, needles, name)


def equals_onnxruntime(shardc, tmp, name, m, feeds, rtol, atol):
    """Saves m as TMP/NAME.onnx and runs it on feeds (name -> array) in
    onnxruntime and through `shardc run`, with --no-fuse and fused: every
    output must have onnxruntime's shape, no NaN, and lie within rtol/atol
    of it. Prints "ok: NAME ..." when all of that holds."""
    import numpy as np
    import onnx
    import onnxruntime as ort
    path = os.path.join(tmp, name + ".onnx")
    onnx.save(m, path)
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
        print(f"ok: {name} equals onnxruntime")
