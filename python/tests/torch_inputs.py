"""torch_inputs.py — PyTorch CPU tensors as inputs, run by hand where torch
is installed (the suite's machines have none; test_shardc.py asserts the
same through NumPy's DLPack and a pure-Python DLPack exporter):

    SHARDC_LIBRARY=build/libshardc.so PYTHONPATH=python \\
        TORCHVENV/bin/python python/tests/torch_inputs.py

It checks that a contiguous tensor is read in place (the pointer handed to
the library is the tensor's data_ptr(), no copy reported), that a
transposed one is copied once, and that the answers and 3 training steps
equal those from NumPy arrays of the same values, bit for bit. Exits 1 on
any difference."""
import os
import sys

import numpy as np
import torch

import shardc
from shardc._tensors import as_host_tensors

src = os.environ.get("SHARDC_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
g = torch.Generator().manual_seed(2026)
x = torch.randn(4, 64, generator=g, dtype=torch.float32)
hosts, keep, copied = as_host_tensors({"x": x})
ok = copied == [] and hosts[0].data == x.data_ptr()
print(f"contiguous tensor read in place: {ok} (pointer {hosts[0].data:#x}, "
      f"data_ptr {x.data_ptr():#x})")
xt = torch.randn(64, 4, generator=g).t()
hosts, keep, copied = as_host_tensors({"x": xt})
ok_t = copied == ["x"] and hosts[0].data != xt.data_ptr()
print(f"transposed tensor copied once: {ok_t}")

exe = shardc.compile(shardc.load(f"{src}/samples/mlp.onnx", dims={"batch": 4}))
a = exe.run({"x": x})["y"]
same = np.array_equal(a, exe.run({"x": x.numpy()})["y"]) and exe.last_input_copies == []
print(f"run on a tensor equals the run on its NumPy array: {same}")

cfg = shardc.TrainConfig(optimizer="adamw", lr=1e-3)
tt, tn = shardc.compile(shardc.load(f"{src}/samples/mlp.onnx", dims={"batch": 8}), train=cfg), \
    shardc.compile(shardc.load(f"{src}/samples/mlp.onnx", dims={"batch": 8}), train=cfg)
steps = True
for i in range(3):
    xb = torch.randn(8, 64, generator=g)
    yb = torch.randint(0, 10, (8,), generator=g)
    s1, s2 = tt.step({"x": xb}, labels=yb), tn.step({"x": xb.numpy()}, labels=yb.numpy())
    print(f"step {s1.step}: loss {s1.loss:.9g} (torch) {s2.loss:.9g} (numpy)")
    steps = steps and s1.loss == s2.loss and s1.grad_norm == s2.grad_norm
print(f"3 training steps equal bit for bit: {steps}")
sys.exit(0 if ok and ok_t and same and steps else 1)
