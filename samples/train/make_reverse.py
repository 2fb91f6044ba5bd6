"""make_reverse.py — a tiny transformer and a task it can learn in a minute
on two cores: reversing a sequence of 8 digits.

Writes into OUT (argv[1]):
  reverse.onnx     one-hot digits x [batch, 8, 10] -> logits [batch, 8, 10]:
                   an embedding (x @ E + positions), one attention layer
                   (single head, scaled dot product, softmax over the
                   keys, residual), a ReLU MLP with a residual, and an
                   output projection. Random weights (seed 0), built with
                   onnx.helper (no PyTorch needed).
  train_x.npy      4096 random sequences (seed 1), one-hot float32
  train_y.npy      the same sequences reversed: int64 class ids [4096, 8]
  test_x.npy, test_digits.npy   8 unseen sequences (seed 2) to show
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper, numpy_helper

SEQ, DIGITS, D, HIDDEN = 8, 10, 64, 128


def one_hot(seqs):
    return np.eye(DIGITS, dtype=np.float32)[seqs]


def model():
    r = np.random.RandomState(0)

    def w(name, *shape, scale=None):
        s = scale if scale is not None else 1.0 / np.sqrt(shape[0])
        return numpy_helper.from_array((r.randn(*shape) * s).astype(np.float32), name)

    inits = [w("embed", DIGITS, D, scale=1.0), w("positions", SEQ, D, scale=1.0),
             w("wq", D, D), w("wk", D, D), w("wv", D, D), w("wo", D, D, scale=0.5 / np.sqrt(D)),
             w("w1", D, HIDDEN), numpy_helper.from_array(np.zeros(HIDDEN, np.float32), "b1"),
             w("w2", HIDDEN, D, scale=0.5 / np.sqrt(HIDDEN)),
             numpy_helper.from_array(np.zeros(D, np.float32), "b2"),
             w("wout", D, DIGITS), numpy_helper.from_array(np.zeros(DIGITS, np.float32), "bout"),
             numpy_helper.from_array(np.array(1.0 / np.sqrt(D), np.float32), "inv_sqrt_d")]
    n = helper.make_node
    nodes = [
        n("MatMul", ["x", "embed"], ["e"]), n("Add", ["e", "positions"], ["h"]),
        n("MatMul", ["h", "wq"], ["q"]), n("MatMul", ["h", "wk"], ["k"]),
        n("MatMul", ["h", "wv"], ["v"]), n("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
        n("MatMul", ["q", "kt"], ["s0"]), n("Mul", ["s0", "inv_sqrt_d"], ["s"]),
        n("Softmax", ["s"], ["a"], axis=-1), n("MatMul", ["a", "v"], ["o"]),
        n("MatMul", ["o", "wo"], ["att"]), n("Add", ["h", "att"], ["h2"]),
        n("MatMul", ["h2", "w1"], ["m0"]), n("Add", ["m0", "b1"], ["m1"]),
        n("Relu", ["m1"], ["m2"]), n("MatMul", ["m2", "w2"], ["m3"]),
        n("Add", ["m3", "b2"], ["m4"]), n("Add", ["h2", "m4"], ["h3"]),
        n("MatMul", ["h3", "wout"], ["l0"]), n("Add", ["l0", "bout"], ["logits"]),
    ]
    g = helper.make_graph(nodes, "reverse",
                          [helper.make_tensor_value_info("x", T.FLOAT, ["batch", SEQ, DIGITS])],
                          [helper.make_tensor_value_info("logits", T.FLOAT, ["batch", SEQ, DIGITS])],
                          inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="shardc")
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    onnx.save(model(), os.path.join(out, "reverse.onnx"))
    seqs = np.random.RandomState(1).randint(0, DIGITS, size=(4096, SEQ))
    np.save(os.path.join(out, "train_x.npy"), one_hot(seqs))
    np.save(os.path.join(out, "train_y.npy"), seqs[:, ::-1].astype(np.int64).copy())
    test = np.random.RandomState(2).randint(0, DIGITS, size=(8, SEQ))
    np.save(os.path.join(out, "test_x.npy"), one_hot(test))
    np.save(os.path.join(out, "test_digits.npy"), test)


if __name__ == "__main__":
    main()
