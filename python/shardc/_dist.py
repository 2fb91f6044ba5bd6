"""_dist.py — where this process stands in a job: shardc.init().

The same environment the command line reads (docs/comm.md): under mpirun
(OMPI_COMM_WORLD_SIZE / PMI_SIZE) a process is one rank of an MPI job and
runs use comm "mpi"; under torchrun or srun (WORLD_SIZE, RANK, or Slurm's
SLURM_NTASKS, SLURM_PROCID; with MASTER_ADDR and MASTER_PORT) one rank of a
job over the tcp communicator, comm "tcp". Otherwise a single process whose
ranks are threads: comm "local". A run started with comm=None takes this
choice; every process runs the same script, with the same global inputs.
"""
import os
from dataclasses import dataclass


@dataclass(frozen=True)
class World:
    comm: str       # "local", "mpi" or "tcp"
    rank: int       # this process's rank (0 for "local")
    size: int       # processes in the job (1 for "local")


def _int(name):
    v = os.environ.get(name)
    return int(v) if v not in (None, "") else None


def init():
    """This process's place in the job, read from the environment."""
    size = _int("OMPI_COMM_WORLD_SIZE") or _int("PMI_SIZE")
    if size:
        rank = _int("OMPI_COMM_WORLD_RANK") or _int("PMI_RANK") or 0
        return World("mpi", rank, size)
    size = _int("WORLD_SIZE") or _int("SLURM_NTASKS")
    if size and size > 1:
        rank = _int("RANK") if _int("RANK") is not None else _int("SLURM_PROCID") or 0
        return World("tcp", rank, size)
    return World("local", 0, 1)
