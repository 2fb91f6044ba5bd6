"""test_oom.py — running out of memory is an error, not a crash.

The GPT-2 sample is trained (2 AdamW steps, batch 2) and run (random
inputs, outputs written), and the ResNet sample run (batch 2: on a CPU
where oneDNN has JIT kernels for them, its convolutions and max-pools run
directly, cpu_conv.c), under a series of address-space limits (ulimit -v)
from just above the lowest at which shardc starts at all (found by
bisecting `shardc --version`: below it the loader or LLVM's static
constructors fail, before main) upwards in 3 MiB steps, until a run
succeeds. Each run must end cleanly: exit 0, or exit 1 with "out of
memory" on stderr; no signal, no "LLVM ERROR", no "terminate called". At
least one run of each command must have failed for memory and one must have
succeeded, so that the series covered the window where allocations fail
(the model's mapping and decoding, the thread stacks, LLVM's compile,
oneDNN's set-up, the arena; for ResNet a thread's oneDNN scratchpad, which
aborted the process before the failure was recorded and reported at the
run's end).

Threads are fixed at 2 (each thread's stack is address space). Skipped
(exit 77) under AddressSanitizer, which reserves terabytes of address
space and so cannot run under ulimit -v (SHARDC_SANITIZE=ON from CMake).

Environment: SHARDC (the binary), SC_SOURCE_DIR. Exit 0 on success, 1 on
any failure, 77 when skipped.
"""
import os
import subprocess
import sys
import tempfile

import numpy as np

SHARDC = os.environ["SHARDC"]
SRC = os.environ.get("SC_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
MODEL = os.path.join(SRC, "samples", "gpt2.onnx")
RESNET = os.path.join(SRC, "samples", "resnet.onnx")
STEP_KIB = 3 * 1024
MAX_VALUES = 16


def limited(kib, args, cwd):
    """args run under ulimit -v kib: (returncode, stderr)."""
    cmd = 'ulimit -v %d && exec "$@"' % kib
    r = subprocess.run(["bash", "-c", cmd, "bash"] + args, cwd=cwd,
                       capture_output=True, text=True, timeout=300)
    return r.returncode, r.stderr


def start_floor(cwd):
    """The lowest limit (KiB, to 1 MiB) at which `shardc --version` exits 0."""
    lo, hi = 16 * 1024, 4 * 1024 * 1024  # lo fails, hi works
    if limited(hi, [SHARDC, "--version"], cwd)[0] != 0:
        sys.exit("FAIL: shardc --version does not start under ulimit -v %d" % hi)
    while hi - lo > 1024:
        mid = (lo + hi) // 2
        if limited(mid, [SHARDC, "--version"], cwd)[0] == 0:
            hi = mid
        else:
            lo = mid
    return hi


def sweep(name, args, floor, cwd):
    """args under rising limits until one succeeds; False on a crash."""
    ok = True
    oom = succeeded = 0
    for i in range(MAX_VALUES):
        kib = floor + 1024 + i * STEP_KIB
        rc, err = limited(kib, args, cwd)
        last = err.strip().splitlines()[-1] if err.strip() else ""
        clean = (rc == 0 or (rc == 1 and "out of memory" in err)) and \
            "LLVM ERROR" not in err and "terminate called" not in err
        print("%s ulimit -v %d: exit %d  %s" % (name, kib, rc, last[:160]))
        if not clean:
            print("FAIL: %s under ulimit -v %d did not end cleanly (exit %d):\n%s"
                  % (name, kib, rc, err[-2000:]))
            ok = False
        if rc == 1 and "out of memory" in err:
            oom += 1
        if rc == 0:
            succeeded += 1
            break
    if oom == 0:
        print("FAIL: %s never ran out of memory (the series starts too high)" % name)
        ok = False
    if succeeded == 0:
        print("FAIL: %s did not succeed up to ulimit -v %d" % (name, kib))
        ok = False
    return ok


def main():
    if os.environ.get("SHARDC_SANITIZE", "OFF").upper() in ("ON", "1", "TRUE", "YES"):
        print("SKIP: built with AddressSanitizer, which cannot run under ulimit -v")
        sys.exit(77)
    with tempfile.TemporaryDirectory() as d:
        rng = np.random.default_rng(7)
        np.save(os.path.join(d, "ids.npy"), rng.integers(0, 1000, (8, 16)).astype(np.int64))
        np.save(os.path.join(d, "labels.npy"), rng.integers(0, 1000, (8, 16)).astype(np.int64))
        floor = start_floor(d)
        print("shardc starts from ulimit -v %d" % floor)
        train = [SHARDC, "train", MODEL, "--dim", "batch=2", "--data", "input_ids=ids.npy",
                 "--labels", "labels.npy", "--steps", "2", "--optimizer", "adamw",
                 "--threads", "2"]
        run = [SHARDC, "run", MODEL, "--dim", "batch=2", "--random-inputs", "1",
               "--output-dir", os.path.join(d, "out"), "--threads", "2"]
        ok = sweep("train", train, floor, d)
        ok = sweep("run", run, floor, d) and ok
        resnet = [SHARDC, "run", RESNET, "--dim", "batch=2", "--random-inputs", "1",
                  "--output-dir", os.path.join(d, "out-resnet"), "--threads", "2"]
        ok = sweep("resnet", resnet, floor, d) and ok
    if not ok:
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()
