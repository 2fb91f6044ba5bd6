"""gpu_memory.py SHARDC MODEL OUT_DIR — a GPU cluster's memory lines in
`shardc plan --train --json` (codegen/device_memory.h, docs/planner.md):

- the per-rank "device" object holds the CUDA device's lines and no CPU
  line; the context is the cluster file's gpu.context_bytes and NCCL's
  buffers are channels x 2 ring neighbours x (Simple 4 MiB + LL 512 KiB +
  LL128 4,915,200 B) + a 4-byte flag for the one dp communicator;
- total_with_device is the predicted peak_bytes_per_rank, and without
  gpu.context_bytes the peak is exactly that much lower;
- fits is decided on that peak: a device of exactly the peak fits, one
  byte less does not (and one byte less is still far above the peak
  without the context and NCCL's lines, so the lines decide it);
- cpu:local keeps the CPU's lines only.
Exits non-zero with a message on the first failure."""
import json
import os
import subprocess
import sys

shardc, model, out = sys.argv[1:4]
CONTEXT = 536870912
CHANNELS = 8
PER_CHANNEL = 2 * (4194304 + 524288 + 4915200)


def cluster(name, memory, context):
    gpu = {"name": "G", "memory_bytes": memory, "peak_flops": {"fp32": 60e12},
           "hbm_bytes_per_s": 3e12}
    if context:
        gpu["context_bytes"] = context
    c = {"name": name, "gpus_per_node": 2, "gpu": gpu,
         "intra_node": {"bandwidth_bytes_per_s": 4e11, "latency_s": 3e-6,
                        "nccl_channels": CHANNELS}}
    path = os.path.join(out, name + ".json")
    with open(path, "w") as f:
        json.dump(c, f)
    return path


def plan(cluster_path, mesh="dp=2"):
    args = [shardc, "plan", model, "--train", "--dim", "batch=4", "--no-weights", "--json",
            "--cluster", cluster_path] + (["--mesh", mesh] if mesh else [])
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("shardc failed: %s\n%s" % (" ".join(args), r.stderr))
    return json.loads(r.stdout)


def check(cond, msg):
    if not cond:
        sys.exit("FAIL: " + msg)


os.makedirs(out, exist_ok=True)
big = 10 ** 12
j = plan(cluster("ctx", big, CONTEXT))
dev = j["device"]
check(sorted(dev) == ["cublaslt workspace", "cuda context", "nccl buffers", "weights padding"],
      "device lines %s" % sorted(dev))
check(dev["cuda context"] == CONTEXT, "context %r" % dev["cuda context"])
check(dev["nccl buffers"] == CHANNELS * PER_CHANNEL + 4, "nccl %r" % dev["nccl buffers"])
check(dev["cublaslt workspace"] == 0, "the workspace is in the arena: %r" % dev)
check(0 <= dev["weights padding"] < 256 * 200, "padding %r" % dev["weights padding"])
peak = j["predicted"]["peak_bytes_per_rank"]
check(peak == j["total_with_device"], "peak %d, total_with_device %d" % (peak, j["total_with_device"]))
check(peak == j["arena"] + j["constants"] + sum(dev.values()), "peak is not the sum of the lines")
check(j["predicted"]["fits"] is True, "fits on a big device")

j0 = plan(cluster("noctx", big, 0))
check(j0["device"]["cuda context"] == 0, "no context key: %r" % j0["device"])
check(peak - j0["predicted"]["peak_bytes_per_rank"] == CONTEXT,
      "the context adds %d" % (peak - j0["predicted"]["peak_bytes_per_rank"]))

edge = plan(cluster("edge", peak, CONTEXT))["predicted"]
check(edge["fits"] is True and edge["peak_bytes_per_rank"] == peak, "at the edge: %r" % edge)
under = plan(cluster("under", peak - 1, CONTEXT))["predicted"]
check(under["fits"] is False, "one byte short: %r" % under)
without = peak - CONTEXT - dev["nccl buffers"]
check(peak - 1 > without, "the lines decide fits")

cpu = plan("cpu:local", mesh="dp=1")
check(not any(k in cpu["device"] for k in dev), "cpu:local has GPU lines: %r" % cpu["device"])
check("gemm scratch" in cpu["device"], "cpu:local lost its lines: %r" % cpu["device"])
print("gpu memory: ok (peak %d bytes, context %d, nccl %d)" % (peak, CONTEXT, dev["nccl buffers"]))
