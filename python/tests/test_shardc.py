"""test_shardc.py — the Python package against the same references as the
command line's tests, on the samples:

- inference equals onnxruntime (MLP, GPT-2; rtol 1e-4, atol 1e-5 as in
  tests/models: fp32 kernels that sum in another order);
- a mesh (tp=2 x pp=2, from a shardc.Plan) equals one rank (same tolerance);
- 5 training steps equal `shardc train`'s, bit for bit: the losses as the
  CLI's JSON log prints them (%.9g: every bit of the float32 loss) and
  every weight of the checkpoint;
- the checkpoint is safetensors as the CLI's, the export runs in
  onnxruntime with the trained weights;
- inputs are read in place (the pointer handed to the library is the
  array's) when contiguous, copied once when not; DLPack-only objects too;
- the library's failures become the right exceptions, with its message.
Inputs are seeded; NaN fails every comparison (assert_allclose's default).
"""
import ctypes
import json
import os
import subprocess
import sys

import numpy as np
import onnxruntime as ort
import pytest

import shardc
from shardc._tensors import as_host_tensors

RTOL, ATOL = 1e-4, 1e-5


def ort_run(path, feeds):
    s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    names = [o.name for o in s.get_outputs()]
    return dict(zip(names, s.run(None, feeds)))


def close(got, want):
    assert got.shape == want.shape
    assert not np.isnan(got).any()
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def test_mlp_equals_onnxruntime(source, rng):
    path = f"{source}/samples/mlp.onnx"
    m = shardc.load(path, dims={"batch": 4})
    s = m.summary()
    assert s.nodes > 0 and s.params == 26122 and "params: 26122" in str(s)
    exe = shardc.compile(m)
    assert exe.inputs == [("x", np.dtype(np.float32), (4, 64))]
    x = rng.standard_normal((4, 64), dtype=np.float32)
    y = exe.run({"x": x})
    close(y["y"], ort_run(path, {"x": x})["y"])
    assert y["y"].flags.owndata


def test_gpt2_equals_onnxruntime_and_mesh_equals_one_rank(source, rng):
    path = f"{source}/samples/gpt2.onnx"
    m = shardc.load(path, dims={"batch": 2})
    ids = rng.integers(0, 1000, size=(2, 16), dtype=np.int64)
    one = shardc.compile(m).run({"input_ids": ids})
    want = ort_run(path, {"input_ids": ids})
    for k in want:
        close(one[k], want[k])
    p = shardc.plan(m, mesh="tp=2,pp=2")
    assert (p.mesh, p.n_ranks, p.stages) == ("tp=2,pp=2", 4, 2)
    assert p.data["tensor_parallel"]["axis"] == "tp" and p.shardings
    exe = shardc.compile(m, plan=p)
    assert (exe.n_ranks, exe.n_stages) == (4, 2)
    four = exe.run({"input_ids": ids}, copy=False)
    for k in want:
        close(four[k], one[k])
        assert not four[k].flags.owndata  # the library's allocation, not a copy


class PyDLPack:
    """A CPU tensor exported through DLPack by a producer written in Python
    (dlpack.h's DLManagedTensor in a "dltensor" capsule, as torch's
    to_dlpack makes it): an fp32 array a seen with shape and strides (in
    elements; None: row-major). The array stays alive with this object."""

    class Tensor(ctypes.Structure):
        _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32),
                    ("device_id", ctypes.c_int32), ("ndim", ctypes.c_int32),
                    ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                    ("lanes", ctypes.c_uint16), ("shape", ctypes.POINTER(ctypes.c_int64)),
                    ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64),
                    ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]

    NAME = b"dltensor"

    def __init__(self, a, shape=None, strides=None):
        assert a.dtype == np.float32
        shape = tuple(shape or a.shape)
        self.a = a
        self.shape = (ctypes.c_int64 * len(shape))(*shape)
        self.strides = (ctypes.c_int64 * len(shape))(*strides) if strides else None
        self.t = self.Tensor(data=a.ctypes.data, device_type=1, device_id=0, ndim=len(shape),
                             code=2, bits=32, lanes=1, shape=self.shape, strides=self.strides,
                             byte_offset=0, manager_ctx=None, deleter=None)

    def __dlpack__(self, stream=None, **kw):
        new = ctypes.pythonapi.PyCapsule_New
        new.restype, new.argtypes = ctypes.py_object, (ctypes.c_void_p, ctypes.c_char_p,
                                                       ctypes.c_void_p)
        return new(ctypes.addressof(self.t), self.NAME, None)

    def __dlpack_device__(self):
        return (1, 0)  # kDLCPU


def test_inputs_read_in_place(source, rng):
    x = rng.standard_normal((4, 64), dtype=np.float32)
    hosts, keep, copied = as_host_tensors({"x": x})
    assert copied == [] and hosts[0].data == x.__array_interface__["data"][0]

    class DLPackOnly:  # a tensor that offers only DLPack (as torch.Tensor does)
        def __init__(self, a):
            self.a = a

        def __dlpack__(self, **kw):
            return self.a.__dlpack__(**kw)

        def __dlpack_device__(self):
            return self.a.__dlpack_device__()

    hosts, keep, copied = as_host_tensors({"x": DLPackOnly(x)})
    assert copied == [] and hosts[0].data == x.__array_interface__["data"][0]
    # a producer that is not NumPy (as torch's is not): its own DLTensor
    own = PyDLPack(x)
    hosts, keep, copied = as_host_tensors({"x": own})
    assert copied == [] and hosts[0].data == x.__array_interface__["data"][0]
    assert (hosts[0].rank, tuple(hosts[0].dims[:2])) == (2, (4, 64))
    # strides (in elements) of a transposed view: read, but copied once
    xt = np.ascontiguousarray(x.T)
    hosts, keep, copied = as_host_tensors({"x": PyDLPack(xt, (4, 64), (1, 4))})
    assert copied == ["x"] and np.array_equal(keep[0], x)
    strided = np.asfortranarray(x)
    hosts, keep, copied = as_host_tensors({"x": strided})
    assert copied == ["x"] and hosts[0].data != strided.__array_interface__["data"][0]
    # and the run reads them: the same answer either way, no copy reported
    exe = shardc.compile(shardc.load(f"{source}/samples/mlp.onnx", dims={"batch": 4}))
    a = exe.run({"x": x})["y"]
    assert exe.last_input_copies == []
    b = exe.run({"x": DLPackOnly(x)})["y"]
    assert exe.last_input_copies == []
    assert np.array_equal(a, exe.run({"x": own})["y"]) and exe.last_input_copies == []
    c = exe.run({"x": strided})["y"]
    assert exe.last_input_copies == ["x"]
    assert np.array_equal(a, b) and np.array_equal(a, c)


def reverse_data(source, tmp_path):
    subprocess.run([sys.executable, f"{source}/samples/train/make_reverse.py", str(tmp_path)],
                   check=True, capture_output=True)
    return (f"{tmp_path}/reverse.onnx", np.load(f"{tmp_path}/train_x.npy"),
            np.load(f"{tmp_path}/train_y.npy"))


def test_training_equals_cli(source, shardc_cli, tmp_path):
    from safetensors.numpy import load_file
    model, xs, ys = reverse_data(source, tmp_path)
    cli_ck = tmp_path / "cli_ck"
    subprocess.run([shardc_cli, "train", model, "--data", f"x={tmp_path}/train_x.npy",
                    "--labels", f"{tmp_path}/train_y.npy", "--dim", "batch=32", "--steps", "5",
                    "--optimizer", "adamw", "--lr", "3e-3", "--weight-decay", "0",
                    "--lr-schedule", "cosine", "--warmup-steps", "2", "--save", str(cli_ck),
                    "--log-json", str(tmp_path / "log.jsonl"), "--quiet"],
                   check=True, capture_output=True)
    log = [json.loads(line) for line in open(tmp_path / "log.jsonl")]
    m = shardc.load(model, dims={"batch": 32})
    cfg = shardc.TrainConfig(optimizer="adamw", lr=3e-3, weight_decay=0.0, schedule="cosine",
                             warmup_steps=2, total_steps=5)
    t = shardc.compile(m, train=cfg)
    first_embed = t.tensor("embed")
    B = 32
    for i in range(5):  # the CLI's batches: examples i*B .. (i+1)*B - 1
        out = t.step({"x": xs[i * B:(i + 1) * B]}, labels=ys[i * B:(i + 1) * B])
        assert out.step == i + 1
        assert f"{out.loss:.9g}" == f"{log[i]['loss']:.9g}", (i, out.loss, log[i]["loss"])
        assert f"{out.lr:.9g}" == f"{log[i]['lr']:.9g}"
        assert f"{out.grad_norm:.9g}" == f"{log[i]['grad_norm']:.9g}"
    py_ck = tmp_path / "py_ck"
    t.save(py_ck)
    files = sorted(os.listdir(cli_ck))
    assert files == sorted(os.listdir(py_ck)) and any(f.endswith(".safetensors") for f in files)
    for f in files:
        if f.endswith(".safetensors"):
            a, b = load_file(str(cli_ck / f)), load_file(str(py_ck / f))
            assert a.keys() == b.keys() and a
            for k in a:
                assert np.array_equal(a[k], b[k]), k  # bit for bit
    weights = load_file(str(py_ck / "weights.safetensors"))
    assert np.array_equal(t.tensor("embed"), weights["embed"])
    assert not np.array_equal(weights["embed"], first_embed)  # it trained
    # export: the trained model runs in onnxruntime as in shardc
    t.export(tmp_path / "trained.onnx")
    x = np.load(f"{tmp_path}/test_x.npy")
    want = ort_run(str(tmp_path / "trained.onnx"), {"x": x})["logits"]
    got = shardc.compile(shardc.load(tmp_path / "trained.onnx", dims={"batch": 8})).run(
        {"x": x})["logits"]
    close(got, want)
    # resume: a fresh training from the checkpoint takes the same 6th step
    u = shardc.compile(m, train=cfg)
    u.resume(py_ck)
    assert u.steps_done == 5
    a = t.step({"x": xs[160:192]}, labels=ys[160:192])
    b = u.step({"x": xs[160:192]}, labels=ys[160:192])
    assert a.loss == b.loss and a.lr == b.lr


def test_aux_loss_equals_cli(source, shardc_cli, tmp_path, rng):
    """TrainConfig.aux_losses is `shardc train --aux-loss`: the moe sample's
    2 SGD steps with its load-balancing loss at 0.02 give the CLI's losses
    bit for bit; an unknown output is refused, naming it."""
    path = f"{source}/samples/moe.onnx"
    ids = rng.integers(0, 1000, (4, 16)).astype(np.int64)
    labels = rng.integers(0, 1000, (4, 16)).astype(np.int64)
    np.save(tmp_path / "ids.npy", ids)
    np.save(tmp_path / "labels.npy", labels)
    subprocess.run([shardc_cli, "train", path, "--data", f"input_ids={tmp_path}/ids.npy",
                    "--labels", f"{tmp_path}/labels.npy", "--dim", "batch=2", "--steps", "2",
                    "--optimizer", "sgd", "--lr", "0.05", "--aux-loss", "aux_loss=0.02",
                    "--log-json", str(tmp_path / "log.jsonl"), "--quiet"],
                   check=True, capture_output=True)
    log = [json.loads(line) for line in open(tmp_path / "log.jsonl")]
    cfg = shardc.TrainConfig(optimizer="sgd", lr=0.05, aux_losses={"aux_loss": 0.02})
    t = shardc.compile(shardc.load(path, dims={"batch": 2}), train=cfg)
    for i in range(2):
        out = t.step({"input_ids": ids[2 * i:2 * i + 2]}, labels=labels[2 * i:2 * i + 2])
        assert f"{out.loss:.9g}" == f"{log[i]['loss']:.9g}", (i, out.loss, log[i]["loss"])
    with pytest.raises(shardc.Error, match="no_such_output"):
        shardc.compile(shardc.load(path, dims={"batch": 2}),
                       train=shardc.TrainConfig(aux_losses={"no_such_output": 1.0}))


def test_expert_tensor_parallel(source, rng):
    """plan(..., expert_tensor_parallel=True) is `--expert-tensor-parallel`:
    the moe sample's expert weights split over ep and tp in the plan, which
    records the choice; compiled from that plan and with the keyword, it
    runs as one rank (rtol 1e-5); refused without a tp axis."""
    m = shardc.load(f"{source}/samples/moe.onnx", dims={"batch": 4})
    ids = rng.integers(0, 1000, size=(4, 16), dtype=np.int64)
    one = shardc.compile(m).run({"input_ids": ids})
    p = shardc.plan(m, mesh="tp=2,ep=2", expert_tensor_parallel=True)
    assert p.data["tensor_parallel"]["expert_tensor_parallel"] is True
    assert p.shardings["layers.0.block_sparse_moe.w1"] == "[ep,_,tp]"
    assert p.shardings["layers.0.block_sparse_moe.w2"] == "[ep,tp,_]"
    for exe in (shardc.compile(m, plan=p),
                shardc.compile(m, mesh="tp=2,ep=2", expert_tensor_parallel=True)):
        got = exe.run({"input_ids": ids})
        for k in one:
            assert not np.isnan(got[k]).any()
            np.testing.assert_allclose(got[k], one[k], rtol=1e-5, atol=1e-6)
    with pytest.raises(shardc.PlanError, match="no tp axis"):
        shardc.plan(m, mesh="ep=2", expert_tensor_parallel=True)


def test_errors(source, tmp_path, rng):
    with pytest.raises(shardc.ModelError) as e:
        shardc.load(tmp_path / "missing.onnx")
    assert e.value.status == "io" and "missing.onnx" in str(e.value)
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07\x12garbage that is not a protobuf")
    with pytest.raises(shardc.ModelError) as e:
        shardc.load(bad)
    assert "bad.onnx" in str(e.value)
    m = shardc.load(f"{source}/samples/mlp.onnx", dims={"batch": 4})
    with pytest.raises(shardc.PlanError) as e:
        shardc.plan(m, mesh="pp=2,pp=2")
    assert "pp" in str(e.value)
    with pytest.raises(shardc.UsageError):
        shardc.load(f"{source}/samples/mlp.onnx", dims={"no_such_dim": 4})
    exe = shardc.compile(m)
    with pytest.raises(shardc.Error) as e:
        exe.run({"x": rng.standard_normal((4, 65), dtype=np.float32)})
    assert "x" in str(e.value)
    with pytest.raises(shardc.UsageError):
        shardc.TrainConfig(schedule="step").lr_at(1)
    with pytest.raises(shardc.UsageError):
        shardc.compile(m, train=shardc.TrainConfig(precision="int4"))
    # a rank that fails in a run over 2 ranks: RankError naming the failure
    exe2 = shardc.compile(shardc.load(f"{source}/samples/gpt2.onnx", dims={"batch": 2}),
                          mesh="tp=2")
    ids = rng.integers(0, 1000, size=(2, 16), dtype=np.int64)
    os.environ["SHARDC_FAIL_RANK"] = "1"
    try:
        with pytest.raises(shardc.RankError) as e:
            exe2.run({"input_ids": ids})
    finally:
        del os.environ["SHARDC_FAIL_RANK"]
    assert "injected failure" in str(e.value)
    assert isinstance(e.value, shardc.Error)


def test_out_of_memory(source, rng):
    """An allocation the library cannot make is an OutOfMemoryError (also a
    MemoryError, status "nomem") naming the bytes, and the executable runs
    once memory is there again. The library's allocator hook (sc_set_allocator,
    ir/base.h) refuses every block of 4 MiB or more; the MLP at batch 65536
    asks for larger ones (16 MiB: as large as its input) on its first run."""
    libc = ctypes.CDLL(None)
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.realloc.restype = ctypes.c_void_p
    libc.realloc.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    alloc_t = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
    realloc_t = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                 ctypes.c_size_t)
    free_t = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)

    class Allocator(ctypes.Structure):  # sc_allocator
        _fields_ = [("alloc", alloc_t), ("realloc", realloc_t), ("free", free_t),
                    ("ud", ctypes.c_void_p)]

    limit, refused = 4 << 20, []

    def alloc(ud, n):
        if n >= limit:
            refused.append(n)
            return None
        return libc.malloc(n)

    def realloc(ud, p, n):
        if n >= limit:
            refused.append(n)
            return None
        return libc.realloc(p, n)

    hook = Allocator(alloc_t(alloc), realloc_t(realloc), free_t(lambda ud, p: libc.free(p)), None)
    set_allocator = shardc._lib.lib.sc_set_allocator
    set_allocator.argtypes, set_allocator.restype = [ctypes.POINTER(Allocator)], None
    path = f"{source}/samples/mlp.onnx"
    exe = shardc.compile(shardc.load(path, dims={"batch": 1 << 16}))
    x = rng.standard_normal((1 << 16, 64), dtype=np.float32)
    set_allocator(ctypes.byref(hook))
    try:
        with pytest.raises(shardc.OutOfMemoryError) as e:
            exe.run({"x": x})
    finally:
        set_allocator(None)
    assert isinstance(e.value, MemoryError) and e.value.status == "nomem"
    assert any(f"needed {n} bytes" in str(e.value) for n in refused), (refused, str(e.value))
    close(exe.run({"x": x})["y"], ort_run(path, {"x": x})["y"])


def test_plan_equals_cli(source, shardc_cli):
    """memory_per_rank and collectives are what `shardc plan` prints."""
    path = f"{source}/samples/gpt2.onnx"
    p = shardc.plan(shardc.load(path, dims={"batch": 2}), mesh="tp=2,pp=2", microbatches=2)
    text = subprocess.run([shardc_cli, "plan", path, "--dim", "batch=2", "--mesh", "tp=2,pp=2",
                           "--microbatches", "2"], check=True, capture_output=True,
                          text=True).stdout
    lines = text.splitlines()
    i = next(k for k, line in enumerate(lines) if line.startswith("memory per rank (the ranks"))
    totals = {}
    for line in lines[i + 2:i + 2 + p.stages]:
        f = line.split()
        totals[int(f[0])] = (f[1], int(f[-1]))
    assert len(totals) == 2 and p.microbatches == 2
    for r, mem in p.memory_per_rank.items():
        ranks, total = totals[mem.stage]
        assert str(r) in ranks.split(",") and mem.total_bytes == total
        assert mem.total_bytes == sum(mem.lines.values()) and mem.lines["weights"] > 0
    j = next(k for k, line in enumerate(lines) if line.startswith("collectives per rank"))
    rows = [line.split()[:4] for line in lines[j + 2:j + 2 + len(p.collectives)]]
    assert rows == [[str(c.stage), c.op, ",".join(c.axes), str(c.count)] for c in p.collectives]
    assert all(c.bytes_per_step == 2 * c.bytes_per_microbatch for c in p.collectives)


def test_docs_example_runs_as_written(source, tmp_path):
    """docs/python.md shows samples/train/train_reverse.py as it is, and it
    runs: the loss falls below half its start (the script's own check)."""
    import re
    doc = open(f"{source}/docs/python.md").read()
    example = open(f"{source}/samples/train/train_reverse.py").read()
    blocks = re.findall(r"```python\n(.*?)```", doc, re.S)
    assert example in blocks
    subprocess.run([sys.executable, f"{source}/samples/train/make_reverse.py", str(tmp_path)],
                   check=True, capture_output=True)
    env = dict(os.environ, PYTHONPATH=os.path.dirname(shardc.__path__[0]))
    r = subprocess.run([sys.executable, f"{source}/samples/train/train_reverse.py", str(tmp_path)],
                       env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "unseen sequences reversed exactly" in r.stdout
    assert (tmp_path / "py_trained.onnx").exists()
    assert (tmp_path / "py_checkpoint" / "weights.safetensors").exists()


def test_map_state_dict(source, tmp_path, rng):
    """A Hugging Face-style state dict onto the reverse model's initializers
    by name (a "model." prefix the export dropped is found): the training
    starts from those values; a wrong shape and an unknown name are errors
    naming them."""
    subprocess.run([sys.executable, f"{source}/samples/train/make_reverse.py", str(tmp_path)],
                   check=True, capture_output=True)
    model = f"{tmp_path}/reverse.onnx"
    embed = rng.standard_normal((10, 64), dtype=np.float32)
    wq = rng.standard_normal((64, 64), dtype=np.float32)
    done = shardc.map_state_dict(model, {"model.embed": embed, "wq": wq}, tmp_path / "init.onnx")
    assert sorted(done) == ["embed", "wq"]
    t = shardc.compile(shardc.load(tmp_path / "init.onnx", dims={"batch": 4}),
                       train=shardc.TrainConfig())
    assert np.array_equal(t.tensor("embed"), embed) and np.array_equal(t.tensor("wq"), wq)
    with pytest.raises(shardc.ModelError) as e:
        shardc.map_state_dict(model, {"wq": wq[:32]}, tmp_path / "bad.onnx")
    assert "'wq'" in str(e.value) and "[32, 64]" in str(e.value)
    with pytest.raises(shardc.UsageError) as e:
        shardc.map_state_dict(model, {"lm_head.weight": wq}, tmp_path / "bad.onnx")
    assert "lm_head.weight" in str(e.value)
    assert shardc.map_state_dict(model, {"lm_head.weight": wq}, tmp_path / "ok.onnx",
                                 strict=False) == []


def cli_train(shardc_cli, tmp_path, model, ck, log, *extra):
    subprocess.run([shardc_cli, "train", model, "--data", f"x={tmp_path}/train_x.npy",
                    "--labels", f"{tmp_path}/train_y.npy", "--dim", "batch=32", "--steps", "5",
                    "--optimizer", "adamw", "--lr", "3e-3", "--weight-decay", "0",
                    "--save", str(ck), "--log-json", str(log), "--quiet", *extra],
                   check=True, capture_output=True)
    return [json.loads(line) for line in open(log)]


def test_mesh_training_equals_cli_and_one_rank(source, shardc_cli, tmp_path):
    """fsdp=2 x tp=2 on thread-ranks: 5 steps equal `shardc train --mesh
    fsdp=2,tp=2` bit for bit (losses, gradient norms, every shard of the
    checkpoint), and one rank's within 1e-4 relative + 1e-6 (the demo's
    bound: the same training to fp32 rounding); the weights read back
    whole."""
    from safetensors.numpy import load_file
    model, xs, ys = reverse_data(source, tmp_path)
    log = cli_train(shardc_cli, tmp_path, model, tmp_path / "cli_ck", tmp_path / "log.jsonl",
                    "--mesh", "fsdp=2,tp=2")
    m = shardc.load(model, dims={"batch": 32})
    cfg = shardc.TrainConfig(optimizer="adamw", lr=3e-3, weight_decay=0.0)
    mesh = shardc.compile(m, mesh="fsdp=2,tp=2", train=cfg, comm="local")
    one = shardc.compile(m, train=cfg)
    for i in range(5):
        batch = ({"x": xs[i * 32:(i + 1) * 32]}, ys[i * 32:(i + 1) * 32])
        a, b = mesh.step(batch[0], labels=batch[1]), one.step(batch[0], labels=batch[1])
        assert f"{a.loss:.9g}" == f"{log[i]['loss']:.9g}", (i, a.loss, log[i]["loss"])
        assert f"{a.grad_norm:.9g}" == f"{log[i]['grad_norm']:.9g}"
        assert abs(a.loss - b.loss) <= 1e-4 * abs(b.loss) + 1e-6, (i, a.loss, b.loss)
    mesh.save(tmp_path / "py_ck")
    files = sorted(os.listdir(tmp_path / "cli_ck"))
    assert files == sorted(os.listdir(tmp_path / "py_ck"))
    shards = [f for f in files if f.endswith(".safetensors")]
    assert len(shards) == 8  # weights and optimizer state of each of the 4 ranks
    for f in shards:
        a, b = load_file(str(tmp_path / "cli_ck" / f)), load_file(str(tmp_path / "py_ck" / f))
        assert a.keys() == b.keys()
        for k in a:
            assert np.array_equal(a[k], b[k]), (f, k)
    w, w1 = mesh.tensor("wq"), one.tensor("wq")
    assert w.shape == (64, 64) and np.abs(w - w1).max() <= 1e-4 * np.abs(w1).max()
    # resumed on one rank from the sharded checkpoint: the same weights
    r = shardc.compile(m, train=cfg)
    r.resume(tmp_path / "py_ck")
    assert r.steps_done == 5 and np.array_equal(r.tensor("wq"), w)


def test_training_plan_equals_cli(source, shardc_cli):
    """A training plan at fsdp=2 (ZeRO-3 over the MLP): the arena's classes
    and collectives are what `shardc plan --train --json` prints, and the
    plan replays: compile(plan=..., train=...) trains on its 2 ranks."""
    path = f"{source}/samples/mlp.onnx"
    m = shardc.load(path, dims={"batch": 8})
    cfg = shardc.TrainConfig(optimizer="adamw")
    p = shardc.plan(m, mesh="fsdp=2", train=cfg)
    cli = json.loads(subprocess.run([shardc_cli, "plan", path, "--train", "--dim", "batch=8",
                                     "--optimizer", "adamw", "--mesh", "fsdp=2", "--json"],
                                    check=True, capture_output=True, text=True).stdout)
    assert p.n_ranks == 2 and p.data["training"]["fsdp_axis"] == "fsdp"
    mem = p.memory_per_rank[0]
    assert p.memory_per_rank[1] == mem
    for k, v in cli["live"].items():
        assert mem.lines[k] == v, k
    assert (mem.lines["arena"], mem.lines["constants"]) == (cli["arena"], cli["constants"])
    assert mem.total_bytes == cli["total"]
    assert [(c.op, ",".join(c.axes), c.count, c.bytes_per_microbatch, c.sent_bytes)
            for c in p.collectives] == [(c["op"], c["axes"], c["count"], c["bytes"], c["sent"])
                                        for c in cli["collectives"]]
    t = shardc.compile(m, plan=p, train=cfg, comm="local")
    x = np.random.default_rng(3).standard_normal((8, 64), dtype=np.float32)
    y = np.random.default_rng(4).integers(0, 10, size=8, dtype=np.int64)
    assert np.isfinite(t.step({"x": x}, labels=y).loss)
    with pytest.raises(shardc.PlanError) as e:
        shardc.plan(m, mesh="fsdp=2")  # an fsdp axis shards training state
    assert "fsdp" in str(e.value)


def test_predicted_equals_cli(source, shardc_cli):
    """On a cluster, plan.predicted is the step `shardc plan --cluster`
    simulates: its step time, tokens/s and critical rank as printed, and
    every field of `shardc plan --json`'s "predicted", the largest rank's
    memory with the GPU's lines and whether it fits included."""
    import re
    path = f"{source}/samples/gpt2.onnx"
    m = shardc.load(path, dims={"batch": 2})
    p = shardc.plan(m, mesh="tp=2,pp=2", cluster="h100-sxm:8x1")
    text = subprocess.run([shardc_cli, "plan", path, "--dim", "batch=2", "--mesh", "tp=2,pp=2",
                           "--cluster", "h100-sxm:8x1"], check=True, capture_output=True,
                          text=True).stdout
    step = re.search(r"step time: +([0-9.]+) us \(pipeline rank \d+, rank (\d+)", text)
    tokens = re.search(r"tokens/s: +(\d+)", text)
    assert step and tokens, text
    pr = p.predicted
    assert pr["cluster"] == "h100-sxm:8x1"
    assert f"{pr['step_time_s'] * 1e6:.3f}" == step.group(1)
    assert pr["rank"] == int(step.group(2))
    assert f"{pr['tokens_per_s']:.0f}" == tokens.group(1)
    cli = json.loads(subprocess.run([shardc_cli, "plan", path, "--dim", "batch=2", "--mesh",
                                     "tp=2,pp=2", "--cluster", "h100-sxm:8x1", "--json"],
                                    check=True, capture_output=True, text=True).stdout)
    want, got = cli["predicted"], dict(pr)
    assert got.pop("cluster") == "h100-sxm:8x1"
    assert want["peak_bytes_per_rank"] > 0 and want["fits"] is True, want
    assert got == want
    assert shardc.plan(m, mesh="tp=2,pp=2").predicted is None
    with pytest.raises(shardc.PlanError) as e:
        shardc.plan(m, mesh="tp=2", cluster="no-such-gpu:8x1")
    assert "no-such-gpu" in str(e.value)


# A made-up CPU profile (docs/planner.md, "The profile file") for cpu:local,
# so that its predictions are times rather than "uncalibrated": what is
# compared is that the library and the command line predict the same.
_PROFILE = {"format": "shardc-profile-1",
            "device": {"kind": "cpu", "name": "test cpu", "threads": 1},
            "gemm": [{"m": 64, "n": 64, "k": 64, "dtype": "fp32", "seconds": 1e-05,
                      "flops_per_s": 2 * 64 ** 3 / 1e-05}],
            "memory_bytes_per_s": 2e10, "step_overhead_s": 2e-08,
            "comms": [{"name": "local", "max_ranks": 4, "latency_s": 1e-05,
                       "bandwidth_bytes_per_s": 5e9, "overhead_s": 1e-09}]}


@pytest.mark.parametrize("cluster,mesh", [("cpu:local", "dp=2"), ("cpu:local", "tp=2"),
                                          ("cpu:local", "pp=2"), ("h100-sxm:2x2", "dp=2"),
                                          ("h100-sxm:2x2", "tp=2"), ("h100-sxm:2x2", "pp=2"),
                                          ("h100-sxm:2x2", "fsdp=2,tp=2")])
def test_training_predicted_equals_cli(source, shardc_cli, tmp_path, cluster, mesh):
    """The predicted training step is the same however the plan was
    reached: shardc.plan(train=...) and `shardc plan --train --json` build
    the step for the cluster's device and simulate it with one call
    (sc_plan_train_predict), so every figure is equal to the last bit, the
    largest rank's memory (with a GPU's own lines on h100-sxm) and whether
    it fits the device included."""
    if cluster == "cpu:local":
        prof = tmp_path / "profile.json"
        prof.write_text(json.dumps(_PROFILE))
        cluster = f"cpu:local@{prof}"
    path = f"{source}/samples/gpt2.onnx"
    cfg = shardc.TrainConfig(optimizer="sgd")  # the command's default
    p = shardc.plan(shardc.load(path, dims={"batch": 4}), mesh=mesh, train=cfg, cluster=cluster)
    cli = json.loads(subprocess.run([shardc_cli, "plan", path, "--dim", "batch=4", "--train",
                                     "--mesh", mesh, "--cluster", cluster, "--json"],
                                    check=True, capture_output=True, text=True).stdout)
    want, got = cli["predicted"], dict(p.predicted)
    assert "step_time_s" in want and want["step_time_s"] > 0, want
    assert got.pop("cluster") == cluster.split("@")[0]  # the name, not the profile
    assert want["peak_bytes_per_rank"] > 0 and isinstance(want["fits"], bool), want
    assert got == want


def test_mesh_training_bundle(source, shardc_cli, tmp_path):
    """A training over a mesh saved as a partitioned training bundle, from
    Python (Training.save_bundle) and from the command line (`shardc compile
    --train --mesh`), and loaded back (load_training, `shardc train B`):
    5 steps of each equal the unbundled mesh training's bit for bit (losses,
    gradient norms; the weights read back whole), at fsdp=2 x tp=2 and
    under a 2-stage pipeline (whose pieces update their state in place in
    the training: save_bundle builds them again as the command does, and
    the bundle's files are the command's, byte for byte)."""
    model, xs, ys = reverse_data(source, tmp_path)
    m = shardc.load(model, dims={"batch": 32})
    cfg = shardc.TrainConfig(optimizer="adamw", lr=3e-3, weight_decay=0.0)
    for tag, mesh, par, cli in (
            ("fsdp2tp2", "fsdp=2,tp=2", {}, []),
            ("pp2", "pp=2", {"microbatches": 2}, ["--microbatches", "2"])):
        t = shardc.compile(m, mesh=mesh, train=cfg, comm="local", **par)
        py_b, cli_b = tmp_path / f"{tag}.py.bundle", tmp_path / f"{tag}.cli.bundle"
        subprocess.run([shardc_cli, "compile", model, "--train", "--dim", "batch=32",
                        "--optimizer", "adamw", "--weight-decay", "0", "--mesh", mesh, *cli,
                        "-o", str(cli_b)], check=True, capture_output=True)
        t.save_bundle(py_b)  # at step 0: the model's initial weights
        assert (py_b / "partition.json").exists() and (py_b / "training.json").exists()
        if par:  # the pipelined step built again for the bundle: the command's
            files = sorted(str(f.relative_to(py_b)) for f in py_b.rglob("*") if f.is_file())
            assert files == sorted(str(f.relative_to(cli_b)) for f in cli_b.rglob("*")
                                   if f.is_file())
            assert [f for f in files if (py_b / f).read_bytes() != (cli_b / f).read_bytes()] \
                == []
        loaded = [shardc.load_training(b, cfg) for b in (py_b, cli_b)]
        assert all(u.model is None and u.steps_done == 0 for u in loaded)
        for i in range(5):
            batch = ({"x": xs[i * 32:(i + 1) * 32]}, ys[i * 32:(i + 1) * 32])
            want = t.step(*batch[:1], labels=batch[1])
            for u in loaded:
                got = u.step(*batch[:1], labels=batch[1])
                assert (got.step, got.loss, got.grad_norm, got.lr) == \
                    (want.step, want.loss, want.grad_norm, want.lr), (tag, i, got, want)
        for u in loaded:
            assert np.array_equal(u.tensor("wq"), t.tensor("wq")), tag
        # the command line trains the bundle Python wrote: the same log
        subprocess.run([shardc_cli, "train", str(py_b), "--data", f"x={tmp_path}/train_x.npy",
                        "--labels", f"{tmp_path}/train_y.npy", "--steps", "3", "--lr", "3e-3",
                        "--log-json", str(tmp_path / f"{tag}.jsonl"), "--quiet"],
                       check=True, capture_output=True)
        log = [json.loads(line) for line in open(tmp_path / f"{tag}.jsonl")]
        u = shardc.load_training(py_b, cfg)
        for i in range(3):
            got = u.step({"x": xs[i * 32:(i + 1) * 32]}, labels=ys[i * 32:(i + 1) * 32])
            assert f"{got.loss:.9g}" == f"{log[i]['loss']:.9g}", (tag, i, got.loss, log[i])
        with pytest.raises(shardc.UsageError):
            u.save_bundle(tmp_path / "again")  # a loaded training is saved already
        with pytest.raises(shardc.UsageError):
            u.export(tmp_path / "no.onnx")  # no model to export into
    with pytest.raises(shardc.ModelError) as e:
        shardc.load_training(tmp_path / "nothing-here")
    assert "nothing-here" in str(e.value)


def test_auto_equals_cli(source, shardc_cli, tmp_path):
    """auto=True: the planner's search chooses what `shardc plan --auto
    --json` chooses (the plan file, options, recompute, the exact predicted
    step), readable as AutoChoice (and, for inference, Plan.predicted, the
    library's replay of the plan on the cluster); for training 2 steps of
    compile(auto=True) equal `shardc train --mesh auto --cluster C`'s log bit
    for bit; for inference compile(mesh="auto") runs equal to one rank.
    cluster= is required."""
    path = f"{source}/samples/gpt2.onnx"
    cluster = "h100-sxm:2x1"
    m = shardc.load(path, dims={"batch": 4})
    cfg = shardc.TrainConfig(optimizer="adamw", lr=1e-3)

    def cli_auto(*extra):
        return json.loads(subprocess.run(
            [shardc_cli, "plan", path, "--auto", "--cluster", cluster, "--json", *extra],
            check=True, capture_output=True, text=True).stdout)["auto"]["chosen"]

    p = shardc.plan(m, auto=True, train=cfg, cluster=cluster)
    want = cli_auto("--train", "--global-batch", "4", "--optimizer", "adamw")
    a = p.auto
    assert isinstance(a, shardc.AutoChoice) and a.options == want["options"]
    assert p.data["mesh"] == want["plan"]["mesh"] and p.data["pipeline"] == \
        want["plan"]["pipeline"] and p.data["training"] == want["plan"]["training"]
    assert (a.mesh, a.zero, a.schedule, a.microbatches, a.recompute) == \
        (want["mesh"], want["zero"], want["schedule"], want["microbatches"], want["recompute"])
    assert a.predicted == want["predicted"] and a.predicted["fits"] is True
    # the search's exact check and the library's replay build the same step
    # (the weights read, the tied embedding found: 28 parameter tensors)
    replayed = {k: v for k, v in p.predicted.items() if k != "cluster"}
    assert replayed == a.predicted, (p.predicted, a.predicted)
    assert "--no-weights" not in a.replay
    assert p.train.recompute == want["recompute"] and p.n_ranks == 2
    assert a.candidates and a.search["candidates_evaluated"] > 0
    # the choice trained: compile(auto=True) against `shardc train --mesh auto`
    rng = np.random.default_rng(5)
    ids = rng.integers(0, 1000, size=(8, 16), dtype=np.int64)
    lab = rng.integers(0, 1000, size=(8, 16), dtype=np.int64)
    np.save(tmp_path / "ids.npy", ids)
    np.save(tmp_path / "lab.npy", lab)
    r = subprocess.run([shardc_cli, "train", path, "--dim", "batch=4", "--mesh", "auto",
                        "--cluster", cluster, "--optimizer", "adamw", "--steps", "2",
                        "--data", f"input_ids={tmp_path}/ids.npy", "--labels",
                        f"{tmp_path}/lab.npy", "--log-json", str(tmp_path / "log.jsonl"),
                        "--quiet"], check=True, capture_output=True, text=True)
    assert f"--mesh auto chose --cluster {cluster} {a.options}" in r.stderr, r.stderr
    log = [json.loads(line) for line in open(tmp_path / "log.jsonl")]
    t = shardc.compile(m, auto=True, train=cfg, cluster=cluster, comm="local")
    assert (t.plan.auto.options, t.plan.auto.predicted) == (a.options, a.predicted)
    assert t.config.recompute == a.recompute
    for i in range(2):
        out = t.step({"input_ids": ids[i * 4:(i + 1) * 4]}, labels=lab[i * 4:(i + 1) * 4])
        assert f"{out.loss:.9g}" == f"{log[i]['loss']:.9g}", (i, out.loss, log[i])
        assert f"{out.grad_norm:.9g}" == f"{log[i]['grad_norm']:.9g}"

    # inference, by latency: the CLI's choice, run equal to one rank
    mi = shardc.load(path, dims={"batch": 2})
    pi = shardc.plan(mi, auto=True, cluster=cluster)
    wi = cli_auto("--dim", "batch=2")
    assert pi.auto.options == wi["options"] and pi.auto.predicted == wi["predicted"]
    assert pi.predicted["step_time_s"] == pytest.approx(wi["predicted"]["step_time_s"],
                                                        rel=1e-9)
    assert pi.train is None and pi.auto.search["objective"] == "latency"
    exe = shardc.compile(mi, mesh="auto", cluster=cluster)
    assert exe.plan.auto.options == pi.auto.options and exe.n_ranks == pi.n_ranks
    x = rng.integers(0, 1000, size=(2, 16), dtype=np.int64)
    close(exe.run({"input_ids": x}, comm="local")["logits"],
          shardc.compile(mi).run({"input_ids": x})["logits"])

    with pytest.raises(shardc.UsageError) as e:
        shardc.plan(m, auto=True, train=cfg)
    assert "cluster" in str(e.value)
    with pytest.raises(shardc.UsageError):
        shardc.plan(m, auto=True, mesh="dp=2", cluster=cluster)
    # the search's own refusal (exit 2), its words: 128 devices, so that no
    # pp x tp x cp (at most 64 here: cp up to 8) leaves one replica of batch 3
    # (lit plan/auto.test)
    with pytest.raises(shardc.UsageError) as e:
        shardc.plan(shardc.load(path, dims={"batch": 3}), auto=True, train=cfg,
                    cluster="h100-sxm:8x16")
    assert "does not divide" in str(e.value)


def test_recompute_equals_cli(source, shardc_cli, tmp_path):
    """TrainConfig(recompute="full") is `shardc train --recompute full`: 5
    steps' losses and gradient norms bit for bit; an unknown kind is a
    UsageError."""
    model, xs, ys = reverse_data(source, tmp_path)
    log = cli_train(shardc_cli, tmp_path, model, tmp_path / "ck", tmp_path / "log.jsonl",
                    "--recompute", "full")
    m = shardc.load(model, dims={"batch": 32})
    t = shardc.compile(m, train=shardc.TrainConfig(optimizer="adamw", lr=3e-3, weight_decay=0.0,
                                                   recompute="full"))
    for i in range(5):
        out = t.step({"x": xs[i * 32:(i + 1) * 32]}, labels=ys[i * 32:(i + 1) * 32])
        assert f"{out.loss:.9g}" == f"{log[i]['loss']:.9g}", (i, out.loss, log[i])
        assert f"{out.grad_norm:.9g}" == f"{log[i]['grad_norm']:.9g}"
    with pytest.raises(shardc.UsageError) as e:
        shardc.compile(m, train=shardc.TrainConfig(recompute="some"))
    assert "recompute 'some'" in str(e.value)
