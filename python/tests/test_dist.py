"""test_dist.py — one process per rank from Python: the same script
(dist_worker.py) started twice, with torchrun's environment variables
(RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT: the tcp communicator), with
srun's (SLURM_PROCID, SLURM_NTASKS, SLURM_JOB_ID; MASTER_ADDR and
MASTER_PORT set as a Slurm batch script sets them) and under mpirun -np 2
(skipped, saying so, when there is no mpirun). Each
time shardc.init() finds its rank, exactly one rank owns the logits, and
they equal the single-process run's (rtol 1e-4, atol 1e-5: the tp split
sums in another order); and 3 training steps at fsdp=2 give both ranks
the losses of the same mesh on thread-ranks in this process, bit for bit
(the same program, only the communicator differs)."""
import json
import os
import shutil
import socket
import subprocess
import sys

import numpy as np
import pytest

import shardc

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dist_worker.py")


def reference(source):
    m = shardc.load(f"{source}/samples/gpt2.onnx", dims={"batch": 2})
    ids = np.random.default_rng(7).integers(0, 1000, size=(2, 16), dtype=np.int64)
    return shardc.compile(m).run({"input_ids": ids})["logits"]


def env_without_launchers():
    env = dict(os.environ)
    for k in list(env):
        if k.startswith(("OMPI_", "PMI", "SLURM_")) or k in ("RANK", "WORLD_SIZE"):
            del env[k]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.path.dirname(shardc.__path__[0]),
                                                      env.get("PYTHONPATH")]))
    return env


def local_losses(source):
    rng = np.random.default_rng(8)
    xs = rng.standard_normal((3, 8, 64), dtype=np.float32)
    ys = rng.integers(0, 10, size=(3, 8), dtype=np.int64)
    t = shardc.compile(shardc.load(f"{source}/samples/mlp.onnx", dims={"batch": 8}),
                       mesh="fsdp=2", comm="local",
                       train=shardc.TrainConfig(optimizer="sgd", lr=0.05, momentum=0.9))
    return [t.step({"x": xs[i]}, labels=ys[i]).loss for i in range(3)]


def check(tmp_path, source, comm):
    ranks = [json.load(open(tmp_path / f"rank{r}.json")) for r in range(2)]
    want = local_losses(source)
    assert all(np.isfinite(want)) and len(set(want)) == 3
    assert ranks[0]["losses"] == want and ranks[1]["losses"] == want
    assert [(r["comm"], r["rank"], r["size"]) for r in ranks] == [(comm, 0, 2), (comm, 1, 2)]
    assert sum(r["owns_logits"] for r in ranks) == 1
    got, want = np.load(tmp_path / "logits.npy"), reference(source)
    assert got.shape == want.shape and not np.isnan(got).any()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("launcher", ["torchrun", "srun"])
def test_tcp_launchers(source, tmp_path, launcher):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(2):
        env = env_without_launchers()
        if launcher == "torchrun":
            env.update(RANK=str(r), WORLD_SIZE="2")
        else:
            env.update(SLURM_PROCID=str(r), SLURM_NTASKS="2", SLURM_JOB_ID="4343",
                       SLURM_STEP_ID="0")
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen([sys.executable, WORKER, source, str(tmp_path)], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    for p in procs:
        out = p.communicate(timeout=300)[0].decode()
        assert p.returncode == 0, out
    check(tmp_path, source, "tcp")


def test_mpirun(source, tmp_path):
    mpirun = shutil.which("mpirun")
    if not mpirun:
        pytest.skip("no mpirun on this machine")
    cmd = [mpirun, "--oversubscribe", "-np", "2"]
    if os.getuid() == 0:
        cmd.append("--allow-run-as-root")
    r = subprocess.run(cmd + [sys.executable, WORKER, source, str(tmp_path)],
                       env=env_without_launchers(), capture_output=True, timeout=300)
    assert r.returncode == 0, r.stdout.decode() + r.stderr.decode()
    check(tmp_path, source, "mpi")
