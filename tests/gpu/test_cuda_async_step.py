"""test_cuda_async_step.py — training steps whose loss is read one step late.

On the emulated GPU (SHARDC_CUDA_EMU=1, the fake driver and its call log),
`shardc train --device cuda` launches step k+1 before it reads step k's loss,
gradient norm and applied flag (runtime/trainer.h: sc_trainer_launch and
sc_trainer_collect; docs/training.md). Checked, each against the same run
with --sync-steps (the host waits for every step before the next, as before):
  - the MLP (AdamW, 6 steps), GPT-2 in bf16 (AdamW, 4 steps, saved every 2)
    and the MLP with gradient accumulation (2 microbatches a step): the
    --log-json records have every step once, in order, with its own number,
    and their loss, gradient norm, lr and skipped flag equal bit for bit; the
    checkpoints are the same files byte for byte; the MLP's losses and
    gradient norms are within rtol 2e-5 of the CPU's (test_cuda_emulated.py's
    tolerance);
  - the host's waits (the fake driver's `call cu*Synchronize` lines and its
    host_syncs count): between the first and the last graph launch of a run
    that saves only at its end, every wait is a cuEventSynchronize on an event
    recorded before the latest cuGraphLaunch (the host waits for step k while
    step k+1 is queued: no round trip inside a step), one per step; the same
    check fails on the --sync-steps run (it waits for the step it has just
    launched), so that it can fail;
  - a step whose loss is not finite (SGD at lr 1e25: step 2 overflows): with
    --on-nan stop the run ends with the same message and exit status as
    --sync-steps, its log holding step 1 only; with --on-nan skip the logs
    are equal (the program leaves the state as it was on the device, so the
    step launched before the report ran on the state it would have seen);
  - no fake driver violations (races, memory freed while in use), also when
    the run ends at a non-finite step with the next one in flight.
"""
import os
import re
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "models"))
from checks import check, finish  # noqa: E402
from test_cuda_emulated import (REAL, SAMPLES, emulated, losses, not_runnable,  # noqa: E402
                                same_files, shardc, summary)

RTOL = 2e-5
KEYS = ("step", "loss", "grad_norm", "lr", "skipped")


def record_keys(path):
    return [tuple(x.get(k) for k in KEYS) for x in losses(path)]


def host_waits(log):
    """(waits inside the steady state that are not on an earlier step's
    event, waits between the first and the last graph launch, graph launches)."""
    lines = open(log).read().splitlines()
    launches = [i for i, ln in enumerate(lines) if ln.startswith("call cuGraphLaunch")]
    if len(launches) < 2:
        return None, 0, len(launches)
    recorded = {}  # event -> line of its latest record
    last_launch, bad, waits = -1, [], 0
    for i, ln in enumerate(lines):
        m = re.match(r"call cuEventRecord (\S+)", ln)
        if m:
            recorded[m.group(1)] = i
        if ln.startswith("call cuGraphLaunch"):
            last_launch = i
        inside = launches[0] < i < launches[-1]
        if not inside:
            continue
        m = re.match(r"call cuEventSynchronize (\S+)", ln)
        if m:
            waits += 1
            if recorded.get(m.group(1), 1 << 60) > last_launch:
                bad.append(ln)
        elif re.match(r"call cu(Stream|Ctx)Synchronize", ln):
            waits += 1
            bad.append(ln)
    return bad, waits, len(launches)


def pair(tmp, name, args, steps, save_every=0):
    """The run launched ahead and the one with --sync-steps: (logs, fake logs, dirs)."""
    out = {}
    for mode in ("ahead", "sync"):
        d = os.path.join(tmp, f"{name}.{mode}")
        lj, fl, ck = d + ".jsonl", d + ".fake.log", d + ".ck"
        more = ["--save", ck] + (["--save-every", str(save_every)] if save_every else [])
        r = shardc(["train"] + args + ["--steps", str(steps), "--device", "cuda", "--no-allow-tf32", "-q",
                                       "--log-json", lj] + more +
                   (["--sync-steps"] if mode == "sync" else []), emulated(fl))
        if not check(r.returncode == 0, f"{name} ({mode}): {r.stderr[-400:]}"):
            return None
        c = summary(fl)
        check(c.get("violations", -1) == 0, f"{name} ({mode}): fake driver violations {c}")
        out[mode] = (lj, fl, ck)
    a, s = record_keys(out["ahead"][0]), record_keys(out["sync"][0])
    check([x[0] for x in a] == list(range(1, steps + 1)),
          f"{name}: steps logged {[x[0] for x in a]}")
    check(a == s, f"{name}: the log differs from --sync-steps:\n  {a}\n  {s}")
    check(all(x[1] is not None and np.isfinite(x[1]) for x in a), f"{name}: loss not finite {a}")
    check(same_files(out["ahead"][2], out["sync"][2]),
          f"{name}: the checkpoint differs from --sync-steps'")
    return out


def main():
    rc = not_runnable()
    if rc is not None:
        return rc
    with tempfile.TemporaryDirectory() as tmp:
        rng = np.random.default_rng(11)
        x, lab = os.path.join(tmp, "x.npy"), os.path.join(tmp, "lab.npy")
        np.save(x, rng.standard_normal((16, 64)).astype(np.float32))
        np.save(lab, rng.integers(0, 10, 16).astype(np.int64))
        ids, glab = os.path.join(tmp, "ids.npy"), os.path.join(tmp, "glab.npy")
        np.save(ids, rng.integers(0, 1000, (8, 16)).astype(np.int64))
        np.save(glab, rng.integers(0, 1000, (8, 16)).astype(np.int64))
        mlp = [os.path.join(SAMPLES, "mlp.onnx"), "--data", "x=" + x, "--labels", lab,
               "--dim", "batch=8"]
        gpt2 = [os.path.join(SAMPLES, "gpt2.onnx"), "--data", "input_ids=" + ids, "--labels",
                glab, "--dim", "batch=4", "--optimizer", "adamw"]

        out = pair(tmp, "mlp", mlp + ["--optimizer", "adamw"], 6)
        if out and not REAL:
            bad, waits, n = host_waits(out["ahead"][1])
            print(f"mlp: launched ahead: {waits} host waits between the first and the last "
                  f"of {n} graph launches; totals {summary(out['ahead'][1]).get('host_syncs')} "
                  f"and {summary(out['sync'][1]).get('host_syncs')} with --sync-steps")
            check(bad == [] and waits == n - 1,
                  f"mlp: host waits inside the steady state ({waits}, {n} graph launches): "
                  f"{bad[:4]}")
            bad_s, waits_s, n_s = host_waits(out["sync"][1])
            check(bad_s and len(bad_s) >= n_s - 1,
                  f"mlp --sync-steps: the wait check found {bad_s} ({waits_s} waits): it "
                  "cannot tell the synchronous path from the one launched ahead")
            cpu = os.path.join(tmp, "mlp.cpu.jsonl")
            r = shardc(["train"] + mlp + ["--optimizer", "adamw", "--steps", "6", "-q",
                                          "--log-json", cpu])
            if check(r.returncode == 0, f"mlp on the cpu: {r.stderr[-300:]}"):
                for p, q in zip(losses(cpu), losses(out["ahead"][0])):
                    for key in ("loss", "grad_norm"):
                        check(np.isfinite(q[key]) and abs(p[key] - q[key]) <= RTOL * abs(p[key]),
                              f"mlp: step {p['step']} {key} {q[key]} vs cpu {p[key]}")
        pair(tmp, "gpt2-bf16", gpt2 + ["--precision", "bf16"], 4, save_every=2)
        pair(tmp, "mlp-accum", mlp + ["--optimizer", "adamw", "--grad-accum", "2"], 4)

        # a step that is not finite: stop with the same message, or skip alike
        nan = mlp + ["--optimizer", "sgd", "--lr", "1e25", "--steps", "4", "--device", "cuda", "--no-allow-tf32",
                     "-q"]
        got = {}
        for mode in ("ahead", "sync"):
            for policy in ("stop", "skip"):
                lj = os.path.join(tmp, f"nan.{mode}.{policy}.jsonl")
                r = shardc(["train"] + nan + ["--on-nan", policy, "--log-json", lj] +
                           (["--sync-steps"] if mode == "sync" else []),
                           emulated(os.path.join(tmp, f"nan.{mode}.{policy}.log")))
                got[mode, policy] = (r.returncode, r.stderr.strip().splitlines()[-1:],
                                     record_keys(lj) if os.path.exists(lj) else None)
                c = summary(os.path.join(tmp, f"nan.{mode}.{policy}.log"))
                check(c.get("violations", -1) == 0,  # stop: a step still in flight at the exit
                      f"non-finite step ({mode}, --on-nan {policy}): violations {c}")
        rc, msg, log = got["ahead", "stop"]
        check(rc == 1 and msg and "step 2: the loss is nan" in msg[0] and log and len(log) == 1,
              f"non-finite step, --on-nan stop: exit {rc}, {msg}, log {log}")
        check(got["ahead", "stop"] == got["sync", "stop"],
              f"--on-nan stop: {got['ahead', 'stop']} vs --sync-steps {got['sync', 'stop']}")
        rc, msg, log = got["ahead", "skip"]
        check(rc == 0 and log and len(log) == 4 and all(x[4] for x in log[1:]),
              f"--on-nan skip: exit {rc}, log {log}")
        check(got["ahead", "skip"] == got["sync", "skip"],
              f"--on-nan skip: {got['ahead', 'skip']} vs --sync-steps {got['sync', 'skip']}")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
