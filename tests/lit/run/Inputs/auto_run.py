"""Checks of `shardc run --auto` and `shardc compile --mesh auto`
(tests/lit/run/auto.test).

  auto_run.py SHARDC MODEL TMP ARGS...
      runs `run MODEL --auto ARGS` on seeded random inputs; takes the plan it
      says it chose from its stderr ("--mesh auto chose --cluster C OPTS");
      runs `run MODEL --cluster C OPTS` (the rest of ARGS kept) on the same
      inputs; then compiles `compile MODEL --mesh auto ARGS -o DIR`, which must
      say the same choice, and runs the bundle. Every output file of the three
      runs must be equal bit for bit (the same program on the same inputs),
      and finite.
"""
import os
import shlex
import subprocess
import sys

import numpy as np

SEED = "7"


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("failed (%d): %s\n%s%s" % (r.returncode, shlex.join(cmd), r.stdout, r.stderr))
    return r.stderr


def chosen(stderr):
    key = "--mesh auto chose "
    lines = [l for l in stderr.splitlines() if key in l]
    assert len(lines) == 1, stderr
    return shlex.split(lines[0].split(key, 1)[1])


def outputs(d):
    names = sorted(f for f in os.listdir(d) if f.endswith(".npy"))
    assert names, "no outputs in " + d
    return {n: np.load(os.path.join(d, n)) for n in names}


def same(a, b, what):
    assert a.keys() == b.keys(), (what, a.keys(), b.keys())
    for n in a:
        assert a[n].dtype == b[n].dtype and a[n].shape == b[n].shape, (what, n)
        if a[n].dtype.kind == "f":
            assert np.isfinite(a[n]).all(), (what, n, "not finite")
        assert np.array_equal(a[n], b[n]), (what, n, float(np.abs(a[n] - b[n]).max()))


def main(shardc, model, tmp, *args):
    args = list(args)
    base = [shardc, "run", model, "--random-inputs", SEED]
    opts = chosen(run(base + ["--auto"] + args + ["--output-dir", tmp + ".auto"]))
    assert opts[0] == "--cluster" and "--mesh" in opts, opts
    # the same plan given by hand: --cluster from the choice, not twice
    rest = []
    i = 0
    while i < len(args):
        if args[i] == "--cluster":
            i += 2
            continue
        rest.append(args[i])
        i += 1
    run(base + opts + rest + ["--output-dir", tmp + ".mesh"])
    a, m = outputs(tmp + ".auto"), outputs(tmp + ".mesh")
    same(a, m, "run --auto against run " + shlex.join(opts))
    err = run([shardc, "compile", model, "--mesh", "auto"] + args + ["-o", tmp + ".bundle"])
    assert chosen(err) == opts, (chosen(err), opts)
    run([shardc, "run", tmp + ".bundle", "--random-inputs", SEED, "--output-dir", tmp + ".bundled"])
    same(a, outputs(tmp + ".bundled"), "compile --mesh auto's bundle")
    print("auto run ok: %s, %d outputs equal" % (shlex.join(opts), len(a)))


if __name__ == "__main__":
    main(*sys.argv[1:])
