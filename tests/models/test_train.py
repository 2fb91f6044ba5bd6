"""test_train.py — `shardc train` on the MLP sample against a float64 numpy
reference of the same training: forward (Gemm transB, Relu), PyTorch's
cross_entropy (mean over labels != ignore_index) or mse, the backward by
hand, torch.nn.utils.clip_grad_norm_, torch.optim.SGD (momentum,
Nesterov, weight decay) and torch.optim.AdamW (bias correction, decoupled
weight decay), learning-rate schedules and gradient accumulation (loss / K
over K microbatches, one step), with the same data order (step i takes
examples (i-1)*K*B ... i*K*B-1, wrapping).

Each run's per-step loss from --log-json must equal the reference's loss
at every step within rtol 2e-4, atol 1e-5: fp32 against fp64, over 12
steps whose updates compound (the loss at step k checks every update
before it); --precision bf16 within rtol 2e-2, atol 2e-3, and different
from fp32 (it really rounds). The gradient norm is checked the same way. No NaN. Inputs are
seeded random; some labels are the ignore index. Also: --list-params, a
label out of range refused before step 1 naming the file, a model input
missing from --data, and a loss that falls (AdamW, 60 steps).
Tied weights: a model whose LM head is a second initializer holding the
embedding's exact transpose trains one parameter whose SGD step (lr 1) is
the float64 sum of both uses' gradients within 1e-5 of its largest
element (fp32 rounding), the copy absent from the checkpoint; --untie
trains them apart (the step is the Gather's part alone); a constant-valued
pair is not tied; the export writes the copy as the trained transpose and
onnxruntime and `shardc run` agree on it (rtol 1e-5).
Training bundles: `compile --train` then `train BUNDLE` gives the same log
and the same final weights and optimizer state, bit for bit, as `train
MODEL` with the same options (SGD with momentum and Nesterov, AdamW with
clipping, AdamW in bf16 (bf16 GEMM steps), SGD with --grad-accum 2); graph options with a bundle, an
inference bundle to train, a training bundle to run, and damaged bundles
(truncated or corrupted files, training.json edited with its hash
rewritten, and a bf16 GEMM step given an f32 operand or bias in program.json)
are refused naming the option or file.

Environment: SHARDC (the binary). Exit 0 on success, 1 on any failure.
"""
import json
import re
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import numpy_helper
from checks import check, failures

SHARDC = os.environ.get("SHARDC")
SRC = os.environ.get("SC_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
MLP = os.path.join(SRC, "samples", "mlp.onnx")


def weights():
    m = onnx.load(MLP)
    init = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in m.graph.initializer}
    return {k: init[k] for k in ["0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias"]}


def forward_backward(w, x, loss_kind, lab, tgt, ignore=-100):
    h0 = x @ w["0.weight"].T + w["0.bias"]
    a0 = np.maximum(h0, 0)
    h1 = a0 @ w["2.weight"].T + w["2.bias"]
    a1 = np.maximum(h1, 0)
    y = a1 @ w["4.weight"].T + w["4.bias"]
    if loss_kind == "ce":
        z = y - y.max(axis=1, keepdims=True)
        logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
        valid = lab != ignore
        n = valid.sum()
        idx = np.where(valid, lab, 0)
        loss = -(logp[np.arange(len(lab)), idx] * valid).sum() / n
        dy = np.exp(logp)
        dy[np.arange(len(lab)), idx] -= 1
        dy *= (valid / n)[:, None]
    else:
        diff = y - tgt
        loss = (diff ** 2).mean()
        dy = 2 * diff / diff.size
    g = {}
    g["4.weight"] = dy.T @ a1
    g["4.bias"] = dy.sum(0)
    da1 = dy @ w["4.weight"]
    dh1 = da1 * (h1 > 0)
    g["2.weight"] = dh1.T @ a0
    g["2.bias"] = dh1.sum(0)
    da0 = dh1 @ w["2.weight"]
    dh0 = da0 * (h0 > 0)
    g["0.weight"] = dh0.T @ x
    g["0.bias"] = dh0.sum(0)
    return loss, g


def lr_at(sched, lr, min_lr, warmup, total, step):
    if warmup > 0 and step <= warmup:
        return lr * step / warmup
    if sched == "constant" or total <= warmup:
        return lr
    f = min(1.0, (step - warmup) / (total - warmup))
    k = 0.5 * (1 + np.cos(np.pi * f)) if sched == "cosine" else 1 - f
    return min_lr + (lr - min_lr) * k


def reference(x, lab, tgt, loss_kind, opt, steps, batch, lr0, clip=0.0, sched=None, accum=1):
    w = weights()
    state = {k: {} for k in w}
    out = []
    for step in range(1, steps + 1):
        lr = lr_at(*sched, steps, step) if sched else lr0
        losses, g = [], None
        for m in range(accum):  # PyTorch: loss / K, backward K times, one step
            rows = [((step - 1) * batch * accum + m * batch + r) % len(x) for r in range(batch)]
            lm, gm = forward_backward(w, x[rows], loss_kind,
                                      lab[rows] if lab is not None else None,
                                      tgt[rows] if tgt is not None else None)
            losses.append(lm)
            g = gm if g is None else {k: g[k] + gm[k] for k in g}
        g = {k: v / accum for k, v in g.items()}
        loss = float(np.mean(losses))
        norm = np.sqrt(sum((gk ** 2).sum() for gk in g.values()))
        if clip > 0:
            coef = min(1.0, clip / (norm + 1e-6))
            g = {k: v * coef for k, v in g.items()}
        out.append((loss, norm))
        for k in w:
            p, gk, s = w[k], g[k], state[k]
            if opt["kind"] == "sgd":
                if opt["wd"]:
                    gk = gk + opt["wd"] * p
                if opt["momentum"]:
                    buf = opt["momentum"] * s.get("buf", 0) + gk
                    s["buf"] = buf
                    gk = gk + opt["momentum"] * buf if opt["nesterov"] else buf
                w[k] = p - lr * gk
            else:
                b1, b2, eps, wd = 0.9, 0.999, 1e-8, opt["wd"]
                p = p * (1 - lr * wd)
                m = b1 * s.get("m", 0) + (1 - b1) * gk
                v = b2 * s.get("v", 0) + (1 - b2) * gk * gk
                s["m"], s["v"] = m, v
                bc1, bc2 = 1 - b1 ** step, 1 - b2 ** step
                w[k] = p - (lr / bc1) * m / (np.sqrt(v) / np.sqrt(bc2) + eps)
    return out


def run(args):
    return subprocess.run([SHARDC, "train", MLP] + args, capture_output=True, text=True,
                          timeout=300)


def shardc(args):
    return subprocess.run([SHARDC] + args, capture_output=True, text=True, timeout=300)


def kernel_stores(kir):
    """Per kernel of `shardc compile --emit=kir` output, and per segment of
    a multi-tensor kernel (codegen/multi_tensor.c: its phases store template
    param j, segment s's param s * P + j), the names of the buffers its
    phases store; and for each of those sets the index of its kernel."""
    names, kernels, owner, params, seg = {}, [], [], {}, (1, 0)
    for line in kir.splitlines():
        m = re.match(r'^b(\d+) \S+ .*"(.*)"$', line)
        if m:
            names[int(m.group(1))] = m.group(2)
        if re.match(r"^k\d+ kernel ", line):
            kernels.append(set())
            owner.append(len(set(owner)))
            params, seg = {}, (1, 0)
        m = re.match(r"^  segments (\d+) of (\d+) params", line)
        if m and kernels:
            seg = (int(m.group(1)), int(m.group(2)))
            kernels += [set() for _ in range(seg[0] - 1)]
            owner += [owner[-1]] * (seg[0] - 1)
        m = re.match(r"^  p(\d+) = buf (\d+) ", line)
        if m:
            params[int(m.group(1))] = int(m.group(2))
        m = re.match(r"^  phase \d+: store p(\d+)\[", line)
        if m and kernels:
            n, per = seg
            for s in range(n):
                kernels[len(kernels) - n + s].add(
                    names.get(params[s * per + int(m.group(1))], "?"))
    return kernels, owner


def log_lines(path):
    """The log without the step times and rates (which differ from run to run)."""
    out = []
    for line in open(path):
        d = json.loads(line)
        d.pop("time_ms")
        d.pop("tokens_per_s")
        out.append(d)
    return out


def rehash(bundle, name):
    """Rewrites manifest.json's size and SHA-256 of bundle/name as a
    consistent (hostile) author would: the loader's own checks must then
    find what is wrong."""
    import hashlib
    mpath = os.path.join(bundle, "manifest.json")
    man = json.load(open(mpath))
    blob = open(os.path.join(bundle, name), "rb").read()
    for f in man["files"]:
        if f["name"] == name:
            f["bytes"] = len(blob)
            f["sha256"] = hashlib.sha256(blob).hexdigest()
    open(mpath, "w").write(json.dumps(man, indent=2))


def bundle_tests(tmp, xf, lf):
    """compile --train, then train BUNDLE: the same per-step log and the
    same final weights and optimizer state, bit for bit, as train MODEL
    with the same options; then the refusals."""
    import shutil
    steps = 6
    data = ["--data", "x=" + xf, "--labels", lf, "--lr", "0.02", "--quiet"]
    configs = [
        ("sgd momentum nesterov wd", ["--optimizer", "sgd", "--momentum", "0.9", "--nesterov",
                                      "--weight-decay", "0.01"]),
        ("adamw clip 0.5", ["--optimizer", "adamw", "--clip-grad-norm", "0.5", "--betas",
                            "0.8,0.99"]),
        # its products bf16 GEMM steps, which the bundle's program checks read
        ("adamw bf16", ["--optimizer", "adamw", "--precision", "bf16"]),
        ("sgd momentum, grad-accum 2", ["--optimizer", "sgd", "--momentum", "0.9",
                                        "--grad-accum", "2"]),
    ]
    bundle = bf16_bundle = None
    for ci, (name, graph) in enumerate(configs):
        b = os.path.join(tmp, "train%d.bundle" % ci)
        r = shardc(["compile", MLP, "--train", "--dim", "batch=8", "-o", b] + graph)
        if not check(r.returncode == 0 and os.path.exists(os.path.join(b, "training.json")),
                     f"bundle {name}: compile --train: {r.returncode} {r.stderr[-400:]}"):
            continue
        bundle = b
        if "bf16" in graph:
            bf16_bundle = b
        logs, cks = [], []
        for k, first in enumerate([[MLP, "--dim", "batch=8"] + graph, [b]]):
            log, ck = os.path.join(tmp, "bl%d.jsonl" % k), os.path.join(tmp, "bck%d" % k)
            r = shardc(["train"] + first + data + ["--steps", str(steps), "--log-json", log,
                                                   "--save", ck])
            if check(r.returncode == 0, f"bundle {name}: train {first[0]}: {r.stderr[-400:]}"):
                logs.append(log_lines(log))
                cks.append(ck)
        if len(logs) != 2:
            continue
        check(len(logs[0]) == steps and logs[0] == logs[1],
              f"bundle {name}: the logs differ:\n{logs[0]}\n{logs[1]}")
        check(len({x["loss"] for x in logs[0]}) > 1, f"bundle {name}: the loss never changed")
        for f in ("weights.safetensors", "optimizer.safetensors"):
            a, c = (open(os.path.join(d, f), "rb").read() for d in cks)
            check(a == c, f"bundle {name}: {f} differs from the model's run")
        print(f"ok: bundle {name}: {steps} steps equal train MODEL bit for bit")
        if ci == 1:  # a checkpoint of the model's run resumes in the bundle, and the reverse
            more = []
            for k, first in enumerate([[MLP, "--dim", "batch=8"] + graph, [b]]):
                log = os.path.join(tmp, "bm%d.jsonl" % k)
                r = shardc(["train"] + first + data + ["--steps", str(steps + 2), "--log-json",
                                                       log, "--resume", cks[1 - k]])
                if check(r.returncode == 0, f"bundle {name}: resume: {r.stderr[-300:]}"):
                    more.append(log_lines(log))
            check(len(more) == 2 and [x["step"] for x in more[0]] == [steps + 1, steps + 2]
                  and more[0] == more[1], f"bundle {name}: resumed logs differ: {more}")
    if not bundle:
        return
    # options compiled into the bundle are refused, naming them
    for bad, needle in ((["--optimizer", "adamw"], "--optimizer"), (["--nesterov"], "--nesterov"),
                        (["--grad-accum", "3"], "--grad-accum"), (["--dim", "batch=4"], "--dim"),
                        (["--freeze", "0.*"], "--freeze")):
        r = shardc(["train", bundle] + data + ["--steps", "1"] + bad)
        check(r.returncode == 2 and needle in r.stderr and "compiled into the bundle" in r.stderr,
              f"bundle with {bad}: {r.returncode} {r.stderr[-300:]}")
    # the step's options without --train, or with a mesh
    r = shardc(["compile", MLP, "--loss", "mse", "-o", os.path.join(tmp, "nope")])
    check(r.returncode == 2 and "--loss needs --train" in r.stderr, f"--loss alone: {r.stderr}")
    # partitioned training bundles (compile --train --mesh): trained as
    # `train MODEL --mesh` trains, bit for bit
    mb = None
    for mesh in (["--mesh", "dp=2"], ["--mesh", "fsdp=2,tp=2"],
                 ["--mesh", "pp=2", "--microbatches", "2", "--schedule", "1f1b"]):
        graph = ["--optimizer", "adamw"]
        b = os.path.join(tmp, "mesh%d.bundle" % len(mesh))
        r = shardc(["compile", MLP, "--train", "--dim", "batch=8", "-o", b] + graph + mesh)
        if not check(r.returncode == 0 and all(os.path.exists(os.path.join(b, f)) for f in
                                               ("partition.json", "training.json", "params.bin")),
                     f"compile --train {mesh}: {r.returncode} {r.stderr[-400:]}"):
            continue
        mb = b
        logs = []
        for k, first in enumerate([[MLP, "--dim", "batch=8"] + graph + mesh, [b]]):
            log = os.path.join(tmp, "ml%d.jsonl" % k)
            r = shardc(["train"] + first + data + ["--steps", str(steps), "--log-json", log])
            if check(r.returncode == 0, f"{mesh}: train {first[0]}: {r.stderr[-400:]}"):
                logs.append(log_lines(log))
        check(len(logs) == 2 and len(logs[0]) == steps and logs[0] == logs[1],
              f"partitioned bundle {mesh}: the logs differ: {logs}")
        print(f"ok: partitioned training bundle {' '.join(mesh[1:])}: {steps} steps equal "
              f"train MODEL bit for bit")
    if mb:
        r = shardc(["train", mb] + data + ["--steps", "1", "--mesh", "dp=2"])
        check(r.returncode == 2 and "compiled into the bundle" in r.stderr,
              f"partitioned bundle with --mesh: {r.returncode} {r.stderr[-300:]}")
        r = shardc(["run", mb, "--random-inputs", "1", "--output-dir", os.path.join(tmp, "o")])
        check(r.returncode == 1 and "training bundle" in r.stderr,
              f"run a partitioned training bundle: {r.returncode} {r.stderr[-300:]}")
        blob = bytearray(open(os.path.join(mb, "params.bin"), "rb").read())
        blob[100] ^= 1
        open(os.path.join(mb, "params.bin"), "wb").write(bytes(blob))
        r = shardc(["train", mb] + data + ["--steps", "1"])
        check(r.returncode == 1 and "params.bin" in r.stderr and "corrupted" in r.stderr,
              f"a damaged params.bin: {r.returncode} {r.stderr[-300:]}")
    # an inference bundle to train, a training bundle to run
    inf = os.path.join(tmp, "inference.bundle")
    r = shardc(["compile", MLP, "--dim", "batch=8", "-o", inf])
    check(r.returncode == 0, f"compile: {r.stderr[-300:]}")
    r = shardc(["train", inf] + data + ["--steps", "1"])
    check(r.returncode == 1 and "inference bundle" in r.stderr and inf in r.stderr,
          f"train an inference bundle: {r.returncode} {r.stderr[-300:]}")
    r = shardc(["run", bundle, "--random-inputs", "1", "--output-dir", os.path.join(tmp, "o")])
    check(r.returncode == 1 and "training bundle" in r.stderr and bundle in r.stderr,
          f"run a training bundle: {r.returncode} {r.stderr[-300:]}")

    # damaged files: refused naming the file, never a crash
    def damaged(name, mutate, fix_hash, needle, base=None):
        b = os.path.join(tmp, "damaged.bundle")
        shutil.rmtree(b, ignore_errors=True)
        shutil.copytree(base or bundle, b)
        path = os.path.join(b, name)
        blob = mutate(open(path, "rb").read())
        open(path, "wb").write(blob)
        if fix_hash:
            rehash(b, name)
        r = shardc(["train", b] + data + ["--steps", "1"])
        # rehashed: the hashes agree, so the manifest's own checks refuse it
        hashes_ok = not fix_hash or ("SHA-256" not in r.stderr and "the manifest says" not in
                                     r.stderr)
        check(r.returncode == 1 and needle in r.stderr and hashes_ok,
              f"damaged {name} ({'rehashed' if fix_hash else 'hash kept'}): {r.returncode} "
              f"{r.stderr[-300:]}")
        return r

    def edit(f):  # a JSON file changed by f
        def mutate(blob):
            t = json.loads(blob)
            f(t)
            return json.dumps(t).encode()
        return mutate

    damaged("training.json", lambda b: b[: len(b) // 2], False, "training.json")
    damaged("params.bin", lambda b: b[:-1] + bytes([b[-1] ^ 1]), False, "params.bin")
    damaged("params.bin", lambda b: b[:100], False, "params.bin")
    for cut in (0, 1, 40, 200, 700):
        damaged("training.json", lambda b, c=cut: b[:c], True, "training.json")
    hostile = [
        lambda t: t["optimizer"].__setitem__("betas", [1.5, 0.9]),
        lambda t: t["optimizer"].__setitem__("kind", "lion"),
        lambda t: t["params"][0].__setitem__("offset", 2 ** 62),
        lambda t: t["params"][1].__setitem__("offset", 1),
        lambda t: t["params"][0].__setitem__("name", "nope"),
        lambda t: t["params"].append(dict(t["params"][0])),
        lambda t: t["params"][0].__setitem__("shape", [64, 128]),
        lambda t: t["data"][0].__setitem__("shape", [9, 64]),
        lambda t: t["data"].pop(),
        lambda t: t.__setitem__("precision", "fp16"),
        lambda t: t.__setitem__("grad_accum", 0),
        lambda t: t.__setitem__("grad_accum", "2"),
        lambda t: t["loss"].__setitem__("classes", -1),
        lambda t: t.__setitem__("version", 99),
        lambda t: t.pop("optimizer"),
    ]
    for h in hostile:
        damaged("training.json", edit(h), True, "training.json")
    damaged("manifest.json", lambda b: b.replace(b'"kind": "training"', b'"kind": "bogus"'),
            False, "kind")
    n_bf16 = 0
    if check(bf16_bundle is not None, "no bf16 training bundle to damage"):
        # the bf16 GEMM steps' operands: one of another dtype is refused
        def gemm_edit(key, dtype):  # the first bf16 GEMM's operand key made a `dtype` buffer
            def f(p):
                g = next(s["gemm"] for s in p["steps"] if s["kind"] == "gemm" and
                         p["buffers"][s["gemm"]["c"]]["dtype"] == "bf16")
                g[key] = next(i for i, b in enumerate(p["buffers"]) if b["dtype"] == dtype)
            return edit(f)
        for key, needle in (("a", "A: f32 operand of a GEMM on bf16"),
                            ("bias", "is f32, the GEMM bf16")):
            damaged("program.json", gemm_edit(key, "f32"), True, needle, bf16_bundle)
            n_bf16 += 1
    print(f"ok: bundle refusals ({len(hostile) + 9 + n_bf16} damaged bundles)")


def tied_model(path, w, c):
    """ids [batch, 3] -> Gather(W, ids) @ W.T + Gather(W, ids) @ C: an
    embedding whose transpose, a second initializer "W.T", is the LM head
    (how PyTorch's exporter writes GPT-2's tied weight); C constant-valued,
    with its transpose "C.T" as an unused initializer (not a tie)."""
    from onnx import helper, TensorProto
    init = [numpy_helper.from_array(a, n) for n, a in
            (("W", w), ("W.T", np.ascontiguousarray(w.T)), ("C", c),
             ("C.T", np.ascontiguousarray(c.T)))]
    nodes = [helper.make_node("Gather", ["W", "ids"], ["e"]),
             helper.make_node("MatMul", ["e", "W.T"], ["h"]),
             helper.make_node("MatMul", ["e", "C"], ["k"]),
             helper.make_node("Add", ["h", "k"], ["logits"])]
    g = helper.make_graph(nodes, "tied", [helper.make_tensor_value_info(
        "ids", TensorProto.INT64, ["batch", 3])], [helper.make_tensor_value_info(
            "logits", TensorProto.FLOAT, ["batch", 3, w.shape[0]])], init)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def tie_tests(tmp):
    """A transposed copy of a weight is trained as that weight: one SGD
    step at lr 1 moves W by the sum of both uses' gradients (computed here
    in float64), W.T is not in the checkpoint, export writes it as the
    transpose of the trained W; --untie trains them apart."""
    rng = np.random.RandomState(11)
    # W and its copies over 1 MiB each: blocks the importer owns apart, which
    # the train pass (the tied copy) and `shardc train` (W, once the trainer
    # has it) give back early (docs/training.md, Memory)
    v, dim = 53000, 5
    w = rng.uniform(-1, 1, (v, dim)).astype(np.float32)
    c = np.full((dim, v), 0.25, np.float32)
    ids = rng.randint(0, v, (2, 3)).astype(np.int64)
    lab = rng.randint(0, v, (2, 3)).astype(np.int64)
    model, idf, lf = (os.path.join(tmp, n) for n in ("tied.onnx", "tied_ids.npy", "tied_lab.npy"))
    tied_model(model, w, c)
    np.save(idf, ids)
    np.save(lf, lab)
    # float64: logits = W[ids] (W.T + C); cross-entropy's mean over 6 labels
    w64, c64 = w.astype(np.float64), c.astype(np.float64)
    e = w64[ids]
    z = e @ (w64.T + c64)
    p = np.exp(z - z.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    onehot = np.zeros_like(p)
    np.put_along_axis(onehot, lab[..., None], 1.0, axis=-1)
    dz = (p - onehot) / lab.size
    d_head = np.einsum("btd,btv->vd", e, dz)          # through W.T, transposed back
    d_embed = np.zeros_like(w64)
    np.add.at(d_embed, ids, dz @ (w64 + c64.T))       # through the Gather
    base = ["train", model, "--data", "ids=" + idf, "--labels", lf, "--dim", "batch=2",
            "--steps", "1", "--lr", "1", "--optimizer", "sgd"]

    r = shardc(["train", model, "--dim", "batch=2", "--list-params"])
    check(r.returncode == 0 and "W.T: tied to W (its transpose)" in r.stdout
          and "C.T: tied" not in r.stdout, f"--list-params of a tied model: {r.stdout}{r.stderr}")
    r = shardc(["train", model, "--dim", "batch=2", "--list-params", "--untie"])
    check(r.returncode == 0 and "tied" not in r.stdout, f"--list-params --untie: {r.stdout}")

    for untie, want in ((False, d_head + d_embed), (True, d_embed)):
        ck = os.path.join(tmp, "tied_ck%d" % untie)
        r = shardc(base + ["--save", ck] + (["--untie"] if untie else []))
        what = "--untie" if untie else "tied"
        if not check(r.returncode == 0, f"{what}: {r.stderr[-300:]}"):
            continue
        note = "note: W.T is the transpose of W" in r.stderr
        check(note != untie, f"{what}: the note on stderr: {r.stderr[-300:]}")
        from safetensors.numpy import load_file
        saved = load_file(os.path.join(ck, "weights.safetensors"))
        check(("W.T" in saved) == untie, f"{what}: the checkpoint has {sorted(saved)}")
        step = w64 - saved["W"].astype(np.float64)
        err = np.abs(step - want).max() / np.abs(want).max()
        check(err < 1e-5, f"{what}: W's step differs from the gradient by {err:.3g} of its largest")
        print(f"ok: {what}: W's step is the gradient of {'the Gather alone' if untie else 'both uses'}"
              f" (relative error {err:.1e})")
        if untie:
            continue
        out = os.path.join(tmp, "tied_trained.onnx")
        r = shardc(["export", ck, "--model", model, "-o", out])
        if not check(r.returncode == 0, f"export of a tied model: {r.stderr[-300:]}"):
            continue
        got = {t.name: numpy_helper.to_array(t) for t in onnx.load(out).graph.initializer}
        check(got["W"].tobytes() == saved["W"].tobytes() and
              got["W.T"].tobytes() == np.ascontiguousarray(saved["W"].T).tobytes(),
              "export: W.T is not the transpose of the trained W")
        import onnxruntime as ort
        ref = ort.InferenceSession(out).run(None, {"ids": ids})[0]
        r = shardc(["run", out, "--dim", "batch=2", "--input", "ids=" + idf, "--output-dir",
                    os.path.join(tmp, "tied_out"), "--quiet"])
        if check(r.returncode == 0, f"run the exported tied model: {r.stderr[-300:]}"):
            y = np.load(os.path.join(tmp, "tied_out", "logits.npy"))
            check(np.allclose(y, ref, rtol=1e-5, atol=1e-6) and not np.isnan(y).any(),
                  f"exported tied model: shardc vs onnxruntime max diff {np.abs(y - ref).max()}")
            print("ok: the exported tied model runs the same in onnxruntime and shardc")


def main():
    if not SHARDC:
        print("SHARDC is not set")
        return 1
    rng = np.random.RandomState(3)
    x = rng.uniform(-1, 1, size=(40, 64)).astype(np.float32)
    x[x == 0] = 0.5
    lab = rng.randint(0, 10, size=40).astype(np.int64)
    lab[[3, 17, 31]] = -100
    tgt = rng.uniform(-1, 1, size=(40, 10)).astype(np.float32)
    batch, steps = 8, 12
    with tempfile.TemporaryDirectory() as tmp:
        xf, lf, tf = (os.path.join(tmp, n) for n in ("x.npy", "lab.npy", "tgt.npy"))
        np.save(xf, x)
        np.save(lf, lab)
        np.save(tf, tgt)
        cases = [
            ("sgd momentum nesterov wd, ce", "ce", {"kind": "sgd", "momentum": 0.9, "nesterov": True,
                                                  "wd": 0.01}, 0.05, 0.0,
             ["--optimizer", "sgd", "--momentum", "0.9", "--nesterov", "--weight-decay", "0.01"]),
            ("sgd plain, mse", "mse", {"kind": "sgd", "momentum": 0, "nesterov": False, "wd": 0},
             0.1, 0.0, ["--optimizer", "sgd", "--loss", "mse"]),
            ("adamw, clip 0.5, ce", "ce", {"kind": "adamw", "wd": 0.01}, 3e-3, 0.5,
             ["--optimizer", "adamw", "--clip-grad-norm", "0.5"]),
            ("sgd momentum, cosine schedule with warm-up, ce", "ce",
             {"kind": "sgd", "momentum": 0.9, "nesterov": False, "wd": 0}, 0.05, 0.0,
             ["--optimizer", "sgd", "--momentum", "0.9", "--lr-schedule", "cosine",
              "--warmup-steps", "3", "--min-lr", "0.001"]),
            ("adamw, linear schedule, ce", "ce", {"kind": "adamw", "wd": 0.01}, 3e-3, 0.0,
             ["--optimizer", "adamw", "--lr-schedule", "linear"]),
            ("sgd momentum, 3 microbatches accumulated, ce", "ce",
             {"kind": "sgd", "momentum": 0.9, "nesterov": False, "wd": 0}, 0.05, 0.0,
             ["--optimizer", "sgd", "--momentum", "0.9", "--grad-accum", "3"]),
            ("adamw, bf16 matrix products, ce", "ce", {"kind": "adamw", "wd": 0.01}, 3e-3, 0.0,
             ["--optimizer", "adamw", "--precision", "bf16"]),
            ("adamw, fp16 matrix products, loss scaling, ce", "ce", {"kind": "adamw", "wd": 0.01},
             3e-3, 0.0, ["--optimizer", "adamw", "--precision", "fp16"]),
        ]
        # bf16 rounds every product's inputs to 8 bits of mantissa: its own,
        # looser tolerance (rtol 2e-2, atol 2e-3) against the fp64 reference
        loose = {6: (2e-2, 2e-3), 7: (2e-2, 2e-3)}
        fp32_losses = {}
        scheds = {3: ("cosine", 0.05, 0.001, 3), 4: ("linear", 3e-3, 0.0, 0)}
        accums = {5: 3}
        for ci, (name, loss_kind, opt, lr, clip, flags) in enumerate(cases):
            log = os.path.join(tmp, "log.jsonl")
            data = ["--data", "x=" + xf] + (["--labels", lf] if loss_kind == "ce" else
                                            ["--targets", tf])
            r = run(data + ["--dim", "batch=%d" % batch, "--steps", str(steps), "--lr", str(lr),
                            "--log-json", log, "--quiet"] + flags)
            if not check(r.returncode == 0, f"{name}: exit {r.returncode}: {r.stderr[-800:]}"):
                continue
            got = [json.loads(line) for line in open(log)]
            want = reference(x.astype(np.float64), lab, tgt.astype(np.float64), loss_kind, opt,
                             steps, batch, lr, clip, scheds.get(ci), accums.get(ci, 1))
            for gline in got:  # the logged learning rate is the schedule's
                s = scheds.get(ci)
                ref = lr_at(*s, steps, gline["step"]) if s else lr
                check(abs(gline["lr"] - ref) <= 1e-9 + 1e-6 * ref,
                      f"{name}: step {gline['step']} lr {gline['lr']} vs {ref}")
            check(len(got) == steps, f"{name}: {len(got)} log lines for {steps} steps")
            worst = 0.0
            rtol, atol = loose.get(ci, (2e-4, 1e-5))
            fp32_losses[ci] = [gline["loss"] for gline in got]
            for (wl, wn), gline in zip(want, got):
                for key, ref in (("loss", wl), ("grad_norm", wn)):
                    v = gline[key]
                    ok = v == v and abs(v - ref) <= atol + rtol * abs(ref)
                    worst = max(worst, abs(v - ref) / max(abs(ref), 1e-12))
                    check(ok, f"{name}: step {gline['step']} {key} {v} vs reference {ref}")
            print(f"ok: {name}: {steps} steps, worst relative difference {worst:.2e}")

        # the state (weights, optimizer state, gradient accumulators) lives in
        # the arena and is updated in place: every tensor of it, for plain
        # steps and with accumulation
        for flags in (["--optimizer", "adamw"], ["--optimizer", "sgd", "--momentum", "0.9",
                                                  "--grad-accum", "2"],
                      ["--optimizer", "sgd", "--momentum", "0.9", "--weight-decay", "0.1"]):
            r = run(["--data", "x=" + xf, "--labels", lf, "--dim", "batch=4", "--steps", "1"]
                    + flags)
            m = re.search(r"(\d+) of (\d+) state tensors updated in place", r.stdout)
            check(r.returncode == 0 and m and m.group(1) == m.group(2) and int(m.group(1)) >= 8,
                  f"in-place state {flags}: {r.stdout[-300:]} {r.stderr[-300:]}")
        print("ok: all training state updated in place")

        # the optimizer is one fused update per parameter: the kernel (the
        # segment of the multi-tensor kernel) that stores new:P also stores
        # P's new state (AdamW: both moments; SGD with momentum and weight
        # decay: the momentum buffer, whose stores go through registers), no
        # other kernel stores state, and AdamW's updates of all the MLP's
        # parameters (all f32) are one multi-tensor kernel (SGD's with
        # decay keep their register phases, which do not merge)
        for flags, suffixes in ((["--optimizer", "adamw"], (".exp_avg", ".exp_avg_sq")),
                                (["--optimizer", "sgd", "--momentum", "0.9",
                                  "--weight-decay", "0.1"], (".momentum_buffer",))):
            r = shardc(["compile", MLP, "--train", "-o", os.path.join(tmp, "kir-bundle"),
                        "--dim", "batch=4", "--emit=kir"] + flags)
            stores, owner = kernel_stores(r.stdout)
            params = sorted(n[4:] for ks in stores for n in ks
                            if n.startswith("new:") and not n.endswith(suffixes))
            state_kernels = [ks for ks in stores if any(n.startswith("new:") for n in ks)]
            launches = {o for ks, o in zip(stores, owner) if any(n.startswith("new:") for n in ks)}
            check(r.returncode == 0 and len(params) >= 4 and len(state_kernels) == len(params),
                  f"{flags}: {len(state_kernels)} kernels store state for {len(params)} "
                  f"parameters {r.stderr[-300:]}")
            check(flags[1] != "adamw" or len(launches) == 1,
                  f"{flags}: the updates are {len(launches)} kernels, not one")
            for ks in state_kernels:
                p = [n[4:] for n in ks if n.startswith("new:") and not n.endswith(suffixes)]
                want = {"new:" + p[0] + x for x in ("",) + suffixes} if len(p) == 1 else None
                check(want is not None and want <= ks, f"{flags}: one kernel stores {sorted(ks)}")
        print("ok: one optimizer update per parameter (AdamW: all in one multi-tensor kernel; "
              "SGD with momentum and decay)")

        # plan --train: the arena it reports is the one the trainer
        # allocates, and its classes add up to what is live at the peak
        for flags in (["--optimizer", "adamw"], ["--optimizer", "sgd", "--momentum", "0.9"]):
            common = ["--dim", "batch=4"] + flags
            pj = subprocess.run([SHARDC, "plan", MLP, "--train", "--json"] + common,
                                capture_output=True, text=True, timeout=300)
            r = run(["--data", "x=" + xf, "--labels", lf, "--steps", "1"] + common)
            m = re.search(r"memory: arena .*?\((\d+) bytes\)", r.stdout)
            if not check(pj.returncode == 0 and r.returncode == 0 and m,
                         f"plan --train {flags}: {pj.stderr[-300:]} {r.stdout[-300:]}"):
                continue
            plan = json.loads(pj.stdout)
            live = plan["live"]
            check(plan["arena"] == int(m.group(1)) and plan["arena"] > 0,
                  f"plan --train {flags}: planned {plan['arena']}, allocated {m.group(1)}")
            check(sum(live.values()) == plan["peak_live"] <= plan["arena"],
                  f"plan --train {flags}: classes {live} vs peak {plan['peak_live']}")
            want_opt = 2 if flags[1] == "adamw" else 1  # exp_avg, exp_avg_sq / momentum
            check(26122 * 4 <= live["params"] < 26122 * 4 + 64 * 6 and  # 6 tensors, 64-byte slots
                  live["optimizer state"] == want_opt * live["params"],
                  f"plan --train {flags}: params {live['params']}, optimizer "
                  f"{live['optimizer state']}")
        print("ok: plan --train: planned arena = allocated, classes add up")

        # the bf16 run really rounded: its losses are not those of the same
        # run in fp32
        log = os.path.join(tmp, "fp32.jsonl")
        r = run(["--data", "x=" + xf, "--labels", lf, "--dim", "batch=%d" % batch, "--steps",
                 str(steps), "--lr", "3e-3", "--optimizer", "adamw", "--log-json", log, "--quiet"])
        if check(r.returncode == 0 and 6 in fp32_losses, f"fp32 twin: {r.stderr[-300:]}"):
            same = [json.loads(line)["loss"] for line in open(log)]
            diff = max(abs(a - b) / abs(a) for a, b in zip(same, fp32_losses[6]))
            check(diff > 1e-6, f"bf16 losses equal fp32's (max relative difference {diff:.1e})")
            print(f"ok: bf16 differs from fp32 by up to {diff:.1e} (relative)")
        # fp16 overflow: GradScaler's answer (skip the step, halve the scale)
        log = os.path.join(tmp, "f16.jsonl")
        r = run(["--data", "x=" + xf, "--labels", lf, "--dim", "batch=8", "--steps", "24",
                 "--optimizer", "adamw", "--lr", "1e-2", "--precision", "fp16", "--loss-scale",
                 "1e8", "--log-json", log, "--quiet"])
        if check(r.returncode == 0, f"fp16 overflow run: {r.stderr[-300:]}"):
            lines = [json.loads(line) for line in open(log)]
            skipped = [ln for ln in lines if ln.get("skipped")]
            check(lines[0].get("skipped") and lines[0]["loss_scale"] == 5e7,
                  f"fp16: step 1 not skipped with the scale halved: {lines[0]}")
            check(0 < len(skipped) < len(lines), f"fp16: {len(skipped)} of {len(lines)} skipped")
            prev = 1e8
            for ln in lines:
                want = prev / 2 if ln.get("skipped") else prev
                check(ln["loss_scale"] == want, f"fp16 scale at step {ln['step']}: "
                      f"{ln['loss_scale']} (want {want})")
                prev = ln["loss_scale"]
            print(f"ok: fp16 overflow: {len(skipped)} steps skipped, scale {lines[-1]['loss_scale']}")

        # the loss falls
        log = os.path.join(tmp, "fall.jsonl")
        r = run(["--data", "x=" + xf, "--labels", lf, "--dim", "batch=8", "--steps", "60",
                 "--optimizer", "adamw", "--lr", "1e-2", "--log-json", log, "--quiet"])
        if check(r.returncode == 0, f"adamw 60 steps: {r.stderr[-500:]}"):
            losses = [json.loads(line)["loss"] for line in open(log)]
            first, last = np.mean(losses[:5]), np.mean(losses[-5:])
            check(last < 0.5 * first, f"the loss does not fall: {first:.3f} -> {last:.3f}")
            print(f"ok: loss falls {first:.3f} -> {last:.3f} over 60 steps")

        # a diverging run: stop (the default) names the step; skip keeps going
        r = run(["--data", "x=" + xf, "--labels", lf, "--dim", "batch=8", "--steps", "6",
                 "--lr", "1e30", "--quiet"])
        check(r.returncode == 1 and "step " in r.stderr and "not finite" not in r.stderr,
              f"--on-nan stop: {r.returncode} {r.stderr[-300:]}")
        log = os.path.join(tmp, "nan.jsonl")
        r = run(["--data", "x=" + xf, "--labels", lf, "--dim", "batch=8", "--steps", "6",
                 "--lr", "1e30", "--on-nan", "skip", "--log-json", log, "--quiet"])
        if check(r.returncode == 0, f"--on-nan skip: {r.returncode} {r.stderr[-300:]}"):
            lines = [json.loads(line) for line in open(log)]
            check(len(lines) == 6 and any(ln.get("skipped") for ln in lines),
                  f"--on-nan skip: no skipped step in {lines}")

        # checkpoints: 4 steps, save, resume, 4 more == 8 steps, bit for bit
        base = ["--data", "x=" + xf, "--labels", lf, "--dim", "batch=8", "--optimizer", "adamw",
                "--lr", "3e-3", "--grad-accum", "2", "--warmup-steps", "2", "--quiet"]
        da, db, db2 = (os.path.join(tmp, n) for n in ("ckA", "ckB", "ckB2"))
        la, lb = os.path.join(tmp, "la.jsonl"), os.path.join(tmp, "lb.jsonl")
        r1 = run(base + ["--steps", "8", "--save", da, "--log-json", la])
        r2 = run(base + ["--steps", "4", "--save", db])
        r3 = run(base + ["--steps", "8", "--resume", db, "--save", db2, "--log-json", lb])
        if check(r1.returncode == 0 and r2.returncode == 0 and r3.returncode == 0,
                 f"checkpoint runs: {r1.stderr[-200:]} {r2.stderr[-200:]} {r3.stderr[-200:]}"):
            for f in ("weights.safetensors", "optimizer.safetensors"):
                a, b = (open(os.path.join(d, f), "rb").read() for d in (da, db2))
                check(a == b, f"resume is not bit-exact: {f} differs")
            la_lines = [json.loads(line) for line in open(la)][4:]
            lb_lines = [json.loads(line) for line in open(lb)]
            check([x["step"] for x in lb_lines] == [5, 6, 7, 8], f"resumed steps {lb_lines}")
            check([x["loss"] for x in la_lines] == [x["loss"] for x in lb_lines],
                  "resumed losses differ from the uninterrupted run's")
            print("ok: 4 steps + resume + 4 steps == 8 steps, bit for bit")
            # export: the checkpoint's weights in a new ONNX file that
            # onnxruntime and shardc run alike
            out = os.path.join(tmp, "trained.onnx")
            r = subprocess.run([SHARDC, "export", da, "--model", MLP, "-o", out],
                               capture_output=True, text=True, timeout=120)
            if check(r.returncode == 0, f"export: {r.stderr[-300:]}"):
                from safetensors.numpy import load_file
                ck = load_file(os.path.join(da, "weights.safetensors"))
                m = onnx.load(out)
                got = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
                for name, w in ck.items():
                    check(name in got and got[name].tobytes() == w.tobytes(),
                          f"export: initializer {name} is not the checkpoint's")
                import onnxruntime as ort
                xb = x[:8]
                ref = ort.InferenceSession(out).run(None, {"x": xb})[0]
                np.save(os.path.join(tmp, "xb.npy"), xb)
                r = subprocess.run([SHARDC, "run", out, "--dim", "batch=8", "--input",
                                    "x=" + os.path.join(tmp, "xb.npy"), "--output-dir",
                                    os.path.join(tmp, "runout"), "--quiet"],
                                   capture_output=True, text=True, timeout=120)
                if check(r.returncode == 0, f"run exported: {r.stderr[-300:]}"):
                    y = np.load(os.path.join(tmp, "runout", "y.npy"))
                    check(np.allclose(y, ref, rtol=1e-4, atol=1e-5) and not np.isnan(y).any(),
                          f"exported model: shardc vs onnxruntime max diff {np.abs(y - ref).max()}")
                    print("ok: export runs the same in onnxruntime and shardc")
            # a damaged checkpoint is refused, naming the file
            w = os.path.join(db, "weights.safetensors")
            blob = bytearray(open(w, "rb").read())
            blob[-1] ^= 0x40
            open(w, "wb").write(bytes(blob))
            r = run(base + ["--steps", "8", "--resume", db])
            check(r.returncode == 1 and "weights.safetensors" in r.stderr,
                  f"damaged checkpoint: {r.returncode} {r.stderr[-300:]}")
            # another optimizer is refused
            r = run(["--data", "x=" + xf, "--labels", lf, "--dim", "batch=8", "--steps", "9",
                     "--resume", da, "--quiet"])
            check(r.returncode == 1 and "adamw" in r.stderr, f"sgd from adamw: {r.stderr[-300:]}")

        bundle_tests(tmp, xf, lf)
        tie_tests(tmp)

        # hostile or wrong inputs: usage errors (exit 2) and input errors (exit 1)
        ok_args = ["--data", "x=" + xf, "--labels", lf, "--dim", "batch=8", "--steps", "1"]
        for bad, needle in ((["--lr", "-1"], "--lr"), (["--lr", "nan"], "--lr"),
                            (["--momentum", "-0.5"], "--momentum"),
                            (["--nesterov"], "--nesterov"), (["--betas", "1.5,0.9"], "--betas"),
                            (["--grad-accum", "0"], "--grad-accum"),
                            (["--precision", "fp4"], "--precision"),
                            (["--loss", "hinge"], "--loss"), (["--optimizer", "lion"], "--optimizer"),
                            (["--save-every", "3"], "--save-every"), (["--steps", "-1"], "--steps"),
                            (["--data", "x=" + xf], "given twice"), (["--data", "bogus"], "--data")):
            r = run(ok_args + bad)
            check(r.returncode == 2 and needle in r.stderr, f"{bad}: {r.returncode} {r.stderr[-200:]}")
        fifo = os.path.join(tmp, "fifo.npy")
        os.mkfifo(fifo)
        r = run(["--data", "x=" + fifo, "--labels", lf, "--dim", "batch=8", "--steps", "1"])
        check(r.returncode == 1 and "FIFO" in r.stderr, f"FIFO data: {r.returncode} {r.stderr[-200:]}")
        l32 = os.path.join(tmp, "l32.npy")
        np.save(l32, lab.astype(np.int32))
        r = run(["--data", "x=" + xf, "--labels", l32, "--dim", "batch=8", "--steps", "1"])
        check(r.returncode == 1 and "l32.npy" in r.stderr, f"int32 labels: {r.stderr[-200:]}")
        xs = os.path.join(tmp, "xs.npy")
        np.save(xs, x[:, :32].copy())
        r = run(["--data", "x=" + xs, "--labels", lf, "--dim", "batch=8", "--steps", "1"])
        check(r.returncode == 1 and "xs.npy" in r.stderr, f"wrong data shape: {r.stderr[-200:]}")
        r = run(ok_args + ["--resume", os.path.join(tmp, "nowhere")])
        check(r.returncode == 1 and "nowhere" in r.stderr, f"missing checkpoint: {r.stderr[-200:]}")
        user = os.path.join(tmp, "userdata")
        os.mkdir(user)
        open(os.path.join(user, "notes.txt"), "w").write("keep me")
        r = run(ok_args + ["--save", user])
        check(r.returncode == 1 and os.path.exists(os.path.join(user, "notes.txt")),
              f"--save over user data: {r.returncode} {r.stderr[-200:]}")

        r = run(["--list-params", "--dim", "batch=8"])
        check(r.returncode == 0 and "0.weight" in r.stdout and "26,122 parameters" in r.stdout,
              f"--list-params: {r.stdout[-400:]} {r.stderr[-300:]}")
        bad = lab.copy()
        bad[5] = 10
        bf = os.path.join(tmp, "bad.npy")
        np.save(bf, bad)
        r = run(["--data", "x=" + xf, "--labels", bf, "--dim", "batch=8", "--steps", "3"])
        check(r.returncode == 1 and "bad.npy" in r.stderr and "label 10" in r.stderr
              and "step 1" not in r.stdout, f"bad label: {r.returncode} {r.stderr}")
        r = run(["--labels", lf, "--dim", "batch=8", "--steps", "1"])
        check(r.returncode == 2 and "--data x=" in r.stderr, f"missing data: {r.returncode} {r.stderr}")
        r = run(["--data", "x=" + xf, "--dim", "batch=8", "--steps", "1"])
        check(r.returncode == 2 and "--labels" in r.stderr, f"no labels: {r.returncode} {r.stderr}")
    if failures:
        print(f"{len(failures)} failure(s)")
        return 1
    print("all passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
