"""_hf.py — a Hugging Face state_dict onto a model's initializers, by name.

map_state_dict(model, state_dict) matches each tensor of the state dict
(a PyTorch or NumPy mapping, e.g. transformers' model.state_dict()) to the
ONNX initializer of the same name — torch.onnx.export keeps the module
names — and writes a copy of the model with those values: the fine-tuning
starts from them. Names may be told apart by a prefix the export dropped
("model.", "transformer."); a tensor whose shape differs from the
initializer's, and transposed linear weights, are errors naming both.
"""
import os

import numpy as np

from ._errors import ModelError, UsageError


def _strip(name, prefixes):
    for p in prefixes:
        if name.startswith(p):
            return name[len(p):]
    return name


def map_state_dict(model, state_dict, out, prefixes=("model.", "transformer."), strict=True):
    """Writes model (a shardc.Model or a path) with the initializers named
    in state_dict replaced, as the ONNX file out; returns the names
    replaced. strict: every tensor of the state dict must find its
    initializer."""
    import onnx
    from onnx import numpy_helper
    from ._tensors import as_array
    path = getattr(model, "path", model)
    m = onnx.load(os.fspath(path))
    inits = {t.name: t for t in m.graph.initializer}
    done, missing = [], []
    for key, value in state_dict.items():
        name = key if key in inits else _strip(key, prefixes)
        if name not in inits:
            missing.append(key)
            continue
        t = inits[name]
        want = numpy_helper.to_array(t)
        if hasattr(value, "detach"):
            value = value.detach().cpu()
        a = as_array(value)
        if tuple(a.shape) != tuple(want.shape):
            raise ModelError(f"{path}: initializer '{name}' is {list(want.shape)} but the "
                             f"state_dict's '{key}' is {list(a.shape)}", "invalid")
        t.CopyFrom(numpy_helper.from_array(np.ascontiguousarray(a, dtype=want.dtype), name))
        done.append(name)
    if strict and missing:
        raise UsageError(f"{path}: no initializer for the state_dict's "
                         f"{', '.join(repr(k) for k in missing[:5])}"
                         f"{' ...' if len(missing) > 5 else ''}", "usage")
    onnx.save(m, os.fspath(out))
    return done
