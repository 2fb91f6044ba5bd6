#!/usr/bin/env python3
"""test_io_safety.py — the files shardc reads and writes, as hostile input and under
interruption (ir/fileio.h).

Reads: a FIFO or a device given as a model, an --input, a --plan or a textual IR file
fails at once (exit 1 within 10 s, the error naming the file, "not a regular file"), and
a plan over the size limit is refused without being read.

Writes: `compile -o D` replaces whatever bundle D held, of either kind (a one-rank
compile over a partitioned bundle used to leave partition.json behind, and `run D` then
ran the old model); a folder that is not a bundle is refused and left as it was, and
`run` names it as not a bundle. An interrupted write leaves the old artifact intact and
no temporary file: SHARDC_TEST_COMMIT_DELAY_MS holds each commit between the complete
write and the rename, announcing it on stderr, and the test sends SIGTERM or SIGINT
there; shardc must die of that signal with nothing of the new write left.

Usage (ctest sets SHARDC and SC_SOURCE_DIR): test_io_safety.py [-v]
"""
import os
import select
import signal
import subprocess
import sys
import tempfile

import numpy as np

SHARDC = os.path.abspath(os.environ.get("SHARDC", "build/shardc"))
SRC = os.path.abspath(os.environ.get("SC_SOURCE_DIR",
                                     os.path.join(os.path.dirname(__file__), "..", "..")))
MLP = os.path.join(SRC, "samples", "mlp.onnx")
GPT2 = os.path.join(SRC, "samples", "gpt2.onnx")
TIMEOUT_S = 10.0
failures = []


def run(args, cwd, timeout=TIMEOUT_S, env=None):
    """(returncode or None on timeout, stdout, stderr)."""
    p = subprocess.Popen([SHARDC] + args, cwd=cwd, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=env, start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
        return p.returncode, out.decode(), err.decode()
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        return None, "", ""


def check(name, ok, detail=""):
    if not ok:
        failures.append("%s: %s" % (name, detail))
    if "-v" in sys.argv or not ok:
        print("%s %s %s" % ("ok  " if ok else "FAIL", name, detail if not ok else ""))


def expect_fail(name, args, cwd, *needles):
    rc, _, err = run(args, cwd)
    if rc is None:
        return check(name, False, "hangs (no exit within %.0f s)" % TIMEOUT_S)
    miss = [n for n in needles if n not in err]
    check(name, rc == 1 and not miss, "rc=%s, stderr=%r (missing %r)" % (rc, err, miss))


def leftovers(folder):
    return sorted(f for f in os.listdir(folder) if ".tmp-" in f or ".old-" in f)


def test_reads(tmp):
    fifo = os.path.join(tmp, "fifo")
    os.mkfifo(fifo)
    big = os.path.join(tmp, "big_plan.json")
    with open(big, "wb") as f:  # sparse: the size is what is checked
        f.truncate(65 << 20)
    expect_fail("plan /dev/zero", ["run", GPT2, "--dim", "batch=2", "--plan", "/dev/zero",
                                   "--random-inputs", "1"], tmp,
                "/dev/zero", "not a regular file (a character device)")
    expect_fail("plan FIFO", ["run", GPT2, "--dim", "batch=2", "--plan", fifo,
                              "--random-inputs", "1"], tmp, fifo, "not a regular file (a FIFO)")
    expect_fail("plan FIFO (plan command)", ["plan", GPT2, "--dim", "batch=2", "--plan", fifo],
                tmp, fifo, "not a regular file (a FIFO)")
    expect_fail("plan too large", ["run", GPT2, "--dim", "batch=2", "--plan", big,
                                   "--random-inputs", "1"], tmp, big, "more than")
    expect_fail("input FIFO", ["run", MLP, "--dim", "batch=2", "--input", "x=" + fifo], tmp,
                "input 'x'", fifo, "not a regular file (a FIFO)")
    expect_fail("opt FIFO", ["opt", fifo, "--passes", "dce"], tmp,
                fifo, "not a regular file (a FIFO)")
    expect_fail("model FIFO (inspect)", ["inspect", fifo], tmp, fifo, "a FIFO")
    expect_fail("model FIFO (run)", ["run", fifo, "--random-inputs", "1"], tmp, fifo, "a FIFO")
    expect_fail("model /dev/zero", ["inspect", "/dev/zero"], tmp, "/dev/zero",
                "a character device")


def test_replace(tmp):
    d = os.path.join(tmp, "D")
    rc, _, err = run(["compile", GPT2, "--dim", "batch=2", "--mesh", "tp=2,pp=2", "-o", d],
                     tmp, timeout=300)
    check("compile partitioned", rc == 0 and os.path.exists(os.path.join(d, "partition.json")),
          err)
    rc, _, err = run(["compile", MLP, "--dim", "batch=2", "-o", d], tmp, timeout=120)
    check("one-rank over partitioned: exit 0", rc == 0, err)
    check("one-rank over partitioned: old bundle gone", sorted(os.listdir(d)) ==
          ["kernels.o", "manifest.json", "program.json", "weights.bin"], str(os.listdir(d)))
    out = os.path.join(tmp, "out")
    rc, _, err = run(["run", d, "--random-inputs", "1", "--output-dir", out, "--quiet"], tmp,
                     timeout=120)
    files = sorted(os.listdir(out)) if os.path.isdir(out) else []
    check("run D runs the new model", rc == 0 and files == ["y.npy"] and
          np.load(os.path.join(out, "y.npy")).shape == (2, 10), "rc=%s %s %s" % (rc, files, err))
    rc, _, err = run(["compile", MLP, "--dim", "batch=2", "--mesh", "tp=2", "-o", d], tmp,
                     timeout=120)
    check("partitioned over one-rank", rc == 0 and
          not os.path.exists(os.path.join(d, "manifest.json")) and
          os.path.exists(os.path.join(d, "partition.json")), "rc=%s %s" % (rc, err))
    check("no temporary folders after compiles", leftovers(tmp) == [], str(leftovers(tmp)))

    user = os.path.join(tmp, "user_data")
    os.mkdir(user)
    with open(os.path.join(user, "notes.txt"), "w") as f:
        f.write("keep me")
    expect_fail("compile over a folder that is not a bundle",
                ["compile", MLP, "--dim", "batch=2", "-o", user], tmp,
                user, "not a shardc bundle", "not replacing it")
    check("user folder intact", os.listdir(user) == ["notes.txt"], str(os.listdir(user)))
    notdir = os.path.join(tmp, "a_file")
    with open(notdir, "w") as f:
        f.write("x")
    expect_fail("compile over a regular file", ["compile", MLP, "-o", notdir], tmp,
                notdir, "not replacing it")
    empty = os.path.join(tmp, "empty")
    os.mkdir(empty)
    expect_fail("run a folder that is not a bundle", ["run", empty, "--random-inputs", "1"],
                tmp, empty + ": not a shardc bundle (no manifest.json / partition.json)")
    rc, _, err = run(["compile", MLP, "-o", empty], tmp, timeout=120)
    check("compile into an empty folder", rc == 0 and
          os.path.exists(os.path.join(empty, "manifest.json")), err)


def interrupted(name, args, cwd, sig):
    """Runs shardc with the commit delay, sends sig once it announces a commit; returns
    the returncode (None: never reached a commit)."""
    env = dict(os.environ, SHARDC_TEST_COMMIT_DELAY_MS="20000")
    p = subprocess.Popen([SHARDC] + args, cwd=cwd, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, env=env)
    buf = b""
    reached = False
    while not reached:
        r, _, _ = select.select([p.stderr], [], [], 120)
        chunk = os.read(p.stderr.fileno(), 4096) if r else b""
        if not chunk:
            break
        buf += chunk
        reached = b"shardc: test: committing" in buf
    if not reached:
        p.kill()
        p.wait()
        check(name, False, "no commit announced: %r" % buf.decode())
        return None
    p.send_signal(sig)
    try:
        rc = p.wait(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        rc = None
    check(name + ": dies of the signal", rc == -sig, "rc=%s" % rc)
    return rc


def test_interrupt(tmp):
    out = os.path.join(tmp, "out")
    os.mkdir(out)
    old = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.save(os.path.join(out, "y.npy"), old)
    interrupted("SIGTERM while writing y.npy", ["run", MLP, "--dim", "batch=512",
                "--random-inputs", "1", "--output-dir", out, "--quiet"], tmp, signal.SIGTERM)
    check("old y.npy intact", np.array_equal(np.load(os.path.join(out, "y.npy")), old))
    check("no temporary .npy", leftovers(out) == [], str(leftovers(out)))
    fresh = os.path.join(tmp, "fresh")
    os.mkdir(fresh)
    interrupted("SIGINT while writing a new y.npy", ["run", MLP, "--dim", "batch=512",
                "--random-inputs", "1", "--output-dir", fresh, "--quiet"], tmp, signal.SIGINT)
    check("no y.npy, no temporary", os.listdir(fresh) == [], str(os.listdir(fresh)))

    d = os.path.join(tmp, "B")
    rc, _, err = run(["compile", MLP, "--dim", "batch=2", "-o", d], tmp, timeout=120)
    check("compile B", rc == 0, err)
    with open(os.path.join(d, "manifest.json"), "rb") as f:
        manifest = f.read()
    interrupted("SIGTERM while committing a bundle", ["compile", MLP, "--dim", "batch=512",
                "-o", d], tmp, signal.SIGTERM)
    with open(os.path.join(d, "manifest.json"), "rb") as f:
        check("old bundle intact", f.read() == manifest)
    interrupted("SIGTERM while writing a partitioned bundle", ["compile", MLP, "--dim",
                "batch=4", "--mesh", "tp=2", "-o", os.path.join(tmp, "P")], tmp,
                signal.SIGTERM)
    check("no partial partitioned bundle", not os.path.exists(os.path.join(tmp, "P")))
    check("no temporary folders after interrupts", leftovers(tmp) == [], str(leftovers(tmp)))


def main():
    with tempfile.TemporaryDirectory() as tmp:
        for t in (test_reads, test_replace, test_interrupt):
            sub = os.path.join(tmp, t.__name__)
            os.mkdir(sub)
            t(sub)
    if failures:
        print("%d failure(s)" % len(failures))
        return 1
    print("all io-safety cases pass")
    return 0


if __name__ == "__main__":
    sys.exit(main())
