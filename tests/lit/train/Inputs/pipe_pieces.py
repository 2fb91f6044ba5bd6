"""pipe_pieces.py SHARDC MODEL PROFILE FOLDER MESH: the pieces `shardc plan
--train` simulates against those `shardc train` runs, both with
--cluster cpu:local@PROFILE (the profile's rates cut the pipeline's chunks,
docs/planner.md "Stage boundaries"); and, for the record, whether
`train` without it runs them too (with the profile's rates it need not).

A piece is known by its step count: SHARDC_SIM_STEPS=1 prints every step of
every simulated stage (piece), SHARDC_PROFILE=1 one table per session (a
piece of one rank) headed by its step count. Each pipeline rank's pieces
run on every rank of its data-parallel group, so the trained counts are the
planned ones, each `ranks / pipeline ranks` times. Prints the planned and
trained counts and whether they agree."""
import collections
import os
import re
import subprocess
import sys

import numpy as np


def main():
    shardc, model, profile, folder, mesh = sys.argv[1:6]
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(0)
    ids, labels = os.path.join(folder, "ids.npy"), os.path.join(folder, "labels.npy")
    np.save(ids, rng.integers(0, 1000, (8, 16), dtype=np.int64))
    np.save(labels, rng.integers(0, 1000, (8, 16), dtype=np.int64))
    opts = ["--dim", "batch=8", "--optimizer", "adamw", "--mesh", mesh, "--microbatches", "4",
            "--schedule", "1f1b"]
    cluster = ["--cluster", f"cpu:local@{profile}"]

    env = dict(os.environ, SHARDC_SIM_STEPS="1")
    r = subprocess.run([shardc, "plan", model, "--train"] + opts + cluster, env=env,
                       capture_output=True, text=True, check=True)
    steps = collections.defaultdict(set)
    for m in re.finditer(r"SHARDC_SIM_STEPS: stage (\d+) step (\d+):", r.stderr):
        steps[int(m.group(1))].add(int(m.group(2)))
    planned = sorted(len(s) for s in steps.values())

    def trained(extra):
        env = dict(os.environ, SHARDC_PROFILE="1")
        r = subprocess.run([shardc, "train", model, "--data", f"input_ids={ids}", "--labels",
                            labels, "--steps", "2", "--lr", "1e-4", "--quiet"] + opts + extra,
                           env=env, capture_output=True, text=True, check=True)
        return sorted(int(n) for n in re.findall(r"SHARDC_PROFILE: (\d+) steps", r.stderr))

    ranks, pp = 1, 1
    for axis in mesh.split(","):
        name, n = axis.split("=")
        ranks *= int(n)
        pp = int(n) if name == "pp" else pp
    want = sorted(planned * (ranks // pp))
    # pieces with no steps: the simulation prints no line for them
    same = lambda got: [n for n in got if n] == [n for n in want if n]
    with_cluster, without = trained(cluster), trained([])
    print(f"planned pieces {len([n for n in planned if n])}: {planned}")
    print(f"trained with the cluster: the planned pieces: {same(with_cluster)}")
    print(f"trained without the cluster: the planned pieces: {same(without)}")


if __name__ == "__main__":
    main()
