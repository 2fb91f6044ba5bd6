"""node_data.py — where the ONNX backend node tests live, and making them.

The node tests (model.onnx + test_data_set_0/input_N.pb, output_N.pb, one
folder per test) ship in the onnx source tree under
onnx/backend/test/data/node/. Some onnx wheels (1.23 among them) leave that
folder out but keep the generators (onnx/backend/test/case/node/*.py, which
compute the expected outputs with NumPy). `node_dir()` returns the shipped
folder when it exists, otherwise it generates the same layout once into a
cache folder (about 10 s) and reuses it while the onnx version is unchanged.

Generation is seeded (np.random.seed(0) before the generators run), so the
inputs, and with them the manifest's expectations, are the same on every
machine with the same onnx and NumPy versions.
"""
import os
import shutil
import sys
import tempfile
import warnings

STAMP = "GENERATED_BY_SHARDC"


def shipped_dir():
    import onnx
    d = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "node")
    return d if os.path.isdir(d) and os.listdir(d) else None


def _write_tensor(path, value, name):
    from onnx import TensorProto, numpy_helper
    t = value if isinstance(value, TensorProto) else numpy_helper.from_array(value, name)
    with open(path, "wb") as f:
        f.write(t.SerializeToString())


def _is_tensor(vi):
    return vi.type.HasField("tensor_type")


def generate(out_dir):
    """Writes every node test case into out_dir/<name>/ (tests whose inputs or
    outputs are not plain tensors — sequences, maps, optionals — get the model
    only and a NOT_TENSOR marker). Returns the number of tests written."""
    import numpy as np
    import onnx
    np.random.seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from onnx.backend.test.loader import load_node_model_tests
        cases = load_node_model_tests()
    os.makedirs(out_dir, exist_ok=True)
    for case in cases:
        d = os.path.join(out_dir, case.name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "model.onnx"), "wb") as f:
            f.write(case.model.SerializeToString())
        g = case.model.graph
        if not all(_is_tensor(v) for v in list(g.input) + list(g.output)):
            open(os.path.join(d, "NOT_TENSOR"), "w").close()
            continue
        for i, (inputs, outputs) in enumerate(case.data_sets):
            ds = os.path.join(d, f"test_data_set_{i}")
            os.makedirs(ds, exist_ok=True)
            for j, v in enumerate(inputs):
                _write_tensor(os.path.join(ds, f"input_{j}.pb"), v, g.input[j].name)
            for j, v in enumerate(outputs):
                _write_tensor(os.path.join(ds, f"output_{j}.pb"), v, g.output[j].name)
    with open(os.path.join(out_dir, STAMP), "w") as f:
        f.write(f"onnx {onnx.__version__} numpy {np.__version__}\n")
    return len(cases)


def node_dir(cache_root):
    """The folder of node tests: the shipped one, else a generated cache under
    cache_root (created atomically: a half-written cache is never used)."""
    d = shipped_dir()
    if d:
        return d
    import numpy as np
    import onnx
    want = f"onnx {onnx.__version__} numpy {np.__version__}\n"
    cache = os.path.join(cache_root, "onnx-node-tests")
    stamp = os.path.join(cache, STAMP)
    if os.path.exists(stamp) and open(stamp).read() == want:
        return cache
    os.makedirs(cache_root, exist_ok=True)
    # Two suites (test_conformance.sh, test_conformance_mesh.sh) may start at
    # once under ctest -j: one generates while the other waits, so neither
    # replaces the folder the other is reading.
    import fcntl
    with open(os.path.join(cache_root, "onnx-node-tests.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(stamp) and open(stamp).read() == want:
            return cache
        tmp = tempfile.mkdtemp(prefix="onnx-node-tests.", dir=cache_root)
        print(f"generating the ONNX node tests (onnx {onnx.__version__}) into {cache} ...",
              file=sys.stderr, flush=True)
        generate(tmp)
        if os.path.exists(cache):
            shutil.rmtree(cache)
        os.rename(tmp, cache)
    return cache
