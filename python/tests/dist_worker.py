"""dist_worker.py — one process of a two-process job (test_dist.py): the
same script on every rank, as under torchrun or mpirun. Compiles GPT-2
over tp=2, runs it with shardc.init()'s communicator on seeded token ids,
and the rank that owns the logits writes them to OUT/logits.npy; every
rank writes OUT/rank<R>.json with what init() found."""
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
with open(f"{out}/rank{world.rank}.json", "w") as f:
    json.dump({"comm": world.comm, "rank": world.rank, "size": world.size,
               "owns_logits": y["logits"] is not None}, f)
