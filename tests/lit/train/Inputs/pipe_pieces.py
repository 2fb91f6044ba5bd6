"""pipe_pieces.py SHARDC MODEL PROFILE FOLDER MESH [cut]: the pieces `shardc
plan --train` simulates against those `shardc train` runs, both with
--cluster cpu:local@PROFILE (the profile's rates cut the pipeline's chunks,
docs/planner.md "Stage boundaries"); and, for the record, whether
`train` without it runs them too (with the profile's rates it need not).

With `cut`: the cut the plan reports (pipeline.boundaries in --json, node
names) replayed without the cluster, by `train --stage-boundaries` and by
`train --plan` of the plan file the report carries (its "plan"), runs the
planned pieces; the cut of `plan --train` without the cluster (byte weight
1) is elsewhere; and `plan --train --auto`'s chosen plan, when pipelined,
carries its cut (its boundaries, --stage-boundaries in its options) and
its plan file replayed by `train --plan` without the cluster runs the
pieces `plan --train --cluster` simulates for its options.

A piece is known by its step count: SHARDC_SIM_STEPS=1 prints every step of
every simulated stage (piece), SHARDC_PROFILE=1 one table per session (a
piece of one rank) headed by its step count. Each pipeline rank's pieces
run on every rank of its data-parallel group, so the trained counts are the
planned ones, each `ranks / pipeline ranks` times. Prints the planned and
trained counts and whether they agree."""
import collections
import json
import os
import re
import shlex
import subprocess
import sys

import numpy as np


def run(args, **env):
    r = subprocess.run(args, env=dict(os.environ, **env), capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"{' '.join(args)}: exit {r.returncode}\n{r.stderr}")
    return r


def planned(shardc, model, opts):
    """The pieces' step counts `plan --train OPTS --json` simulates, and its
    report."""
    r = run([shardc, "plan", model, "--train", "--json"] + opts, SHARDC_SIM_STEPS="1")
    steps = collections.defaultdict(set)
    for m in re.finditer(r"SHARDC_SIM_STEPS: stage (\d+) step (\d+):", r.stderr):
        steps[int(m.group(1))].add(int(m.group(2)))
    return sorted(len(s) for s in steps.values()), json.loads(r.stdout)


def ranks_of(mesh):
    ranks, pp = 1, 1
    for axis in mesh.split(","):
        name, n = axis.split("=")
        ranks *= int(n)
        pp = int(n) if name == "pp" else pp
    return ranks, pp


def main():
    shardc, model, profile, folder, mesh = sys.argv[1:6]
    cut = sys.argv[6:] == ["cut"]
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(0)
    ids, labels = os.path.join(folder, "ids.npy"), os.path.join(folder, "labels.npy")
    np.save(ids, rng.integers(0, 1000, (8, 16), dtype=np.int64))
    np.save(labels, rng.integers(0, 1000, (8, 16), dtype=np.int64))
    step = ["--dim", "batch=8", "--optimizer", "adamw"]
    opts = step + ["--mesh", mesh, "--microbatches", "4", "--schedule", "1f1b"]
    cluster = ["--cluster", f"cpu:local@{profile}"]

    def trained(extra):
        r = run([shardc, "train", model, "--data", f"input_ids={ids}", "--labels", labels,
                 "--steps", "2", "--lr", "1e-4", "--quiet"] + extra, SHARDC_PROFILE="1")
        return sorted(int(n) for n in re.findall(r"SHARDC_PROFILE: (\d+) steps", r.stderr))

    def same(got, want, mesh):
        ranks, pp = ranks_of(mesh)
        want = sorted(want * (ranks // pp))
        # pieces with no steps: the simulation prints no line for them
        return [n for n in got if n] == [n for n in want if n]

    want, report = planned(shardc, model, opts + cluster)
    print(f"planned pieces {len([n for n in want if n])}: {want}")
    if not cut:
        print(f"trained with the cluster: the planned pieces: "
              f"{same(trained(opts + cluster), want, mesh)}")
        print(f"trained without the cluster: the planned pieces: "
              f"{same(trained(opts), want, mesh)}")
        return
    bounds = report["pipeline"]["boundaries"]
    plan = report["plan"]
    _, pp = ranks_of(mesh)
    print(f"cut at {len(bounds)} of {pp - 1} boundaries; the plan file's the same: "
          f"{plan['pipeline']['boundaries'] == bounds}")
    _, balanced = planned(shardc, model, opts)
    print(f"the cut without the cluster is elsewhere: "
          f"{balanced['pipeline']['boundaries'] != bounds}")
    given = ["--stage-boundaries", ",".join(bounds)]
    print(f"trained with --stage-boundaries, no cluster: the planned pieces: "
          f"{same(trained(opts + given), want, mesh)}")
    path = os.path.join(folder, "plan.json")
    with open(path, "w") as f:
        json.dump(plan, f)
    print(f"trained with --plan, no cluster: the planned pieces: "
          f"{same(trained(step + ['--plan', path]), want, mesh)}")

    # the search's choice (pipelined on this profile or not: its cut checked
    # where it is)
    r = run([shardc, "plan", model, "--train", "--auto", "--json"] + step + cluster)
    ch = json.loads(r.stdout)["auto"]["chosen"]
    ok = True
    if ch["mesh"]["pp"] > 1:
        options = shlex.split(ch["options"])
        given = options[options.index("--stage-boundaries") + 1].split(",")
        ok = ch["boundaries"] == given == ch["plan"]["pipeline"]["boundaries"]
        cmesh = options[options.index("--mesh") + 1]
        got_want, got_report = planned(shardc, model, step + options + cluster)
        ok = ok and got_report["pipeline"]["boundaries"] == given
        with open(path, "w") as f:
            json.dump(ch["plan"], f)
        rest = options[options.index("--recompute"):options.index("--recompute") + 2]
        ok = ok and same(trained(step + rest + ["--plan", path]), got_want, cmesh)
        print(f"auto chose {ch['options']}")
    print(f"auto's choice replayed by --plan, no cluster: the planned pieces: {ok}")


if __name__ == "__main__":
    main()
