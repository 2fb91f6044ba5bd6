"""test_node_tests.py — the ONNX backend node tests, run through `shardc run`.

Which tests count. A node test is one small model (usually one node) with
its inputs and expected outputs (node_data.py finds or generates them). It
counts toward conformance when every op in it is in shardc's ops table
(ir/ops.def, default ONNX domain) and its default-domain opset is one shardc
reads (13..25, SC_OPSET_MIN..SC_OPSET_MAX in ir/ops.h). Others are listed in
the summary but not run: 'unsupported' (an op shardc does not have), 'opset'
(supported ops, opset outside 13..25), 'io' (sequence/map/optional inputs or
outputs: not tensors), 'dtype' (a graph input/output/initializer or a Cast
`to` of an element type shardc has no dtype for: float8, float4, int4, int2 —
the test is about that type; the summary prints how many).

How one test runs. The inputs (TensorProto .pb) become .npy files; then
  shardc run model.onnx --threads 1 --input NAME=FILE.npy ... --output-dir DIR
(with --dim NAME=V for symbolic dims, bound from the stored inputs' shapes),
20 s timeout, and DIR/<output name>.npy (characters outside [A-Za-z0-9_.-]
replaced by '_', see safe_name) is compared with the stored output.

Comparison. Shape and dtype must match exactly. Integers, bool and strings:
exactly equal. Floats: |got - want| <= atol + rtol * |want| elementwise, with
  float32/float64: rtol 1e-4, atol 1e-5 (the project's tolerance: float32
                   kernels that reorder sums or use other libm
                   approximations stay well inside it)
  float16:         rtol 1e-3, atol 1e-3 (fp16 has 11 significant bits: one
                   rounding of an fp32-computed result is up to ~4.9e-4
                   relative)
  bfloat16:        rtol 1e-2, atol 1e-2 (8 significant bits)
Infinities must match exactly. NaN is accepted only where the expected
output is NaN at the same place, and an expected NaN must be produced.

Status of each test: pass; fail (wrong numbers, shape or dtype); error
(shardc exited non-zero: its message is the reason); crash (killed by a
signal); timeout.

The manifest (manifest.txt, `test_name status reason`) records the expected
status of every counted test: `pass`, or `xfail` with the reason; `opset`
and `dtype` for the supported-op tests not run. It is checked both ways:
every test of the corpus is in the manifest or excluded by its kind
(`unsupported` op, `io`: printed with their counts), and every manifest
entry names a test of the corpus. This program exits 1 (the ctest fails)
when the corpus is empty or no test is to be run, a test marked pass does
not pass, a test marked xfail passes (update the manifest:
--update-manifest), a counted test is missing from the manifest, a
manifest entry names no test of the corpus (or its kind changed), or any
test crashes or times out. The pass
percentage over counted tests is printed (target >= 95%); it is not itself a
failure. Exits 77 (skipped) when the shardc binary has no `run` command yet.

--backend ort runs the same harness with onnxruntime in place of shardc (to
check the harness itself; the manifest is not checked then).

--mesh SPEC / --split-last N run every test partitioned: a test the manifest
marks pass must pass, and the run counts how many tests ran split, split with
a fallback, or replicated (split_kind), failing when the split count is below
SPLIT_FLOOR. --shard I/N runs the counted tests whose index is I modulo N.

--freeze-shape-inputs (an experiment, never used for the manifest) retries
a test whose error names a graph input that "must be a constant" with that
input made an initializer, and prints how many more tests then pass.

usage: test_node_tests.py [--shardc PATH] [--jobs 2] [-k SUBSTR]...
                          [--corpus DIR] [--manifest FILE]
                          [--update-manifest] [--backend shardc|ort]
                          [--mesh SPEC | --split-last N] [--shard I/N]
                          [--freeze-shape-inputs] [-v]
"""
import argparse
import collections
import concurrent.futures as cf
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("SC_SOURCE_DIR") or os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import node_data  # noqa: E402

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import numpy_helper  # noqa: E402

OPSET_MIN, OPSET_MAX = 13, 25
DEFAULT_MANIFEST = os.path.join(HERE, "manifest.txt")
TOL = {  # dtype name -> (rtol, atol); see the file comment
    "float32": (1e-4, 1e-5), "float64": (1e-4, 1e-5),
    "float16": (1e-3, 1e-3), "bfloat16": (1e-2, 1e-2),
}


def read_opset_bounds():
    """SC_OPSET_MIN/MAX from ir/ops.h, so the window follows the frontend."""
    global OPSET_MIN, OPSET_MAX
    try:
        text = open(os.path.join(SRC, "ir", "ops.h")).read()
    except OSError:
        return
    m = re.search(r"SC_OPSET_MIN\s*=\s*(\d+)\s*,\s*SC_OPSET_MAX\s*=\s*(\d+)", text)
    if m:
        OPSET_MIN, OPSET_MAX = int(m.group(1)), int(m.group(2))


def supported_ops():
    """ONNX op names of the ops table (ir/ops.def, second column) and the
    default-domain ops the frontend reads into them through its version
    adapters (frontend/onnx_adapters.c's ADAPTERS: Upsample, Scatter)."""
    text = open(os.path.join(SRC, "ir", "ops.def")).read()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    ops = set(re.findall(r'^\s*OP\(\s*\w+\s*,\s*"(\w+)"', text, flags=re.M))
    adapters = open(os.path.join(SRC, "frontend", "onnx_adapters.c")).read()
    return ops | set(re.findall(r'\{\s*NULL\s*,\s*"(\w+)"\s*,', adapters))


def domain_ops():
    """(domain, op) pairs of other domains the frontend reads into the ops
    table (frontend/onnx_adapters.c's ADAPTERS: ONNX's preview and ML
    domains)."""
    adapters = open(os.path.join(SRC, "frontend", "onnx_adapters.c")).read()
    return set(re.findall(r'\{\s*"(ai\.onnx\.[\w.]+)"\s*,\s*"(\w+)"\s*,', adapters))


def graph_ops(g):
    """(domain, op_type) of every node, subgraphs included."""
    for n in g.node:
        yield (n.domain, n.op_type)
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from graph_ops(a.g)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for sg in a.graphs:
                    yield from graph_ops(sg)


def classify(test_dir, ops):
    """'run', or the reason the test is not counted: 'io', 'unsupported',
    'opset'. Also returns the op list (for the summary)."""
    m = onnx.load(os.path.join(test_dir, "model.onnx"), load_external_data=False)
    used = sorted({t for d, t in graph_ops(m.graph)})
    if os.path.exists(os.path.join(test_dir, "NOT_TENSOR")):
        return "io", used
    other = domain_ops()
    if any((d not in ("", "ai.onnx") and (d, t) not in other) or t not in ops
           for d, t in graph_ops(m.graph)):
        return "unsupported", used
    ver = [o.version for o in m.opset_import if o.domain in ("", "ai.onnx")]
    if not ver and all(d not in ("", "ai.onnx") for d, _ in graph_ops(m.graph)):
        ver = [OPSET_MAX]  # no default-domain op: the frontend reads it at the newest
    if not ver or not OPSET_MIN <= ver[0] <= OPSET_MAX:
        return "opset", used
    if uses_no_dtype(m.graph):
        return "dtype", used
    return "run", used


# ONNX element types shardc has no dtype for (ir/dtype.h): float6 (27, 28).
NO_DTYPE = {27, 28}

# The types .npy has not, by NumPy's (ml_dtypes') name, and the .npy dtype
# shardc reads and writes them as (their memory form: ir/dtype.h,
# sc_dtype_holds): bf16 and float8/float4 as bits, 4/2-bit integers as
# values.
AS_BITS = {"bfloat16": np.uint16, "float8_e4m3fn": np.uint8, "float8_e4m3fnuz": np.uint8,
           "float8_e5m2": np.uint8, "float8_e5m2fnuz": np.uint8, "float4_e2m1fn": np.uint8,
           "float8_e8m0fnu": np.uint8}
AS_VALUES = {"int4": np.int8, "int2": np.int8, "uint4": np.uint8, "uint2": np.uint8}


def uses_no_dtype(g):
    """True when a graph input, output or initializer, or a Cast `to`, has
    an element type of NO_DTYPE: the test is about that type, not the op."""
    for v in list(g.input) + list(g.output):
        if v.type.HasField("tensor_type") and v.type.tensor_type.elem_type in NO_DTYPE:
            return True
    if any(t.data_type in NO_DTYPE for t in g.initializer):
        return True
    for n in g.node:
        for a in n.attribute:
            if n.op_type == "Cast" and a.name == "to" and a.i in NO_DTYPE:
                return True
            if a.type == onnx.AttributeProto.GRAPH and uses_no_dtype(a.g):
                return True
    return False


def safe_name(name):
    """The file name `shardc run` gives an output (tools/run.c): characters
    outside [A-Za-z0-9._-] become '_'; an empty name or one starting with '.'
    gets a leading '_'."""
    s = re.sub(r"[^A-Za-z0-9_.-]", "_", name)
    return "_" + s if not s or s.startswith(".") else s


def load_case(test_dir):
    """(model, [(input name, array)], [(output name, array)]) of data set 0."""
    m = onnx.load(os.path.join(test_dir, "model.onnx"), load_external_data=False)
    ds = os.path.join(test_dir, "test_data_set_0")
    init = {i.name for i in m.graph.initializer}
    in_names = [v.name for v in m.graph.input if v.name not in init]
    ins, outs = [], []
    for j, name in enumerate(in_names):
        p = os.path.join(ds, f"input_{j}.pb")
        if os.path.exists(p):
            ins.append((name, numpy_helper.to_array(onnx.load_tensor(p))))
    for j, v in enumerate(m.graph.output):
        p = os.path.join(ds, f"output_{j}.pb")
        outs.append((v.name, numpy_helper.to_array(onnx.load_tensor(p))))
    return m, ins, outs


def to_npy(arr):
    """The array in a dtype .npy has (AS_BITS, AS_VALUES)."""
    name = str(arr.dtype)
    if name in AS_BITS:
        return arr.view(AS_BITS[name])
    if name in AS_VALUES:
        return arr.astype(AS_VALUES[name])
    return arr


def from_npy(got, want):
    """shardc's output file read back as want's dtype when that is one .npy
    has not (the inverse of to_npy); otherwise unchanged."""
    name = str(want.dtype)
    if name in AS_BITS and got.dtype == AS_BITS[name]:
        return got.view(want.dtype)
    if name in AS_VALUES and got.dtype == AS_VALUES[name]:
        return got.astype(want.dtype)
    return got


def dim_bindings(m, ins):
    """--dim NAME=V for symbolic input dims, from the stored inputs' shapes."""
    dims = {}
    arrays = dict(ins)
    for v in m.graph.input:
        if v.name not in arrays or not v.type.HasField("tensor_type"):
            continue
        shape = v.type.tensor_type.shape
        for k, d in enumerate(shape.dim):
            if d.HasField("dim_param") and d.dim_param and k < arrays[v.name].ndim:
                dims.setdefault(d.dim_param, arrays[v.name].shape[k])
    return dims


def short_error(text, model_path):
    """One line from shardc's stderr: the first 'error:' line, without the
    program name and model path, at most 200 characters."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    pick = next((ln for ln in lines if "error" in ln), lines[0] if lines else "no message")
    pick = pick.replace(model_path + ": ", "").replace(model_path, "MODEL")
    pick = re.sub(r"^shardc:\s*(error:\s*)?", "", pick)
    pick = re.sub(r"\s+", " ", pick)
    return pick[:200] if pick else "no message"


def compare(name, got, want):
    """None if got matches want, else the reason (one line)."""
    if got.shape != want.shape:
        return f"{name}: shape {list(got.shape)} != expected {list(want.shape)}"
    if str(got.dtype) != str(want.dtype):
        return f"{name}: dtype {got.dtype} != expected {want.dtype}"
    if str(want.dtype) in TOL:
        rtol, atol = TOL[str(want.dtype)]
        g = got.astype(np.float64)
        w = want.astype(np.float64)
        gn, wn = np.isnan(g), np.isnan(w)
        if (gn & ~wn).any():
            return f"{name}: NaN at {int((gn & ~wn).sum())} places where a number is expected"
        if (wn & ~gn).any():
            return f"{name}: a number at {int((wn & ~gn).sum())} places where NaN is expected"
        gi, wi = np.isinf(g), np.isinf(w)
        if (gi != wi).any() or (g[wi] != w[wi]).any():
            return f"{name}: infinities differ"
        fin = ~(wn | wi)
        err = np.abs(g[fin] - w[fin])
        bad = err > atol + rtol * np.abs(w[fin])
        if bad.any():
            return (f"{name}: {int(bad.sum())}/{bad.size} values off, max abs err "
                    f"{err.max():.3g} (rtol {rtol:g}, atol {atol:g})")
        return None
    if str(want.dtype) in AS_BITS:  # float8, float4: the same codes (any NaN for NaN)
        g, w = got.astype(np.float64), want.astype(np.float64)
        both_nan = np.isnan(g) & np.isnan(w)
        ok = bool(((got.view(np.uint8) == want.view(np.uint8)) | both_nan).all())
    elif got.dtype.kind in "fc":
        ok = np.array_equal(got.astype(np.float64), want.astype(np.float64), equal_nan=True)
    else:
        ok = np.array_equal(got, want)
    if not ok:
        return f"{name}: {int((got != want).sum())}/{want.size} values differ (exact compare)"
    return None


class Result:
    __slots__ = ("name", "status", "reason", "seconds", "split")

    def __init__(self, name, status, reason="", seconds=0.0):
        self.name, self.status, self.reason, self.seconds = name, status, reason, seconds
        self.split = None  # partitioned runs: split_kind() of the run


SEED_INPUT = re.compile(r"^\s*input %\S+ : \S+ shard<\[([^\]]*)\]", re.M)
NODES_WHOLE = re.compile(r"(\d+) nodes? computed whole")


def split_kind(stderr):
    """What a partitioned run split, from its stderr (`--print-after=seed`
    and the partitioner's fallback warning): 'split' (a graph input split,
    no node computed whole), 'fallback' (a graph input split, but at least
    one node gathers it and every rank computes that node whole) or
    'replicated' (no graph input split: every rank computes everything)."""
    seed = stderr.split("IR after seed", 1)[1] if "IR after seed" in stderr else ""
    seed = seed.split("\n}", 1)[0]
    if not any(d.strip() != "_" for m in SEED_INPUT.finditer(seed) for d in m.group(1).split(",")):
        return "replicated"
    m = NODES_WHOLE.search(stderr)
    return "fallback" if m and int(m.group(1)) > 0 else "split"


def without_ir(stderr):
    """stderr without the IR printed by --print-after (for short_error)."""
    return re.sub(r"// ----- IR after .*?\n}\n", "", stderr, flags=re.S)


# The fewest tests that must run split (split_kind 'split'), as a fraction of
# those run, with the full corpus or a shard of it: a rule or a seed that
# stops splitting shows here even though the outputs stay right. Measured
# with onnx 1.23.2 (2026-12-04), of the 1,804 counted tests: --mesh dp=3
# 691 split (38.3%), 189 split with a fallback, 914 replicated (no input
# dim 0 divides by 3); --split-last 2 359 split (19.9%), 469 with a
# fallback, 966 replicated. In 4 shards (--shard I/4, 451 tests each):
# 168..177 and 76..102. The floors sit a little below the smallest shard.
SPLIT_FLOOR = {"mesh": 0.35, "split-last": 0.15}


NOT_CONST = re.compile(r"input '([^']+)' must be a constant")


MESH = None  # --mesh SPEC: every test runs partitioned over that mesh
SPLIT_LAST = 0  # --split-last N: every input's last dim split N ways (a plan)


def split_last_plan(path, ins, n):
    """A plan (docs/plan-format.md) over the mesh x=n that splits the last
    dim of every input where it divides: sharding rules meet splits on the
    dims that ops reduce, contract, slice and reshape. False, and no file,
    when no input divides (a plan whose axis splits nothing is refused)."""
    import json
    sh = {}
    for name, arr in ins:
        a = np.asarray(arr)
        # float inputs only: integer ones are often shapes, axes or pads that
        # shardc specialises to constants (tools/run.c)
        if a.dtype.kind == "f" and a.ndim >= 1 and a.shape[-1] > 0 and a.shape[-1] % n == 0:
            sh[name] = "[" + ",".join(["_"] * (a.ndim - 1) + ["x"]) + "]"
    if not sh:
        return False  # nothing to split: the test runs on one rank ("replicated")
    with open(path, "w") as f:
        json.dump({"version": 1, "mesh": {"axes": f"x={n}"}, "shardings": sh}, f)
    return True


def run_shardc(shardc, test_dir, name, timeout, threads, freeze=False):
    """One test through `shardc run`. With freeze, an error naming a graph
    input that "must be a constant" (axes, shapes, pads given as graph
    inputs: data-dependent shapes) is retried with that input turned into an
    initializer holding the test's value — an experiment that measures how
    many tests fail only for that reason; never used for the manifest."""
    r = run_shardc_once(shardc, test_dir, name, timeout, threads)
    frozen = []
    while freeze and r.status == "error" and len(frozen) < 4:
        mt = NOT_CONST.search(r.reason)
        if not mt or mt.group(1) in frozen:
            break
        frozen.append(mt.group(1))
        r = run_shardc_once(shardc, test_dir, name, timeout, threads, frozen)
    if frozen:
        r.reason = f"[frozen {', '.join(frozen)}] {r.reason}"
    return r


def freeze_inputs(m, ins, names):
    """The model with the graph inputs in names made initializers."""
    arrays = dict(ins)
    m = onnx.ModelProto.FromString(m.SerializeToString())
    keep = [v for v in m.graph.input if v.name not in names]
    missing = [n for n in names if n not in arrays]
    if missing:
        raise ValueError(f"cannot freeze {missing}: not graph inputs with data")
    del m.graph.input[:]
    m.graph.input.extend(keep)
    for n in names:
        m.graph.initializer.append(numpy_helper.from_array(arrays[n], n))
    return m, [(k, v) for k, v in ins if k not in names]


def run_shardc_once(shardc, test_dir, name, timeout, threads, frozen=()):
    model_path = os.path.join(test_dir, "model.onnx")
    m, ins, outs = load_case(test_dir)
    work = tempfile.mkdtemp(prefix="sc-conf-")
    try:
        if frozen:
            try:
                m, ins = freeze_inputs(m, ins, frozen)
            except ValueError as e:
                return Result(name, "error", str(e))
            model_path = os.path.join(work, "model.onnx")
            onnx.save(m, model_path)
        cmd = [shardc, "run", model_path, "--threads", str(threads),
               "--output-dir", os.path.join(work, "out")]
        if MESH:
            cmd += ["--mesh", MESH]
        if SPLIT_LAST:
            plan = os.path.join(work, "plan.json")
            if split_last_plan(plan, ins, SPLIT_LAST):
                cmd += ["--plan", plan]
        if MESH or SPLIT_LAST:
            cmd += ["--print-after=seed"]  # which inputs split: split_kind()
        for d, v in dim_bindings(m, ins).items():
            cmd += ["--dim", f"{d}={v}"]
        for j, (iname, arr) in enumerate(ins):
            p = os.path.join(work, f"input_{j}.npy")
            np.save(p, to_npy(arr))
            cmd += ["--input", f"{iname}={p}"]
        t0 = time.perf_counter()
        try:
            p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               timeout=timeout)
        except subprocess.TimeoutExpired:
            return Result(name, "timeout", f"no result after {timeout} s", timeout)
        dt = time.perf_counter() - t0
        err = p.stderr.decode(errors="replace")
        kind = split_kind(err) if MESH or SPLIT_LAST else None
        err = without_ir(err)
        if p.returncode < 0:
            sig = -p.returncode
            try:
                signame = signal.Signals(sig).name
            except ValueError:
                signame = f"signal {sig}"
            msg = short_error(err, model_path) if err.strip() else ""
            return Result(name, "crash", f"{signame}" + (f": {msg}" if msg else ""), dt)
        if p.returncode != 0:
            return Result(name, "error", short_error(err, model_path), dt)
        for oname, want in outs:
            f = os.path.join(work, "out", safe_name(oname) + ".npy")
            if not os.path.exists(f):
                return Result(name, "fail", f"{oname}: no output file {os.path.basename(f)}", dt)
            try:
                got = np.load(f, allow_pickle=False)
            except Exception as e:  # a malformed .npy is a failure of shardc
                return Result(name, "fail", f"{oname}: unreadable .npy ({e})", dt)
            got = from_npy(got, want)
            why = compare(oname, got, want)
            if why:
                return Result(name, "fail", why, dt)
        r = Result(name, "pass", "", dt)
        r.split = kind
        return r
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run_ort(test_dir, name, threads):
    """The same test through onnxruntime: checks the harness, not shardc."""
    import onnxruntime as ort
    m, ins, outs = load_case(test_dir)
    t0 = time.perf_counter()
    try:
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.log_severity_level = 3
        sess = ort.InferenceSession(os.path.join(test_dir, "model.onnx"), so,
                                    providers=["CPUExecutionProvider"])
        res = sess.run([o for o, _ in outs], dict(ins))
    except Exception as e:
        return Result(name, "error", re.sub(r"\s+", " ", str(e))[:120],
                      time.perf_counter() - t0)
    dt = time.perf_counter() - t0
    for (oname, want), got in zip(outs, res):
        why = compare(oname, np.asarray(got), want)
        if why:
            return Result(name, "fail", why, dt)
    return Result(name, "pass", "", dt)


def read_manifest(path):
    entries = {}
    if not os.path.exists(path):
        return entries
    for ln in open(path):
        ln = ln.strip()
        if not ln or ln.startswith("#"):
            continue
        parts = ln.split(None, 2)
        entries[parts[0]] = (parts[1], parts[2] if len(parts) > 2 else "")
    return entries


MANIFEST_HEADER = """\
# ONNX backend node tests run through `shardc run` (tests/conformance/README.md).
# One line per test whose ops are all in ir/ops.def: `name status reason`.
#   pass   must pass
#   xfail  known not to pass (reason: shardc's error, or how the numbers differ)
#   opset  supported ops, but an opset shardc does not read: not run
#   dtype  supported ops, but an element type shardc has no dtype for: not run
# NAME@N is test NAME converted down to opset N by onnx.version_converter
# (--opsets; manifest-opsets.txt), against the same expected outputs.
# Regenerate with: tests/conformance/test_node_tests.py --update-manifest
# (review the diff: a pass turned xfail is a regression).
"""


def write_manifest(path, entries):
    with open(path, "w") as f:
        f.write(MANIFEST_HEADER)
        for name in sorted(entries):
            st, why = entries[name]
            f.write(f"{name} {st} {why}".rstrip() + "\n")


def cause_of(r):
    """A coarse cause for grouping failures: the reason with names and numbers
    taken out."""
    s = r.reason
    s = re.sub(r"'[^']*'", "'…'", s)
    s = re.sub(r"\[[^\]]*\]", "[…]", s)
    s = re.sub(r"\b\d+(\.\d+)?(e[-+]?\d+)?\b", "N", s)
    s = re.sub(r"^[\w.:/-]*: ", "", s) if r.status == "fail" else s
    return f"{r.status}: {s}"


def shardc_has_run(shardc):
    try:
        p = subprocess.run([shardc, "run", "--help"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return p.returncode == 0 and b"--output-dir" in p.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shardc", default=os.environ.get("SHARDC"))
    ap.add_argument("--backend", choices=["shardc", "ort"], default="shardc")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="--threads for each shardc run")
    ap.add_argument("--timeout", type=float, default=20.0)
    ap.add_argument("-k", dest="filters", action="append", default=[],
                    help="run only tests whose name contains this (repeatable)")
    ap.add_argument("--manifest", default=DEFAULT_MANIFEST)
    ap.add_argument("--update-manifest", action="store_true")
    ap.add_argument("--cache-dir", default=None,
                    help="where generated node tests go (default $SC_BINARY_DIR or /tmp)")
    ap.add_argument("--corpus", default=None,
                    help="a folder of node tests to use instead of onnx's (one folder per "
                         "test with model.onnx and test_data_set_0/)")
    ap.add_argument("--freeze-shape-inputs", action="store_true",
                    help="experiment: retry tests whose error is an input that must be a "
                         "constant with that input made an initializer (no manifest check)")
    ap.add_argument("--mesh", default=None,
                    help="run every test partitioned over this mesh (e.g. dp=2): the "
                         "tests the manifest says pass must still pass")
    ap.add_argument("--split-last", type=int, default=0,
                    help="run every test partitioned with each input's last dim split this "
                         "many ways (a plan): passing tests must still pass")
    ap.add_argument("--opsets", default=None,
                    help="comma-separated opsets (e.g. 7,8,9,10,11,12): run the counted tests "
                         "converted down to each by onnx.version_converter, as NAME@OPSET "
                         "(use with --manifest tests/conformance/manifest-opsets.txt)")
    ap.add_argument("--shard", default=None, metavar="I/N",
                    help="run only the counted tests whose index (in name order) is I modulo N "
                         "(0 <= I < N): N such runs together run every test once; the "
                         "manifest is then checked for those tests only")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    shard = None
    if args.shard:
        m = re.fullmatch(r"(\d+)/(\d+)", args.shard)
        if not m or not int(m.group(1)) < int(m.group(2)):
            ap.error(f"--shard {args.shard}: want I/N with 0 <= I < N")
        shard = (int(m.group(1)), int(m.group(2)))
    global MESH, SPLIT_LAST
    MESH = args.mesh
    SPLIT_LAST = args.split_last

    if args.backend == "shardc":
        if not args.shardc:
            sys.exit("test_node_tests.py: no shardc binary (--shardc or $SHARDC)")
        if not shardc_has_run(args.shardc):
            print(f"SKIP: {args.shardc} has no `run` command yet")
            return 77

    read_opset_bounds()
    ops = supported_ops()
    cache = args.cache_dir or os.environ.get("SC_BINARY_DIR") or tempfile.gettempdir()
    root = args.corpus or node_data.node_dir(os.path.join(cache, "conformance"))
    names = sorted(n for n in os.listdir(root)
                   if os.path.isfile(os.path.join(root, n, "model.onnx")))
    if not names:
        print(f"FAIL: no node tests in {root} (an empty corpus checks nothing)")
        return 1
    dirs = {n: os.path.join(root, n) for n in names}
    if args.opsets:  # the counted tests, converted down to each opset
        counted = [n for n in names if classify(dirs[n], ops)[0] == "run"]
        dirs = {}
        for t in sorted({int(x) for x in args.opsets.split(",")}, reverse=True):
            cdir = node_data.converted_dir(root, os.path.join(cache, "conformance"), t, counted)
            for n in counted:
                if os.path.isdir(os.path.join(cdir, n)):
                    dirs[f"{n}@{t}"] = os.path.join(cdir, n)
        names = sorted(dirs)
    corpus = set(names)
    if args.filters:
        names = [n for n in names if any(f in n for f in args.filters)]

    kinds = {}
    for n in names:
        if os.path.exists(os.path.join(dirs[n], "NOT_CONVERTIBLE")):
            kinds[n] = "convert"
        else:
            kinds[n], _ = classify(dirs[n], ops)
    todo = [n for n in names if kinds[n] == "run"]
    count = collections.Counter(kinds.values())
    print(f"{len(names)} node tests in {root}{' converted to opsets ' + args.opsets if args.opsets else ''}: "
          f"{len(todo)} to run "
          f"(supported ops, opset {OPSET_MIN}..{OPSET_MAX}); not counted: "
          f"{count['opset']} opset, {count['unsupported']} unsupported op, {count['io']} non-tensor io, "
          f"{count['dtype']} element types shardc has no dtype for"
          f"{', %d not convertible by onnx.version_converter' % count['convert'] if args.opsets else ''}",
          flush=True)

    if not todo:
        print("FAIL: no node test to run" + (" (check -k)" if args.filters else ""))
        return 1
    if shard:
        # by index modulo N over the sorted list: the N shards are disjoint
        # and together are todo (checked here, as each shard sees the list)
        i, n = shard
        parts = [todo[k::n] for k in range(n)]
        if sorted(x for part in parts for x in part) != todo or sum(map(len, parts)) != len(todo):
            print("FAIL: the shards do not cover the tests exactly once")
            return 1
        todo = parts[i]
        mine = set(todo)
        names = [x for x in names if kinds[x] != "run" or x in mine]
        print(f"shard {i}/{n}: {len(todo)} of the {sum(map(len, parts))} tests to run "
              f"(those whose index is {i} modulo {n}; shard sizes "
              f"{', '.join(str(len(p)) for p in parts)})", flush=True)
        if not todo:
            print("FAIL: this shard has no test to run")
            return 1

    t0 = time.perf_counter()
    results = {}

    def one(n):
        d = dirs[n]
        try:
            if args.backend == "ort":
                return run_ort(d, n, args.threads)
            return run_shardc(args.shardc, d, n, args.timeout, args.threads,
                              args.freeze_shape_inputs)
        except Exception as e:  # a harness problem with this test's data
            return Result(n, "error", f"harness: {type(e).__name__}: {e}"[:120])

    with cf.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for r in pool.map(one, todo):
            results[r.name] = r
            if args.verbose or r.status in ("crash", "timeout"):
                print(f"  {r.status:7s} {r.name} ({r.seconds:.2f} s) {r.reason}", flush=True)
    wall = time.perf_counter() - t0

    by = collections.Counter(r.status for r in results.values())
    n_run = len(results)
    pct = 100.0 * by["pass"] / n_run if n_run else 0.0
    secs = sorted(r.seconds for r in results.values())
    med = secs[len(secs) // 2] if secs else 0.0
    print(f"\n{n_run} run in {wall:.1f} s with {args.jobs} workers (median {med:.2f} s "
          f"per test, slowest {secs[-1] if secs else 0:.2f} s)")
    print("  " + ", ".join(f"{by[s]} {s}" for s in ("pass", "fail", "error", "crash", "timeout")))
    print(f"  pass rate over tests of supported ops: {pct:.1f}% (target >= 95%: "
          f"{'met' if pct >= 95.0 else 'NOT met'})")

    if args.opsets:
        print("  per opset (converted tests: pass / run; not convertible):")
        for t in sorted({int(x) for x in args.opsets.split(",")}):
            mine = [r for n, r in results.items() if n.endswith(f"@{t}")]
            nc = sum(1 for n in names if n.endswith(f"@{t}") and kinds[n] == "convert")
            ok = sum(1 for r in mine if r.status == "pass")
            print(f"    opset {t:2d}: {ok} / {len(mine)} pass; {nc} not convertible")

    groups = collections.defaultdict(list)
    for r in results.values():
        if r.status != "pass":
            groups[cause_of(r)].append(r.name)
    if groups:
        print("\nnot passing, grouped by cause:")
        for cause, tests in sorted(groups.items(), key=lambda kv: -len(kv[1])):
            shown = ", ".join(sorted(tests)[:6]) + (" …" if len(tests) > 6 else "")
            print(f"  {len(tests):4d}  {cause}\n        {shown}")

    if args.mesh or args.split_last:
        what = f"--mesh {args.mesh}" if args.mesh else f"--split-last {args.split_last}"
        manifest = read_manifest(args.manifest)
        lost = sorted(n for n, r in results.items()
                      if manifest.get(n, ("",))[0] == "pass" and r.status != "pass")
        print(f"\n{what}: {len(lost)} tests that pass on one rank do not pass "
              f"partitioned")
        for n in lost:
            print(f"  {results[n].status:7s} {n}: {results[n].reason}")
        kinds_run = collections.Counter(r.split for r in results.values() if r.status == "pass")
        mode = "mesh" if args.mesh else "split-last"
        floor = SPLIT_FLOOR[mode] * n_run
        print(f"{what} split summary: {kinds_run['split']} of {n_run} tests ran split, "
              f"{kinds_run['fallback']} split with a fallback (nodes computed whole), "
              f"{kinds_run['replicated']} replicated (no input split); "
              f"{n_run - sum(kinds_run.values())} did not pass"
              + ("" if args.filters else f"; floor {floor:.0f} split "
                 f"({SPLIT_FLOOR[mode]:.0%} of those run)"))
        few = not args.filters and (kinds_run["split"] == 0 or kinds_run["split"] < floor)
        if few:
            print(f"FAIL: {kinds_run['split']} tests ran split, fewer than the floor of "
                  f"{floor:.0f}: a sharding rule or seed stopped splitting (SPLIT_FLOOR)")
        return 0 if not lost and not few and not (by["crash"] or by["timeout"]) else 1

    if args.backend != "shardc" or args.freeze_shape_inputs:
        if args.freeze_shape_inputs:
            nf = sum(1 for r in results.values() if r.status == "pass" and "[frozen" in r.reason)
            print(f"\nexperiment: {nf} tests pass only with shape inputs frozen as constants "
                  f"(manifest not checked)")
        return 0 if not (by["crash"] or by["timeout"]) else 1

    manifest = read_manifest(args.manifest)
    if args.update_manifest:
        for n in names:  # entries of the tests not selected are kept
            manifest.pop(n, None)
            if kinds[n] in ("opset", "dtype"):
                manifest[n] = (kinds[n], "")
            elif n in results:
                r = results[n]
                manifest[n] = ("pass", "") if r.status == "pass" else \
                    ("xfail", f"{r.status}: {r.reason}")
        if not args.filters:  # tests gone from the corpus leave the manifest
            for n in set(manifest) - corpus:
                del manifest[n]
        write_manifest(args.manifest, manifest)
        print(f"\nwrote {args.manifest}")

    problems = []
    for n, r in sorted(results.items()):
        want = manifest.get(n, (None, ""))[0]
        if r.status in ("crash", "timeout"):
            problems.append(f"{n}: {r.status} ({r.reason})")
        elif want is None:
            problems.append(f"{n}: not in the manifest (got {r.status})")
        elif want == "pass" and r.status != "pass":
            problems.append(f"{n}: marked pass, got {r.status}: {r.reason}")
        elif want == "xfail" and r.status == "pass":
            problems.append(f"{n}: marked xfail, now passes")
    for n in names:
        want = manifest.get(n, (None,))[0]
        if kinds[n] != "run" and want in ("pass", "xfail"):
            problems.append(f"{n}: in the manifest as {want}, now not counted ({kinds[n]})")
        elif kinds[n] in ("opset", "dtype") and want != kinds[n]:
            problems.append(f"{n}: not run ({kinds[n]}), but the manifest says "
                            f"{want or 'nothing'}")
    if not args.filters:  # the other way: every entry names a test of the corpus
        for n in sorted(set(manifest) - corpus):
            problems.append(f"{n}: in the manifest as {manifest[n][0]}, but no such test in "
                            f"{root}")
    if problems:
        print(f"\n{len(problems)} manifest mismatches, crashes or timeouts:")
        for p in problems[:60]:
            print("  " + p)
        if len(problems) > 60:
            print(f"  … {len(problems) - 60} more")
        print("If the changes are intended, update the manifest:\n"
              "  $PYTHON tests/conformance/test_node_tests.py --shardc $SHARDC --update-manifest\n"
              "(crashes and timeouts fail whatever the manifest says)")
        return 1
    print("\nmanifest: all statuses as expected")
    return 0


if __name__ == "__main__":
    sys.exit(main())
