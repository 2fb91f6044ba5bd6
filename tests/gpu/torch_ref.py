#!/usr/bin/env python3
"""torch_ref.py — PyTorch's side of the training speed comparison
(tests/gpu/train_speed.py): the model of an ONNX file written by
samples/make_llama.py, as a torch module with the same weights (read from
the same external data file, at the offsets the ONNX file records), trained
on the same batches with the same optimizer, and timed as shardc's steps
are.

  python tests/gpu/torch_ref.py MODEL.onnx --ids IDS.npy --labels LABELS.npy
      --batch B --steps N [--lr X] [--variant eager|compile] [--device cuda]

The module (`build_module`) is the graph of make_llama.py written with
torch: parameters named as the ONNX initializers (the state dict's keys,
loaded strictly), every MatMul weight [in, out] used as x @ W;
attention through F.scaled_dot_product_attention(is_causal=True) (flash
attention on a GPU, where shardc's graph has the product, the causal
Where and the Softmax); GPT-2's tanh GELU as F.gelu(approximate="tanh");
Llama's RMSNorm as F.rms_norm in float32 (the residual stream is float32
under autocast, as in shardc's bf16 step); the rotary tables are
make_llama.rope_tables', applied in q's and k's dtype (bfloat16 under
autocast, feeding the attention without a cast). The loss is F.cross_entropy over float32 logits.

A step, as shardc train's step: the batch (rows (i-1)·B … i·B-1 of the
data, wrapping) copied to the device, the forward under
torch.autocast(bfloat16) and the loss, backward, torch.optim.AdamW
(fused=True, PyTorch's defaults: betas 0.9, 0.999, eps 1e-8, weight
decay 0.01 — shardc's --optimizer adamw), zero_grad, the loss read back
(loss.item()) and torch.cuda.synchronize(); its wall time from the host
(time.perf_counter) from before the copy to after the synchronisation.
`--variant compile` runs the same step function through torch.compile
(its first steps include the compile).

Output: one JSON line a step on stdout, flushed ({"step", "loss",
"time_ms"}), so that a run cut short (a compile past its time budget)
still reports what it did; then {"done": true, "max_memory_allocated",
"max_memory_reserved", "torch", "device", "variant"}.

Importing this file needs numpy only: torch is imported by the functions
that use it (tests/gpu/test_train_speed.py import-checks it where torch is
not installed).
"""
import argparse
import json
import math
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(SRC, "samples"))

import make_llama  # noqa: E402  (numpy only at import)


def batch_rows(step, batch, n_rows):
    """The data rows of step `step` (1-based): shardc train's (i-1)·B … i·B-1
    modulo the rows."""
    return [((step - 1) * batch + j) % n_rows for j in range(batch)]


def build_module(c):
    """The torch module of a make_llama.py config, parameters on the CPU,
    uninitialised (load_state_dict fills them)."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    def param(*shape):
        return nn.Parameter(torch.empty(*shape))

    class Lin(nn.Module):   # x @ W (+ b), W [in, out] as in the ONNX graph
        def __init__(self, n_in, n_out, bias):
            super().__init__()
            self.weight = param(n_in, n_out)
            self.bias = param(n_out) if bias else None

        def forward(self, x):
            y = x @ self.weight
            return y + self.bias if self.bias is not None else y

    class Vec(nn.Module):   # an embedding table, or a norm's weight (and bias)
        def __init__(self, *shape, bias=False):
            super().__init__()
            self.weight = param(*shape)
            self.bias = param(shape[-1]) if bias else None

    def heads(x, h):        # [B, S, d] -> [B, H, S, d/H]
        b, s, d = x.shape
        return x.view(b, s, h, d // h).transpose(1, 2)

    def merge(x):           # [B, H, S, hd] -> [B, S, H·hd]
        b, h, s, hd = x.shape
        return x.transpose(1, 2).reshape(b, s, h * hd)

    if c["family"] == "gpt2":
        d, H = c["n_embd"], c["n_head"]

        class Attn(nn.Module):
            def __init__(self):
                super().__init__()
                self.c_attn, self.c_proj = Lin(d, 3 * d, True), Lin(d, d, True)

            def forward(self, x):
                q, k, v = self.c_attn(x).split(d, dim=2)
                y = F.scaled_dot_product_attention(heads(q, H), heads(k, H), heads(v, H),
                                                   is_causal=True)
                return self.c_proj(merge(y))

        class Mlp(nn.Module):
            def __init__(self):
                super().__init__()
                self.c_fc, self.c_proj = Lin(d, 4 * d, True), Lin(4 * d, d, True)

            def forward(self, x):
                return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))

        class Block(nn.Module):
            def __init__(self):
                super().__init__()
                self.ln_1, self.attn = Vec(d, bias=True), Attn()
                self.ln_2, self.mlp = Vec(d, bias=True), Mlp()

            def forward(self, x):
                x = x + self.attn(F.layer_norm(x, (d,), self.ln_1.weight, self.ln_1.bias, 1e-5))
                return x + self.mlp(F.layer_norm(x, (d,), self.ln_2.weight, self.ln_2.bias,
                                                 1e-5))

        class Body(nn.Module):
            def __init__(self):
                super().__init__()
                self.wte, self.wpe = Vec(c["vocab"], d), Vec(c["n_positions"], d)
                self.h = nn.ModuleList(Block() for _ in range(c["n_layer"]))
                self.ln_f = Vec(d, bias=True)

        class Gpt2(nn.Module):
            def __init__(self):
                super().__init__()
                self.transformer = Body()

            def forward(self, ids):
                t = self.transformer
                x = F.embedding(ids, t.wte.weight) + t.wpe.weight[:ids.shape[1]]
                for blk in t.h:
                    x = blk(x)
                x = F.layer_norm(x, (d,), t.ln_f.weight, t.ln_f.bias, 1e-5)
                return x @ t.wte.weight.t()     # the tied head
        return Gpt2()

    d, H, f, eps = c["d"], c["n_head"], c["ffn"], c["eps"]
    cos, sin = (torch.from_numpy(t) for t in make_llama.rope_tables(c))

    def rmsnorm(x, w):
        x = x.float()
        if hasattr(F, "rms_norm"):
            return F.rms_norm(x, (d,), w, eps)
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w

    def rotate(x, cs, sn):  # x·cos + rotate_half(x)·sin, in x's dtype
        x1, x2 = x.chunk(2, dim=-1)
        return x * cs.to(x.dtype) + torch.cat((-x2, x1), dim=-1) * sn.to(x.dtype)

    class Attn(nn.Module):
        def __init__(self):
            super().__init__()
            self.q_proj, self.k_proj = Lin(d, d, False), Lin(d, d, False)
            self.v_proj, self.o_proj = Lin(d, d, False), Lin(d, d, False)

        def forward(self, x, cs, sn):
            q = rotate(heads(self.q_proj(x), H), cs, sn)
            k = rotate(heads(self.k_proj(x), H), cs, sn)
            y = F.scaled_dot_product_attention(q, k, heads(self.v_proj(x), H), is_causal=True)
            return self.o_proj(merge(y))

    class Mlp(nn.Module):
        def __init__(self):
            super().__init__()
            self.gate_proj, self.up_proj = Lin(d, f, False), Lin(d, f, False)
            self.down_proj = Lin(f, d, False)

        def forward(self, x):
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.input_layernorm, self.self_attn = Vec(d), Attn()
            self.post_attention_layernorm, self.mlp = Vec(d), Mlp()

        def forward(self, x, cs, sn):
            x = x + self.self_attn(rmsnorm(x, self.input_layernorm.weight), cs, sn)
            return x + self.mlp(rmsnorm(x, self.post_attention_layernorm.weight))

    class Body(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed_tokens = Vec(c["vocab"], d)
            self.layers = nn.ModuleList(Layer() for _ in range(c["n_layer"]))
            self.norm = Vec(d)

    class Llama(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = Body()
            self.lm_head = Lin(d, c["vocab"], False)
            self.register_buffer("rope_cos", cos, persistent=False)
            self.register_buffer("rope_sin", sin, persistent=False)

        def forward(self, ids):
            m = self.model
            x = F.embedding(ids, m.embed_tokens.weight)
            for layer in m.layers:
                x = layer(x, self.rope_cos, self.rope_sin)
            return self.lm_head(rmsnorm(x, m.norm.weight))
    return Llama()


def load_module(onnx_path):
    """(config, module) with the weights of the ONNX file's external data."""
    import torch
    c = make_llama.read_config(onnx_path)
    mod = build_module(c)
    w = make_llama.load_weights(onnx_path)
    mod.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in w.items()}, strict=True)
    return c, mod


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--ids", required=True)
    ap.add_argument("--labels", required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--variant", choices=("eager", "compile"), default="eager")
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args()

    import numpy as np
    import torch
    import torch.nn.functional as F
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    c, model = load_module(a.model)
    model.to(dev)
    ids = torch.from_numpy(np.load(a.ids))
    labels = torch.from_numpy(np.load(a.labels))
    V = c["vocab"]
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=0.01, fused=cuda)

    def fwd_loss(x, y):
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            logits = model(x)
        return F.cross_entropy(logits.float().reshape(-1, V), y.reshape(-1))
    step_loss = torch.compile(fwd_loss) if a.variant == "compile" else fwd_loss

    def sync():
        if cuda:
            torch.cuda.synchronize()
    for step in range(1, a.steps + 1):
        rows = torch.tensor(batch_rows(step, a.batch, ids.shape[0]))
        x, y = ids[rows], labels[rows]
        sync()
        t0 = time.perf_counter()
        loss = step_loss(x.to(dev), y.to(dev))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        value = loss.item()
        sync()
        ms = (time.perf_counter() - t0) * 1e3
        print(json.dumps({"step": step, "loss": value if math.isfinite(value) else None,
                          "time_ms": ms}), flush=True)
    done = {"done": True, "variant": a.variant, "torch": torch.__version__,
            "device": torch.cuda.get_device_name(dev) if cuda else "cpu",
            "max_memory_allocated": torch.cuda.max_memory_allocated(dev) if cuda else None,
            "max_memory_reserved": torch.cuda.max_memory_reserved(dev) if cuda else None}
    print(json.dumps(done), flush=True)


if __name__ == "__main__":
    main()
