"""real_models.py — real-size models for the speed benchmarks, built with
onnx.helper and seeded random weights (no download, no PyTorch).

  gpt2-small  GPT-2 small's shapes: 12 layers, d 768, 12 heads, vocabulary
              50,257, sequence 128, op for op like transformers' export at
              opset 13 (samples/make_samples.py: build_gpt2_graph)
  resnet18    torchvision's ResNet-18 layout at 224x224, as an eval-mode
              export writes it: BatchNorm folded into each Conv's bias,
              Relu, MaxPool, residual Add, GlobalAveragePool, Flatten, Gemm

Both take the batch as a symbolic dim named "batch". `model_path(name,
cache)` builds the file once into `cache` and returns its path.
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "samples"))

GPT2_SMALL = dict(vocab=50257, n_positions=1024, n_embd=768, n_head=12, n_layer=12, seq=128)
VERSION = 1   # bump when a builder changes: cached files are rebuilt


def gpt2_small():
    import make_samples
    from make_samples import gpt2_param_shapes
    rng = np.random.default_rng(11)
    weights = {}
    for name, shape in gpt2_param_shapes(GPT2_SMALL):
        if name.endswith(".weight") and len(shape) == 1:     # LayerNorm gains
            w = 1.0 + 0.1 * rng.standard_normal(shape)
        else:
            w = 0.02 * rng.standard_normal(shape)
        weights[name] = w.astype(np.float32)
    model, _ = make_samples.build_gpt2_graph(GPT2_SMALL, weights=weights)
    return model


def resnet18():
    rng = np.random.default_rng(12)
    nodes, inits = [], []
    n = [0]

    def conv(x, cin, cout, k, stride, relu=True):
        n[0] += 1
        w = f"conv{n[0]}.weight"
        b = f"conv{n[0]}.bias"
        std = (2.0 / (cin * k * k)) ** 0.5
        inits.append(numpy_helper.from_array(
            (std * rng.standard_normal((cout, cin, k, k))).astype(np.float32), w))
        inits.append(numpy_helper.from_array(
            (0.1 * rng.standard_normal(cout)).astype(np.float32), b))
        y = f"/conv{n[0]}/Conv_output_0"
        nodes.append(helper.make_node("Conv", [x, w, b], [y], name=f"/conv{n[0]}/Conv",
                                      kernel_shape=[k, k], strides=[stride, stride],
                                      pads=[k // 2] * 4, dilations=[1, 1], group=1))
        if relu:
            nodes.append(helper.make_node("Relu", [y], [y + "_relu"], name=f"/relu{n[0]}"))
            return y + "_relu"
        return y

    x = conv("input", 3, 64, 7, 2)
    nodes.append(helper.make_node("MaxPool", [x], ["/maxpool"], name="/maxpool/MaxPool",
                                  kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]))
    x, cin = "/maxpool", 64
    for stage, cout in enumerate([64, 128, 256, 512]):
        for blk in range(2):
            stride = 2 if stage > 0 and blk == 0 else 1
            y = conv(x, cin, cout, 3, stride)
            y = conv(y, cout, cout, 3, 1, relu=False)
            idt = conv(x, cin, cout, 1, stride, relu=False) if (stride != 1 or cin != cout) else x
            s = f"/layer{stage + 1}.{blk}/Add"
            nodes.append(helper.make_node("Add", [y, idt], [s + "_output_0"], name=s))
            nodes.append(helper.make_node("Relu", [s + "_output_0"], [s + "_relu"],
                                          name=f"/layer{stage + 1}.{blk}/Relu"))
            x, cin = s + "_relu", cout
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["/avgpool"], name="/avgpool"))
    nodes.append(helper.make_node("Flatten", ["/avgpool"], ["/flatten"], name="/flatten", axis=1))
    inits.append(numpy_helper.from_array(
        (0.04 * rng.standard_normal((1000, 512))).astype(np.float32), "fc.weight"))
    inits.append(numpy_helper.from_array(
        (0.01 * rng.standard_normal(1000)).astype(np.float32), "fc.bias"))
    nodes.append(helper.make_node("Gemm", ["/flatten", "fc.weight", "fc.bias"], ["output"],
                                  name="/fc/Gemm", alpha=1.0, beta=1.0, transB=1))
    graph = helper.make_graph(
        nodes, "resnet18",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 3, 224, 224])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", 1000])],
        initializer=inits)
    model = helper.make_model(graph, producer_name="shardc bench/real_models.py",
                              opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


BUILDERS = {"gpt2-small": gpt2_small, "resnet18": resnet18}


def model_path(name, cache):
    os.makedirs(cache, exist_ok=True)
    path = os.path.join(cache, f"{name}.v{VERSION}.onnx")
    if not os.path.exists(path):
        model = BUILDERS[name]()
        onnx.checker.check_model(model)
        tmp = path + ".tmp"
        onnx.save(model, tmp)
        os.replace(tmp, path)
    return path


def feeds(name, batch, seed=1):
    rng = np.random.default_rng(seed)
    if name == "gpt2-small":
        return {"input_ids": rng.integers(0, GPT2_SMALL["vocab"], (batch, GPT2_SMALL["seq"]),
                                          dtype=np.int64)}
    return {"input": rng.standard_normal((batch, 3, 224, 224)).astype(np.float32)}
