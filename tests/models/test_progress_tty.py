"""test_progress_tty.py — the progress line (ir/progress.h, docs/cli.md
"Progress on a terminal") seen as a user sees it: each command runs with
its stderr on a pseudo-terminal (Python's pty module; TERM=xterm), what
it draws read back from the terminal's master side, then again with its
stderr redirected to a file:

  - `shardc check` (the MLP's training step at dp=2): the line says which
    check of how many ("\\rcheck: 0/5" first: a process's first draw is
    immediate), is redrawn in place (no newline of its own: every draw
    is "\\r" ... "\\033[K") and is erased at the end ("\\r\\033[K" last);
  - `shardc train --save` (2000 steps, so that the save begins well past
    the rate limit's interval after the compile's last draw): "compiling
    programs: 0/1" and "saving checkpoint: ... of ... (N %)";
  - `shardc export` of that checkpoint: "loading checkpoint: ... of ...";
  - the same commands with stderr in a file write none of it (no "\\r", no
    escape, no progress text), and their exit status is the same;
  - on the terminal, --quiet, TERM=dumb, TERM unset and RANK=1 (a rank
    other than 0 of a launched job) draw nothing; RANK=0 draws.

Environment: SHARDC, SC_SOURCE_DIR. Exit 0 on success, 1 on any failure,
77 when no pseudo-terminal can be opened here."""
import os
import pty
import subprocess
import sys
import tempfile

import numpy as np
from checks import check, finish, skip_all

SHARDC = os.environ.get("SHARDC")
SRC = os.path.abspath(os.environ.get("SC_SOURCE_DIR",
                                     os.path.join(os.path.dirname(__file__), "..", "..")))
MLP = os.path.join(SRC, "samples", "mlp.onnx")
ESC = b"\x1b[K"


def on_terminal(args, term="xterm", cwd=None, more_env=None):
    """Runs shardc ARGS with stderr on a new pseudo-terminal; returns
    (exit status, every byte drawn on it)."""
    master, slave = pty.openpty()
    env = dict(os.environ)
    env.pop("TERM", None)
    if term is not None:
        env["TERM"] = term
    env.update(more_env or {})
    p = subprocess.Popen([SHARDC, *args], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=slave, env=env, cwd=cwd)
    os.close(slave)
    out = b""
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the last writer closed the terminal
            break
        if not data:
            break
        out += data
    os.close(master)
    return p.wait(timeout=300), out


def to_file(args, tmp, cwd=None):
    """Runs shardc ARGS with stderr in a file (TERM=xterm, as a terminal's
    shell would have it); returns (exit status, the file's bytes)."""
    path = os.path.join(tmp, "stderr.txt")
    with open(path, "wb") as f:
        rc = subprocess.run([SHARDC, *args], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=f, env=dict(os.environ, TERM="xterm"), cwd=cwd,
                            timeout=300).returncode
    return rc, open(path, "rb").read()


def no_progress(what, data):
    check(b"\r" not in data and ESC not in data and b"checkpoint: " not in data
          and b"compiling" not in data and b"check: " not in data,
          f"{what}: no progress written: {data[:300]!r}")


def main():
    if not SHARDC:
        print("SHARDC is not set")
        return 1
    try:
        m, s = pty.openpty()
        os.close(m)
        os.close(s)
    except OSError as e:
        return skip_all(f"no pseudo-terminal here: {e}")
    tmp = tempfile.mkdtemp(prefix="shardc-test-progress-")

    check_args = ["check", MLP, "--train", "--dim", "batch=4", "--mesh", "dp=2",
                  "--cluster", "h100-sxm:1x2"]
    rc, drawn = on_terminal(check_args)
    check(rc == 0 and drawn.startswith(b"\rcheck: 0/5") and drawn.endswith(b"\r" + ESC),
          f"check on a terminal: the line drawn first, erased last (exit {rc}): {drawn[:400]!r}")
    check(b"\n" not in drawn and drawn.count(b"\r") >= 2
          and all(d == b"" or d.endswith(ESC) for d in drawn.split(b"\r")),
          f"redrawn in place, each draw erasing the rest of the line: {drawn[:400]!r}")
    frc, text = to_file(check_args, tmp)
    check(frc == rc, f"the same exit status with stderr in a file ({frc})")
    no_progress("check, stderr in a file", text)

    # a checkpoint saved and loaded
    rng = np.random.default_rng(7)
    np.save(os.path.join(tmp, "x.npy"), rng.uniform(-1, 1, (64, 64)).astype(np.float32))
    np.save(os.path.join(tmp, "y.npy"), rng.integers(0, 10, (64,)).astype(np.int64))
    train = ["train", MLP, "--dim", "batch=8", "--data", "x=x.npy", "--labels", "y.npy",
             "--steps", "2000", "--save", "ck"]
    rc, drawn = on_terminal(train, cwd=tmp)
    check(rc == 0 and drawn.startswith(b"\rcompiling programs: 0/1" + ESC),
          f"train: the compile said (exit {rc}): {drawn[:300]!r}")
    total = 0  # the tensors' bytes the save wrote: each file less its header
    for f in os.listdir(os.path.join(tmp, "ck")) if rc == 0 else []:
        if f.endswith(".safetensors"):
            blob = open(os.path.join(tmp, "ck", f), "rb").read()
            total += len(blob) - 8 - int.from_bytes(blob[:8], "little")
    of = f" of {total / 1024:.2f} KiB (".encode()
    check(b"\rsaving checkpoint: " in drawn and of in drawn and drawn.endswith(b"\r" + ESC),
          f"train --save: the bytes saved of the {total} written, erased at the end: "
          f"{drawn[-300:]!r}")
    frc, text = to_file(train[:-1] + ["ck2"], tmp, cwd=tmp)
    check(frc == 0, f"train --save with stderr in a file (exit {frc}): {text[-300:]!r}")
    no_progress("train --save, stderr in a file", text)

    export = ["export", "ck", "--model", MLP, "-o", "out.onnx"]
    rc, drawn = on_terminal(export, cwd=tmp)
    check(rc == 0 and drawn.startswith(b"\rloading checkpoint: ") and b" of " in drawn
          and drawn.endswith(b"\r" + ESC),
          f"export: the checkpoint's bytes loaded (exit {rc}): {drawn[:300]!r}")
    frc, text = to_file(export, tmp, cwd=tmp)
    check(frc == 0, f"export with stderr in a file (exit {frc})")
    no_progress("export, stderr in a file", text)

    # asked not to, or a terminal that cannot
    rc, drawn = on_terminal(check_args + ["--quiet"])
    check(rc == 0, f"check --quiet (exit {rc})")
    no_progress("check --quiet on a terminal", drawn)
    rc, drawn = on_terminal(export, term="dumb", cwd=tmp)
    no_progress("TERM=dumb", drawn)
    rc, drawn = on_terminal(export, term=None, cwd=tmp)
    no_progress("TERM unset", drawn)
    rc, drawn = on_terminal(export, cwd=tmp, more_env={"RANK": "1"})
    no_progress("rank 1 of a launched job (RANK=1)", drawn)
    rc, drawn = on_terminal(export, cwd=tmp, more_env={"RANK": "0"})
    check(drawn.startswith(b"\rloading checkpoint: "), f"rank 0 draws: {drawn[:200]!r}")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
