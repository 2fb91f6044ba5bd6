#!/usr/bin/env python3
"""Regenerate the sample ONNX models in samples/.

Run from the repository root with the samples virtual environment:

    samples/install-torch.sh                    # once: creates .venv-samples
    .venv-samples/bin/python samples/make_samples.py

Nothing is downloaded: every model is built from a small config object with
random weights drawn from a fixed seed, so a rerun with the pinned toolchain in
samples/requirements.txt gives the same files.

Torch models (mlp, resnet, gpt2, bert, llama, vit, vit_pool, moe) are exported with the classic
TorchScript exporter (dynamo=False), opset 17, with a symbolic "batch" dimension.

gpt_1p5b.onnx is a GPT-2 XL sized graph (48 layers, 1.56e9 parameters) built
directly with onnx.helper, op for op like the GPT-2 export; its initializers are
external data in gpt_1p5b.weights, a file that is NOT committed (the graph only
records location/offset/length). The same generator is checked at a tiny
config with real weights against transformers' GPT2LMHeadModel in onnxruntime.

Options:
    --only NAME[,NAME...]   build only these samples
    --out DIR               write to DIR instead of samples/
    --no-sanity             skip the tiny-config check of the gpt_1p5b generator
"""

import argparse
import contextlib
import inspect
import math
import os
import re
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper

HERE = os.path.dirname(os.path.abspath(__file__))
OPSET = 17
SEQ = 16          # fixed sequence length of the small transformer samples
VOCAB = 1000


# --------------------------------------------------------------------------
# torch exports
# --------------------------------------------------------------------------

def _torch():
    import torch
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    return torch


def _rename_initializers(m, model):
    """Give the exporter's constant-folded initializers (onnx::MatMul_123, ...)
    the names of the torch tensors they came from, so every weight in a sample
    can be traced to its state_dict key:
      NAME    a tensor identical to state_dict()[NAME]
      NAME.T  the transpose of state_dict()[NAME] (nn.Linear weights under MatMul;
              for GPT-2, transformer.wte.weight.T is the tied lm_head)
      PATH.weight.folded / PATH.bias.folded  Conv weights with BatchNorm folded in
    The "m." prefix of the export wrappers is dropped as well."""
    sd = {k[2:] if k.startswith("m.") else k: v.detach().cpu().numpy()
          for k, v in model.state_dict().items()}
    same, trans = {}, {}
    for k, v in sd.items():
        if v.dtype == np.float32:
            same.setdefault((v.shape, v.tobytes()), k)
            if v.ndim == 2:
                trans.setdefault((v.T.shape, np.ascontiguousarray(v.T).tobytes()), k + ".T")
    consumers = {}
    for n in m.graph.node:
        for i, x in enumerate(n.input):
            consumers.setdefault(x, (n, i))
    used = {t.name for t in m.graph.initializer}
    ren = {}
    for t in m.graph.initializer:
        new = t.name[2:] if t.name.startswith("m.") else t.name
        if t.name.startswith("onnx::"):
            a = onnx.numpy_helper.to_array(t)
            key = (a.shape, np.ascontiguousarray(a).tobytes())
            new = same.get(key) or trans.get(key)
            if new is None or new in used:
                n, i = consumers[t.name]
                parts = []      # "/layer2/down/down.0/Conv" -> layer2.down.0
                for x in n.name.split("/")[:-1]:
                    if parts and x.startswith(parts[-1] + "."):
                        parts.pop()
                    if x and not (x == "m" and not parts):
                        parts.append(x)
                path = ".".join(parts)
                role = {1: "weight", 2: "bias"}.get(i, "input%d" % i)
                new = "%s.%s.folded" % (path, role)
        if new != t.name:
            assert new not in used, new
            used.add(new)
            ren[t.name] = new
            t.name = new
    for n in m.graph.node:
        for i, x in enumerate(n.input):
            if x in ren:
                n.input[i] = ren[x]
    for vi in list(m.graph.input) + list(m.graph.value_info):
        if vi.name in ren:
            vi.name = ren[vi.name]


def perturb(model, seed):
    """Add seeded noise to every parameter, as if after some training.

    Fresh transformers models have all LayerNorm weights 1 and all biases 0;
    the exporter would then merge equal initializers into one tensor shared by
    every layer (a fake weight tying). Tied parameters stay tied."""
    torch = _torch()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.02 * torch.randn(p.shape, generator=g))


def compare_with_onnxruntime(model, args, path, input_names):
    """The exported file must compute what the torch model computes, at batch
    1 and 3 (the example used for tracing had batch 2)."""
    torch = _torch()
    try:
        import onnxruntime as ort
    except ImportError:
        print("  (onnxruntime not installed: export not compared)")
        return
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    g = torch.Generator().manual_seed(99)
    worst = 0.0
    for b in (1, 3):
        feeds = []
        for name, a in zip(input_names, args):
            shape = (b,) + tuple(a.shape[1:])
            if a.dtype.is_floating_point:
                feeds.append(torch.randn(shape, generator=g))
            elif "mask" in name:     # last 4 positions of row 0 are padding
                mask = torch.ones(shape, dtype=a.dtype)
                mask[0, -4:] = 0
                feeds.append(mask)
            else:
                feeds.append(torch.randint(0, VOCAB, shape, generator=g, dtype=a.dtype))
        with torch.no_grad():
            want = model(*feeds)
        want = want if isinstance(want, (tuple, list)) else (want,)
        got = sess.run(None, {n: f.numpy() for n, f in zip(input_names, feeds)})
        for w, o in zip(want, got):
            assert tuple(w.shape) == o.shape, (path, w.shape, o.shape)
            worst = max(worst, float(np.abs(w.numpy() - o).max()))
    print("  onnxruntime vs torch at batch 1 and 3: max |diff| = %.3g" % worst)
    if not worst < 1e-4:
        sys.exit("%s: exported model does not match torch" % path)


def export(model, args, path, input_names, output_names, batch_axes=None,
           opset=OPSET, dynamo=False):
    """Export `model` with the TorchScript exporter (or, with dynamo=True, the
    torch.export-based one), at `opset` (17 unless told), symbolic batch."""
    torch = _torch()
    model.eval()
    with torch.no_grad():
        example = model(*args)
    example = example if isinstance(example, (tuple, list)) else (example,)
    if batch_axes is None:
        batch_axes = {n: {0: "batch"} for n in input_names + output_names}
    kwargs = dict(
        input_names=input_names,
        output_names=output_names,
        dynamic_axes=batch_axes,
        opset_version=opset,
    )
    if "dynamo" in inspect.signature(torch.onnx.export).parameters:
        kwargs["dynamo"] = dynamo
    elif dynamo:
        sys.exit("this torch has no dynamo exporter")
    if dynamo:
        # torch.export's batch dimension (dynamic_axes is converted to it);
        # the weights are embedded in the file like the other samples'.
        kwargs["external_data"] = False
    with torch.no_grad():
        torch.onnx.export(model, args, path, **kwargs)
    m = onnx.load(path)
    if dynamo:
        # torch.export names the batch dimension after its symbol (s72):
        # call it "batch", as the other samples do (it is the only one).
        syms = {d.dim_param for vi in m.graph.input
                for d in vi.type.tensor_type.shape.dim if d.HasField("dim_param")}
        assert len(syms) == 1, syms
        sym = re.compile(r"\b%s\b" % re.escape(syms.pop()))
        for vi in list(m.graph.input) + list(m.graph.output) + list(m.graph.value_info):
            for d in vi.type.tensor_type.shape.dim:
                if d.HasField("dim_param"):
                    d.dim_param = sym.sub("batch", d.dim_param)
        # Reproducible files: no stack traces (they hold source paths).
        for n in m.graph.node:
            keep = [p for p in n.metadata_props if p.key != "pkg.torch.onnx.stack_trace"]
            del n.metadata_props[:]
            n.metadata_props.extend(keep)
    else:               # the new exporter names initializers after the
        _rename_initializers(m, model)   # state_dict already
    # Only the batch is symbolic: pin the other output dims (the exporter
    # names them e.g. MatMullogits_dim_1) to the example's sizes.
    for vi, t in zip(m.graph.output, example):
        for j, d in enumerate(vi.type.tensor_type.shape.dim):
            if j > 0 and d.HasField("dim_param"):
                d.dim_value = t.shape[j]
    # Reproducible files: no exporter doc strings (they hold source paths).
    for n in m.graph.node:
        n.doc_string = ""
    m.doc_string = ""
    onnx.checker.check_model(m)
    for init in m.graph.initializer:
        assert init.data_location != TensorProto.EXTERNAL, path
    onnx.save(m, path)
    compare_with_onnxruntime(model, args, path, input_names)
    nparams = sum(p.numel() for p in model.parameters())
    print("  torch parameters %d, ONNX initializer elements %d"
          % (nparams, sum(math.prod(t.dims) for t in m.graph.initializer)))
    return m


class LogitsOnly:
    """Wrap a transformers model so that the graph's only output is logits."""

    @staticmethod
    def make(model):
        torch = _torch()

        class Wrap(torch.nn.Module):
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, input_ids):
                return self.m(input_ids=input_ids, use_cache=False).logits

        return Wrap(model)


def mlp_module():
    nn = _torch().nn
    return nn.Sequential(
        nn.Linear(64, 128), nn.ReLU(),
        nn.Linear(128, 128), nn.ReLU(),
        nn.Linear(128, 10),
    )


def make_mlp(out):
    torch = _torch()
    torch.manual_seed(1)
    model = mlp_module()
    x = torch.randn(2, 64)
    export(model, (x,), os.path.join(out, "mlp.onnx"), ["x"], ["y"])


def make_resnet(out):
    torch = _torch()
    nn = torch.nn
    torch.manual_seed(2)

    class Block(nn.Module):
        """torchvision-style BasicBlock."""

        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.relu = nn.ReLU()
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(
                    nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            idt = x if self.down is None else self.down(x)
            y = self.relu(self.bn1(self.conv1(x)))
            y = self.bn2(self.conv2(y))
            return self.relu(y + idt)

    class ResNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 16, 3, 1, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(16)
            self.relu = nn.ReLU()
            self.pool = nn.MaxPool2d(2)                      # 32x32 -> 16x16
            self.layer1 = Block(16, 16, 1)
            self.layer2 = Block(16, 32, 2)                   # -> 8x8
            self.layer3 = Block(32, 64, 2)                   # -> 4x4
            # A BatchNorm that follows an Add (pre-activation style) cannot be
            # folded into a convolution, so BatchNormalization stays in the graph.
            self.bn_final = nn.BatchNorm2d(64)
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(64, 10)

        def forward(self, x):
            x = self.pool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer3(self.layer2(self.layer1(x)))
            x = self.relu(self.bn_final(x))
            x = torch.flatten(self.avgpool(x), 1)
            return self.fc(x)

    model = ResNet()
    g = torch.Generator().manual_seed(20)
    for m in model.modules():   # non-trivial statistics, as after training
        if isinstance(m, nn.BatchNorm2d):
            c = m.num_features
            m.weight.data = 1 + 0.1 * torch.randn(c, generator=g)
            m.bias.data = 0.1 * torch.randn(c, generator=g)
            m.running_mean = 0.1 * torch.randn(c, generator=g)
            m.running_var = 0.5 + torch.rand(c, generator=g)
    x = torch.randn(2, 3, 32, 32)
    export(model, (x,), os.path.join(out, "resnet.onnx"), ["x"], ["y"])


def gpt2_tiny_config(**over):
    from transformers import GPT2Config
    kw = dict(vocab_size=VOCAB, n_positions=64, n_embd=64, n_layer=2, n_head=4,
              n_inner=None, activation_function="gelu_new", use_cache=False,
              resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    kw.update(over)
    return GPT2Config(**kw)


def bert_tiny_config():
    from transformers import BertConfig
    return BertConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2,
                      num_attention_heads=4, intermediate_size=128,
                      max_position_embeddings=64, hidden_dropout_prob=0.0,
                      attention_probs_dropout_prob=0.0)


def llama_tiny_config():
    from transformers import LlamaConfig
    return LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128,
                       num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, max_position_embeddings=64,
                       tie_word_embeddings=False, use_cache=False)


def vit_tiny_config():
    from transformers import ViTConfig
    return ViTConfig(image_size=32, patch_size=8, num_channels=3, hidden_size=64,
                     num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=128, num_labels=10,
                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def _patch_mask_vmap():
    """transformers >= 4.53 builds attention masks with torch.vmap, which the
    TorchScript tracer cannot record ("unordered_map::at"). Replace the vmap by
    the equivalent broadcast of index tensors; the mask functions (causal,
    padding, packed sequence) are elementwise, so the result is the same mask."""
    try:
        from transformers import masking_utils
    except ImportError:
        return
    if not hasattr(masking_utils, "_vmap_for_bhqkv") or getattr(masking_utils, "_shardc_patched", False):
        return
    torch = _torch()

    def broadcast_for_bhqkv(mask_function, bh_indices=True):
        def fn(batch_idx, head_idx, q_idx, kv_idx):
            if bh_indices:
                b, h = batch_idx[:, None, None, None], head_idx[None, :, None, None]
                q, kv = q_idx[None, None, :, None], kv_idx[None, None, None, :]
                shape = (batch_idx.shape[0], head_idx.shape[0], q_idx.shape[0], kv_idx.shape[0])
            else:
                b = h = None
                q, kv = q_idx[:, None], kv_idx[None, :]
                shape = (q_idx.shape[0], kv_idx.shape[0])
            return mask_function(b, h, q, kv).expand(shape)
        return fn

    masking_utils._vmap_for_bhqkv = broadcast_for_bhqkv
    # Only needed to index inside vmap; plain indexing broadcasts the same way.
    masking_utils.TransformGetItemToIndex = contextlib.nullcontext
    # Sequence packing is detected from position_ids with aten::diff, which has
    # no ONNX export; the samples' position_ids are always 0..seq-1 (no packing).
    if hasattr(masking_utils, "find_packed_sequence_indices"):
        masking_utils.find_packed_sequence_indices = lambda position_ids: None
    masking_utils._shardc_patched = True


def hf_model(cls, config):
    """Build a transformers model from a config with eager attention."""
    _patch_mask_vmap()
    try:
        return cls(config, attn_implementation="eager")
    except TypeError:
        config._attn_implementation = "eager"
        return cls(config)


def gpt2_sample():
    """(module, example args, input names, output names) of the gpt2 sample."""
    torch = _torch()
    from transformers import GPT2LMHeadModel
    torch.manual_seed(3)
    model = hf_model(GPT2LMHeadModel, gpt2_tiny_config()).eval()
    perturb(model, 30)
    ids = torch.randint(0, VOCAB, (2, SEQ))
    return LogitsOnly.make(model), (ids,), ["input_ids"], ["logits"]


def bert_sample():
    torch = _torch()
    from transformers import BertModel
    torch.manual_seed(4)
    model = hf_model(BertModel, bert_tiny_config()).eval()
    perturb(model, 40)

    class Wrap(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask):
            o = self.m(input_ids=input_ids, attention_mask=attention_mask)
            return o.last_hidden_state, o.pooler_output

    ids = torch.randint(0, VOCAB, (2, SEQ))
    mask = torch.ones(2, SEQ, dtype=torch.int64)
    return (Wrap(model), (ids, mask), ["input_ids", "attention_mask"],
            ["last_hidden_state", "pooler_output"])


def llama_sample():
    torch = _torch()
    from transformers import LlamaForCausalLM
    torch.manual_seed(5)
    model = hf_model(LlamaForCausalLM, llama_tiny_config()).eval()
    perturb(model, 50)
    ids = torch.randint(0, VOCAB, (2, SEQ))
    return LogitsOnly.make(model), (ids,), ["input_ids"], ["logits"]


def vit_sample():
    torch = _torch()
    from transformers import ViTForImageClassification
    torch.manual_seed(6)
    model = hf_model(ViTForImageClassification, vit_tiny_config()).eval()
    perturb(model, 60)

    class Wrap(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, pixel_values):
            return self.m(pixel_values=pixel_values).logits

    x = torch.randn(2, 3, 32, 32)
    return Wrap(model), (x,), ["pixel_values"], ["logits"]


def vit_pool_sample():
    """A ViT without the class token, in torch alone (the vit sample's sizes:
    32x32 images in 8x8 patches, hidden 64, 2 layers of 4 heads, MLP 128,
    10 labels): the 16 patch tokens with learned position embeddings
    through pre-norm encoder layers (eager attention: softmax(q kᵀ / √d) v,
    GELU MLP), the final norm, then their mean into the classifier (global
    average pooling). A sequence of 16 divides into 2·cp chunks for cp = 2,
    4 and 8, which the vit sample's 17 (16 patches and the class token)
    does not (docs/context-parallel.md)."""
    torch = _torch()
    nn = torch.nn
    torch.manual_seed(8)
    d, heads, layers, mlp, patch, labels = 64, 4, 2, 128, 8, 10

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
            self.fc1, self.fc2 = nn.Linear(d, mlp), nn.Linear(mlp, d)

        def forward(self, x):
            b, s, _ = x.shape
            h = self.ln1(x)

            def split(t):
                return t.view(b, s, heads, d // heads).transpose(1, 2)
            q, k, v = split(self.q(h)), split(self.k(h)), split(self.v(h))
            p = torch.softmax(torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d // heads), -1)
            a = torch.matmul(p, v).transpose(1, 2).reshape(b, s, d)
            x = x + self.o(a)
            return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.ln2(x))))

    class Pool(nn.Module):
        def __init__(self):
            super().__init__()
            self.patch = nn.Conv2d(3, d, patch, stride=patch)
            self.pos = nn.Parameter(0.02 * torch.randn(1, (32 // patch) ** 2, d))
            self.layers = nn.ModuleList(Layer() for _ in range(layers))
            self.ln = nn.LayerNorm(d)
            self.head = nn.Linear(d, labels)

        def forward(self, pixel_values):
            x = self.patch(pixel_values).flatten(2).transpose(1, 2) + self.pos
            for layer in self.layers:
                x = layer(x)
            return self.head(self.ln(x).mean(dim=1))

    model = Pool().eval()
    perturb(model, 80)
    x = torch.randn(2, 3, 32, 32)
    return model, (x,), ["pixel_values"], ["logits"]


# --------------------------------------------------------------------------
# moe: a Mixtral-style decoder with capacity-based (GShard/Switch) dispatch
# --------------------------------------------------------------------------

MOE = dict(vocab=VOCAB, d=64, heads=4, layers=2, experts=8, top_k=2, ffn=64,
           capacity_factor=1.25, seq=SEQ)


def moe_capacity(c):
    """C = ceil(tokens * k * capacity_factor / experts), tokens = one sequence
    (the routing group): ceil(16 * 2 * 1.25 / 8) = 5."""
    return math.ceil(c["seq"] * c["top_k"] * c["capacity_factor"] / c["experts"])


def moe_module(c=MOE):
    """The moe sample as a torch module: input_ids [B, S] -> (logits [B, S, V],
    aux_loss []). Every shape but the batch is static: each sequence is one
    routing group, and the dispatch and combine tensors are [B, S, E, C]."""
    torch = _torch()
    nn = torch.nn
    F = torch.nn.functional
    d, E, k, f, S, H = c["d"], c["experts"], c["top_k"], c["ffn"], c["seq"], c["heads"]
    cap = moe_capacity(c)

    class RMSNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(d))

        def forward(self, x):
            v = x.pow(2).mean(-1, keepdim=True)
            return self.weight * (x * torch.rsqrt(v + 1e-6))

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.q_proj = nn.Linear(d, d, bias=False)
            self.k_proj = nn.Linear(d, d, bias=False)
            self.v_proj = nn.Linear(d, d, bias=False)
            self.o_proj = nn.Linear(d, d, bias=False)
            self.register_buffer("causal", torch.tril(torch.ones(S, S, dtype=torch.bool)),
                                 persistent=False)

        def forward(self, x):
            B = x.shape[0]
            q, kk, v = (p(x).view(B, S, H, d // H).transpose(1, 2)
                        for p in (self.q_proj, self.k_proj, self.v_proj))
            a = q @ kk.transpose(-1, -2) / math.sqrt(d // H)
            a = a.masked_fill(~self.causal, -1e9).softmax(-1)
            return self.o_proj((a @ v).transpose(1, 2).reshape(B, S, d))

    class SparseMoe(nn.Module):
        """Top-k of E SwiGLU experts, GShard's capacity: the first choices of
        every token of the group take their expert's slots before any second
        choice, in token order; a choice past an expert's C slots is dropped
        (its token gets nothing from that expert). Gates are the top-k
        probabilities renormalised to sum to 1 (Mixtral)."""

        def __init__(self):
            super().__init__()
            self.gate = nn.Linear(d, E, bias=False)
            self.w1 = nn.Parameter(torch.randn(E, d, f) / math.sqrt(d))
            self.w3 = nn.Parameter(torch.randn(E, d, f) / math.sqrt(d))
            self.w2 = nn.Parameter(torch.randn(E, f, d) / math.sqrt(f))
            self.register_buffer("experts", torch.arange(E, dtype=torch.float32),
                                 persistent=False)
            self.register_buffer("slots", torch.arange(cap, dtype=torch.float32),
                                 persistent=False)

        def forward(self, x):
            B = x.shape[0]
            probs = self.gate(x).softmax(-1)                        # [B, S, E]
            top, idx = probs.topk(k, dim=-1)                        # [B, S, k]
            gates = top / top.sum(-1, keepdim=True)
            choice = (idx.unsqueeze(-1).float() == self.experts).float()   # [B, S, k, E]
            order = choice.transpose(1, 2).reshape(B, k * S, E)    # k-major priority
            pos = order.cumsum(1) - 1.0                             # slot in the expert
            keep = order * (pos < cap).float()
            slot = keep.unsqueeze(-1) * (pos.unsqueeze(-1) == self.slots).float()
            slot = slot.reshape(B, k, S, E, cap).transpose(1, 2)   # [B, S, k, E, C]
            dispatch = slot.sum(2).reshape(B, S, E * cap)
            combine = (gates.unsqueeze(-1).unsqueeze(-1) * slot).sum(2).reshape(B, S, E * cap)
            xe = (dispatch.transpose(1, 2) @ x).reshape(B, E, cap, d)
            h = F.silu(xe @ self.w1) * (xe @ self.w3)
            ye = (h @ self.w2).reshape(B, E * cap, d)
            # Switch/Mixtral load balance: E * sum_e (share of the choices
            # routed to e) * (mean router probability of e)
            share = choice.mean((0, 1)).sum(0) / k                  # [E]
            aux = E * (share * probs.mean((0, 1))).sum()
            return combine @ ye, aux

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.input_layernorm = RMSNorm()
            self.self_attn = Attention()
            self.post_attention_layernorm = RMSNorm()
            self.block_sparse_moe = SparseMoe()

        def forward(self, x):
            x = x + self.self_attn(self.input_layernorm(x))
            y, aux = self.block_sparse_moe(self.post_attention_layernorm(x))
            return x + y, aux

    class MoeLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed_tokens = nn.Embedding(c["vocab"], d)
            self.embed_positions = nn.Parameter(0.02 * torch.randn(S, d))
            self.layers = nn.ModuleList(Layer() for _ in range(c["layers"]))
            self.norm = RMSNorm()
            self.lm_head = nn.Linear(d, c["vocab"], bias=False)

        def forward(self, input_ids):
            x = self.embed_tokens(input_ids) + self.embed_positions
            # the mean over layers of each layer's load-balancing loss,
            # summed as it goes so that every layer computes the same ops
            # (an Add and a Div: the layers stay identical blocks)
            aux = torch.zeros(())
            for layer in self.layers:
                x, a = layer(x)
                aux = aux + a / len(self.layers)
            return self.lm_head(self.norm(x)), aux

    return MoeLM()


def moe_sample():
    torch = _torch()
    torch.manual_seed(7)
    model = moe_module().eval()
    perturb(model, 70)
    ids = torch.randint(0, VOCAB, (2, SEQ))
    return model, (ids,), ["input_ids"], ["logits", "aux_loss"]


def make_moe(out):
    model, args, inputs, outputs = moe_sample()
    export(model, args, os.path.join(out, "moe.onnx"), inputs, outputs,
           batch_axes={"input_ids": {0: "batch"}, "logits": {0: "batch"}})


def exported(sample, name, **kw):
    """A SAMPLES entry: export sample() to OUT/name.onnx (export's options)."""
    def make(out):
        model, args, inputs, outputs = sample()
        export(model, args, os.path.join(out, name + ".onnx"), inputs, outputs, **kw)
    return make


def ort_optimized(sample, name, model_type, num_heads, hidden_size):
    """A SAMPLES entry: the opset-17 export of sample(), passed through
    onnxruntime's transformer optimizer with its default options for
    model_type (the com.microsoft fused ops: Attention, SkipLayerNormalization,
    EmbedLayerNormalization, FastGelu, BiasGelu, ...), then compared with torch."""
    import tempfile

    def make(out):
        from onnxruntime.transformers import optimizer
        model, args, inputs, outputs = sample()
        path = os.path.join(out, name + ".onnx")
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "src.onnx")
            export(model, args, src, inputs, outputs)
            opt = optimizer.optimize_model(src, model_type=model_type,
                                           num_heads=num_heads, hidden_size=hidden_size)
            print("  fused ops: %s" % opt.get_fused_operator_statistics())
            m = opt.model
            m.doc_string = ""
            for n in m.graph.node:
                n.doc_string = ""
            onnx.checker.check_model(m)
            onnx.save(m, path)
        compare_with_onnxruntime(model, args, path, inputs)
    return make


# --------------------------------------------------------------------------
# GPT-2 graph built with onnx.helper (used for gpt_1p5b)
# --------------------------------------------------------------------------

GPT_1P5B = dict(vocab=50257, n_positions=1024, n_embd=1600, n_head=25,
                n_layer=48, seq=128)


def gpt2_param_shapes(c):
    """(name, shape) of every GPT-2 parameter, in state_dict order.

    Names and layouts follow transformers' GPT2LMHeadModel: Conv1D weights are
    [in, out]; lm_head is tied to transformer.wte.weight.
    """
    e, v, p = c["n_embd"], c["vocab"], c["n_positions"]
    out = [("transformer.wte.weight", [v, e]), ("transformer.wpe.weight", [p, e])]
    for i in range(c["n_layer"]):
        h = "transformer.h.%d." % i
        out += [
            (h + "ln_1.weight", [e]), (h + "ln_1.bias", [e]),
            (h + "attn.c_attn.weight", [e, 3 * e]), (h + "attn.c_attn.bias", [3 * e]),
            (h + "attn.c_proj.weight", [e, e]), (h + "attn.c_proj.bias", [e]),
            (h + "ln_2.weight", [e]), (h + "ln_2.bias", [e]),
            (h + "mlp.c_fc.weight", [e, 4 * e]), (h + "mlp.c_fc.bias", [4 * e]),
            (h + "mlp.c_proj.weight", [4 * e, e]), (h + "mlp.c_proj.bias", [e]),
        ]
    out += [("transformer.ln_f.weight", [e]), ("transformer.ln_f.bias", [e])]
    return out


def external_initializer(name, shape, location, offset, align):
    """A float32 initializer whose data lies in file `location` at `offset`
    (location/offset/length, no data: the file itself is not written), and
    the next offset, rounded up to `align`."""
    t = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=shape)
    nbytes = 4 * math.prod(shape)
    t.data_location = TensorProto.EXTERNAL
    for k, val in (("location", location), ("offset", offset), ("length", nbytes)):
        ent = t.external_data.add()
        ent.key, ent.value = k, str(val)
    return t, offset + (nbytes + align - 1) // align * align


def build_gpt2_graph(c, weights=None, external=None, align=4096):
    """GPT-2 LM (logits only) as an ONNX ModelProto, op for op like the export.

    weights:  dict name -> float32 numpy array to embed, or None
    external: file name for external data (initializers get location/offset/
              length and no data; the file itself is not written)
    """
    e, nh, L, S = c["n_embd"], c["n_head"], c["n_layer"], c["seq"]
    hd = e // nh
    assert hd * nh == e and S <= c["n_positions"]
    nodes, inits = [], []

    def const(name, arr):
        nodes.append(helper.make_node(
            "Constant", [], [name], name=name,
            value=onnx.numpy_helper.from_array(np.asarray(arr), name)))
        return name

    offset = 0
    for name, shape in gpt2_param_shapes(c):
        if weights is not None:
            arr = np.ascontiguousarray(weights[name], dtype=np.float32)
            assert list(arr.shape) == shape, (name, arr.shape, shape)
            inits.append(onnx.numpy_helper.from_array(arr, name))
            continue
        t, offset = external_initializer(name, shape, external, offset, align)
        inits.append(t)

    n = [0]

    def op(op_type, inputs, n_out=1, **attrs):
        n[0] += 1
        base = "/%s_%d" % (op_type, n[0])
        outs = [base + "_out%d" % j for j in range(n_out)]
        nodes.append(helper.make_node(op_type, inputs, outs, name=base, **attrs))
        return outs if n_out > 1 else outs[0]

    # shared constants
    pos = const("position_ids", np.arange(S, dtype=np.int64))
    causal = const("causal_mask", np.tril(np.ones((S, S), dtype=bool)).reshape(1, 1, S, S))
    mask_value = const("mask_value", np.array(np.finfo(np.float32).min, dtype=np.float32))
    scale = const("attn_scale", np.array(math.sqrt(hd), dtype=np.float32))
    split = const("qkv_split", np.array([e, e, e], dtype=np.int64))
    heads_shape = const("heads_shape", np.array([0, 0, nh, hd], dtype=np.int64))
    merge_shape = const("merge_shape", np.array([0, 0, e], dtype=np.int64))
    c_half = const("gelu_half", np.array(0.5, dtype=np.float32))
    c_one = const("gelu_one", np.array(1.0, dtype=np.float32))
    c_three = const("gelu_three", np.array(3.0, dtype=np.float32))
    c_k = const("gelu_coeff", np.array(0.044715, dtype=np.float32))
    c_s = const("gelu_sqrt_2_over_pi", np.array(math.sqrt(2.0 / math.pi), dtype=np.float32))

    def linear(x, prefix):
        return op("Add", [op("MatMul", [x, prefix + ".weight"]), prefix + ".bias"])

    def layernorm(x, prefix):
        return op("LayerNormalization", [x, prefix + ".weight", prefix + ".bias"],
                  axis=-1, epsilon=1e-5)

    def gelu_new(x):   # 0.5*x*(1+tanh(sqrt(2/pi)*(x+0.044715*x^3)))
        x3 = op("Pow", [x, c_three])
        inner = op("Add", [x, op("Mul", [x3, c_k])])
        t = op("Tanh", [op("Mul", [inner, c_s])])
        return op("Mul", [op("Mul", [x, c_half]), op("Add", [t, c_one])])

    tok = op("Gather", ["transformer.wte.weight", "input_ids"], axis=0)
    pe = op("Gather", ["transformer.wpe.weight", pos], axis=0)
    h = op("Add", [tok, pe])
    for i in range(L):
        p = "transformer.h.%d." % i
        a = layernorm(h, p + "ln_1")
        qkv = linear(a, p + "attn.c_attn")
        q, k, v = op("Split", [qkv, split], n_out=3, axis=2)
        q = op("Transpose", [op("Reshape", [q, heads_shape])], perm=[0, 2, 1, 3])
        kt = op("Transpose", [op("Reshape", [k, heads_shape])], perm=[0, 2, 3, 1])
        v = op("Transpose", [op("Reshape", [v, heads_shape])], perm=[0, 2, 1, 3])
        w = op("Div", [op("MatMul", [q, kt]), scale])
        w = op("Where", [causal, w, mask_value])
        w = op("Softmax", [w], axis=-1)
        ctx = op("Transpose", [op("MatMul", [w, v])], perm=[0, 2, 1, 3])
        ctx = op("Reshape", [ctx, merge_shape])
        h = op("Add", [h, linear(ctx, p + "attn.c_proj")])
        m = layernorm(h, p + "ln_2")
        m = linear(gelu_new(linear(m, p + "mlp.c_fc")), p + "mlp.c_proj")
        h = op("Add", [h, m])
    h = layernorm(h, "transformer.ln_f")
    head = op("Transpose", ["transformer.wte.weight"], perm=[1, 0])   # tied lm_head
    nodes.append(helper.make_node("MatMul", [h, head], ["logits"], name="/lm_head/MatMul"))

    graph = helper.make_graph(
        nodes, "gpt2_lm",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", S])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", S, c["vocab"]])],
        initializer=inits)
    model = helper.make_model(graph, producer_name="shardc samples/make_samples.py",
                              opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    return model, offset


def check_external_graph(path, data_bytes):
    """onnx.checker and strict shape inference on a model whose external data
    file is absent: check a copy next to a sparse, all-zero stand-in of the
    right length (the checker only requires the file to exist; nothing reads it)."""
    import shutil
    import tempfile
    m = onnx.load(path, load_external_data=False)
    locs = {e.value for t in m.graph.initializer for e in t.external_data if e.key == "location"}
    with tempfile.TemporaryDirectory() as d:
        shutil.copy(path, d)
        for loc in locs:
            with open(os.path.join(d, loc), "wb") as f:
                f.truncate(data_bytes)
        onnx.checker.check_model(os.path.join(d, os.path.basename(path)))
    onnx.shape_inference.infer_shapes(m, check_type=True, strict_mode=True)


def make_gpt_1p5b(out):
    model, total = build_gpt2_graph(GPT_1P5B, external="gpt_1p5b.weights")
    path = os.path.join(out, "gpt_1p5b.onnx")
    onnx.save(model, path)
    check_external_graph(path, total)
    params = sum(math.prod(t.dims) for t in model.graph.initializer)
    print("  gpt_1p5b: %d parameters; gpt_1p5b.weights (not written) would be %d bytes"
          % (params, total))


def sanity_gpt2_generator():
    """The onnx.helper GPT-2 at a tiny config, loaded with the weights of
    transformers' GPT2LMHeadModel, must give the same logits in onnxruntime."""
    torch = _torch()
    import onnxruntime as ort
    from transformers import GPT2LMHeadModel
    torch.manual_seed(7)
    cfg = gpt2_tiny_config(n_layer=3)
    ref = hf_model(GPT2LMHeadModel, cfg).eval()
    perturb(ref, 70)
    sd = {k: v.detach().numpy() for k, v in ref.state_dict().items()}
    c = dict(vocab=cfg.vocab_size, n_positions=cfg.n_positions, n_embd=cfg.n_embd,
             n_head=cfg.n_head, n_layer=cfg.n_layer, seq=SEQ)
    model, _ = build_gpt2_graph(c, weights=sd)
    onnx.checker.check_model(model, full_check=True)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    worst = 0.0
    for b in (1, 3):
        ids = torch.randint(0, cfg.vocab_size, (b, SEQ))
        with torch.no_grad():
            want = ref(input_ids=ids, use_cache=False).logits.numpy()
        got = sess.run(None, {"input_ids": ids.numpy()})[0]
        worst = max(worst, float(np.abs(got - want).max()))
    print("  sanity: helper-built GPT-2 vs transformers, max |diff| = %.3g" % worst)
    if not worst < 1e-4:
        sys.exit("gpt2 generator sanity check failed")


SAMPLES = {
    "mlp": make_mlp,
    "resnet": make_resnet,
    "gpt2": exported(gpt2_sample, "gpt2"),
    "bert": exported(bert_sample, "bert"),
    "llama": exported(llama_sample, "llama"),
    "vit": exported(vit_sample, "vit"),
    "vit_pool": exported(vit_pool_sample, "vit_pool"),
    "gpt_1p5b": make_gpt_1p5b,
    "moe": make_moe,
    # The same models as other exporters and tools write them (issue 12 §4):
    # the TorchScript exporter at opset 11, torch.export's exporter (newer
    # opset, its own op forms), onnxruntime's transformer optimizer.
    "gpt2_opset11": exported(gpt2_sample, "gpt2_opset11", opset=11),
    "bert_opset11": exported(bert_sample, "bert_opset11", opset=11),
    "vit_opset11": exported(vit_sample, "vit_opset11", opset=11),
    "gpt2_dynamo": exported(gpt2_sample, "gpt2_dynamo", opset=18, dynamo=True),
    "bert_ortopt": ort_optimized(bert_sample, "bert_ortopt", "bert", 4, 64),
    "gpt2_ortopt": ort_optimized(gpt2_sample, "gpt2_ortopt", "gpt2", 4, 64),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="", help="comma-separated sample names")
    ap.add_argument("--out", default=HERE)
    ap.add_argument("--no-sanity", action="store_true")
    a = ap.parse_args()
    names = [s for s in a.only.split(",") if s] or list(SAMPLES)
    for s in names:
        if s not in SAMPLES:
            sys.exit("unknown sample %r (have: %s)" % (s, ", ".join(SAMPLES)))
    os.makedirs(a.out, exist_ok=True)
    import warnings
    warnings.filterwarnings("ignore")
    for s in names:
        print("building %s" % s, flush=True)
        SAMPLES[s](a.out)
        path = os.path.join(a.out, s + ".onnx")
        print("  wrote %s (%d bytes)" % (path, os.path.getsize(path)), flush=True)
    if "gpt_1p5b" in names and not a.no_sanity:
        sanity_gpt2_generator()


if __name__ == "__main__":
    main()
