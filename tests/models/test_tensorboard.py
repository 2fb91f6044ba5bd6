#!/usr/bin/env python3
"""test_tensorboard.py — `shardc train --tensorboard DIR` read back with TensorBoard's
own reader (the tensorboard package: EventAccumulator, the loader `tensorboard --logdir`
uses) against the same run's --log-json.

Runs (the MLP sample, seeded data, a few steps each):
- one rank, fp32, a cosine schedule with warm-up (the learning rate changes);
- --mesh dp=2,tp=2 (four thread ranks), --precision fp16 (the loss scale);
- --mesh dp=2 --comm tcp, two processes: one file each in DIR, rank 0's holding the
  step scalars and its arena, rank 1's only its arena; read as one run.
For each: DIR holds one file named events.out.tfevents.<10 digits>.<host>.<pid>.0; its
first record is the file version "brain.Event:2"; the scalar tags are exactly
train/{loss,learning_rate,grad_norm,tokens_per_second,step_time_ms} (and
train/loss_scale with fp16) plus memory/rank_R/arena_bytes for every rank; each train/
tag has one value per JSON line at the same steps; every record's CRCs equal
TensorBoard's own masked CRC-32C of its bytes.

Tolerances. Both logs are written from the same double: TensorBoard's scalar is the
float32 nearest it (half a float32 spacing away at most), the JSON prints it with %.9g
(loss, lr, grad_norm, tokens_per_s: a hundredth of a spacing more at most), %.4f
(time_ms: 5e-5 ms) or %.17g (loss_scale, a power of two: exact). So they compare
within one float32 spacing, time_ms within 5e-5 ms plus one spacing, the loss scale
exactly (measured: 0.49 spacings at most, float32's own rounding; 4.4e-5 ms). The
arena bytes equal the figure `memory: arena ... (N bytes)` train prints for rank 0,
exactly (below 2^24, exact in float32), and every rank's is positive.

Live: a long run is read while it goes on: once its JSON log has k lines, the event file
read with TensorBoard's loader holds at least k - 1 steps (each step's event is written
and flushed right after its JSON line), and the process is still running then.

Corruption: one byte flipped in a step's event data, and one in a record's length, each
make TensorBoard's record reader raise DataLossError naming the CRC check; the
EventAccumulator then keeps only the steps before the bad record.

Environment: SHARDC, SC_SOURCE_DIR. Exit 0, 1 on a failure, 77 without tensorboard.
"""
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np
from checks import check, failures, finish, skip_all

SHARDC = os.environ.get("SHARDC", "build/shardc")
SRC = os.environ.get("SC_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
MLP = os.path.join(SRC, "samples", "mlp.onnx")
TIMEOUT_S = 120

TRAIN_TAGS = {"loss": "train/loss", "lr": "train/learning_rate",
              "grad_norm": "train/grad_norm", "tokens_per_s": "train/tokens_per_second",
              "time_ms": "train/step_time_ms"}


def event_file(folder):
    names = sorted(os.listdir(folder))
    check(len(names) == 1, f"{folder}: one event file, got {names}")
    name = names[0] if names else ""
    check(re.fullmatch(r"events\.out\.tfevents\.\d{10}\.[^/]+\.\d+\.0", name),
          f"event file name {name!r}")
    return os.path.join(folder, name)


def records(path):
    """(offset, data) of every TFRecord, each CRC checked against TensorBoard's own
    masked CRC-32C (its reader's implementation, not shardc's)."""
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c
    blob, at, out = open(path, "rb").read(), 0, []
    while at < len(blob):
        header = blob[at:at + 8]
        (n,) = struct.unpack("<Q", header)
        (hcrc,) = struct.unpack("<I", blob[at + 8:at + 12])
        data = blob[at + 12:at + 12 + n]
        (dcrc,) = struct.unpack("<I", blob[at + 12 + n:at + 16 + n])
        check(hcrc == masked_crc32c(header), f"record at {at}: length CRC")
        check(dcrc == masked_crc32c(data), f"record at {at}: data CRC")
        out.append((at, data))
        at += 16 + n
    check(at == len(blob), f"{path}: records end at {at}, the file at {len(blob)}")
    return out


def accumulate(folder):
    from tensorboard.backend.event_processing import event_accumulator
    acc = event_accumulator.EventAccumulator(folder, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    return acc


def ulp32(x):
    return float(np.spacing(np.float32(abs(x))))


def compare(what, folder, log, ranks, fp16, rank0_arena):
    path = event_file(folder)
    recs = records(path)
    from tensorboard.compat.proto import event_pb2
    first = event_pb2.Event.FromString(recs[0][1]) if recs else None
    check(first is not None and first.file_version == "brain.Event:2",
          f"{what}: first event {first}")
    lines = [json.loads(x) for x in open(log)]
    acc = accumulate(folder)
    tags = set(acc.Tags()["scalars"])
    want = set(TRAIN_TAGS.values()) | {f"memory/rank_{r}/arena_bytes" for r in range(ranks)}
    if fp16:
        want.add("train/loss_scale")
    check(tags == want, f"{what}: tags {sorted(tags)}, expected {sorted(want)}")
    steps = [ln["step"] for ln in lines]
    worst, worst_ms = 0.0, 0.0
    pairs = list(TRAIN_TAGS.items()) + ([("loss_scale", "train/loss_scale")] if fp16 else [])
    for key, tag in pairs:
        if tag not in tags:
            continue
        ev = acc.Scalars(tag)
        check([e.step for e in ev] == steps,
              f"{what}: {tag} steps {[e.step for e in ev]} vs {steps}")
        for e, ln in zip(ev, lines):
            j = ln[key]
            check(j is not None and not np.isnan(e.value),
                  f"{what}: {tag} step {e.step}: {j} / {e.value}")
            if j is None:
                continue
            tol = 0.0 if key == "loss_scale" else ulp32(j) + (5e-5 if key == "time_ms" else 0.0)
            if key == "time_ms":
                worst_ms = max(worst_ms, abs(e.value - j))
            else:
                worst = max(worst, abs(e.value - j) / ulp32(j))
            check(abs(e.value - j) <= tol,
                  f"{what}: {tag} step {e.step}: TensorBoard {e.value!r}, JSON {j!r} (tol {tol:g})")
    for r in range(ranks):
        tag = f"memory/rank_{r}/arena_bytes"
        ev = acc.Scalars(tag) if tag in tags else []
        check(len(ev) == 1 and ev[0].step == steps[0] and ev[0].value > 0,
              f"{what}: {tag} once at step {steps[0]}: {ev}")
        if r == 0 and ev:
            check(ev[0].value == rank0_arena, f"{what}: rank 0's arena {ev[0].value} vs the "
                  f"printed {rank0_arena}")
    wall = [e.wall_time for e in acc.Scalars("train/loss")] if "train/loss" in tags else []
    check(wall == sorted(wall) and all(w > 1.6e9 for w in wall), f"{what}: wall times {wall}")
    print(f"ok: {what}: {len(lines)} steps, {len(tags)} tags; the largest TensorBoard - JSON "
          f"difference {worst:.2f} float32 spacings ({worst_ms:.2g} ms for the step time)")
    return path, recs


def train(tmp, name, extra, steps=4, quiet=False):
    folder, log = os.path.join(tmp, name), os.path.join(tmp, name + ".jsonl")
    args = [SHARDC, "train", MLP, "--dim", "batch=8", "--data", "x=" + os.path.join(tmp, "x.npy"),
            "--labels", os.path.join(tmp, "lab.npy"), "--steps", str(steps),
            "--tensorboard", folder, "--log-json", log] + (["--quiet"] if quiet else []) + extra
    p = subprocess.run(args, capture_output=True, text=True, timeout=TIMEOUT_S)
    check(p.returncode == 0, f"{name}: train: {p.stderr[-500:]}")
    m = re.search(r"memory: arena .*?\((\d+) bytes\)", p.stdout)
    check(m is not None, f"{name}: no arena line in {p.stdout[-300:]}")
    return folder, log, float(m.group(1)) if m else None


def two_processes(tmp):
    """--comm tcp, one rank per process: a file per process in one DIR."""
    folder = os.path.join(tmp, "tcp")
    port = socket.socket()
    port.bind(("127.0.0.1", 0))
    env = dict(os.environ, WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(port.getsockname()[1]))
    port.close()
    procs = [subprocess.Popen([SHARDC, "train", MLP, "--dim", "batch=8", "--data",
                               "x=" + os.path.join(tmp, "x.npy"), "--labels",
                               os.path.join(tmp, "lab.npy"), "--steps", "3", "--quiet",
                               "--mesh", "dp=2", "--comm", "tcp", "--tensorboard", folder],
                              env=dict(env, RANK=str(r)), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for r in range(2)]
    outs = [p.communicate(timeout=TIMEOUT_S) for p in procs]
    if not check(all(p.returncode == 0 for p in procs), f"tcp: {[o[1][-300:] for o in outs]}"):
        return
    names = sorted(os.listdir(folder))
    check(len(names) == 2, f"tcp: a file per process, got {names}")
    per_file = []
    for i, n in enumerate(names):
        one = os.path.join(tmp, f"tcp_file{i}")  # a folder name without "tfevents"
        os.makedirs(one)
        shutil.copy(os.path.join(folder, n), one)
        per_file.append(set(accumulate(one).Tags()["scalars"]))
    train_tags = set(TRAIN_TAGS.values())
    want = [train_tags | {"memory/rank_0/arena_bytes"}, {"memory/rank_1/arena_bytes"}]
    check(sorted(per_file, key=len, reverse=True) == want, f"tcp: tags per file {per_file}")
    acc = accumulate(folder)
    check([e.step for e in acc.Scalars("train/loss")] == [1, 2, 3] and
          len(acc.Scalars("memory/rank_1/arena_bytes")) == 1, "tcp: one run of both files")
    print("ok: two processes: rank 0's file has the steps, rank 1's its arena")


def live(tmp):
    """The event file read by TensorBoard while the run goes on."""
    folder, log = os.path.join(tmp, "live"), os.path.join(tmp, "live.jsonl")
    args = [SHARDC, "train", MLP, "--dim", "batch=8", "--data", "x=" + os.path.join(tmp, "x.npy"),
            "--labels", os.path.join(tmp, "lab.npy"), "--steps", "100000000", "--quiet",
            "--tensorboard", folder, "--log-json", log]
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline, k = time.time() + 60, 0
        while time.time() < deadline and p.poll() is None:
            if os.path.exists(log):
                with open(log) as f:
                    k = sum(1 for ln in f if ln.endswith("\n"))
                if k >= 20:
                    break
            time.sleep(0.02)
        acc = accumulate(folder)
        has = "train/loss" in acc.Tags()["scalars"]
        seen = [e.step for e in acc.Scalars("train/loss")] if has else []
        running = p.poll() is None
        check(running, f"live: the run ended early (rc {p.returncode})")
        check(k >= 20 and len(seen) >= k - 1 and seen == list(range(1, len(seen) + 1)),
              f"live: {k} JSON lines but TensorBoard saw steps {seen[:5]}... ({len(seen)})")
        print(f"ok: live: TensorBoard read {len(seen)} steps while the run went on "
              f"({k} JSON lines before)")
    finally:
        p.kill()
        p.wait()


def corrupt(tmp, path, recs):
    """A flipped byte in a step's data, then in a length: TensorBoard's reader fails the
    CRC check; the accumulator keeps the steps before the bad record."""
    from tensorboard.backend.event_processing import event_file_loader
    from tensorboard.compat import tf
    from tensorboard.compat.proto import event_pb2
    blob = open(path, "rb").read()
    # the third step's record: the file version, the arenas with step 1, then steps 1, 2, 3
    at, data = recs[4]
    ev = event_pb2.Event.FromString(data)
    check(ev.step == 3 and ev.summary.value[0].tag == "train/loss", f"record 4 is step 3: {ev}")
    for part, pos, needle in (("data", at + 12 + len(data) // 2, "event crc32"),
                              ("length", at + 2, "header crc32")):
        bad = bytearray(blob)
        bad[pos] ^= 0x40
        folder = os.path.join(tmp, "bad_" + part)
        os.makedirs(folder)
        target = os.path.join(folder, os.path.basename(path))
        open(target, "wb").write(bytes(bad))
        err = None
        try:
            for _ in event_file_loader._make_tf_record_iterator(target):
                pass
        except tf.errors.DataLossError as e:
            err = str(e)
        check(err is not None and needle in err,
              f"corrupt {part}: TensorBoard's reader said {err!r}, expected {needle!r}")
        acc = accumulate(folder)
        seen = [e.step for e in acc.Scalars("train/loss")]
        check(seen == [1, 2], f"corrupt {part}: the accumulator kept steps {seen}")
        print(f"ok: a flipped {part} byte: {err}")


def main():
    try:
        import tensorboard  # noqa: F401
    except ImportError as e:
        return skip_all(f"the tensorboard package is not installed ({e}): scripts/install-deps.sh")
    with tempfile.TemporaryDirectory() as tmp:
        r = np.random.RandomState(5)
        np.save(os.path.join(tmp, "x.npy"), r.randn(40, 64).astype(np.float32))
        np.save(os.path.join(tmp, "lab.npy"), r.randint(0, 10, 40).astype(np.int64))
        folder, log, arena = train(tmp, "one", ["--optimizer", "adamw", "--lr", "1e-2",
                                                 "--lr-schedule", "cosine", "--warmup-steps", "1",
                                                 "--min-lr", "1e-4"], steps=5)
        path, recs = compare("one rank", folder, log, 1, False, arena)
        lrs = [json.loads(x)["lr"] for x in open(log)]
        check(len(set(lrs)) >= 3, f"the schedule changes the learning rate: {lrs}")
        if len(recs) >= 5:
            corrupt(tmp, path, recs)
        folder, log, arena = train(tmp, "mesh", ["--mesh", "dp=2,tp=2", "--precision", "fp16"])
        compare("dp=2,tp=2 fp16", folder, log, 4, True, arena)
        two_processes(tmp)
        live(tmp)
        # an unwritable DIR: a clear error naming it, before any step
        plain = os.path.join(tmp, "plain")
        open(plain, "w").close()
        p = subprocess.run([SHARDC, "train", MLP, "--dim", "batch=8", "--data",
                            "x=" + os.path.join(tmp, "x.npy"), "--labels",
                            os.path.join(tmp, "lab.npy"), "--steps", "2", "--quiet",
                            "--tensorboard", os.path.join(plain, "tb"), "--log-json",
                            os.path.join(tmp, "never.jsonl")],
                           capture_output=True, text=True, timeout=TIMEOUT_S)
        check(p.returncode == 1 and f"{plain}/tb: cannot create the TensorBoard log folder"
              in p.stderr, f"unwritable DIR: rc {p.returncode}, {p.stderr!r}")
        check(not os.path.exists(os.path.join(tmp, "never.jsonl")),
              "unwritable DIR: no step ran (no JSON log)")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
