"""test_fp8_state.py — `--precision fp8`: its scaling state, resume, dp=2, the emulated GPU.

  * the scaling state over 6 steps with --fp8-amax-history 4, each step a
    run resumed from the last one's checkpoint: every tensor's history is
    the last one's rolled by one with this step's amax last and index 0 zero;
    its scale is float32(fp8_max) / max(this amax and the 3 before) in f32
    (kept while that max is 0); each weight's amax is max |W| of the master
    weights the step started from (the previous checkpoint's);
  * resume bit-exact: the 6 resumed runs end with the checkpoint (weights,
    optimizer and FP8 state) and losses of one 6-step run, byte for byte;
  * dp=2 (thread ranks) equals one rank: after step 1 every FP8 history
    and scale bit for bit (each amax reduced over both ranks' rows) and the
    same loss; over 6 steps losses within 5e-4 relative (the split
    gradient sums round differently in bf16: 3e-5 in bf16 alone, 1.1e-4
    measured in fp8);
  * --recompute selective and full: 6 steps' losses within dp=2's 5e-4 of
    the run without (selective measured equal, full 2.1e-4: the recomputed
    blocks' kernels round bf16 intermediates at other places); `plan` finds
    the 2 blocks by structure and runs forward nodes again, and full
    recompute keeps for the backward what bf16's keeps (within 1 %: the
    quantized weights are recomputed in their blocks);
  * --grad-accum 2 at batch 4 against batch 8: after step 1 the 32 X and W
    history and scale tensors bit for bit (the step's amax is the max over
    both microbatches, the history rolled once), each dY amax twice batch
    8's within 10 % (a microbatch's mean loss is over half the rows; E5M2's
    subnormals at scale 1); step 1's loss within 1e-6, 6 steps' within
    5e-4 (measured 1.9e-4);
  * the emulated GPU (SHARDC_CUDA_EMU=1 --device cuda; a partial skip
    without the cuda target): after step 1 the same FP8 state as the CPU
    within 1e-6 relative (one LayerNorm output's amax and scale 1 ulp
    apart), losses over 3 steps within 1e-4 relative; its
    SHARDC_CUDA_VERBOSE line says all 24 FP8 products ran as the emulated
    cuBLASLt's FP8 matmuls (16 through transposed FP8 copies); the tiny
    Llama's 42 of 42 too, its 3 steps' losses within 5e-4 of the CPU's
    (7.0e-8 with AVX-512, 2.1e-4 on an AVX2-only host).

The quantization and the loss curve: test_fp8.py.

Environment: SHARDC. Exit 0 on success, 1 on any failure (checks.py).
"""
import os
import re
import subprocess
import sys

import numpy as np

from checks import check, has_cuda_target, skip_part
from fp8_runs import LLAMA, MODEL, SHARDC, merged, run_test, train


def state(ck):
    return merged(ck, "optimizer"), merged(ck, "weights")


def test_scaling_and_resume(work):
    hist = 4
    base = ["--precision", "fp8", "--fp8-amax-history", str(hist)]
    whole = train(work, "whole", base + ["--save", f"{work}/whole"], 6)
    losses, cks = [], []
    for t in range(1, 7):
        ck = f"{work}/ck{t}"
        extra = base + ["--save", ck] + (["--resume", cks[-1]] if cks else [])
        losses += train(work, f"step{t}", extra, t)
        cks.append(ck)
    check(losses == whole, f"resumed losses {losses} != one run's {whole}")
    a, b = state(f"{work}/whole"), state(cks[-1])
    for g in range(2):
        check(sorted(a[g]) == sorted(b[g]), "the same tensors")
        diff = [k for k in a[g] if k in b[g] and a[g][k].tobytes() != b[g][k].tobytes()]
        check(not diff, f"resume not bit-exact: {diff[:3]}")
    print(f"resume: 6 single-step runs equal one 6-step run bit for bit "
          f"({len(a[0])} optimizer and FP8 tensors, {len(a[1])} weights)")

    prev_o, prev_w = None, None
    amaxes = {}
    n_checked = 0
    for t, ck in enumerate(cks, 1):
        o, w = state(ck)
        names = sorted(k[:-len(".fp8_scale")] for k in o if k.endswith(".fp8_scale"))
        check(len(names) == 24, f"24 FP8 tensors (8 layers x input, weight, grad): {len(names)}")
        for nm in names:
            hs, sc = o[nm + ".fp8_amax_history"], o[nm + ".fp8_scale"]
            check(hs.shape == (hist,) and hs.dtype == np.float32, f"{nm} history {hs.shape}")
            check(hs[0] == 0, f"{nm} step {t}: history[0] = {hs[0]}")
            a_t = hs[-1]
            amaxes.setdefault(nm, []).append(a_t)
            if prev_o is not None:
                ph = prev_o[nm + ".fp8_amax_history"]
                check(np.array_equal(hs[1:-1], ph[2:]), f"{nm} step {t}: not rolled: {ph} -> {hs}")
            fmax = np.float32(57344.0 if nm.endswith("/grad") else 448.0)
            window = np.float32(max(amaxes[nm][-hist:]))
            want = fmax / window if window > 0 else np.float32(0)
            check(sc == want, f"{nm} step {t}: scale {sc!r}, want {want!r} = {fmax} / {window}")
            if nm.endswith("/weight") and prev_w is not None:
                # "/m/transformer/h.0/attn/c_attn/Gemm/weight" reads
                # "transformer.h.0.attn.c_attn.weight"
                wname = nm[len("/m/"):nm.rindex("/Gemm/")].replace("/", ".") + ".weight"
                check(wname in prev_w, f"{nm}: no weight {wname}")
                if wname in prev_w:
                    mw = np.abs(prev_w[wname]).max()
                    check(a_t == mw, f"{nm} step {t}: amax {a_t} != max|W| {mw}")
                    n_checked += 1
        prev_o, prev_w = o, w
    check(n_checked == 8 * 5, f"weight amaxes checked against the master weights: {n_checked}")
    print(f"delayed scaling: 24 tensors x 6 steps as Transformer Engine's "
          f"(history {hist}, {n_checked} weight amaxes equal to max |W|)")
    return whole


def test_dp(work, whole):
    base = ["--precision", "fp8", "--fp8-amax-history", "4", "--mesh", "dp=2"]
    one = train(work, "dp2_1", base + ["--save", f"{work}/dp2_1"], 1)
    dp = train(work, "dp2", base, 6)
    if len(dp) != 6 or len(whole) != 6 or len(one) != 1:
        check(False, "dp=2 ran 6 steps")
        return
    # step 1: the same weights, so the same amaxes and scales bit for bit
    # when each amax is reduced over both ranks' rows (a rank's own
    # half would give its own maxima)
    a, b = merged(f"{work}/ck1", "optimizer"), merged(f"{work}/dp2_1", "optimizer")
    keys = [k for k in a if "fp8" in k]
    diff = [k for k in keys if k not in b or a[k].tobytes() != b[k].tobytes()]
    check(len(keys) == 48 and not diff, f"dp=2 step 1 FP8 state differs: {diff[:3]}")
    # (the loss itself is a mean summed in two halves: f32 rounding, 7e-8)
    check(abs(one[0] - whole[0]) <= 1e-6 * abs(whole[0]),
          f"dp=2 step 1 loss {one[0]} != {whole[0]}")
    # later steps: the rows' gradient sums split in two differ in bf16
    # rounding (bf16 alone: 3e-5 over these 6 steps), which FP8's coarser
    # rounding can widen (measured 1.1e-4)
    rel = max(abs(x - y) / abs(y) for x, y in zip(dp, whole))
    print(f"dp=2: step 1's {len(keys)} FP8 state tensors equal one rank's bit for bit; "
          f"6 steps' losses within {rel:.2e}")
    check(rel < 5e-4, f"dp=2 losses {dp} not within 5e-4 of one rank's {whole}")


def test_recompute(work, whole):
    """--recompute selective and full: the same step, some of its forward
    run again for the backward."""
    base = ["--precision", "fp8", "--fp8-amax-history", "4"]
    for mode in ("selective", "full"):
        got = train(work, "rc_" + mode, base + ["--recompute", mode], 6)
        if len(got) != 6 or len(whole) != 6:
            check(False, f"--recompute {mode} ran 6 steps")
            continue
        # selective: GPT-2's attention cores are fused, nothing runs again
        # (measured: equal bit for bit). full: the recomputed blocks are
        # fused into other kernels, whose bf16 intermediates round at other
        # places (a kernel keeps them in f32 until it stores), which moves
        # some FP8 roundings (measured 2.1e-4 over 6 steps): dp=2's bound
        rel = max(abs(x - y) / abs(y) for x, y in zip(got, whole))
        print(f"--recompute {mode}: 6 steps' losses within {rel:.1e} of the run without")
        check(rel < 5e-4, f"--recompute {mode} losses {got} not within 5e-4 of {whole}")
    r = subprocess.run([SHARDC, "plan", MODEL, "--train", "--dim", "batch=4",
                        "--precision", "fp8", "--recompute", "full"],
                       capture_output=True, text=True, timeout=300)
    # the blocks by structure, as in bf16: the forward handed to recompute
    # ends where the backward begins (a backward node in it made six
    # residual additions and fell back to names)
    m = re.search(r"2 blocks found by structure.*; (\d+) forward nodes run again", r.stdout)
    check(r.returncode == 0 and m and int(m.group(1)) > 0,
          f"fp8 --recompute full runs forward nodes again: {r.stdout[-400:]} {r.stderr[-300:]}")
    # the quantized weights are recomputed in their block (passes/recompute.c,
    # weight_nodes), not kept from the forward: full recompute keeps what
    # bf16's keeps, within 1 % (measured 173.06 against 173.00 KiB; 525
    # KiB when they stayed saved), under half the run without (679 KiB)
    saved = {}
    for prec, rc in (("fp8", "full"), ("fp8", "none"), ("bf16", "full")):
        q = subprocess.run([SHARDC, "plan", MODEL, "--train", "--dim", "batch=4",
                            "--precision", prec, "--recompute", rc],
                           capture_output=True, text=True, timeout=300)
        m = re.search(r"saved for backward\s+\S+ \S+\s+(\d+)", q.stdout)
        check(q.returncode == 0 and m, f"plan {prec} --recompute {rc}: {q.stdout[-300:]}")
        saved[prec, rc] = int(m.group(1)) if m else 0
    print(f"--recompute full saves for the backward {saved['fp8', 'full']} bytes in fp8 "
          f"({saved['fp8', 'none']} without), bf16 {saved['bf16', 'full']}")
    check(0 < saved["fp8", "full"] <= 1.01 * saved["bf16", "full"] and
          2 * saved["fp8", "full"] < saved["fp8", "none"],
          f"fp8 --recompute full keeps {saved}")


def test_grad_accum(work, whole):
    """--grad-accum 2 at batch 4 against batch 8: the step's amax is the
    max over its microbatches, the history rolled once a step."""
    base = ["--precision", "fp8", "--fp8-amax-history", "4", "--grad-accum", "2"]
    one = train(work, "acc_1", base + ["--save", f"{work}/acc_1"], 1, batch=4)
    six = train(work, "acc_6", base, 6, batch=4)
    if len(one) != 1 or len(six) != 6 or len(whole) != 6:
        check(False, "--grad-accum 2 ran")
        return
    a, b = merged(f"{work}/ck1", "optimizer"), merged(f"{work}/acc_1", "optimizer")
    keys = sorted(k for k in a if "fp8" in k)
    check(len(keys) == 48 and all(k in b for k in keys), "the FP8 state of --grad-accum 2")
    # X and W: the same values in both runs, so the same amaxes (the max of
    # the two microbatches' rows) and scales bit for bit; only the last
    # microbatch's amax would differ
    xw = [k for k in keys if not k.split(".fp8")[0].endswith("/grad")]
    diff = [k for k in xw if k in b and a[k].tobytes() != b[k].tobytes()]
    check(len(xw) == 32 and not diff, f"--grad-accum 2 step 1 X/W state differs: {diff[:3]}")
    # dY: each microbatch's loss is the mean over half the rows, so its dY is
    # twice the whole batch's (exactly, but where E5M2 rounds below its
    # smallest normal at step 1's scale 1: measured within 10 %)
    for k in keys:
        if k.endswith("/grad.fp8_amax_history") and k in b:
            ratio = float(b[k][-1] / a[k][-1])
            check(abs(ratio - 2) <= 0.2 and b[k][0] == 0 and not b[k][:-1].any(),
                  f"{k}: accumulated {b[k]} against {a[k]} (ratio {ratio})")
    # the loss logged is the mean of the microbatches'; the gradient sums
    # split in two round differently (as dp=2's, same bound; measured 1.9e-4)
    check(abs(one[0] - whole[0]) <= 1e-6 * abs(whole[0]), f"step 1 loss {one[0]} != {whole[0]}")
    rel = max(abs(x - y) / abs(y) for x, y in zip(six, whole))
    print(f"--grad-accum 2: step 1's {len(xw)} X/W FP8 state tensors equal batch 8's bit for "
          f"bit, dY's amaxes twice; 6 steps' losses within {rel:.1e}")
    check(rel < 5e-4, f"--grad-accum 2 losses {six} not within 5e-4 of batch 8's {whole}")


def test_emulated_gpu(work, whole):
    if not has_cuda_target(SHARDC):
        skip_part("fp8 on the emulated GPU", "this shardc has no cuda target (no NVRTC)")
        return
    base = ["--precision", "fp8", "--fp8-amax-history", "4", "--device", "cuda", "--no-allow-tf32"]
    emu = {"SHARDC_CUDA_EMU": "1"}
    one = train(work, "gpu1", base + ["--save", f"{work}/gpu1"], 1, emu)
    err = []
    three = train(work, "gpu3", base, 3, dict(emu, SHARDC_CUDA_VERBOSE="1"), stderr=err)
    if len(one) != 1 or len(three) != 3:
        check(False, "the emulated GPU ran fp8")
        return
    # every FP8 product ran as the emulated cuBLASLt's FP8 matmul: GPT-2's
    # Conv1D weights are [in, out], so the 8 input gradients dY·Wᵀ are "TN"
    # as they stand, the forward X·W reads W's transposed FP8 copy and the
    # weight gradient Xᵀ·dY those of X and dY (kernels of the step)
    m = fp8_matmuls(err)
    check(m is not None and (int(m.group(1)), int(m.group(2))) == (24, 24) and
          not m.group(3), f"FP8 matmuls on the emulated GPU: "
          f"{m.group(0) if m else 'no SHARDC_CUDA_VERBOSE line'}")
    # step 1 from the same weights: the same FP8 state but where an f32
    # input (a LayerNorm's output, reduced in another order) differs in its
    # last bit (measured: 46 of 48 tensors equal, that input's history and
    # scale 1 ulp apart)
    a, b = merged(f"{work}/ck1", "optimizer"), merged(f"{work}/gpu1", "optimizer")
    keys = [k for k in a if "fp8" in k]
    worst = max(float(np.max(np.abs(a[k] - b[k]) / np.maximum(np.abs(a[k]), 1e-30)))
                for k in keys if k in b)
    same = sum(a[k].tobytes() == b[k].tobytes() for k in keys if k in b)
    check(len(keys) == 48 and all(k in b for k in keys), "the GPU's FP8 state tensors")
    check(worst <= 1e-6 and same >= 40, f"GPU FP8 state after step 1: {same} of 48 equal, "
          f"worst {worst:.2e}")
    # over 3 steps the products' sums in another order (bf16 GPU against
    # CPU: 6e-6) flip some FP8 roundings (measured 1.6e-5)
    rel = max(abs(x - y) / abs(y) for x, y in zip(three, whole))
    print(f"emulated GPU ({m.group(0) if m else '?'}): after step 1 {same} of 48 FP8 state "
          f"tensors equal the CPU's (worst {worst:.1e}); 3 steps' losses within {rel:.1e}")
    check(rel < 1e-4, f"GPU losses {three} not within 1e-4 of the CPU's {whole[:3]}")
    # the tiny Llama (nn.Linear weights [out, in]): its 42 FP8 products, 14
    # layers' forward, input and weight gradients, all FP8 matmuls too, and
    # 3 steps' losses within the bound of the other FP8 roundings moved by a
    # sum's order (dp=2's, recompute's): measured 7.0e-8 on a host with
    # AVX-512, 2.1e-4 on one with AVX2 only (AMD EPYC, 2026-12-06), whose
    # CPU kernels sum in another order than the emulated GPU's products'
    # and so flip some FP8 roundings that the two then carry for 2 steps
    lcpu = train(work, "llama_cpu", base[:4], 3, model=LLAMA)
    err = []
    lgpu = train(work, "llama_gpu", base, 3, dict(emu, SHARDC_CUDA_VERBOSE="1"), stderr=err,
                 model=LLAMA)
    m = fp8_matmuls(err)
    check(m is not None and (int(m.group(1)), int(m.group(2))) == (42, 42) and
          not m.group(3), f"the Llama's FP8 matmuls on the emulated GPU: "
          f"{m.group(0) if m else 'no SHARDC_CUDA_VERBOSE line'}")
    if len(lcpu) != 3 or len(lgpu) != 3 or not np.isfinite(lgpu).all():
        check(False, f"the Llama's fp8 runs: {lcpu} {lgpu}")
        return
    rel = max(abs(x - y) / abs(y) for x, y in zip(lgpu, lcpu))
    print(f"emulated GPU, Llama ({m.group(0) if m else '?'}): 3 steps' losses within {rel:.1e} "
          f"of the CPU's")
    check(rel < 5e-4, f"the Llama's GPU losses {lgpu} not within 5e-4 of the CPU's {lcpu}")


def fp8_matmuls(err):
    """SHARDC_CUDA_VERBOSE's count of FP8 matmuls in a run's stderr (list of
    one string): the match, group 3 the reason for the others, if any."""
    return re.search(r"(\d+) of (\d+) FP8 products as cuBLASLt FP8 matmuls( \(the others f32: "
                     r"[^)]*\))?", err[0] if err else "")


def parts(work):
    whole = test_scaling_and_resume(work)
    test_dp(work, whole)
    test_recompute(work, whole)
    test_grad_accum(work, whole)
    test_emulated_gpu(work, whole)


if __name__ == "__main__":
    sys.exit(run_test(parts))
