#!/usr/bin/env python3
"""test_bad_models.py — `shardc inspect` on hostile and malformed ONNX files.

Generates the cases of make_bad_models.py into a temporary folder and runs
`$SHARDC inspect FILE` on each. For every case: no signal, no hang (10 s), and the secret
file beside the model folders never shows up in the output. For an error case: exit
status exactly 1 and stderr exactly one line, "shardc: error: FILE: ...", naming the node
("node 'N' (Op): ") when the case is about a node. For an ok case: exit status 0 and no
error line. Path-escape cases are also run under `strace -f -y -e trace=open,openat,openat2`
(when strace exists) and fail if any open of the secret file or /etc/passwd succeeded.

Usage (ctest sets SHARDC): test_bad_models.py [-k SUBSTRING] [--keep DIR] [-v]
Exit status 0 when every case behaves, 1 otherwise (a table of failures is printed).
"""
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_bad_models  # noqa: E402

TIMEOUT_S = 10.0
ERR_PREFIX = "shardc: error: "


def _run(cmd, env=None, cwd=None):
    """(returncode or None on timeout, stdout, stderr). The command runs in its own
    process group, killed whole on timeout (strace's tracee included)."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                         cwd=cwd, start_new_session=True)
    try:
        out, err = p.communicate(timeout=TIMEOUT_S)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        rc = None
    return rc, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")


def _cwd(case):
    """Runs happen in the generation root, not the model folder, so that a tool resolving
    external data against the working directory fails the ext_control_valid case."""
    return os.path.dirname(os.path.dirname(os.path.dirname(case.path)))


def check_case(shardc, case, secret_bytes):
    """Returns a list of problems (empty when the case behaves)."""
    probs = []
    rc, out, err = _run([shardc, "inspect", case.path], cwd=_cwd(case))
    if rc is None:
        return ["hang: no exit within %.0f s" % TIMEOUT_S]
    if rc < 0:
        probs.append("killed by signal %d" % -rc)
    if secret_bytes.hex() in out.replace(" ", "") or secret_bytes.hex() in err.replace(" ", ""):
        probs.append("secret file contents appear in the output")
    lines = [ln for ln in err.splitlines() if ln.strip()]
    err_lines = [ln for ln in lines if ln.startswith(ERR_PREFIX)]
    if case.expect == "ok" or (case.expect == "either" and rc == 0):
        if rc != 0:
            probs.append("exit status %d, expected 0" % rc)
        if err_lines:
            probs.append("error line on success: %r" % err_lines[0])
    else:
        if rc != 1:
            probs.append("exit status %d, expected 1" % rc)
        prefix = ERR_PREFIX + case.path + ": "
        if len(lines) != 1:
            probs.append("stderr has %d lines, expected exactly 1" % len(lines))
        good = [ln for ln in lines if ln.startswith(prefix) and len(ln) > len(prefix)]
        if len(good) != 1:
            probs.append("no single line starting %r" % prefix)
        line = good[0] if good else "\n".join(lines)
        if case.expect == "error" and case.nodes:
            pats = ["node '%s' (%s): " % (n, op) for n, op in case.nodes]
            if not any(p in line for p in pats):
                probs.append("missing %s" % " or ".join(repr(p) for p in pats))
        if case.expect == "error" and case.msg_re and not re.search(case.msg_re, line, re.I):
            probs.append("message does not match /%s/i" % case.msg_re)
    if probs:
        shown = err.strip().splitlines()
        probs.append("stderr: %s" % (" | ".join(shown[:3])[:600] if shown else "(empty)"))
    return probs


# "PID openat(DIRFD<path>, "name", FLAGS) = FD<resolved path>" (strace -f -y)
_OPEN_RE = re.compile(r'^(?:\[pid\s+\d+\]\s+|\d+\s+)?(open|openat|openat2)\((.*)\)'
                      r'\s+=\s+(-?\d+)(<([^>]*)>)?')


def strace_escapes(shardc, case, forbidden):
    """Runs the case under strace; returns the list of successful opens of a forbidden
    file (resolved through the fd path strace -y prints, or the argument path)."""
    log = case.path + ".strace"
    env = dict(os.environ)
    # LeakSanitizer cannot run under ptrace; the leak check is done by the plain run.
    env["ASAN_OPTIONS"] = (env.get("ASAN_OPTIONS", "") + ":detect_leaks=0").lstrip(":")
    rc, _, _ = _run(["strace", "-f", "-qq", "-y", "-o", log,
                     "-e", "trace=open,openat,openat2", shardc, "inspect", case.path],
                    env=env, cwd=_cwd(case))
    if rc is None:
        return ["hang under strace"]
    bad = []
    with open(log, encoding="utf-8", errors="replace") as f:
        for ln in f:
            m = _OPEN_RE.match(ln.strip())
            if not m or int(m.group(3)) < 0:
                continue
            target = m.group(5)
            if target is None:
                am = re.search(r'"([^"]*)"', m.group(2))
                target = am.group(1) if am else ""
                if not os.path.isabs(target):
                    target = os.path.join(_cwd(case), target)
            if os.path.realpath(target) in forbidden:
                bad.append("opened %s: %s" % (target, ln.strip()[:200]))
    return bad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-k", default="", help="run only cases whose name contains this")
    ap.add_argument("--keep", help="generate into this folder and keep it")
    ap.add_argument("-v", action="store_true", help="print every case's stderr")
    args = ap.parse_args()
    shardc = os.environ.get("SHARDC")
    if not shardc or not os.access(shardc, os.X_OK):
        print("test_bad_models: SHARDC must name the shardc executable", file=sys.stderr)
        return 1
    shardc = os.path.abspath(shardc)
    tmp = args.keep or tempfile.mkdtemp(prefix="shardc-bad-")
    if args.keep:
        shutil.rmtree(tmp, ignore_errors=True)
    try:
        cases = [c for c in make_bad_models.build_cases(tmp) if args.k in c.name]
        secret = os.path.realpath(os.path.join(tmp, "secret.bin"))
        forbidden = {secret, os.path.realpath("/etc/passwd")}
        have_strace = shutil.which("strace") is not None
        if not have_strace:
            print("PARTIAL SKIP: the escape cases' strace check (strace not found; "
                  "their other checks run)")
        failures = 0
        for c in cases:
            probs = check_case(shardc, c, make_bad_models.SECRET_BYTES)
            if c.escape and have_strace:
                probs += strace_escapes(shardc, c, forbidden)
            status = "FAIL" if probs else "ok"
            failures += bool(probs)
            print("%-4s %-26s %-6s %s" % (status, c.name, c.expect, c.what))
            for p in probs:
                print("       - " + p)
            if args.v and not probs:
                _, _, err = _run([shardc, "inspect", c.path])
                for ln in err.strip().splitlines()[:2]:
                    print("       | " + ln[:300])
        print("test_bad_models: %d of %d cases failed" % (failures, len(cases)))
        return 1 if failures else 0
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
