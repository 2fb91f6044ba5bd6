"""dist_worker.py — one process of a two-process job (test_dist.py): the
same script on every rank, as under torchrun or mpirun. Compiles GPT-2
over tp=2, runs it with shardc.init()'s communicator on seeded token ids,
and the rank that owns the logits writes them to OUT/logits.npy; then
trains the MLP at fsdp=2 for 3 SGD steps on seeded batches (every call
collective). Every rank writes OUT/rank<R>.json with what init() found and
the losses it saw."""
import json
import sys

import numpy as np

import shardc

source, out = sys.argv[1], sys.argv[2]
world = shardc.init()
m = shardc.load(f"{source}/samples/gpt2.onnx", dims={"batch": 2})
exe = shardc.compile(m, mesh="tp=2")
ids = np.random.default_rng(7).integers(0, 1000, size=(2, 16), dtype=np.int64)
y = exe.run({"input_ids": ids})
if y["logits"] is not None:
    np.save(f"{out}/logits.npy", y["logits"])

rng = np.random.default_rng(8)
xs = rng.standard_normal((3, 8, 64), dtype=np.float32)
ys = rng.integers(0, 10, size=(3, 8), dtype=np.int64)
t = shardc.compile(shardc.load(f"{source}/samples/mlp.onnx", dims={"batch": 8}), mesh="fsdp=2",
                   train=shardc.TrainConfig(optimizer="sgd", lr=0.05, momentum=0.9))
losses = [t.step({"x": xs[i]}, labels=ys[i]).loss for i in range(3)]
with open(f"{out}/rank{world.rank}.json", "w") as f:
    json.dump({"comm": world.comm, "rank": world.rank, "size": world.size,
               "owns_logits": y["logits"] is not None, "losses": losses}, f)
