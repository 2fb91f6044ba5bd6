"""test_param_init.py — delayed parameter initialisation (`shardc train
--init`, runtime/param_init.c): each rank writes only its own pieces, and the
values are the same for any mesh.

  - GPT-2 sample, the same --init rules and --seed on one rank, fsdp=2,
    fsdp=2 x tp=2, pp=2 and dp=2 x fsdp=2 x tp=2 (thread-ranks): the initial
    state (`--steps 0 --save`, put together from the sharded checkpoint
    independently of shardc) is bit-identical to one rank's, tensor by tensor,
    and 2 steps give losses within rtol 2e-5 of one rank's (the tolerance of
    test_train_dist.py: both sides sum in fp32 in different orders);
  - the values follow the rules: ones and zeros where the globs say, the
    first matching rule wins (the biases' rule comes before the catch-all),
    normal:0.02 elsewhere; --init-residual-scale: the residual projections
    (attention c_proj, MLP c_proj; GPT-2 has 2 layers) at std 0.02/sqrt(4),
    the others at 0.02 (each std within 5 standard errors); the model's own
    values are gone; a parameter no rule matches keeps the model's value;
  - fans: uniform, xavier and kaiming (--steps 0) give one rank's state bit
    for bit at fsdp=2 x tp=2, fsdp=2 x cp=2, dp=2 x cp=2 and pp=2, each
    tensor with its fans' spread, the tied embedding over fan-in 64 (its
    last axis, from the lookup and from every form of the LM head);
  - errors: an unknown initialiser, a bad glob, xavier on a vector, --seed
    without --init, a shape-only model (--no-weights) with a parameter no rule matches (named);
  - memory: a shape-only GPT (d 384, 8 layers, vocabulary 8192: 17.4M
    parameters, no weight file) trains 2 steps at fsdp=8 with
    --init '*=normal:0.02' --optimizer adamw; its peak RSS (os.wait4) must be
    below 0.40 of 8 ranks x the whole training state (fp32 weights, gradients
    and AdamW's two moments: 16 bytes a parameter), which eight whole copies
    would need, and within 192 MiB of the 8 ranks' arenas (what the memory
    plan holds: the shards, activations, gathered parameters), so that no
    rank holds model-sized memory beside its plan (762 MiB measured against
    8 x 80 MiB of arenas, 0.36 of the eight copies, 2026-12-06; 856 MiB and
    8 x 88 MiB before the tied embedding's gradient was reduce-scattered in
    two parts and the compiler's freed heap returned before the ranks
    start). bench/bench_param_init.py measures a 350M model.
  - a gather along the columns in row chunks: a shape-only GPT whose
    vocabulary (4,097) does not divide by 2 and whose gathered embedding
    (16.0 MiB) exceeds the scratch's cap (SC_COMM_SCRATCH_CAP_BYTES): at
    fsdp=2 both gathers of the embedding, and both reduce-scatters of its
    tied gradient's parts (a pack of 16.0 MiB), go in chunks of 4,096 rows
    (the program's steps), and 2 AdamW steps' losses are within rtol 2e-5
    of one rank's; on the emulated GPU (NCCL's path: one pack or unpack and
    one collective a chunk), where this shardc has a cuda target, the first loss
    equals the CPU's at fsdp=2 within rtol 2e-5 (--no-allow-tf32).
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "samples"))
from checks import check, finish, has_cuda_target, skip_part  # noqa: E402
from test_train_dist import load_ckpt  # noqa: E402

SHARDC = os.environ.get("SHARDC")
SRC = os.environ.get("SC_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
GPT2 = os.path.join(SRC, "samples", "gpt2.onnx")
RULES = ["--init", "*ln_*.weight=ones", "--init", "*ln_f.weight=ones", "--init",
         "*.bias=zeros", "--init", "*=normal:0.02", "--seed", "1234", "--init-residual-scale"]
MESHES = [[], ["--mesh", "fsdp=2"], ["--mesh", "fsdp=2,tp=2"],
          ["--mesh", "pp=2", "--microbatches", "2", "--schedule", "1f1b"],
          ["--mesh", "dp=2,fsdp=2,tp=2"]]


# the fans' meshes: each form the tied LM head takes (a transB Gemm; beside
# dp or fsdp under cp a MatMul of a Transpose; a pipeline's handed-over copy)
FAN_MESHES = [[], ["--mesh", "fsdp=2,tp=2"], ["--mesh", "fsdp=2,cp=2"], ["--mesh", "dp=2,cp=2"],
              ["--mesh", "pp=2", "--microbatches", "2", "--schedule", "1f1b"]]


def train(args, timeout=600):
    return subprocess.run([SHARDC, "train"] + args, capture_output=True, text=True,
                          timeout=timeout)


def peak_rss(args, tmp):
    """Runs shardc train; (exit status, stdout, stderr, peak RSS in bytes of
    that process, from os.wait4)."""
    out, err = os.path.join(tmp, "rss.out"), os.path.join(tmp, "rss.err")
    with open(out, "w") as fo, open(err, "w") as fe:
        p = subprocess.Popen([SHARDC, "train"] + args, stdout=fo, stderr=fe)
        _, status, ru = os.wait4(p.pid, 0)
    return os.waitstatus_to_exitcode(status), open(out).read(), open(err).read(), \
        ru.ru_maxrss * 1024


def initial_state(ck, args, mesh, ref):
    """(what, the weights) of `train GPT2 ARGS MESH --steps 0 --save CK`,
    checked bit-identical to ref's when ref is given; (what, None) when
    the run failed."""
    what = " ".join(mesh) or "one rank"
    p = train([GPT2] + args + mesh + ["--steps", "0", "--save", ck])
    if not check(p.returncode == 0, f"{what}: --steps 0 --save failed: {p.stderr}"):
        return what, None
    w = load_ckpt(ck, "weights")
    if ref is not None:
        diff = [n for n in ref if n not in w or w[n].tobytes() != ref[n].tobytes()]
        check(sorted(w) == sorted(ref) and not diff,
              f"{what}: initial weights not bit-identical to one rank's: {diff[:4]}")
    return what, w


def fans(tmp, data):
    """uniform, xavier and kaiming on GPT-2 (--steps 0): the initial state is
    one rank's bit for bit on every mesh, cp's included (beside a batch
    split cp makes the tied LM head's transB Gemm a MatMul of the
    embedding's Transpose; a pipeline hands the head a copy), and each
    tensor has its fans' spread: the tied embedding [1000, 64] kaiming over
    fan-in 64 (an embedding is PyTorch's [num, dim]: before, the meshes
    that change the head's form gave it fan-in 1000, std 0.045 against
    0.177), c_attn [64, 192] xavier U(-a, a) with a = sqrt(6 / 256), the
    MLP's [64, 256] and [256, 64] (MatMul's [in, out]) kaiming over fan-in
    64 and 256, wpe uniform:0.1 (each std within 5 standard errors)."""
    rules = ["--init", "*ln_*.weight=ones", "--init", "*ln_f.weight=ones", "--init",
             "*.bias=zeros", "--init", "*wpe*=uniform:0.1", "--init", "*attn*=xavier",
             "--init", "*=kaiming", "--seed", "7"]
    ref = None
    for k, mesh in enumerate(FAN_MESHES):
        what, w = initial_state(os.path.join(tmp, f"fans{k}"), data + rules, mesh, ref)
        ref = w if ref is None else ref
    if ref is None:
        return
    a = np.sqrt(6 / (64 + 192))
    want = {"wte.weight": (np.sqrt(2 / 64), None), "wpe.weight": (0.1 / np.sqrt(3), 0.1),
            "attn.c_attn.weight": (a / np.sqrt(3), a),
            "attn.c_proj.weight": (np.sqrt(6 / 128) / np.sqrt(3), np.sqrt(6 / 128)),
            "mlp.c_fc.weight": (np.sqrt(2 / 64), None),
            "mlp.c_proj.weight": (np.sqrt(2 / 256), None)}
    seen = 0
    for name, x in ref.items():
        for suffix, (std, bound) in want.items():
            if not name.endswith(suffix):
                continue
            seen += 1
            x64 = x.astype(np.float64)
            n = x64.size
            check(abs(x64.std() - std) < 5 * std / np.sqrt(2 * n)
                  and abs(x64.mean()) < 5 * std / np.sqrt(n)
                  and (bound is None or np.abs(x64).max() <= bound),
                  f"fans: {name} {x.shape}: mean {x64.mean():.3g} std {x64.std():.4g}, "
                  f"expected 0 and {std:.4g}" + (f", |x| <= {bound:.4g}" if bound else ""))
    check(seen == 10, f"fans: {seen} tensors checked, want 10")
    print(f"fans: {len(FAN_MESHES) - 1} meshes bit-identical to one rank; the tied embedding "
          f"std {ref['transformer.wte.weight'].std():.4f} (kaiming over fan-in 64: "
          f"{np.sqrt(2 / 64):.4f})")


def main():
    if not SHARDC:
        print("SHARDC is not set")
        return 1
    tmp = tempfile.mkdtemp(prefix="sc_param_init_")
    rng = np.random.default_rng(7)
    ids, lab = os.path.join(tmp, "ids.npy"), os.path.join(tmp, "lab.npy")
    np.save(ids, rng.integers(0, 1000, (4, 16)).astype(np.int64))
    np.save(lab, rng.integers(0, 1000, (4, 16)).astype(np.int64))
    data = ["--dim", "batch=4", "--data", f"input_ids={ids}", "--labels", lab, "--quiet"]

    # the initial state and 2 steps on each mesh
    ref_w, ref_log = None, None
    for k, mesh in enumerate(MESHES):
        what, w = initial_state(os.path.join(tmp, f"init{k}"), data + RULES, mesh, ref_w)
        if w is None:
            continue
        log = os.path.join(tmp, f"log{k}.json")
        p = train([GPT2] + data + RULES + mesh + ["--steps", "2", "--log-json", log])
        if not check(p.returncode == 0, f"{what}: 2 steps failed: {p.stderr}"):
            continue
        losses = [json.loads(line)["loss"] for line in open(log)]
        check(len(losses) == 2 and all(x is not None and np.isfinite(x) for x in losses),
              f"{what}: losses {losses}")
        if ref_w is None:
            ref_w, ref_log = w, losses
            continue
        for a, b in zip(ref_log, losses):
            check(abs(a - b) <= 2e-5 * abs(a), f"{what}: loss {b} vs one rank's {a}")

    # the rules' values (one rank's state)
    if ref_w is not None:
        model = load_ckpt_model()
        for name, x in ref_w.items():
            x64 = x.astype(np.float64)
            if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
                check((x == 1).all(), f"{name}: not ones")
            elif name.endswith(".bias"):
                check((x == 0).all(), f"{name}: not zeros (the first matching rule wins)")
            else:
                std = 0.02 / 2 if name.endswith("c_proj.weight") else 0.02  # sqrt(2 * 2)
                n = x.size
                check(abs(x64.mean()) < 5 * std / np.sqrt(n) and
                      abs(x64.std() - std) < 5 * std / np.sqrt(2 * n),
                      f"{name}: mean {x64.mean():.3g} std {x64.std():.4g}, expected 0 and {std}")
                check(not np.array_equal(x, model[name]), f"{name}: still the model's value")

    # the fans do not depend on the mesh: uniform, xavier and kaiming
    fans(tmp, data)

    # a parameter no rule matches keeps the model's value
    ck = os.path.join(tmp, "partial")
    p = train([GPT2] + data + ["--init", "*.bias=zeros", "--mesh", "fsdp=2", "--steps", "0",
                               "--save", ck])
    if check(p.returncode == 0, f"--init '*.bias=zeros' failed: {p.stderr}"):
        w, model = load_ckpt(ck, "weights"), load_ckpt_model()
        kept = [n for n in w if not n.endswith(".bias") and np.array_equal(w[n], model[n])]
        check(len(kept) == len([n for n in w if not n.endswith(".bias")]) and kept,
              "parameters without a rule do not keep the model's values")

    # errors
    for args, needle in [(["--init", "gaussian:1"], "unknown initialiser 'gaussian'"),
                         (["--init", "*.w[=zeros"], "bad name pattern"),
                         (["--init", "xavier"], "xavier needs a tensor of rank 2"),
                         (["--seed", "3"], "--seed goes with --init rules")]:
        p = train([GPT2] + data + args + ["--steps", "1"])
        check(p.returncode != 0 and needle in p.stderr,
              f"{' '.join(args)}: expected an error with '{needle}', got {p.returncode}: "
              f"{p.stderr.strip()}")

    # memory: a shape-only GPT at fsdp=8, initialised on the ranks
    from make_samples import build_gpt2_graph
    import onnx
    d, layers, vocab, seq = 384, 8, 8192, 64
    model, _ = build_gpt2_graph(dict(vocab=vocab, n_positions=seq, n_embd=d, n_head=d // 64,
                                     n_layer=layers, seq=seq), external="absent.weights")
    path = os.path.join(tmp, "gpt_shapes.onnx")
    onnx.save(model, path)
    ids8, lab8 = os.path.join(tmp, "ids8.npy"), os.path.join(tmp, "lab8.npy")
    np.save(ids8, rng.integers(0, vocab, (8, seq)).astype(np.int64))
    np.save(lab8, rng.integers(0, vocab, (8, seq)).astype(np.int64))
    p = train([path, "--no-weights", "--init", "*.weight=normal:0.02", "--dim", "batch=8",
               "--data", f"input_ids={ids8}", "--labels", lab8, "--steps", "1"])
    needle = "parameter 'transformer.h.0.ln_1.bias' has no value in the model"
    check(p.returncode != 0 and needle in p.stderr,
          f"a shape-only model with a parameter no rule matches: {p.stderr.strip()}")
    rc, out, err, rss = peak_rss([path, "--no-weights", "--init", "*=normal:0.02", "--dim",
                                  "batch=8", "--data", f"input_ids={ids8}", "--labels", lab8,
                                  "--steps", "2", "--mesh", "fsdp=8", "--optimizer", "adamw"], tmp)
    if check(rc == 0, f"shape-only GPT at fsdp=8: {err}"):
        m = re.search(r"training (\d+) parameters", out)
        params = int(m.group(1)) if m else 0
        state = 16 * params
        print(f"shape-only GPT, {params} parameters, fsdp=8: peak RSS {rss / 2**20:.0f} MiB; "
              f"the training state {state / 2**20:.0f} MiB whole, 8 x {state / 2**20:.0f} = "
              f"{8 * state / 2**20:.0f} MiB if every rank held it")
        check(params > 15_000_000, f"the shape-only GPT has {params} parameters")
        if os.environ.get("SHARDC_SANITIZE", "OFF").upper() in ("ON", "1", "TRUE", "YES"):
            print("peak RSS not checked: under AddressSanitizer resident sizes are its shadow "
                  "memory's and quarantine's (1315 MiB measured, against 738 without)")
        else:
            check(0 < rss < 0.40 * 8 * state, f"peak RSS {rss} not below 0.40 of 8 x {state}")
            m = re.search(r"memory: arena [^(]*\((\d+) bytes\)", out)
            arena = int(m.group(1)) if m else 0
            check(0 < arena and rss < 8 * arena + 192 * 2**20,
                  f"peak RSS {rss} more than 192 MiB above the 8 ranks' arenas of {arena} bytes")
    chunked_gather(tmp, rng)
    shutil.rmtree(tmp, ignore_errors=True)
    return finish()


def chunked_gather(tmp, rng):
    """The module docstring's "gather along the columns in row chunks"."""
    from make_samples import build_gpt2_graph
    import onnx
    vocab, seq = 4097, 8
    model, _ = build_gpt2_graph(dict(vocab=vocab, n_positions=seq, n_embd=1024, n_head=16,
                                     n_layer=1, seq=seq), external="absent.weights")
    path = os.path.join(tmp, "gpt_cols.onnx")
    onnx.save(model, path)
    ids, lab = os.path.join(tmp, "ids_cols.npy"), os.path.join(tmp, "lab_cols.npy")
    np.save(ids, rng.integers(0, vocab, (4, seq)).astype(np.int64))
    np.save(lab, rng.integers(0, vocab, (4, seq)).astype(np.int64))
    args = [path, "--no-weights", "--init", "*=normal:0.02", "--seed", "5", "--dim", "batch=4",
            "--data", f"input_ids={ids}", "--labels", lab, "--optimizer", "adamw", "--quiet",
            "--no-allow-tf32"]
    p = subprocess.run([SHARDC, "plan", path, "--train", "--no-weights", "--dim", "batch=4",
                        "--mesh", "fsdp=2", "--print-after=program"], capture_output=True,
                       text=True, timeout=600)
    for kind, what in (("all_gather", "gathers"), ("reduce_scatter", "reduce-scatters")):
        chunked = [ln for ln in p.stderr.splitlines() if kind in ln and "by 4096 rows" in ln]
        check(p.returncode == 0 and len(chunked) == 2,
              f"fsdp=2: {len(chunked)} {what} of the embedding in chunks of 4096 rows, want 2 "
              f"({p.stderr[-400:]})")
    losses = {}
    for what, extra, steps in (("one rank", [], 2), ("fsdp=2", ["--mesh", "fsdp=2"], 2),
                               ("fsdp=2 on the emulated GPU",
                                ["--mesh", "fsdp=2", "--device", "cuda"], 1)):
        if "--device" in extra and not has_cuda_target(SHARDC):
            skip_part(what, "this shardc has no cuda target (no NVRTC)")
            continue
        log = os.path.join(tmp, f"cols{len(losses)}.json")
        p = subprocess.run([SHARDC, "train"] + args + extra + ["--steps", str(steps),
                                                               "--log-json", log],
                           capture_output=True, text=True, timeout=600,
                           env=dict(os.environ, SHARDC_CUDA_EMU="1"))
        if not check(p.returncode == 0, f"columns gathered in chunks, {what}: {p.stderr[-600:]}"):
            return
        losses[what] = [json.loads(line)["loss"] for line in open(log)]
        check(len(losses[what]) == steps and all(x is not None and np.isfinite(x)
                                                 for x in losses[what]),
              f"columns gathered in chunks, {what}: losses {losses[what]}")
    ref = losses.get("one rank", [])
    for what, got in losses.items():
        for a, b in zip(ref if "GPU" not in what else losses.get("fsdp=2", []), got):
            check(abs(a - b) <= 2e-5 * abs(a),
                  f"columns gathered in chunks, {what}: loss {b} vs {a}")
    print(f"columns gathered in chunks of 4096 rows: {losses}")


_model = {}


def load_ckpt_model():
    """The GPT-2 sample's own initializers, by name."""
    if not _model:
        import onnx
        from onnx import numpy_helper
        for t in onnx.load(GPT2).graph.initializer:
            _model[t.name] = numpy_helper.to_array(t)
    return _model


if __name__ == "__main__":
    sys.exit(main())
