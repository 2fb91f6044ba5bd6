"""shardc — ONNX models compiled for distributed execution, from Python.

A thin layer over the C library's public API (include/shardc.h, through
ctypes: shardc/_lib.py): load and inspect a model, plan a mesh, compile and
run it, train it, save and export. Every failure of the library becomes an
exception carrying its message ("FILE: node 'N' (Op): what is wrong").

    import shardc
    m = shardc.load("model.onnx", dims={"batch": 8})
    print(m.summary())
    y = shardc.compile(m).run({"x": x})

docs/python.md is the guide; this file holds the objects, _tensors.py the
conversions between arrays and the library's host tensors.
"""
import ctypes
import dataclasses
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field

from . import _lib
from ._lib import lib
from ._tensors import as_host_tensors, outputs_to_arrays, DTYPES
from ._errors import (Error, ModelError, PlanError, OutOfMemoryError, RankError, UsageError,
                      raise_for)
from ._dist import init, World
from ._hf import map_state_dict

__all__ = ["load", "plan", "compile", "Model", "Summary", "Plan", "RankMemory", "Collective",
           "AutoChoice",
           "Executable", "Training", "load_training",
           "TrainConfig", "StepResult", "init", "World", "map_state_dict", "export_checkpoint",
           "Error", "ModelError", "PlanError", "OutOfMemoryError", "RankError", "UsageError"]


def _b(s):
    return None if s is None else os.fsencode(s) if isinstance(s, os.PathLike) else s.encode()


def _dims(dims):
    """{name: value} as a ctypes array of sc_dim_binding (kept alive by the caller)."""
    dims = dict(dims or {})
    arr = (_lib.DimBinding * max(1, len(dims)))()
    for i, (k, v) in enumerate(dims.items()):
        arr[i] = _lib.DimBinding(k.encode(), int(v))
    return arr, len(dims)


def _take_string(p):
    """A char * the library allocated, as str, freed."""
    if not p:
        return None
    s = ctypes.string_at(p).decode()
    lib.sc_string_free(p)
    return s


@dataclass(frozen=True)
class Summary:
    """The statistics `shardc inspect` prints (sc_model_info)."""
    path: str
    dims: dict
    nodes: int
    nodes_before_fold: int
    params: int
    param_bytes: int
    flops: float
    largest_activation_bytes: int
    blocks: int

    def __str__(self):
        dims = ", ".join(f"{k}={v}" for k, v in self.dims.items()) or "defaults"
        return (f"model {self.path} (dims: {dims})\n"
                f"  nodes: {self.nodes} after folding ({self.nodes_before_fold} before)\n"
                f"  params: {self.params} ({self.param_bytes} bytes)\n"
                f"  forward FLOPs: {self.flops:.4g}\n"
                f"  largest activation: {self.largest_activation_bytes} bytes\n"
                f"  repeated blocks: {self.blocks}")


class Model:
    """An ONNX model with its dims bound, imported and prepared (sc_model).

    The handle is the library's; compile() and plan() compile from the same
    file with the same dims."""

    def __init__(self, path, dims=None, no_weights=False):
        self.path = os.fspath(path)
        self.dims = dict(dims or {})
        self.no_weights = bool(no_weights)
        h = ctypes.c_void_p()
        opts = _lib.ModelOpts(no_weights=no_weights, quiet=True)
        st = lib.sc_model_load(_b(self.path), ctypes.byref(opts), ctypes.byref(h))
        self._h = h
        if st:
            self._fail(st)
        for k, v in self.dims.items():
            st = lib.sc_model_bind_dim(self._h, k.encode(), int(v))
            if st:
                self._fail(st)
        st = lib.sc_model_prepare(self._h)
        if st:
            self._fail(st)
        info = _lib.ModelInfo()
        st = lib.sc_model_stats(self._h, ctypes.byref(info))
        if st:
            self._fail(st)
        self._summary = Summary(self.path, dict(self.dims),
                                *(getattr(info, f) for f, _ in _lib.ModelInfo._fields_))

    def _fail(self, st):
        msg = (lib.sc_model_error(self._h) or b"").decode() if self._h else "out of memory"
        raise_for("model", st, msg)

    def summary(self):
        return self._summary

    def close(self):
        if getattr(self, "_h", None):
            lib.sc_model_free(self._h)
            self._h = None

    __del__ = close

    def __repr__(self):
        return f"shardc.Model({self.path!r}, dims={self.dims!r})"


def load(path, dims=None, no_weights=False):
    """Loads and prepares an ONNX model; dims binds symbolic input dims."""
    return Model(path, dims, no_weights)


def _parallel(mesh=None, microbatches=0, ranks_per_node=0, stage_boundaries=None,
              sequence_parallel=False, no_vocab_parallel=False, plan_json=None, cluster=None,
              expert_tensor_parallel=False, reduce_dtype=None):
    return _lib.ParallelOpts(reduce_dtype=_b(reduce_dtype), mesh=_b(mesh), microbatches=microbatches,
                             ranks_per_node=ranks_per_node,
                             stage_boundaries=_b(stage_boundaries),
                             sequence_parallel=sequence_parallel,
                             no_vocab_parallel=no_vocab_parallel, plan_json=_b(plan_json),
                             cluster=_b(cluster), expert_tensor_parallel=expert_tensor_parallel)


@dataclass(frozen=True)
class RankMemory:
    """The memory of one rank: total_bytes and its lines by name. For
    inference (sc_plan_report_json) "weights" (local shards),
    "activations" and "communication" (the collectives' scratch), which sum
    to the total; for a training step (sc_training_plan_json) the arena's
    classes at its peak ("params", "optimizer state", "gradients",
    "activations", "workspace", "data", "communication"), "arena" and
    "constants", the total being arena + constants."""
    stage: int
    total_bytes: int
    lines: dict


@dataclass(frozen=True)
class Collective:
    """The collectives of one kind a rank of a stage runs over axes;
    sent_bytes (training plans): what a rank sends per step with ring
    algorithms, else None."""
    stage: int
    op: str
    axes: tuple
    count: int
    bytes_per_microbatch: int
    bytes_per_step: int
    sent_bytes: int = None


@dataclass(frozen=True)
class AutoChoice:
    """What the planner's search (auto=True: `shardc plan --auto --json`,
    docs/cli.md#plan---auto) chose: the chosen plan's options as the
    command line writes them (options: "--mesh pp=2 --microbatches 1
    --recompute none"), its mesh ({"dp", "fsdp", "tp", "pp", "cp", "ep"}), zero,
    sequence_parallel, schedule, virtual_stages, microbatches,
    micro_batch_size, recompute ("none" for inference), predicted
    (the exact simulated step: docs/plan-format.md's object, step_time_s,
    peak_bytes_per_rank, fits, ...), estimate (the block model's figures),
    replay (`shardc plan`'s options that predict the same), candidates (the
    best ones, each a dict of the same keys with "why" it lost) and search
    (the rest of the report: counts, times, the memory limit, objective)."""
    options: str
    mesh: dict
    zero: int
    sequence_parallel: bool
    schedule: str
    virtual_stages: int
    microbatches: int
    micro_batch_size: int
    recompute: str
    predicted: dict
    estimate: dict
    replay: str
    candidates: list
    search: dict


class Plan:
    """How a model is split over a mesh: the plan as JSON text
    (sc_plan_json, docs/plan-format.md), which compile() replays exactly,
    and as a dict; what it asks of each rank (sc_plan_report_json, what
    `shardc plan` prints): memory_per_rank {rank: RankMemory} and
    collectives [Collective]; with a cluster, predicted: the simulated step
    on it (`shardc plan --json`'s "predicted": step_time_s, rank,
    pipe_rank, breakdown, tokens_per_s, tflops_per_gpu, mfu,
    peak_bytes_per_rank (the largest rank's memory, the device's own lines
    included) and fits; and cluster), else None. auto: the search's choice (AutoChoice) of a
    plan made with auto=True, else None."""

    def __init__(self, model, text, report, train=None, auto=None):
        self.model = model
        self.train = train
        self.auto = auto
        self.json = text
        self.data = json.loads(text)
        rep = json.loads(report)
        self.mesh = rep["mesh"]
        self.n_ranks = rep["ranks"]
        self.stages = self.data["pipeline"]["stages"]
        self.microbatches = rep["microbatches"]
        self.shardings = dict(self.data.get("shardings", {}))
        self.memory_per_rank = {}
        for st in rep["stages"]:
            lines = st.get("lines") or {"weights": st["weight_bytes"],
                                        "activations": st["activation_bytes"],
                                        "communication": st["comm_bytes"]}
            mem = RankMemory(st["stage"], st["total_bytes"], lines)
            for r in st["ranks"]:
                self.memory_per_rank[r] = mem
        self.memory_per_rank = dict(sorted(self.memory_per_rank.items()))
        self.predicted = rep.get("predicted")
        self.collectives = [Collective(c["stage"], c["op"], tuple(c["axes"]), c["count"],
                                       c["bytes_per_microbatch"], c["bytes_per_step"],
                                       c.get("sent_bytes"))
                            for c in rep["collectives"]]

    def __repr__(self):
        return f"shardc.Plan(mesh={self.mesh!r}, ranks={self.n_ranks}, stages={self.stages})"


def _plan_call(f, model, par):
    dims, n = _dims(model.dims)
    out, err = ctypes.c_void_p(), ctypes.c_void_p()
    st = f(_b(model.path), dims, n, ctypes.byref(par), ctypes.byref(out), ctypes.byref(err))
    text, msg = _take_string(out.value), _take_string(err.value)
    if st:
        raise_for("plan", st, msg or _lib.STATUS_NAMES[st])
    return text


def _training_plan(model, cfg, par, auto=None):
    s, keep = _settings(model, cfg, par, None)
    out, rep, err = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
    st = lib.sc_training_plan_json(_b(model.path), ctypes.byref(s), ctypes.byref(out),
                                   ctypes.byref(rep), ctypes.byref(err))
    text, report, msg = (_take_string(out.value), _take_string(rep.value),
                         _take_string(err.value))
    if st:
        raise_for("plan", st, msg or _lib.STATUS_NAMES[st])
    return Plan(model, text, report, cfg, auto)


# the step's options the search builds its candidates with (`plan --auto`
# takes `shardc train`'s): TrainConfig field -> option
_AUTO_STEP_OPTIONS = (("optimizer", "--optimizer"), ("precision", "--precision"),
                      ("loss", "--loss"), ("logits", "--logits"))


def _auto_plan(model, cfg, cluster, objective, memory_budget):
    """The planner's search, as `shardc plan MODEL --auto --json` runs it
    (the search is the command line's, tools/plan_auto.c: the package
    runs its `shardc`), its chosen plan then replayed through the
    library: a Plan whose auto is the AutoChoice. cfg: the training step
    (the global batch is the model's batch dim), or None for inference
    (by objective, "latency" or "throughput")."""
    from ._cli import command
    if not cluster:
        raise UsageError("auto=True needs cluster= (a preset such as 'h100-sxm:8x2', a "
                         "cluster file, or 'cpu:local@PROFILE.json' from `shardc calibrate`)",
                         "usage")
    exe = command()
    if exe is None:
        raise Error("auto=True runs the planner's search of the `shardc` command, which this "
                    "installation lacks (shardc/bin/shardc; or set SHARDC)", "io")
    args = [exe, "plan", model.path, "--auto", "--json", "--cluster", str(cluster)]
    for k, v in model.dims.items():
        args += ["--dim", f"{k}={int(v)}"]
    if model.no_weights:
        args.append("--no-weights")  # the candidates built from shapes, as the model was loaded
    if memory_budget is not None:
        args += ["--memory-budget", str(memory_budget)]
    if cfg is not None:
        if objective is not None:
            raise UsageError("objective= ranks inference plans; a training step is ranked by "
                             "its time", "usage")
        args.append("--train")
        for f, opt in _AUTO_STEP_OPTIONS:
            if getattr(cfg, f) is not None:
                args += [opt, str(getattr(cfg, f))]
        for g in cfg.freeze:
            args += ["--freeze", g]
    elif objective is not None:
        args += ["--objective", objective]
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode:
        msg = r.stderr.strip().replace("shardc: error: ", "") or f"exit {r.returncode}"
        raise (UsageError(msg, "usage") if r.returncode == 2 else PlanError(msg, "invalid"))
    a = json.loads(r.stdout)["auto"]
    c = a["chosen"]
    keys = ("mesh", "zero", "sequence_parallel", "schedule", "virtual_stages", "microbatches",
            "micro_batch_size", "recompute", "predicted", "estimate", "replay")
    choice = AutoChoice(c["options"], *(c.get(k) for k in keys), list(a["candidates"]),
                        {k: v for k, v in a.items() if k not in ("chosen", "candidates")})
    text = json.dumps(c["plan"])
    if cfg is None:
        report = _plan_call(lib.sc_plan_report_json, model, _parallel(plan_json=text))
        return Plan(model, text, report, None, choice)
    if cfg.recompute not in (None, c["recompute"]):
        raise UsageError(f"auto=True chooses the recompute itself ({c['recompute']}), not "
                         f"TrainConfig(recompute={cfg.recompute!r})", "usage")
    cfg = dataclasses.replace(cfg, recompute=c["recompute"])
    return _training_plan(model, cfg, _parallel(plan_json=text), choice)


def plan(model, mesh=None, microbatches=0, ranks_per_node=0, stage_boundaries=None,
         sequence_parallel=False, no_vocab_parallel=False, train=None, cluster=None,
         auto=False, objective=None, memory_budget=None, expert_tensor_parallel=False,
         reduce_dtype=None):
    """The plan of model over mesh ("tp=2,pp=2"), shapes only; with
    train=TrainConfig(...) (or True: its defaults) the plan of the training
    step (a mesh may have an fsdp axis), which compile(m, plan=...,
    train=...) then trains. cluster ("h100-sxm:8x4" or a cluster file,
    docs/planner.md): the axes placed on its nodes and the step predicted.
    auto=True (or mesh="auto"): the planner chooses the plan on cluster
    (`shardc plan --auto`: for training the global batch is the model's
    batch dim, the recompute is chosen too; for inference by objective,
    "latency" by default), under memory_budget (bytes, or "80%") if given;
    the Plan's auto holds the choice (AutoChoice), predicted its step.
    expert_tensor_parallel: each expert's MLP split over tp as well
    (`--expert-tensor-parallel`, docs/moe.md). reduce_dtype: a bf16 or
    fp16 step's gradient reductions, "fp32" (None: the default, after their
    cast back) or the step's own "bf16" / "fp16" (`--reduce-dtype`,
    docs/training.md)."""
    if auto or mesh == "auto":
        if (mesh not in (None, "auto") or microbatches or ranks_per_node or stage_boundaries
                or sequence_parallel or no_vocab_parallel or expert_tensor_parallel
                or reduce_dtype):
            raise UsageError("auto=True chooses the mesh and every partitioning option itself: "
                             "give only cluster=", "usage")
        cfg = None if train is None or train is False else TrainConfig() if train is True \
            else train
        return _auto_plan(model, cfg, cluster, objective, memory_budget)
    if objective is not None or memory_budget is not None:
        raise UsageError("objective= and memory_budget= go with auto=True", "usage")
    par = _parallel(mesh, microbatches, ranks_per_node, stage_boundaries, sequence_parallel,
                    no_vocab_parallel, cluster=cluster,
                    expert_tensor_parallel=expert_tensor_parallel, reduce_dtype=reduce_dtype)
    if train is not None and train is not False:
        return _training_plan(model, TrainConfig() if train is True else train, par)
    text = _plan_call(lib.sc_plan_json, model, par)
    return Plan(model, text, _plan_call(lib.sc_plan_report_json, model, _parallel(plan_json=text)))


_plan_of = plan  # compile()'s argument `plan` hides the function


@dataclass
class TrainConfig:
    """The training step's settings (sc_training_settings; PyTorch's defaults
    for the optimizer where a field is None) and the learning rate per step:
    lr, or a linear warm-up over warmup_steps then schedule ("cosine" or
    "linear") down to min_lr at total_steps — the CLI's --lr-schedule."""
    optimizer: str = "adamw"
    lr: float = 1e-3
    loss: str = "cross-entropy"
    logits: str = None
    weight_decay: float = None
    momentum: float = None
    nesterov: bool = False
    betas: tuple = None
    eps: float = None
    clip_grad_norm: float = 0.0
    ignore_index: int = None
    freeze: list = field(default_factory=list)
    aux_losses: dict = field(default_factory=dict)   # output name -> coefficient (--aux-loss)
    precision: str = "fp32"
    recompute: str = None     # "none" (None), "selective", "full"; auto=True chooses it
    threads: int = 0
    schedule: str = "constant"
    warmup_steps: int = 0
    total_steps: int = 0
    min_lr: float = 0.0

    def lr_at(self, step):
        """The learning rate of step (1-based), as `shardc train` computes it
        (sc_learning_rate: the same function)."""
        lr = lib.sc_learning_rate(_b(self.schedule), self.lr, self.min_lr, self.warmup_steps,
                                  self.total_steps, step)
        if lr != lr:
            raise UsageError(f"schedule '{self.schedule}': expected constant, cosine or "
                             f"linear (step {step})", "usage")
        return lr


@dataclass(frozen=True)
class StepResult:
    step: int
    loss: float
    grad_norm: float
    lr: float
    time: float   # seconds of the step


class Executable:
    """A compiled inference program (sc_executable): one rank or a mesh.

    run() takes a dict of arrays (buffer protocol or DLPack: NumPy arrays,
    PyTorch CPU tensors), read in place when C-contiguous with a dtype the
    library knows, and returns a dict of NumPy arrays."""

    def __init__(self, handle, model=None):
        self._h = handle
        self.model = model
        self.plan = None  # compile()'s plan, when it was given one or made one (auto=True)
        self.inputs = [self._describe(lib.sc_executable_input, i)
                       for i in range(lib.sc_executable_n_inputs(handle))]
        self.outputs = [self._describe(lib.sc_executable_output, i)
                        for i in range(lib.sc_executable_n_outputs(handle))]
        self.n_ranks = lib.sc_executable_n_ranks(handle)
        self.n_stages = lib.sc_executable_n_stages(handle)
        self.last_input_copies = []   # names of the inputs the last run had to copy

    def _describe(self, f, i):
        t = _lib.HostTensor()
        st = f(self._h, i, ctypes.byref(t))
        if st:
            self._fail(st)
        return (t.name.decode(), DTYPES.get(t.dtype, t.dtype), tuple(t.dims[:t.rank]))

    def _fail(self, st, where="model"):
        msg = (lib.sc_executable_error(self._h) or b"").decode()
        raise_for(where, st, msg)

    def run(self, inputs, comm=None, threads=0, copy=True):
        """Runs once. comm: "local" (every rank a thread) or "mpi" (this
        process one rank of mpirun, "tcp" of torchrun); None: shardc.init()'s
        choice for a mesh, "local" for one rank. copy=False
        returns views of the memory the library allocated (no copy, freed
        with the arrays) instead of arrays owning their data."""
        if comm is None:  # one rank runs here whatever the launcher
            comm = init().comm if self.n_ranks > 1 else "local"
        hosts, keep, copied = as_host_tensors(inputs)
        self.last_input_copies = copied
        n_out = len(self.outputs)
        outs = (_lib.HostTensor * max(1, n_out))()
        opts = _lib.RunOpts(comm=_b(comm), threads=threads)
        st = lib.sc_executable_run(self._h, ctypes.byref(opts), hosts, len(keep), outs, n_out)
        del keep
        if st:
            self._fail(st, "run" if self.n_ranks > 1 or comm != "local" else "model")
        return outputs_to_arrays(outs, n_out, copy)

    def save(self, path):
        """Writes the bundle directory (docs/bundle.md); load() reads it."""
        st = lib.sc_executable_save(self._h, _b(os.fspath(path)))
        if st:
            self._fail(st)

    @staticmethod
    def load(path):
        h = ctypes.c_void_p()
        st = lib.sc_executable_load(_b(os.fspath(path)), ctypes.byref(h))
        if st:
            msg = (lib.sc_executable_error(h) or b"").decode()
            lib.sc_executable_free(h)
            raise_for("model", st, msg)
        return Executable(h)

    def close(self):
        if getattr(self, "_h", None):
            lib.sc_executable_free(self._h)
            self._h = None

    __del__ = close


def _settings(model, cfg, parallel, comm):
    """cfg as sc_training_settings (PyTorch's defaults where a field is
    None); the ctypes objects it points to, to keep alive."""
    s = _lib.TrainingSettings()
    lib.sc_training_settings_init(ctypes.byref(s), _b(cfg.optimizer))
    dims, n = _dims(model.dims)
    freeze = (ctypes.c_char_p * max(1, len(cfg.freeze)))(*[_b(f) for f in cfg.freeze])
    s.dims, s.n_dims = dims, n
    s.optimizer = _b(cfg.optimizer)
    s.loss = _b(cfg.loss)
    s.logits = _b(cfg.logits)
    for name in ("weight_decay", "momentum", "eps"):
        v = getattr(cfg, name)
        if v is not None:
            setattr(s, name, v)
    if cfg.betas is not None:
        s.beta1, s.beta2 = cfg.betas
    if cfg.ignore_index is not None:
        s.ignore_index = cfg.ignore_index
    s.nesterov = cfg.nesterov
    s.clip_grad_norm = cfg.clip_grad_norm
    s.freeze, s.n_freeze = freeze, len(cfg.freeze)
    n_aux = len(cfg.aux_losses)
    aux_names = (ctypes.c_char_p * max(1, n_aux))(*[_b(k) for k in cfg.aux_losses])
    aux_coefs = (ctypes.c_double * max(1, n_aux))(*[float(v) for v in cfg.aux_losses.values()])
    s.aux_loss_names, s.aux_loss_coefs, s.n_aux_losses = aux_names, aux_coefs, n_aux
    s.threads = cfg.threads
    s.precision = _b(cfg.precision)
    s.recompute = _b(cfg.recompute)
    if parallel is not None:
        s.parallel = parallel
        s.comm = _b(comm)
    return s, (dims, freeze, aux_names, aux_coefs, parallel)


class Training:
    """A compiled training step (sc_training) and its state: on one rank,
    or over a mesh (parallel: a ParallelOpts) whose ranks are threads of
    this process (comm "local") or the processes of an mpirun / torchrun
    job ("mpi", "tcp": every process makes the same calls)."""

    def __init__(self, model, cfg, parallel=None, comm=None, _handle=None):
        self.model = model
        self.config = cfg
        self.plan = None  # compile()'s plan, when it was given one or made one (auto=True)
        if _handle is not None:  # load_training's: the step compiled into a bundle
            self._h, self._keep = _handle, None
            return
        self._parallel = parallel  # save_bundle() of a pipelined step builds it again
        s, self._keep = _settings(model, cfg, parallel, comm)
        h = ctypes.c_void_p()
        st = lib.sc_training_create(_b(model.path), ctypes.byref(s), ctypes.byref(h))
        self._h = h
        if st:
            self._fail(st, "model")

    def _fail(self, st, where="run"):
        msg = (lib.sc_training_error(self._h) or b"").decode() if self._h else "out of memory"
        raise_for(where, st, msg)

    @property
    def steps_done(self):
        return lib.sc_training_steps_done(self._h)

    def step(self, inputs, labels=None, targets=None, lr=None):
        """One optimizer step on one batch: the data inputs by name, and
        labels (cross-entropy) or targets (mse). lr: this step's learning
        rate (None: the config's schedule). Returns a StepResult."""
        data = dict(inputs)
        if labels is not None:
            data["labels"] = labels
        if targets is not None:
            data["targets"] = targets
        step = self.steps_done + 1
        if lr is None:
            lr = self.config.lr_at(step)
        hosts, keep, _ = as_host_tensors(data)
        loss, norm = ctypes.c_double(), ctypes.c_double()
        t0 = time.perf_counter()
        st = lib.sc_training_step(self._h, hosts, len(keep), lr, ctypes.byref(loss),
                                  ctypes.byref(norm))
        dt = time.perf_counter() - t0
        del keep
        if st:
            self._fail(st, "model" if st == _lib.SC_ERR_USAGE else "run")
        return StepResult(step, loss.value, norm.value, lr, dt)

    def tensor(self, name, copy=True):
        """A parameter's current value (or optimizer state: "NAME.exp_avg")."""
        import numpy as np
        t = _lib.HostTensor()
        st = lib.sc_training_tensor(self._h, _b(name), ctypes.byref(t))
        if st:
            raise UsageError(f"no training tensor named '{name}'", "usage")
        from ._tensors import view_of
        a = view_of(t)
        return np.array(a) if copy else a

    def save(self, path):
        """Writes a checkpoint directory (docs/checkpoint.md): the same
        safetensors files as `shardc train --save`."""
        st = lib.sc_training_save(self._h, _b(os.fspath(path)))
        if st:
            self._fail(st, "model")

    def resume(self, path):
        st = lib.sc_training_resume(self._h, _b(os.fspath(path)))
        if st:
            self._fail(st, "model")

    def save_bundle(self, path):
        """Writes the training step as a training bundle directory
        (docs/bundle.md; over a mesh a partitioned one): what `shardc compile
        --train [--mesh ...]` writes, trained by load_training() or `shardc
        train DIR` without the model, from the model's initial weights (the
        steps taken are in save()'s checkpoints, not here). A pipelined
        step (pp > 1), whose pieces update their state in place here, is
        built again for the bundle as the command builds it
        (sc_training_bundle_write)."""
        st = lib.sc_training_save_bundle(self._h, _b(os.fspath(path)))
        if st == _lib.SC_ERR_UNSUPPORTED and self.model is not None:
            s, keep = _settings(self.model, self.config, self._parallel, None)
            err = ctypes.c_void_p()
            st = lib.sc_training_bundle_write(_b(self.model.path), ctypes.byref(s),
                                              _b(os.fspath(path)), ctypes.byref(err))
            msg = _take_string(err.value)
            if st:
                raise_for("model", st, msg or _lib.STATUS_NAMES[st])
            return
        if st:
            self._fail(st, "model")

    def export(self, path):
        """The model with the trained weights as a new ONNX file."""
        if self.model is None:
            raise UsageError("a training loaded from a bundle has no model to export: save() "
                             "the checkpoint and export_checkpoint() it into the model",
                             "usage")
        tmp = tempfile.mkdtemp(prefix="shardc-export-")
        try:
            self.save(os.path.join(tmp, "ckpt"))
            export_checkpoint(os.path.join(tmp, "ckpt"), self.model.path, path)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def close(self):
        if getattr(self, "_h", None):
            lib.sc_training_free(self._h)
            self._h = None

    __del__ = close


def load_training(path, config=None, threads=0):
    """A training bundle (Training.save_bundle(), `shardc compile --train
    [--mesh ...]`) as a Training at step 0 from its initial weights; a
    partitioned one runs its ranks as threads of this process. The step
    (optimizer, loss, precision, mesh) is the bundle's; config (a
    TrainConfig, None: its defaults) gives only each step's learning rate
    (lr, schedule, warmup_steps, total_steps, min_lr). threads: per rank, 0
    for all cores (cores / ranks over a mesh)."""
    h = ctypes.c_void_p()
    st = lib.sc_training_load(_b(os.fspath(path)), threads, ctypes.byref(h))
    if st:
        msg = (lib.sc_training_error(h) or b"").decode() if h else "out of memory"
        lib.sc_training_free(h)
        raise_for("model", st, msg)
    return Training(None, config or TrainConfig(), _handle=h)


def export_checkpoint(checkpoint, model_path, out):
    """Writes model_path with a checkpoint's weights as the ONNX file out."""
    err = ctypes.c_void_p()
    st = lib.sc_export_checkpoint(_b(os.fspath(checkpoint)), _b(os.fspath(model_path)),
                                  _b(os.fspath(out)), ctypes.byref(err))
    msg = _take_string(err.value)
    if st:
        raise_for("model", st, msg or _lib.STATUS_NAMES[st])


def compile(model, plan=None, mesh=None, train=None, no_fuse=False, comm=None, auto=False,
            objective=None, memory_budget=None, **parallel):
    """Compiles model: for inference (an Executable), or, with
    train=TrainConfig(...), its training step (a Training); on one rank or
    over the mesh of plan or mesh ("fsdp=2,tp=2"; parallel: microbatches,
    stage_boundaries, ...). auto=True (or mesh="auto") with cluster=:
    plan(..., auto=True)'s choice (the compiled object's plan attribute
    holds it). comm (training over a mesh): "local", "mpi", "tcp"; None:
    shardc.init()'s choice."""
    if auto or mesh == "auto":
        if plan is not None:
            raise UsageError("give a plan or auto=True, not both", "usage")
        plan = _plan_of(model, mesh=mesh, train=train, auto=True, objective=objective,
                        memory_budget=memory_budget, **parallel)
        mesh, parallel = None, {}
    if plan is not None and (mesh or parallel):
        raise UsageError("give a plan or a mesh, not both", "usage")
    if train is not None and plan is not None and plan.auto is not None and plan.train:
        train = dataclasses.replace(train, recompute=plan.train.recompute)  # the search's
    par = _parallel(plan_json=plan.json) if plan is not None else _parallel(mesh, **parallel)
    out = _compile(model, plan, mesh, train, no_fuse, comm, par)
    out.plan = plan
    return out


def _compile(model, plan, mesh, train, no_fuse, comm, par):
    if train is not None:
        if plan is None and not mesh:
            return Training(model, train)
        return Training(model, train, par, comm or init().comm)
    dims, n = _dims(model.dims)
    s = _lib.CompileSettings(dims=dims, n_dims=n, parallel=par, target=0, no_fuse=no_fuse,
                             quiet=True)
    h = ctypes.c_void_p()
    st = lib.sc_compile(_b(model.path), ctypes.byref(s), ctypes.byref(h))
    if st:
        msg = (lib.sc_executable_error(h) or b"").decode()
        lib.sc_executable_free(h)
        raise_for("plan" if plan is not None or mesh else "model", st, msg)
    return Executable(h, model)
