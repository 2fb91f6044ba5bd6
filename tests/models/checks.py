"""checks.py — what the tests in this folder share to report: each calls
check(cond, what) for every requirement (a failure is printed at once and
listed in `failures`) and exits 1 at the end when `failures` is not empty."""
failures = []


def check(cond, what):
    """Records and prints `what` as a failure when cond is false; returns cond."""
    if not cond:
        failures.append(what)
        print("FAIL:", what)
    return cond
