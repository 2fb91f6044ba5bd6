"""test_train_speed.py — the pieces of run-all's train-speed section that
run without a GPU (ctest gpu.test_train_speed, about 30 s):

  1. tests/gpu/torch_ref.py, train_speed.py, run_all.py and
     samples/make_llama.py compile (py_compile), and torch_ref imports
     where torch cannot be imported (torch is loaded only by the functions
     that need it);
  2. the tiny configs of both generated models (gpt2-tiny, llama-tiny):
     onnx.checker passes on the files with their external data; the config
     in the file's metadata is the generator's; make_llama.load_weights
     (what torch_ref trains from) reads every initializer equal to onnx's
     own external-data loader; norms' weights are 1, biases 0, the rest
     N(0, 0.02) (sample std within 10 %);
  3. the Llama graph means what torch_ref.py computes: a numpy forward
     written as torch_ref's (RMSNorm, the rotary tables rotating the two
     halves, causal softmax attention, SwiGLU, the head) against
     onnxruntime on llama-tiny, within 1e-4 of the largest logit; where
     torch is installed, torch_ref's module itself (float32, no autocast)
     against onnxruntime on both tiny models, within 1e-4 (else said
     skipped);
  4. shardc: `plan --train` of each tiny config, and `train` of each for
     2 steps on the CPU with the section's options (bf16, AdamW, lr 3e-4)
     on one batch seen twice: both losses finite, the first within 0.1 of
     log(vocab) (N(0, 0.02) weights give near-uniform logits: 6.2383 for
     512), the second below the first;
  5. the real sizes planned without their weights (`plan --train
     --no-weights`, h200:1x1): gpt2-small at batch 8 and llama-1p3b at
     batch 4 with --recompute none and selective fit an H200's memory, and
     so does the llama-1p3b's fp8 row (--precision fp8, no recompute), all
     169 of its linear layers in FP8 (7 a block and the LM head), none left
     bf16, the amax history 1024;
     the parameter counts (124,439,808 and 1,364,297,728) and the FLOP
     count's matrix-product weights (123,532,032 and 1,298,661,376,
     counted by hand from the shapes) are the documented ones.
"""
import json
import math
import os
import py_compile
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(SRC, "samples"))
sys.path.insert(0, HERE)
SHARDC = os.environ.get("SHARDC", os.path.join(SRC, "build", "shardc"))
H200_BYTES = 150754820096   # samples/clusters/h200.json gpu.memory_bytes

failures = []


def check(ok, what):
    print(("ok: " if ok else "FAIL: ") + what, flush=True)
    if not ok:
        failures.append(what)


def part1(tmp):
    for f in ("tests/gpu/torch_ref.py", "tests/gpu/train_speed.py", "tests/gpu/run_all.py",
              "samples/make_llama.py"):
        py_compile.compile(os.path.join(SRC, f), doraise=True,
                           cfile=os.path.join(tmp, os.path.basename(f) + "c"))
    check(True, "py_compile of torch_ref.py, train_speed.py, run_all.py, make_llama.py")
    r = subprocess.run([sys.executable, "-c", "import sys; sys.modules['torch'] = None; "
                        f"sys.path.insert(0, {HERE!r}); import torch_ref, train_speed; "
                        "print(torch_ref.batch_rows(3, 4, 10))"],
                       capture_output=True, text=True)
    # step 3 of batch 4 over 10 rows: rows 8, 9, then 0, 1 (shardc's wrap)
    check(r.returncode == 0 and r.stdout.strip() == "[8, 9, 0, 1]",
          f"torch_ref imports without torch; step 3's rows {r.stdout.strip()} {r.stderr[-300:]}")


def part2(tmp):
    import numpy as np
    import onnx
    import make_llama
    paths = {}
    for name in ("gpt2-tiny", "llama-tiny"):
        path = make_llama.write_model(name, tmp, seed=0)
        paths[name] = path
        onnx.checker.check_model(path, full_check=True)
        check(make_llama.read_config(path) == make_llama.MODELS[name],
              f"{name}: the config in the metadata")
        mine = make_llama.load_weights(path)
        theirs = {t.name: onnx.numpy_helper.to_array(t)
                  for t in onnx.load(path).graph.initializer}
        same = set(mine) == set(theirs) and all(np.array_equal(mine[k], theirs[k])
                                                for k in theirs)
        check(same, f"{name}: load_weights equals onnx's loader on {len(theirs)} tensors")
        bad = []
        for k, v in mine.items():
            if k.endswith("norm.weight") or k.endswith(("ln_1.weight", "ln_2.weight",
                                                        "ln_f.weight")):
                good = bool(np.all(v == 1))
            elif k.endswith(".bias"):
                good = bool(np.all(v == 0))
            else:
                good = abs(float(np.std(v)) - 0.02) < 0.002 and abs(float(np.mean(v))) < 0.002
            if not good:
                bad.append(k)
        check(not bad, f"{name}: initial values (norms 1, biases 0, N(0, 0.02)) {bad[:3]}")
    return paths


def llama_numpy(c, w, ids):
    """llama-tiny's logits as torch_ref.py computes them, in numpy (float64)."""
    import numpy as np
    import make_llama
    d, H, eps = c["d"], c["n_head"], c["eps"]
    hd = d // H
    cos, sin = (t.astype(np.float64) for t in make_llama.rope_tables(c))
    W = {k: np.asarray(v, np.float64) for k, v in w.items()}

    def rms(x, g):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * g

    def heads(x):
        b, s, _ = x.shape
        return x.reshape(b, s, H, hd).transpose(0, 2, 1, 3)

    def rot(x):
        x1, x2 = x[..., :hd // 2], x[..., hd // 2:]
        return x * cos + np.concatenate([-x2, x1], -1) * sin

    S = ids.shape[1]
    causal = np.tril(np.ones((S, S), bool))
    x = W["model.embed_tokens.weight"][ids]
    for i in range(c["n_layer"]):
        p = f"model.layers.{i}."
        a = rms(x, W[p + "input_layernorm.weight"])
        q = rot(heads(a @ W[p + "self_attn.q_proj.weight"]))
        k = rot(heads(a @ W[p + "self_attn.k_proj.weight"]))
        v = heads(a @ W[p + "self_attn.v_proj.weight"])
        s = np.where(causal, q @ k.transpose(0, 1, 3, 2) / math.sqrt(hd), -np.inf)
        s = np.exp(s - s.max(-1, keepdims=True))
        y = (s / s.sum(-1, keepdims=True)) @ v
        y = y.transpose(0, 2, 1, 3).reshape(x.shape)
        x = x + y @ W[p + "self_attn.o_proj.weight"]
        m = rms(x, W[p + "post_attention_layernorm.weight"])
        g = m @ W[p + "mlp.gate_proj.weight"]
        x = x + (g / (1 + np.exp(-g)) * (m @ W[p + "mlp.up_proj.weight"])) @ \
            W[p + "mlp.down_proj.weight"]
    return rms(x, W["model.norm.weight"]) @ W["lm_head.weight"]


def part3(paths):
    import numpy as np
    import onnxruntime as ort
    import make_llama
    ids = np.random.default_rng(3).integers(0, 512, (2, 32), dtype=np.int64)

    def ort_logits(path):
        s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        return s.run(None, {"input_ids": ids})[0]
    path = paths["llama-tiny"]
    want = ort_logits(path)
    got = llama_numpy(make_llama.read_config(path), make_llama.load_weights(path), ids)
    err = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
    check(err <= 1e-4 and not np.isnan(want).any(),
          f"llama-tiny: the numpy forward (torch_ref's math) against onnxruntime: {err:.2e}")
    try:
        import torch
    except ImportError:
        print("skipped: torch_ref's module against onnxruntime (torch is not installed here)")
        return
    import torch_ref
    for name, path in paths.items():
        _, mod = torch_ref.load_module(path)
        with torch.no_grad():
            got = mod(torch.from_numpy(ids)).numpy()
        want = ort_logits(path)
        err = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
        check(err <= 1e-4, f"{name}: torch_ref's module against onnxruntime: {err:.2e}")


def part4(paths, tmp):
    import numpy as np
    for name, path in paths.items():
        c = json.loads(json.dumps(__import__("make_llama").read_config(path)))
        B = 2
        t = np.random.default_rng(5).integers(0, c["vocab"], (B, c["seq"] + 1), dtype=np.int64)
        ids, labels = os.path.join(tmp, name + ".ids.npy"), os.path.join(tmp, name + ".lab.npy")
        np.save(ids, t[:, :-1])
        np.save(labels, t[:, 1:])
        opts = ["--dim", f"batch={B}", "--optimizer", "adamw", "--precision", "bf16"]
        r = subprocess.run([SHARDC, "plan", path, "--train", "--json"] + opts,
                           capture_output=True, text=True, timeout=300)
        check(r.returncode == 0 and json.loads(r.stdout)["parameters"] > 0,
              f"{name}: shardc plan --train ({r.stderr.strip()[-200:]})")
        log = os.path.join(tmp, name + ".log.jsonl")
        r = subprocess.run([SHARDC, "train", path, "--data", f"input_ids={ids}", "--labels",
                            labels, "--steps", "2", "--lr", "3e-4", "--log-json", log,
                            "--quiet"] + opts, capture_output=True, text=True, timeout=300)
        losses = [json.loads(ln)["loss"] for ln in open(log)] if r.returncode == 0 else []
        finite = len(losses) == 2 and all(x is not None and math.isfinite(x) for x in losses)
        logv = math.log(c["vocab"])
        check(finite and abs(losses[0] - logv) <= 0.1 and losses[1] < losses[0],
              f"{name}: shardc train, 2 steps on one batch: losses {losses}, log(vocab) "
              f"{logv:.4f} {r.stderr.strip()[-300:]}")


def part5(tmp):
    import make_llama
    want_params = {"gpt2-small": 124439808, "llama-1p3b": 1364297728}
    want_mm = {"gpt2-small": 12 * 12 * 768 ** 2 + 768 * 50257,
               "llama-1p3b": 24 * (4 * 2048 ** 2 + 3 * 2048 * 5632) + 2048 * 32000}
    for name, batch, recomputes in (("gpt2-small", 8, ("none",)),
                                    ("llama-1p3b", 4, ("none", "selective", "fp8"))):
        c = make_llama.MODELS[name]
        n = sum(math.prod(s) for _, s in make_llama.param_shapes(c))
        flops, n_mm = make_llama.model_flops(c, batch * c["seq"])
        d = c.get("d", c.get("n_embd"))
        check(n == want_params[name] and n_mm == want_mm[name] and
              flops == 6 * n_mm * batch * c["seq"] + 12 * c["n_layer"] * d * c["seq"] ** 2 * batch,
              f"{name}: {n:,} parameters, {n_mm:,} in matrix products, {flops:.4g} FLOP a step")
        path = make_llama.write_model(name, tmp, weights=False)
        for rc in recomputes:
            # the fp8 row: --precision fp8 without recompute (train_speed.LLAMA_RUNS)
            prec, rc = ("fp8", "none") if rc == "fp8" else ("bf16", rc)
            r = subprocess.run([SHARDC, "plan", path, "--no-weights", "--train", "--dim",
                                f"batch={batch}", "--optimizer", "adamw", "--precision", prec,
                                "--recompute", rc, "--mesh", "dp=1", "--cluster", "h200:1x1",
                                "--json"], capture_output=True, text=True, timeout=600)
            j = json.loads(r.stdout) if r.returncode == 0 else {}
            total = j.get("total")
            check(total is not None and 0 < total < H200_BYTES,
                  f"{name}, {prec}, recompute {rc}: the step planned at {total} bytes, under an "
                  f"H200's {H200_BYTES} {r.stderr.strip()[-200:]}")
            if prec == "fp8":  # every linear layer in FP8: 7 a block and the LM head
                want = {"history": 1024, "layers": 7 * c["n_layer"] + 1, "kept": 0, "bf16": []}
                check(j.get("fp8") == want, f"{name}, fp8: {j.get('fp8')}, want {want}")


def main():
    if not os.path.exists(SHARDC):
        print(f"SKIPPED: no shardc at {SHARDC}")
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        part1(tmp)
        paths = part2(tmp)
        part3(paths)
        part4(paths, tmp)
        part5(tmp)
    print(f"{len(failures)} failed" if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
