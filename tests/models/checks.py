"""checks.py — what the tests in this folder share to report: each calls
check(cond, what) for every requirement (a failure is printed at once and
listed in `failures`) and exits 1 at the end when `failures` is not empty
(finish()). refused(...) checks that shardc refuses a model file."""
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
