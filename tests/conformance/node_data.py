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

`converted_dir()` makes the same tests at an older opset: each model taken
down by onnx.version_converter (the expected outputs unchanged), for the
runner's --opsets mode.
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
    return len(cases)


def _cached(cache_root, name, want, fill, what):
    """cache_root/name, made by fill(folder) unless its stamp already reads
    `want`: built in a temporary folder and renamed into place under a lock,
    so a half-written cache is never used and two suites starting at once
    under ctest -j (test_conformance.sh, test_conformance_mesh.sh) neither
    build it twice nor replace the folder the other is reading."""
    cache = os.path.join(cache_root, name)
    stamp = os.path.join(cache, STAMP)
    if os.path.exists(stamp) and open(stamp).read() == want:
        return cache
    os.makedirs(cache_root, exist_ok=True)
    import fcntl
    with open(os.path.join(cache_root, name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(stamp) and open(stamp).read() == want:
            return cache
        tmp = tempfile.mkdtemp(prefix=name + ".", dir=cache_root)
        print(f"{what} into {cache} ...", file=sys.stderr, flush=True)
        fill(tmp)
        with open(os.path.join(tmp, STAMP), "w") as f:
            f.write(want)
        if os.path.exists(cache):
            shutil.rmtree(cache)
        os.rename(tmp, cache)
    return cache


def node_dir(cache_root):
    """The folder of node tests: the shipped one, else a generated cache under
    cache_root."""
    d = shipped_dir()
    if d:
        return d
    import numpy as np
    import onnx
    return _cached(cache_root, "onnx-node-tests", f"onnx {onnx.__version__} numpy {np.__version__}\n",
                   generate, f"generating the ONNX node tests (onnx {onnx.__version__})")


def _convert(src, dst, target):
    """Writes src's test converted to opset `target` into dst (model.onnx and
    a link to its data set), or dst/NOT_CONVERTIBLE holding the reason."""
    import onnx
    from onnx import version_converter
    os.makedirs(dst, exist_ok=True)
    try:
        m = onnx.load(os.path.join(src, "model.onnx"))
        c = version_converter.convert_version(m, target)
        onnx.checker.check_model(c)
    except Exception as e:  # the converter has no adapter down to target
        with open(os.path.join(dst, "NOT_CONVERTIBLE"), "w") as f:
            f.write(str(e).strip().splitlines()[-1][:200] + "\n")
        return False
    with open(os.path.join(dst, "model.onnx"), "wb") as f:
        f.write(c.SerializeToString())
    os.symlink(os.path.abspath(os.path.join(src, "test_data_set_0")),
               os.path.join(dst, "test_data_set_0"))
    return True


def converted_dir(root, cache_root, target, names):
    """The node tests `names` of root whose default-domain opset is above
    `target`, converted down to it by onnx.version_converter (the expected
    outputs are the original ones): a folder per test under
    cache_root/onnx-node-tests-opset<target>/, made once per onnx version and
    set of names. A test the converter cannot take down holds
    NOT_CONVERTIBLE and no model."""
    import hashlib
    import onnx
    root = os.path.abspath(root)
    want = (f"onnx {onnx.__version__} root {root} names "
            f"{hashlib.sha256(' '.join(sorted(names)).encode()).hexdigest()}\n")

    def fill(tmp):
        for n in names:
            m = onnx.load(os.path.join(root, n, "model.onnx"), load_external_data=False)
            ver = [o.version for o in m.opset_import if o.domain in ("", "ai.onnx")]
            if ver and ver[0] > target:
                _convert(os.path.join(root, n), os.path.join(tmp, n), target)

    return _cached(cache_root, f"onnx-node-tests-opset{target}", want, fill,
                   f"converting the node tests to opset {target}")
