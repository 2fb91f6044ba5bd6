"""test_recompute_blocks.py — repeated blocks are found from the graph's
structure, not from names, by `inspect` and by `--recompute` alike
(passes/blocks.c).

GPT-style pre-LN layers (fused LayerNormalization, fused QKV, Softmax,
Gelu, residual adds) built here with names that say nothing of the layers:
nodes and weights prefixed `l0.`, `l1.`, ... in one model, random tokens
in another. Checked:
  - inspect finds L blocks by structure, no name key, 12h^2 + 13h
    parameters each (and the 10 elements of its shape initializers);
  - plan --train (the attention cores unfused, --no-fuse-attention: the
    figures below are the unfused core's, docs/passes.md#fused-attention):
    recompute finds L blocks; per layer (the 4-layer model
    minus the 2-layer one, halved) the saved activations are Korthikanti's
    fp32 figures without dropout: none 4(16sbh + as^2b), selective 4·16sbh,
    full 4sbh (the block's input alone);
  - training 3 steps (SGD with momentum, mse) with selective and full
    recompute gives the losses and final weights of no recompute, bit for
    bit;
  - the shape-only 1.5B GPT (node names "/Mul_814"): full recompute finds
    its 48 blocks, recomputes nodes, keeps about the blocks' inputs (and the
    logits, which the fused loss's backward reads);
  - --recompute auto --memory-budget lists its three tries and its choice,
    and when nothing fits says by how much and what to try;
  - --recompute on a model without blocks (the MLP sample) warns.
Environment: SHARDC, SHARDC_SOURCE_DIR. Exit 0 on success."""
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from checks import check, finish

SHARDC = os.environ.get("SHARDC")
SRC = os.environ.get("SHARDC_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
S, B, H, A = 8, 2, 64, 4
D = H // A


def layer(p, x, nodes, inits, rng):
    """One pre-LN layer; every name starts with p and carries no index."""
    def w(name, shape):
        inits.append(numpy_helper.from_array(
            rng.uniform(-0.1, 0.1, shape).astype(np.float32), f"{p}{name}"))
        return f"{p}{name}"

    def c(name, vals):
        inits.append(numpy_helper.from_array(np.array(vals, dtype=np.int64), f"{p}{name}"))
        return f"{p}{name}"

    def node(op, ins, outs, **kw):
        nodes.append(helper.make_node(op, ins, [f"{p}{o}" for o in outs],
                                      name=f"{p}{op}{len(nodes)}", **kw))
        return f"{p}{outs[0]}"

    ln1 = node("LayerNormalization", [x, w("g1", [H]), w("b1", [H])], ["ln1"], axis=-1)
    qkv = node("MatMul", [ln1, w("wqkv", [H, 3 * H])], ["qkv_mm"])
    qkv = node("Add", [qkv, w("bqkv", [3 * H])], ["qkv"])
    node("Split", [qkv, c("split", [H, H, H])], ["q", "k", "v"], axis=-1)
    heads = c("heads", [B, S, A, D])
    q = node("Reshape", [f"{p}q", heads], ["q4"])
    q = node("Transpose", [q], ["qt"], perm=[0, 2, 1, 3])
    k = node("Reshape", [f"{p}k", heads], ["k4"])
    k = node("Transpose", [k], ["kt"], perm=[0, 2, 3, 1])
    v = node("Reshape", [f"{p}v", heads], ["v4"])
    v = node("Transpose", [v], ["vt"], perm=[0, 2, 1, 3])
    sc = node("MatMul", [q, k], ["scores"])
    node("Constant", [], ["scale"],  # not an initializer: not trained
         value=numpy_helper.from_array(np.array(1 / np.sqrt(D), np.float32)))
    sc = node("Mul", [sc, f"{p}scale"], ["scaled"])
    pr = node("Softmax", [sc], ["probs"], axis=-1)
    o = node("MatMul", [pr, v], ["ctx"])
    o = node("Transpose", [o], ["ctx_t"], perm=[0, 2, 1, 3])
    o = node("Reshape", [o, c("merge", [B, S, H])], ["ctx_m"])
    o = node("MatMul", [o, w("wo", [H, H])], ["proj_mm"])
    o = node("Add", [o, w("bo", [H])], ["proj"])
    x2 = node("Add", [x, o], ["res1"])
    ln2 = node("LayerNormalization", [x2, w("g2", [H]), w("b2", [H])], ["ln2"], axis=-1)
    f = node("MatMul", [ln2, w("wfc", [H, 4 * H])], ["fc_mm"])
    f = node("Add", [f, w("bfc", [4 * H])], ["fc"])
    g = node("Gelu", [f], ["gelu"])
    m = node("MatMul", [g, w("wp", [4 * H, H])], ["mlp_mm"])
    m = node("Add", [m, w("bp", [H])], ["mlp"])
    return node("Add", [x2, m], ["out"])


def model(prefixes, path):
    rng = np.random.RandomState(11)
    nodes, inits = [], []
    x = "x"
    for p in prefixes:
        x = layer(p, x, nodes, inits, rng)
    nodes.append(helper.make_node("Identity", [x], ["y"], name="head"))
    g = helper.make_graph(
        nodes, "blocks",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, S, H])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [B, S, H])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])
    onnx.checker.check_model(m)
    onnx.save(m, path)


def shardc(args, timeout=300):
    return subprocess.run([SHARDC] + args, capture_output=True, text=True, timeout=timeout)


def plan(path, *extra):
    r = shardc(["plan", path, "--train", "--loss", "mse", "--json", "--no-fuse-attention"] +
               list(extra))
    if not check(r.returncode == 0, f"plan {path} {extra}: {r.stderr[-500:]}"):
        return None
    return json.loads(r.stdout)


def main():
    if not SHARDC:
        print("SHARDC is not set")
        return 1
    sbh, as2b = S * B * H, A * S * S * B
    per_layer = {"none": 4 * (16 * sbh + as2b), "selective": 4 * 16 * sbh, "full": 4 * sbh}
    rng = np.random.RandomState(5)
    with tempfile.TemporaryDirectory() as tmp:
        named = {L: os.path.join(tmp, f"l{L}.onnx") for L in (2, 4)}
        for L, path in named.items():
            model([f"l{i}." for i in range(L)], path)
        tokens = ["".join(chr(97 + c) for c in rng.randint(0, 26, 6)) + "_" for _ in range(4)]
        meaningless = os.path.join(tmp, "tokens.onnx")
        model(tokens, meaningless)

        # inspect: blocks by structure, no key
        for path, L in ((named[2], 2), (named[4], 4), (meaningless, 4)):
            r = shardc(["inspect", path, "--json"])
            if not check(r.returncode == 0, f"inspect {path}: {r.stderr[-300:]}"):
                continue
            j = json.loads(r.stdout)
            blocks = j["blocks"]
            check(j["blocks_found_by"] == "structure" and j["block_key"] is None
                  and j["residual_adds_per_block"] == 2,
                  f"inspect {os.path.basename(path)}: {j['blocks_found_by']} {j['block_key']}")
            check([b["index"] for b in blocks] == list(range(L)) and
                  all(b["params"] == 12 * H * H + 13 * H + 10 for b in blocks) and
                  len({b["nodes"] for b in blocks}) == 1,
                  f"inspect {os.path.basename(path)}: blocks {blocks}")
            r = shardc(["inspect", path])
            check(f"blocks: {L} repeated blocks, found by structure" in r.stdout,
                  f"inspect text: {r.stdout[-400:]}")

        # plan: recompute finds the blocks; per layer, Korthikanti's figures
        saved = {}
        for kind in per_layer:
            for L in (2, 4):
                j = plan(named[L], "--recompute", kind)
                if j is None:
                    continue
                rc = j["recompute"]
                saved[kind, L] = j["saved_activations"]
                if kind != "none":
                    check(rc["blocks"] == L and rc["found_by"] == "structure" and rc["nodes"] > 0,
                          f"plan {L} layers --recompute {kind}: {rc}")
            if (kind, 2) in saved and (kind, 4) in saved:
                got = (saved[kind, 4] - saved[kind, 2]) // 2
                check(got == per_layer[kind],
                      f"--recompute {kind}: {got} bytes saved per layer, want {per_layer[kind]}")
        j = plan(meaningless, "--recompute", "full")
        if j is not None and ("full", 4) in saved:
            check(j["saved_activations"] == saved["full", 4],
                  f"meaningless names: full saves {j['saved_activations']}, "
                  f"l0. names {saved['full', 4]}")

        # training: bit-identical losses and weights
        x = rng.standard_normal((B, S, H)).astype(np.float32)
        t = rng.standard_normal((B, S, H)).astype(np.float32)
        xf, tf = os.path.join(tmp, "x.npy"), os.path.join(tmp, "t.npy")
        np.save(xf, x)
        np.save(tf, t)
        runs = {}
        for kind in per_layer:
            log, ck = os.path.join(tmp, f"{kind}.jsonl"), os.path.join(tmp, f"ck_{kind}")
            r = shardc(["train", named[2], "--data", "x=" + xf, "--targets", tf, "--loss", "mse",
                        "--steps", "3", "--lr", "0.05", "--momentum", "0.9", "--quiet",
                        "--recompute", kind, "--log-json", log, "--save", ck])
            if check(r.returncode == 0, f"train --recompute {kind}: {r.stderr[-500:]}"):
                files = sorted(f for f in os.listdir(ck) if f.endswith(".safetensors"))
                runs[kind] = ([json.loads(s)["loss"] for s in open(log)],
                              {f: open(os.path.join(ck, f), "rb").read() for f in files})
        if "none" in runs:
            check(len(runs["none"][0]) == 3 and runs["none"][1],
                  f"train: {runs['none'][0]}, files {list(runs['none'][1])}")
            for kind in ("selective", "full"):
                if kind in runs:
                    check(runs[kind][0] == runs["none"][0],
                          f"{kind} losses {runs[kind][0]} vs {runs['none'][0]}")
                    check(runs[kind][1] == runs["none"][1], f"{kind}: final weights differ")

        # the 1.5B GPT, shapes only: its nodes' names carry no layer index
        gpt = os.path.join(SRC, "samples", "gpt_1p5b.onnx")
        big = {}
        for kind in ("none", "full"):
            r = shardc(["plan", gpt, "--no-weights", "--train", "--dim", "batch=1", "--json",
                        "--recompute", kind])
            if check(r.returncode == 0, f"plan 1.5B --recompute {kind}: {r.stderr[-400:]}"):
                big[kind] = json.loads(r.stdout)
        if len(big) == 2:
            rc, s1 = big["full"]["recompute"], 128 * 1 * 1600 * 4  # s, b, h, fp32
            # and the logits [s, b, V] in fp32, which the loss's backward reads
            # (SoftmaxCrossEntropyGrad: docs/training.md, "Fused backward ops")
            logits = 128 * 1 * 50257 * 4
            check(rc["blocks"] == 48 and rc["found_by"] == "structure" and rc["nodes"] > 0,
                  f"1.5B full recompute: {rc}")
            # without recompute the blocks save 16 times what full recompute
            # keeps (670,720,000 bytes against 40,960,000; 28 times with the
            # GELU spelled out, SHARDC_NO_FUSE_GELU=1: fuse-gelu's Gelu saves
            # only its input)
            full, none = big["full"]["saved_activations"], big["none"]["saved_activations"]
            check(48 * s1 + logits <= full <= 52 * s1 + logits and
                  none - logits > 12 * (full - logits),
                  f"1.5B saved activations: full {full} (48 block inputs {48 * s1}, the logits "
                  f"{logits}), none {none}")

        # auto: three tries listed, the choice said; nothing fits: what would
        need = {}
        for kind in per_layer:
            j = plan(named[4], "--recompute", kind)
            if j:
                need[kind] = j["total"]
        if len(need) == 3 and check(need["full"] < need["selective"] < need["none"],
                                    f"step memory {need}"):
            budget = (need["full"] + need["selective"]) // 2
            r = shardc(["plan", named[4], "--train", "--loss", "mse", "--recompute", "auto",
                        "--memory-budget", str(budget)])
            tries = re.findall(r"^  (none|selective|full) +step .*: (fits|over) by", r.stderr, re.M)
            check(r.returncode == 0 and tries == [("none", "over"), ("selective", "over"),
                                                  ("full", "fits")] and
                  "--recompute auto chose full" in r.stderr and "4 blocks found by structure"
                  in r.stderr, f"auto {budget}: {r.returncode} {tries} {r.stderr[-800:]}")
            r = shardc(["plan", named[4], "--train", "--loss", "mse", "--recompute", "auto",
                        "--memory-budget", str(need["full"] - 4096)])
            check(r.returncode == 1 and "no recompute fits" in r.stderr and
                  "more than the budget" in r.stderr and "try --mesh fsdp=" in r.stderr,
                  f"auto below full: {r.returncode} {r.stderr[-800:]}")

        # no blocks: a warning, never silently nothing
        r = shardc(["plan", os.path.join(SRC, "samples", "mlp.onnx"), "--train", "--dim",
                    "batch=4", "--recompute", "full"])
        check(r.returncode == 0 and "warning" in r.stderr and "no repeated blocks" in r.stderr,
              f"MLP --recompute full: {r.returncode} {r.stderr[-400:]}")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
