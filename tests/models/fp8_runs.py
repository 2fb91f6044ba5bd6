"""fp8_runs.py — what test_fp8.py and test_fp8_state.py share: the GPT-2
sample's training runs on seeded token ids and reading their checkpoints."""
import json
import os
import subprocess
import tempfile

import numpy as np
from safetensors.numpy import load_file

from checks import check, finish

SHARDC = os.environ.get("SHARDC")
SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(SRC, "samples", "gpt2.onnx")
LLAMA = os.path.join(SRC, "samples", "llama.onnx")


def make_data(work):
    """64 seeded sequences of 16 token ids and their next tokens."""
    rng = np.random.RandomState(7)
    t = rng.randint(0, 1000, (64, 17)).astype(np.int64)
    np.save(os.path.join(work, "ids.npy"), t[:, :16])
    np.save(os.path.join(work, "labels.npy"), t[:, 1:])


def train(work, tag, extra, steps, env=None, batch=8, stderr=None, model=MODEL):
    """`shardc train` of the sample (batch 8, AdamW, lr 1e-3; GPT-2 unless
    model says): its losses (and its stderr appended to the list `stderr`,
    when given)."""
    log = os.path.join(work, tag + ".jsonl")
    r = subprocess.run([SHARDC, "train", model, "--dim", f"batch={batch}", "--data",
                        f"input_ids={work}/ids.npy", "--labels", f"{work}/labels.npy",
                        "--optimizer", "adamw", "--lr", "1e-3", "--threads", "1",
                        "--steps", str(steps), "--log-json", log] + extra,
                       capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, **(env or {})))
    check(r.returncode == 0, f"train {tag}: {r.stderr[-400:]}")
    if stderr is not None:
        stderr.append(r.stderr)
    if r.returncode:
        return []
    return [json.loads(l)["loss"] for l in open(log) if l.strip()]


def merged(ck, group):
    """A checkpoint group's tensors by name, a sharded save's rank files put
    together (the FP8 state is whole in one of them, key "NAME@0")."""
    out = {}
    for f in sorted(os.listdir(ck)):
        if f.startswith(group) and f.endswith(".safetensors"):
            for k, v in load_file(os.path.join(ck, f)).items():
                out[k.split("@")[0]] = v
    return out


def run_test(body):
    """body(work) in a scratch folder holding make_data's files; the exit
    status (checks.finish; 2 without SHARDC)."""
    if not SHARDC:
        print("SHARDC not set")
        return 2
    with tempfile.TemporaryDirectory() as work:
        make_data(work)
        body(work)
    return finish()
