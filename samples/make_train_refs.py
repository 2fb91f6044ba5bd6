#!/usr/bin/env python3
"""PyTorch references for `shardc train` on the samples (tests/models/train_refs).

Run from the repository root with the samples virtual environment, after
make_samples.py (the `samples` target of the Makefile does both):

    .venv-samples/bin/python samples/make_train_refs.py [--only mlp,gpt2]

For each torch sample, the committed ONNX file's initializers are loaded into
a PyTorch computation of the same model: the sample's own torch module (the
same transformers config) with its state_dict set from the initializers
(NAME.T transposed back; gpt2's transformer.wte.weight.T, the export's copy
of the tied LM head, is no parameter: shardc ties it to transformer.wte.weight,
docs/training.md#tied-weights), or for resnet, whose convolutions the export folded
with their BatchNorm, the same network written with torch.nn.functional over
exactly the ONNX initializers. Its forward must equal onnxruntime's on the
reference data within 1e-4, or nothing is written.

Each case then trains N steps on seeded random data (step i takes examples
(i-1)*B .. i*B-1, as `shardc train` does) with torch.optim, in fp32 or, for
mlp's bf16 case, with every Gemm rounded to bf16 where shardc's
--precision bf16 casts (bf16_linear), and records, as small .npy files:

    <sample>/sample.json       model, batch, loss, the data files
    <sample>/<input>.npy       the data; labels.npy (cross-entropy) or targets.npy (mse)
    <sample>/<case>/case.json  the `shardc train` options; which weights are stored;
                               the tied copies (no parameters: not in the checkpoint)
    <sample>/<case>/loss.npy   float64 [N]: the loss of every step (before its update)
    <sample>/<case>/grad_norm.npy  float64 [N]: the global gradient norm (before clipping)
    <sample>/<case>/lr.npy         float64 [N]: the learning rate of every step
    <sample>/<case>/weights.npy    float32: the final value of the stored elements
    <sample>/<case>/weight_index.npy  int32: their flat indices, tensor by tensor
    <sample>/<case>/delta_norm.npy    float64: ||final - initial|| of every whole tensor
    <sample>/<case>/grad_max.npy      float32: the stored elements' largest |gradient| over the steps
    <sample>/<case>/state.S.npy       float32: the stored elements' final optimizer state S
                                      (momentum_buffer; exp_avg, exp_avg_sq)
    <sample>/<case>/loss_fp32.npy     bf16 cases: the losses of the same run in fp32

The weights are those of shardc's parameters, by ONNX initializer name, in
the ONNX layout. Stored elements per tensor: the 16 with the largest update
and 48 more at random (all of a tensor with at most 64).

Nothing is downloaded; one torch thread; every random number from fixed seeds.
"""

import argparse
import json
import os
import shutil
import sys

import numpy as np
import onnx
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.path.join(ROOT, "tests", "models", "train_refs")
sys.path.insert(0, HERE)
import make_samples as ms  # noqa: E402
sys.path.insert(0, os.path.join(ROOT, "tests", "models"))
from test_train import lr_at as schedule_lr  # noqa: E402

STEPS = 5
BATCH = 2
TOP, RANDOM = 16, 48     # stored elements per tensor
# A gradient element at most NOISE times the largest global gradient norm at
# every step is rounding noise of an exact zero (attention key biases:
# softmax ignores a shift shared by all keys). Measured: key biases 1e-11 of
# the norm, every other tensor's largest element above 1e-5.
NOISE = 1e-8

# sample -> case -> the `shardc train` options, which the torch run follows
SGD = ["--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9"]
ADAMW = ["--optimizer", "adamw"]          # torch.optim.AdamW's defaults
CASES = {
    "mlp": {
        "sgd": SGD + ["--nesterov", "--weight-decay", "0.01"],
        "adamw": ADAMW,
        "sgd_bf16": SGD + ["--precision", "bf16"],
    },
    "resnet": {"sgd": SGD + ["--weight-decay", "0.01"], "adamw": ADAMW},
    "gpt2": {
        "sgd": SGD,
        "adamw": ADAMW,
        "adamw_clip_cosine": ["--optimizer", "adamw", "--lr", "0.003", "--clip-grad-norm", "1",
                              "--lr-schedule", "cosine", "--warmup-steps", "2",
                              "--min-lr", "0.0003"],
    },
    "bert": {"sgd": SGD, "adamw": ADAMW},
    "llama": {"sgd": SGD, "adamw": ADAMW},
    "vit": {"sgd": SGD, "adamw": ADAMW},
    # the load-balancing loss added at Mixtral's router_aux_loss_coef
    "moe": {"sgd": SGD + ["--aux-loss", "aux_loss=0.02"],
            "adamw": ADAMW + ["--aux-loss", "aux_loss=0.02"]},
}
# the data's seed of each sample
SEED = {"bert": 1000, "gpt2": 1001, "llama": 1002, "mlp": 1003, "resnet": 1004, "vit": 1005,
        "moe": 1006}


def _torch():
    import torch
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    return torch


# --------------------------------------------------------------------------
# data (numpy RandomState, one seed per sample)
# --------------------------------------------------------------------------

def make_data(name, n):
    """Model inputs, labels or targets for n examples: integer tokens in
    [0, 1000), images uniform in [-1, 1) (never zero), class labels; gpt2 has
    some labels equal to the ignore index, bert some padded positions."""
    r = np.random.RandomState(SEED[name])
    if name in ("mlp",):
        data = {"x": r.uniform(-1, 1, (n, 64)).astype(np.float32)}
    elif name in ("resnet", "vit"):
        key = "x" if name == "resnet" else "pixel_values"
        data = {key: r.uniform(-1, 1, (n, 3, 32, 32)).astype(np.float32)}
    else:
        data = {"input_ids": r.randint(0, ms.VOCAB, (n, ms.SEQ)).astype(np.int64)}
    if name == "bert":
        mask = np.ones((n, ms.SEQ), np.int64)
        for i in range(n):
            pad = r.randint(0, 6)
            if pad:
                mask[i, -pad:] = 0
        data["attention_mask"] = mask
        return data, "targets", r.uniform(-1, 1, (n, 64)).astype(np.float32)
    classes = 10 if name in ("mlp", "resnet", "vit") else ms.VOCAB
    shape = (n,) if classes == 10 else (n, ms.SEQ)
    labels = r.randint(0, classes, shape).astype(np.int64)
    if name == "gpt2":
        labels[r.uniform(size=shape) < 0.2] = -100
    return data, "labels", labels


# --------------------------------------------------------------------------
# the torch computations
# --------------------------------------------------------------------------

class Ref:
    """A torch computation of one sample whose parameters are exactly the
    ONNX initializers: params[onnx_name] = (tensor, transposed)."""

    def __init__(self, forward, params, module=None, tied=None):
        self.forward, self.params, self.module = forward, params, module
        self.tied = tied or {}   # the exporter's copy of a tied weight -> its source
        self.aux = {}            # the model's scalar outputs of the last forward, by name

    def onnx_value(self, name):
        t, transposed = self.params[name]
        a = t.detach().numpy()
        return np.ascontiguousarray(a.T if transposed else a)


def module_ref(module, inits, forward, tied=None):
    """Set module's state_dict from the initializers (NAME, or NAME.T
    transposed back) and freeze any float tensor that is no initializer
    (there must be none). tied maps an initializer that is the exporter's
    copy of a tied weight to its source: it must be exactly the source's
    transpose, and is no parameter (shardc trains it as the source)."""
    torch = _torch()
    tied = tied or {}
    sd = dict(module.named_parameters())
    params = {}
    for copy, source in tied.items():
        assert np.array_equal(inits[copy], inits[source].T), "%s is not %s.T" % (copy, source)
    for name, a in inits.items():
        if name in tied:
            continue
        key, tr = name, False
        if key not in sd and key.endswith(".T"):
            key, tr = key[:-2], True
        assert key in sd, "%s: no torch parameter %s" % (name, key)
        with torch.no_grad():
            sd[key].copy_(torch.from_numpy(a.T.copy() if tr else a))
        params[name] = (sd.pop(key), tr)
    assert not sd, "torch parameters that are no ONNX initializer: %s" % sorted(sd)
    return Ref(forward, params, module, tied)


def ref_mlp(inits):
    m = ms.mlp_module().eval()
    return module_ref(m, inits, lambda d: m(d["x"]))


def ref_gpt2(inits):
    from transformers import GPT2LMHeadModel
    # The natural, tied model: the export holds the LM head (lm_head.weight,
    # which is transformer.wte.weight) as a second initializer, its
    # transpose transformer.wte.weight.T, which shardc ties back.
    m = ms.hf_model(GPT2LMHeadModel, ms.gpt2_tiny_config()).eval()
    return module_ref(m, inits, lambda d: m(input_ids=d["input_ids"], use_cache=False).logits,
                      tied={"transformer.wte.weight.T": "transformer.wte.weight"})


def ref_llama(inits):
    from transformers import LlamaForCausalLM
    m = ms.hf_model(LlamaForCausalLM, ms.llama_tiny_config()).eval()
    return module_ref(m, inits, lambda d: m(input_ids=d["input_ids"], use_cache=False).logits)


def ref_bert(inits):
    from transformers import BertModel
    m = ms.hf_model(BertModel, ms.bert_tiny_config()).eval()
    return module_ref(m, inits, lambda d: m(input_ids=d["input_ids"],
                                            attention_mask=d["attention_mask"]).pooler_output)


def ref_vit(inits):
    from transformers import ViTForImageClassification
    m = ms.hf_model(ViTForImageClassification, ms.vit_tiny_config()).eval()
    return module_ref(m, inits, lambda d: m(pixel_values=d["pixel_values"]).logits)


def ref_resnet(inits):
    """make_samples' ResNet as exported: every Conv+BN folded into one Conv
    with a bias (PATH.weight.folded, PATH.bias.folded), the final BatchNorm in
    inference form (its running statistics are no parameters)."""
    torch = _torch()
    F = torch.nn.functional
    p = {k: torch.from_numpy(v.copy()) for k, v in inits.items()}
    stats = ("bn_final.running_mean", "bn_final.running_var")
    params = {k: (t.requires_grad_(), False) for k, t in p.items() if k not in stats}

    def conv(x, path, stride=1, pad=1):
        return F.conv2d(x, p[path + ".weight.folded"], p[path + ".bias.folded"], stride, pad)

    def block(x, path, stride):
        idt = x if stride == 1 else conv(x, path + ".down.0", stride, 0)
        y = F.relu(conv(x, path + ".conv1", stride))
        return F.relu(conv(y, path + ".conv2") + idt)

    def forward(d):
        x = F.max_pool2d(F.relu(conv(d["x"], "conv1")), 2)
        x = block(block(block(x, "layer1", 1), "layer2", 2), "layer3", 2)
        x = F.relu(F.batch_norm(x, p[stats[0]], p[stats[1]], p["bn_final.weight"],
                                p["bn_final.bias"], training=False, eps=1e-5))
        x = torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)
        return F.linear(x, p["fc.weight"], p["fc.bias"])

    return Ref(forward, params)


def ref_moe(inits):
    """The moe sample's own module; forward gives the logits and keeps the
    model's load-balancing loss (its second output) in ref.aux["aux_loss"]."""
    m = ms.moe_module().eval()
    ref = module_ref(m, inits, None)

    def forward(d):
        logits, ref.aux["aux_loss"] = m(d["input_ids"])
        return logits
    ref.forward = forward
    return ref


REFS = {"mlp": ref_mlp, "resnet": ref_resnet, "gpt2": ref_gpt2, "bert": ref_bert,
        "llama": ref_llama, "vit": ref_vit, "moe": ref_moe}


def bf16_linear():
    """shardc's --precision bf16 for a Gemm (passes/train.c to_low_precision):
    every input cast to bf16, the product rounded to bf16 and cast back; in
    the backward the incoming gradient is cast to bf16 (the Cast's rule) and
    each gradient product (and the bias gradient's ReduceSum) is bf16."""
    torch = _torch()

    def bf(t):
        return t.to(torch.bfloat16).to(torch.float32)

    class Linear(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w, b):
            xb, wb = bf(x), bf(w)
            ctx.save_for_backward(xb, wb)
            return bf(xb @ wb.T + bf(b))

        @staticmethod
        def backward(ctx, gy):
            xb, wb = ctx.saved_tensors
            g = bf(gy)
            return bf(g @ wb), bf(g.T @ xb), bf(g.sum(0))

    return Linear.apply


def ref_mlp_bf16(inits):
    """The MLP with every Linear as shardc's bf16 Gemm."""
    torch = _torch()
    ref = ref_mlp(inits)
    lin = bf16_linear()
    layers = [mod for mod in ref.module if isinstance(mod, torch.nn.Linear)]

    def forward(d):
        x = d["x"]
        for i, mod in enumerate(layers):
            x = lin(x, mod.weight, mod.bias)
            if i + 1 < len(layers):
                x = torch.relu(x)
        return x

    return Ref(forward, ref.params, ref.module, ref.tied)


# --------------------------------------------------------------------------
# training
# --------------------------------------------------------------------------

def opt_value(opts, flag, default=None):
    return opts[opts.index(flag) + 1] if flag in opts else default


def lr_at(opts, step):
    """The learning rate of a step as runtime/trainer.c sc_lr_at computes it
    (test_train.py's copy of the formula): linear warm-up from 0 over W
    steps, then cosine or linear decay to --min-lr at --steps."""
    return float(schedule_lr(opt_value(opts, "--lr-schedule", "constant"),
                             float(opt_value(opts, "--lr", "0.001")),
                             float(opt_value(opts, "--min-lr", "0")),
                             int(opt_value(opts, "--warmup-steps", "0")), STEPS, step))


def make_optimizer(opts, params):
    torch = _torch()
    lr = float(opt_value(opts, "--lr", "0.001"))
    if opt_value(opts, "--optimizer") == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=float(opt_value(opts, "--momentum", "0")),
                               nesterov="--nesterov" in opts,
                               weight_decay=float(opt_value(opts, "--weight-decay", "0")))
    assert "--betas" not in opts and "--eps" not in opts
    return torch.optim.AdamW(params, lr=lr, weight_decay=float(opt_value(opts, "--weight-decay",
                                                                         "0.01")))


def aux_losses(opts):
    """(name, coefficient) of every --aux-loss NAME=COEF, in order."""
    return [(opts[i + 1].split("=")[0], float(opts[i + 1].split("=")[1]))
            for i, o in enumerate(opts) if o == "--aux-loss"]


def batch(data, step, torch):
    s = slice((step - 1) * BATCH, step * BATCH)
    return {k: torch.from_numpy(v[s].copy()) for k, v in data.items()}


def train(ref, data, kind, target, opts):
    """STEPS steps of torch training; returns the losses, the gradient norms
    and the learning rates of the steps, and each parameter's largest
    |gradient| over the steps and final optimizer state (by ONNX name, in
    the ONNX layout)."""
    torch = _torch()
    F = torch.nn.functional
    params = [t for t, _ in ref.params.values()]
    opt = make_optimizer(opts, params)
    clip = float(opt_value(opts, "--clip-grad-norm", "0"))
    losses, norms, lrs = [], [], []
    gmax = {k: torch.zeros_like(t) for k, (t, _) in ref.params.items()}
    for step in range(1, STEPS + 1):
        lrs.append(lr_at(opts, step))
        for group in opt.param_groups:
            group["lr"] = lrs[-1]
        opt.zero_grad(set_to_none=True)
        y = ref.forward(batch(data, step, torch))
        t = torch.from_numpy(target[(step - 1) * BATCH:step * BATCH].copy())
        if kind == "labels":
            loss = F.cross_entropy(y.reshape(-1, y.shape[-1]), t.reshape(-1), ignore_index=-100)
        else:
            loss = F.mse_loss(y, t)
        for name, coef in aux_losses(opts):   # --aux-loss NAME=COEF
            loss = loss + coef * ref.aux[name]
        loss.backward()
        grads = [q.grad for q in params if q.grad is not None]
        for k, (q, _) in ref.params.items():
            if q.grad is not None:
                torch.maximum(gmax[k], q.grad.abs(), out=gmax[k])
        if clip > 0:
            norm = torch.nn.utils.clip_grad_norm_(params, clip)
        else:
            norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
        losses.append(float(loss))
        norms.append(float(norm))
        opt.step()
    def onnx_layout(k, t):
        return np.ascontiguousarray((t.T if ref.params[k][1] else t).detach().numpy())
    state = {k: {s: onnx_layout(k, v) for s, v in opt.state[t].items() if s != "step"}
             for k, (t, _) in ref.params.items()}
    return (np.array(losses), np.array(norms), np.array(lrs),
            {k: onnx_layout(k, g) for k, g in gmax.items()}, state)


def check_forward(ref, path, data, torch):
    """The torch computation must equal onnxruntime on the first batch."""
    import onnxruntime as ort
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    feeds = {k: v[:BATCH] for k, v in data.items()}
    with torch.no_grad():
        want = ref.forward(batch(data, 1, torch)).numpy()
    outs = [o.name for o in sess.get_outputs()]
    got = sess.run(None, feeds)
    diff = min(float(np.abs(g - want).max()) if g.shape == want.shape else np.inf for g in got)
    i = [float(np.abs(g - want).max()) if g.shape == want.shape else np.inf for g in got].index(diff)
    print("  torch vs onnxruntime (%s): max |diff| %.3g" % (outs[i], diff))
    if not diff < 1e-4:
        sys.exit("%s: the torch reference does not compute the ONNX model" % path)
    for name, v in ref.aux.items():     # the model's scalar outputs (aux losses) too
        d = abs(float(got[outs.index(name)]) - float(v))
        print("  torch vs onnxruntime (%s): |diff| %.3g" % (name, d))
        if not d < 1e-5:
            sys.exit("%s: the torch reference's %s is not the ONNX model's" % (path, name))
    return outs[i]


def stored_indices(delta, r):
    """Flat indices kept of one tensor: the TOP largest |update|, RANDOM more."""
    n = delta.size
    if n <= TOP + RANDOM:
        return np.arange(n, dtype=np.int32)
    top = np.argsort(-np.abs(delta).reshape(-1), kind="stable")[:TOP]
    rest = np.setdiff1d(np.arange(n), top)
    return np.sort(np.concatenate([top, r.choice(rest, RANDOM, replace=False)])).astype(np.int32)


def make_sample(name, out):
    torch = _torch()
    path = os.path.join(HERE, name + ".onnx")
    m = onnx.load(path)
    inits = {t.name: numpy_helper.to_array(t).copy() for t in m.graph.initializer
             if t.data_type == onnx.TensorProto.FLOAT}
    data, kind, target = make_data(name, STEPS * BATCH)
    sdir = os.path.join(out, name)
    shutil.rmtree(sdir, ignore_errors=True)
    os.makedirs(sdir)
    ref = REFS[name](inits)
    logits = check_forward(ref, path, data, torch)
    meta = {"model": "samples/%s.onnx" % name, "batch": BATCH, "steps": STEPS,
            "loss": "cross-entropy" if kind == "labels" else "mse",
            kind: kind + ".npy", "data": {k: k + ".npy" for k in data}}
    if len(m.graph.output) > 1:
        meta["logits"] = logits
    for k, v in data.items():
        np.save(os.path.join(sdir, k + ".npy"), v)
    np.save(os.path.join(sdir, kind + ".npy"), target)
    with open(os.path.join(sdir, "sample.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    for case, opts in CASES[name].items():
        make = ref_mlp_bf16 if "bf16" in opts else REFS[name]
        ref = make(inits)
        run = train(ref, data, kind, target, opts)
        cdir = os.path.join(sdir, case)
        os.makedirs(cdir)
        write_case(cdir, ref, inits, opts, run)
        if "bf16" in opts:   # the same run in fp32: the test sees that bf16 really rounds
            fp32 = train(REFS[name](inits), data, kind, target, opts[:opts.index("--precision")])
            np.save(os.path.join(cdir, "loss_fp32.npy"), fp32[0])
            print("  %s: fp32 losses differ by %.3g relative" % (case, np.abs(fp32[0] / run[0] - 1).max()))
        print("  %s: loss %s, grad norm %.4g .. %.4g"
              % (case, " ".join("%.5f" % x for x in run[0]), run[1][0], run[1][-1]), flush=True)


def write_case(cdir, ref, inits, opts, run):
    """The files of one case (module docstring) from train()'s results."""
    losses, norms, lrs, gmax, state = run
    assert np.isfinite(losses).all() and np.isfinite(norms).all(), (cdir, losses)
    r = np.random.RandomState(7)
    idx, vals, gvals, dnorm, tensors = [], [], [], [], []
    svals = {s: [] for s in state[next(iter(state))]}
    for pname in sorted(ref.params):
        final = ref.onnx_value(pname)
        delta = final.astype(np.float64) - inits[pname]
        k = stored_indices(delta, r)
        idx.append(k)
        vals.append(final.reshape(-1)[k])
        gvals.append(gmax[pname].reshape(-1)[k])
        for sname, v in svals.items():
            v.append(state[pname][sname].reshape(-1)[k])
        dnorm.append(np.linalg.norm(delta))
        tensors.append({"name": pname, "count": int(k.size), "grad_max": float(gmax[pname].max())})
    arrays = {"loss": losses, "grad_norm": norms, "lr": lrs, "delta_norm": np.array(dnorm),
              "weight_index": np.concatenate(idx),
              "weights": np.concatenate(vals).astype(np.float32),
              "grad_max": np.concatenate(gvals).astype(np.float32)}
    arrays.update({"state." + s: np.concatenate(v).astype(np.float32) for s, v in svals.items()})
    for f, a in arrays.items():
        np.save(os.path.join(cdir, f + ".npy"), a)
    spec = {"options": opts, "zero_grad_below": float(NOISE * norms.max()), "tensors": tensors}
    if ref.tied:
        spec["tied"] = ref.tied
    with open(os.path.join(cdir, "case.json"), "w") as f:
        json.dump(spec, f, indent=1)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="", help="comma-separated sample names")
    ap.add_argument("--out", default=OUT)
    a = ap.parse_args()
    names = [s for s in a.only.split(",") if s] or list(CASES)
    for s in names:
        if s not in CASES:
            sys.exit("unknown sample %r (have: %s)" % (s, ", ".join(CASES)))
    import warnings
    warnings.filterwarnings("ignore")
    for s in names:
        print("references for %s" % s, flush=True)
        make_sample(s, a.out)


if __name__ == "__main__":
    main()
