#!/usr/bin/env python3
"""test_train_files.py — the files `shardc train` and `shardc run` read and write, as
hostile input: checkpoint folders (runtime/checkpoint.h), training data, the JSON log and
run's output folder.

Checkpoints: a symbolic link named like a dead save's temporary folder (ck.tmp-PID-N ->
victim/) is left alone and the victim checkpoint stays whole; --resume refuses a member
that is a symbolic link (it is not followed: /etc/passwd's size is not printed) and the
message names the checkpoint once; --save into a checkpoint holding a file shardc did not
write is refused naming it, the file kept; a manifest whose data_position is 2^63-1
(resealed) is refused before step 1. Data: --data and --labels of different row counts are
refused naming both; a NaN in --data is refused naming the file and the element's index;
a bad --labels file is called --labels. The log: a run that fails before its first step
leaves no --log-json file, one that fails later (the loss blows up) a log of the steps it
ran; a full disk (/dev/full) and a file size limit (RLIMIT_FSIZE) are reported with the
system's reason. run: a model with two outputs interrupted (SIGTERM) before its outputs'
renames leaves both old files, and interrupted between the two renames dies only after
the second (both new).

Usage (ctest sets SHARDC and SC_SOURCE_DIR): test_train_files.py [-v]
"""
import hashlib
import json
import os
import resource
import select
import signal
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper

SHARDC = os.path.abspath(os.environ.get("SHARDC", "build/shardc"))
SRC = os.path.abspath(os.environ.get("SC_SOURCE_DIR",
                                     os.path.join(os.path.dirname(__file__), "..", "..")))
MLP = os.path.join(SRC, "samples", "mlp.onnx")
TIMEOUT_S = 60.0
failures = []


def run(args, cwd, env=None, preexec_fn=None):
    """(returncode, stdout, stderr)."""
    p = subprocess.run([SHARDC] + args, cwd=cwd, capture_output=True, text=True, env=env,
                       timeout=TIMEOUT_S, preexec_fn=preexec_fn)
    return p.returncode, p.stdout, p.stderr


def check(name, ok, detail=""):
    if not ok:
        failures.append("%s: %s" % (name, detail))
    if "-v" in sys.argv or not ok:
        print("%s %s %s" % ("ok  " if ok else "FAIL", name, detail if not ok else ""))
    return ok


def expect_fail(name, args, cwd, *needles, absent=(), **kw):
    rc, _, err = run(args, cwd, **kw)
    miss = [n for n in needles if n not in err] + [n for n in absent if n in err]
    check(name, rc == 1 and not miss, "rc=%s, stderr=%r (wrong: %r)" % (rc, err, miss))
    return err


def canonical(obj):
    """The manifest's checksummed text as the saver writes it (jansson: compact, sorted
    keys, reals as %.17g with a bare exponent)."""
    floats = []

    def walk(o):
        if isinstance(o, float):
            floats.append(o)
            return "@@F%d@@" % (len(floats) - 1)
        if isinstance(o, dict):
            return {k: walk(v) for k, v in o.items()}
        if isinstance(o, list):
            return [walk(v) for v in o]
        return o
    text = json.dumps(walk(obj), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    for i, f in enumerate(floats):
        r = "%.17g" % f
        if "e" in r:
            mant, exp = r.split("e")
            r = "%se%d" % (mant, int(exp))
        elif "." not in r:
            r += ".0"
        text = text.replace('"@@F%d@@"' % i, r)
    return text


def reseal(path, key, value):
    m = json.load(open(path))
    m[key] = value
    m.pop("manifest_sha256", None)
    m["manifest_sha256"] = hashlib.sha256(canonical(m).encode()).hexdigest()
    json.dump(m, open(path, "w"), indent=2)


def file_limit():  # a write past 50 kB fails with EFBIG instead of killing the process
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (50000, 50000))


def test_checkpoints(tmp, train):
    victim = os.path.join(tmp, "victim")
    rc, _, err = run(train + ["--steps", "2", "--save", victim], tmp)
    check("save victim", rc == 0, err)
    before = sorted(os.listdir(victim))
    os.symlink("victim", os.path.join(tmp, "ck.tmp-99999999-0"))
    rc, _, err = run(train + ["--steps", "1", "--save", "ck"], tmp)
    check("save next to a linked stale temporary", rc == 0, err)
    check("the victim checkpoint is whole", sorted(os.listdir(victim)) == before,
          str(os.listdir(victim)))
    rc, _, err = run(train + ["--steps", "3", "--resume", "victim"], tmp)
    check("the victim still resumes", rc == 0, err)

    os.unlink(os.path.join(tmp, "ck", "weights.safetensors"))
    os.symlink("/etc/passwd", os.path.join(tmp, "ck", "weights.safetensors"))
    expect_fail("resume through a linked member", train + ["--steps", "2", "--resume", "ck"],
                tmp, "shardc: error: ck: weights.safetensors is a symbolic link",
                absent=("ck: ck:", "bytes"))

    with open(os.path.join(victim, "notes.txt"), "w") as f:
        f.write("keep me")
    expect_fail("save over a checkpoint holding other files",
                train + ["--steps", "1", "--save", "victim"], tmp, "victim", "notes.txt",
                "not replacing it")
    check("notes.txt kept", open(os.path.join(victim, "notes.txt")).read() == "keep me")

    ck4 = os.path.join(tmp, "ck4")
    rc, _, err = run(train + ["--steps", "1", "--save", ck4], tmp)
    reseal(os.path.join(ck4, "manifest.json"), "step", 1)
    rc, _, err = run(train + ["--steps", "2", "--resume", ck4], tmp)
    check("a resealed manifest resumes (the helper is right)", rc == 0, err)
    reseal(os.path.join(ck4, "manifest.json"), "data_position", 2 ** 63 - 1)
    log = os.path.join(tmp, "l4.jsonl")
    expect_fail("data_position 2^63-1", train + ["--steps", "3", "--resume", ck4,
                                                 "--log-json", log], tmp,
                "'data_position'", "[0, 2^53]")
    check("no log after a refused resume", not os.path.exists(log))

    expect_fail("a save past the file size limit",
                train + ["--steps", "1", "--save", "big"], tmp, "big: weights.safetensors",
                "write failed: File too large", preexec_fn=file_limit)
    check("no checkpoint and no temporary left",
          not [f for f in os.listdir(tmp) if f.startswith("big")], str(os.listdir(tmp)))


def test_data(tmp, x, lab):
    rng = np.random.RandomState(7)
    np.save(os.path.join(tmp, "lab30.npy"), rng.randint(0, 10, 30).astype(np.int64))
    xn = x.copy()
    xn[5, 3] = np.nan
    np.save(os.path.join(tmp, "xnan.npy"), xn)
    with open(os.path.join(tmp, "junk.npy"), "w") as f:
        f.write("not numpy")
    base = ["train", MLP, "--dim", "batch=8", "--quiet", "--steps", "2"]
    expect_fail("rows differ", base + ["--data", "x=x.npy", "--labels", "lab30.npy"], tmp,
                "--data x (x.npy) holds 40 examples", "--labels (lab30.npy) 30")
    log = os.path.join(tmp, "l.jsonl")
    expect_fail("NaN data", base + ["--data", "x=xnan.npy", "--labels", "lab.npy",
                                    "--log-json", log], tmp,
                "--data x: xnan.npy: element 323 (example 5) is nan")
    check("no log after a run that fails before step 1", not os.path.exists(log))
    expect_fail("bad --labels", base + ["--data", "x=x.npy", "--labels", "junk.npy"], tmp,
                "--labels: junk.npy", absent=("--data labels",))
    expect_fail("log on a full disk", base + ["--data", "x=x.npy", "--labels", "lab.npy",
                                              "--log-json", "/dev/full"], tmp,
                "/dev/full: cannot write the log: No space left on device")
    rc, _, err = run(base[:-1] + ["6", "--data", "x=x.npy", "--labels", "lab.npy",
                                  "--optimizer", "sgd", "--lr", "1e30", "--log-json", log],
                     tmp)
    lines = open(log).read().splitlines() if os.path.exists(log) else []
    check("a run that blows up fails", rc == 1 and "the loss is" in err, "rc=%s %s" % (rc, err))
    check("its log holds every step before the failure",
          len(lines) >= 1 and [json.loads(s)["step"] for s in lines] ==
          list(range(1, len(lines) + 1)) and ("step %d:" % (len(lines) + 1)) in err,
          "%r / %r" % (lines, err))


def interrupted_run(tmp, out, after):
    """Runs the two-output model into out (holding old a.npy, b.npy) and sends SIGTERM
    at the commit announcement number `after`; returns (rc, [a new, b new])."""
    old = np.full((4, 8), 7, np.float32)
    os.makedirs(out)
    for f in ("a.npy", "b.npy"):
        np.save(os.path.join(out, f), old)
    env = dict(os.environ, SHARDC_TEST_COMMIT_DELAY_MS="1500")
    p = subprocess.Popen([SHARDC, "run", "two.onnx", "--random-inputs", "1", "--output-dir",
                          out, "--quiet"], cwd=tmp, stderr=subprocess.PIPE, env=env)
    buf = b""
    while buf.count(b"shardc: test: committing") < after:
        r, _, _ = select.select([p.stderr], [], [], TIMEOUT_S)
        chunk = os.read(p.stderr.fileno(), 4096) if r else b""
        if not chunk:
            break
        buf += chunk
    p.send_signal(signal.SIGTERM)
    rc = p.wait(timeout=TIMEOUT_S)
    new = [not np.array_equal(np.load(os.path.join(out, f)), old) for f in ("a.npy", "b.npy")]
    left = [f for f in os.listdir(out) if ".tmp-" in f]
    check("no temporary left (%d)" % after, left == [], str(left))
    return rc, new


def test_outputs(tmp):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, [4, 8])
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, [4, 8])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["a"]),
                           helper.make_node("Neg", ["x"], ["b"])], "two", [x], [a, b])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]),
              os.path.join(tmp, "two.onnx"))
    rc, new = interrupted_run(tmp, os.path.join(tmp, "o1"), 1)
    check("SIGTERM before the renames: both outputs old", rc == -signal.SIGTERM and
          new == [False, False], "rc=%s new=%s" % (rc, new))
    rc, new = interrupted_run(tmp, os.path.join(tmp, "o2"), 2)
    check("SIGTERM between the renames: both outputs new", rc == -signal.SIGTERM and
          new == [True, True], "rc=%s new=%s" % (rc, new))


def main():
    rng = np.random.RandomState(5)
    x = rng.uniform(-1, 1, size=(40, 64)).astype(np.float32)
    lab = rng.randint(0, 10, size=40).astype(np.int64)
    with tempfile.TemporaryDirectory() as tmp:
        np.save(os.path.join(tmp, "x.npy"), x)
        np.save(os.path.join(tmp, "lab.npy"), lab)
        train = ["train", MLP, "--dim", "batch=8", "--data", "x=" + os.path.join(tmp, "x.npy"),
                 "--labels", os.path.join(tmp, "lab.npy"), "--quiet"]
        test_checkpoints(tmp, train)
        test_data(tmp, x, lab)
        test_outputs(tmp)
    if failures:
        print("%d failure(s)" % len(failures))
        return 1
    print("all train-file cases pass")
    return 0


if __name__ == "__main__":
    sys.exit(main())
