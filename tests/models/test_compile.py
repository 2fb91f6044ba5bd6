"""test_compile.py — `shardc compile` bundles, run back with `shardc run`.

  * cpu: `shardc compile samples/mlp.onnx --dim batch=2 --target cpu -o B`
    writes manifest.json, program.json, weights.bin and kernels.o, each
    listed in the manifest with its size and SHA-256 (checked here with
    hashlib); `shardc run B --input x=X.npy` gives bit-identical outputs to
    `shardc run samples/mlp.onnx --dim batch=2 --input x=X.npy` (same kernels,
    same BLAS calls), and both agree with onnxruntime within rtol 1e-4,
    atol 1e-5 (float32 GEMM reassociation), on three seeded random inputs;
  * the GPT-2 sample through a bundle equals the direct run too (a program
    with row kernels, views and integer inputs);
  * cuda: `--target cuda` writes kernels.cu and kernels.sm_80.ptx /
    kernels.sm_90.ptx that hold `.visible .entry` for every kernel of the
    program (skipped when this shardc has no NVRTC); `shardc run B` runs it
    on the cuda device (here: the emulated GPU, SHARDC_CUDA_EMU=1, within
    1e-5 of `--device cpu` on the same bundle), and says "no CUDA driver"
    without one;
  * corruption: one flipped byte in weights.bin (and a truncated
    program.json, an edited manifest) makes `shardc run B` exit 1 with an
    error naming the file — no crash, no output;
  * `shardc run B --dim batch=4` is a usage error (shapes are fixed);
  * the kernels run from kernels.o (`shardc run B --verbose` says "kernels:
    loaded from kernels.o"; the direct run says "JIT-compiled"), the
    manifest records the CPU and features kernels.o was compiled for, and a
    kernels.o lacking a kernel's symbol (renamed with objcopy, manifest hash
    updated), a feature the host lacks, or a manifest without "cpu" are
    clear errors (exit 1).

Environment: SHARDC, SC_SOURCE_DIR. Exit 0 on success, 1 on any failure.
"""
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np
from checks import check, finish, has_cuda_target, skip_part

SHARDC = os.environ.get("SHARDC")
SRC = os.environ.get("SC_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
MLP = os.path.join(SRC, "samples", "mlp.onnx")
GPT2 = os.path.join(SRC, "samples", "gpt2.onnx")


def run(args, **kw):
    return subprocess.run([SHARDC] + args, capture_output=True, text=True, timeout=300, **kw)


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def check_manifest(bundle, target, want_files):
    with open(os.path.join(bundle, "manifest.json")) as f:
        m = json.load(f)
    check(m["format"] == "shardc-bundle" and m["format_version"] == 1, "manifest format")
    check(m["target"] == target, "manifest target %s" % m["target"])
    names = [e["name"] for e in m["files"]]
    check(sorted(names) == sorted(want_files), "manifest files %s" % names)
    for e in m["files"]:
        p = os.path.join(bundle, e["name"])
        check(os.path.getsize(p) == e["bytes"], "%s size" % e["name"])
        check(sha256(p) == e["sha256"], "%s sha256" % e["name"])
    return m


def compile_cpu(tmp):
    bundle = os.path.join(tmp, "mlp.cpu")
    r = run(["compile", MLP, "--dim", "batch=2", "--target", "cpu", "-o", bundle])
    if not check(r.returncode == 0, "compile cpu: %s" % r.stderr):
        return None
    m = check_manifest(bundle, "cpu", ["program.json", "weights.bin", "kernels.o"])
    check(m["inputs"] == [{"name": "x", "dtype": "f32", "shape": [2, 64]}], "manifest inputs")
    check(m["outputs"] == [{"name": "y", "dtype": "f32", "shape": [2, 10]}], "manifest outputs")
    with open(os.path.join(bundle, "kernels.o"), "rb") as f:
        check(f.read(4) == b"\x7fELF", "kernels.o is an ELF object")
    # weights.bin holds the model's initializers at the recorded offsets.
    import onnx
    from onnx import numpy_helper
    model = onnx.load(MLP)
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    with open(os.path.join(bundle, "program.json")) as f:
        prog = json.load(f)
    with open(os.path.join(bundle, "weights.bin"), "rb") as f:
        wb = f.read()
    n_const = 0
    for b in prog["buffers"]:
        if b["kind"] != "const":
            continue
        n_const += 1
        off = b["weights_offset"]
        check(off % 64 == 0, "const %s aligned" % b["name"])
        if b["name"] in inits:
            a = inits[b["name"]]
            got = np.frombuffer(wb[off:off + b["bytes"]], dtype=a.dtype).reshape(a.shape)
            check(np.array_equal(got, a), "weights of %s" % b["name"])
    check(n_const >= 6, "the MLP's 6 weights are constants (%d)" % n_const)
    return bundle


def run_outputs(model_args, inputs, tmp, tag):
    out = os.path.join(tmp, "out_" + tag)
    shutil.rmtree(out, ignore_errors=True)
    args = ["run"] + model_args + ["--output-dir", out]
    for name, path in inputs.items():
        args += ["--input", "%s=%s" % (name, path)]
    r = run(args)
    if not check(r.returncode == 0, "run %s: %s" % (tag, r.stderr)):
        return None
    return {f[:-4]: np.load(os.path.join(out, f)) for f in os.listdir(out) if f.endswith(".npy")}


def test_cpu_bundle(tmp, bundle):
    import onnxruntime as ort
    sess = ort.InferenceSession(MLP, providers=["CPUExecutionProvider"])
    for seed in (0, 1, 2):
        rng = np.random.default_rng(seed)
        x = rng.uniform(-1, 1, size=(2, 64)).astype(np.float32)
        xp = os.path.join(tmp, "x%d.npy" % seed)
        np.save(xp, x)
        got = run_outputs([bundle], {"x": xp}, tmp, "bundle%d" % seed)
        ref = run_outputs([MLP, "--dim", "batch=2"], {"x": xp}, tmp, "onnx%d" % seed)
        if got is None or ref is None:
            continue
        check(set(got) == {"y"}, "bundle outputs %s" % list(got))
        y = got.get("y")
        if y is None:
            continue
        check(not np.isnan(y).any(), "NaN in the bundle's output")
        check(y.shape == (2, 10) and y.dtype == np.float32, "output shape/dtype %s" % (y.shape,))
        check(np.array_equal(y, ref["y"]), "seed %d: bundle run differs from the model run" % seed)
        ort_y = sess.run(None, {"x": x})[0]
        ok = np.allclose(y, ort_y, rtol=1e-4, atol=1e-5)
        check(ok, "seed %d: bundle vs onnxruntime max diff %g" % (seed, np.abs(y - ort_y).max()))


def test_gpt2_bundle(tmp):
    bundle = os.path.join(tmp, "gpt2.cpu")
    r = run(["compile", GPT2, "--dim", "batch=1", "-o", bundle])
    if not check(r.returncode == 0, "compile gpt2: %s" % r.stderr):
        return
    outs = []
    for tag, args in (("gpt2b", [bundle]), ("gpt2o", [GPT2, "--dim", "batch=1"])):
        out = os.path.join(tmp, tag)
        r = run(["run"] + args + ["--random-inputs", "5", "--output-dir", out])
        if not check(r.returncode == 0, "run %s: %s" % (tag, r.stderr)):
            return
        outs.append({f: np.load(os.path.join(out, f)) for f in os.listdir(out)})
    check(outs[0].keys() == outs[1].keys() and len(outs[0]) > 0, "gpt2 output names")
    for k in outs[0]:
        check(not np.isnan(outs[0][k]).any(), "gpt2 %s NaN" % k)
        check(np.array_equal(outs[0][k], outs[1][k]), "gpt2 %s: bundle differs" % k)


def test_cuda_bundle(tmp):
    if not has_cuda_target(SHARDC):
        skip_part("the CUDA bundle", "this shardc has no NVRTC (built without the cuda target)")
        return
    bundle = os.path.join(tmp, "mlp.cuda")
    r = run(["compile", MLP, "--dim", "batch=2", "--target", "cuda", "--gpu-arch", "sm_80,sm_90",
             "-o", bundle])
    if not check(r.returncode == 0, "compile cuda: %s" % r.stderr):
        return
    m = check_manifest(bundle, "cuda", ["program.json", "weights.bin", "kernels.cu",
                                        "kernels.sm_80.ptx", "kernels.sm_90.ptx"])
    check(m["archs"] == ["sm_80", "sm_90"], "archs %s" % m["archs"])
    with open(os.path.join(bundle, "program.json")) as f:
        kernels = [k["name"] for k in json.load(f)["kernels"]]
    check(len(kernels) > 0, "the MLP has kernels")
    src = open(os.path.join(bundle, "kernels.cu")).read()
    for arch in ("sm_80", "sm_90"):
        ptx = open(os.path.join(bundle, "kernels.%s.ptx" % arch)).read()
        check(".target %s" % arch in ptx, "%s: .target line" % arch)
        entries = re.findall(r"\.visible \.entry (\w+)\(", ptx)
        check(sorted(entries) == sorted(kernels), "%s entries %s vs kernels %s" % (arch, entries, kernels))
    for k in kernels:
        check(re.search(r'extern "C" __global__ .*\b%s\(' % k, src) is not None, "kernels.cu defines %s" % k)
    # a cuda bundle runs on the cuda device by default: its kernels.cu on the
    # emulated GPU, equal to the same bundle on --device cpu (the kir, JIT)
    outs = {}
    for tag, extra, env in (("cpu", ["--device", "cpu"], {}),
                            ("emu", ["--no-allow-tf32"], {"SHARDC_CUDA_EMU": "1"})):
        d = os.path.join(tmp, "cuda-run-" + tag)
        r = run(["run", bundle, "--random-inputs", "1", "-q", "--output-dir", d] + extra,
                env=dict(os.environ, **env))
        if check(r.returncode == 0, "running the cuda bundle (%s): %s" % (tag, r.stderr[-300:])):
            outs[tag] = np.load(os.path.join(d, "y.npy"))
    if len(outs) == 2:
        err = float(np.max(np.abs(outs["cpu"] - outs["emu"])) / np.max(np.abs(outs["cpu"])))
        check(err <= 1e-5, "cuda bundle, emulated vs cpu: max error %.3g (tolerance 1e-5)" % err)
    try:
        import ctypes
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        r = run(["run", bundle, "--random-inputs", "1", "-q", "--output-dir",
                 os.path.join(tmp, "cuda-run-none")], env=dict(os.environ, SHARDC_CUDA_EMU="0"))
        check(r.returncode == 1 and "no CUDA driver" in r.stderr,
              "a cuda bundle without a driver: exit %d: %s" % (r.returncode, r.stderr[-300:]))


def corrupt(bundle, name, how):
    p = os.path.join(bundle, name)
    data = bytearray(open(p, "rb").read())
    orig = bytes(data)
    if how == "flip":
        data[len(data) // 2] ^= 0x01
    elif how == "truncate":
        data = data[: len(data) - 7]
    else:
        data = how(data)
    open(p, "wb").write(bytes(data))
    return orig


def test_corruption(tmp, bundle, xp):
    bad = os.path.join(tmp, "bad")
    cases = [
        ("weights.bin", "flip", "weights.bin"),
        ("weights.bin", "truncate", "weights.bin"),
        ("program.json", "flip", "program.json"),
        ("kernels.o", "flip", "kernels.o"),
        ("manifest.json", "truncate", "manifest.json"),
        ("manifest.json",
         lambda d: bytearray(bytes(d).replace(b'"arena_bytes": ', b'"arena_bytes": 1')),
         "arena_bytes"),
    ]
    for name, how, needle in cases:
        shutil.rmtree(bad, ignore_errors=True)
        shutil.copytree(bundle, bad)
        corrupt(bad, name, how)
        out = os.path.join(tmp, "out_bad")
        shutil.rmtree(out, ignore_errors=True)
        r = run(["run", bad, "--input", "x=" + xp, "--output-dir", out])
        what = "%s %s" % (name, how if isinstance(how, str) else "edit")
        check(r.returncode == 1, "corrupted %s: exit %d (want 1)" % (what, r.returncode))
        check(r.stderr.startswith("shardc: error: ") and needle in r.stderr,
              "corrupted %s: message %r" % (what, r.stderr))
        check(not os.path.exists(os.path.join(out, "y.npy")), "corrupted %s: wrote output" % what)
    r = run(["run", bundle, "--dim", "batch=4", "--input", "x=" + xp])
    check(r.returncode == 2 and "--dim" in r.stderr, "--dim on a bundle: %r" % r.stderr)


def rewrite_manifest(bundle, edit):
    """Applies edit(manifest dict) and re-hashes every listed file, so that
    only the intended inconsistency remains."""
    mp = os.path.join(bundle, "manifest.json")
    with open(mp) as f:
        m = json.load(f)
    edit(m)
    for e in m["files"]:
        p = os.path.join(bundle, e["name"])
        e["bytes"] = os.path.getsize(p)
        e["sha256"] = sha256(p)
    with open(mp, "w") as f:
        json.dump(m, f, indent=2)


def test_object_kernels(tmp, bundle, xp):
    out = os.path.join(tmp, "out_obj")
    r = run(["run", bundle, "--input", "x=" + xp, "--output-dir", out, "--verbose"])
    check(r.returncode == 0 and "kernels: loaded from kernels.o" in r.stderr,
          "bundle run --verbose: %r" % r.stderr)
    r = run(["run", MLP, "--dim", "batch=2", "--input", "x=" + xp, "--output-dir", out, "-v"])
    check(r.returncode == 0 and "JIT-compiled" in r.stderr and "kernels.o" not in r.stderr,
          "model run --verbose: %r" % r.stderr)
    with open(os.path.join(bundle, "manifest.json")) as f:
        m = json.load(f)
    cpu = m.get("cpu", {})
    check(isinstance(cpu.get("name"), str) and cpu["name"] != "", "manifest cpu name %r" % cpu)
    feats = cpu.get("features", "")
    check(isinstance(feats, str) and re.search(r"(^|,)\+\w", feats) is not None,
          "manifest cpu features %r" % feats[:80])
    with open(os.path.join(bundle, "program.json")) as f:
        kname = json.load(f)["kernels"][0]["name"]

    bad = os.path.join(tmp, "bad_obj")
    def fresh():
        shutil.rmtree(bad, ignore_errors=True)
        shutil.copytree(bundle, bad)
        shutil.rmtree(out, ignore_errors=True)

    def expect_error(what, needles):
        r = run(["run", bad, "--input", "x=" + xp, "--output-dir", out])
        check(r.returncode == 1 and r.stderr.startswith("shardc: error: ") and
              all(n in r.stderr for n in needles), "%s: exit %d, %r" % (what, r.returncode, r.stderr))
        check(not os.path.exists(os.path.join(out, "y.npy")), "%s: wrote output" % what)

    objcopy = shutil.which("objcopy")
    if objcopy:
        fresh()
        ko = os.path.join(bad, "kernels.o")
        subprocess.run([objcopy, "--redefine-sym", "%s=%s_renamed" % (kname, kname), ko],
                       check=True)
        rewrite_manifest(bad, lambda m: None)
        expect_error("kernels.o without %s" % kname, ["kernels.o", "'%s'" % kname, "recompile"])
    else:
        skip_part("the missing-symbol case", "no objcopy")

    fresh()
    def add_feature(m):
        m["cpu"]["features"] += ",+shardc-no-such-feature"
    rewrite_manifest(bad, add_feature)
    expect_error("feature the host lacks", ["shardc-no-such-feature", "recompile"])

    fresh()
    rewrite_manifest(bad, lambda m: m.pop("cpu"))
    expect_error("manifest without cpu", ["'cpu'"])


def main():
    if not SHARDC or not os.path.exists(SHARDC):
        print("SHARDC not set")
        return 1
    tmp = tempfile.mkdtemp(prefix="shardc_compile_")
    try:
        bundle = compile_cpu(tmp)
        if bundle:
            test_cpu_bundle(tmp, bundle)
            test_corruption(tmp, bundle, os.path.join(tmp, "x0.npy"))
            test_object_kernels(tmp, bundle, os.path.join(tmp, "x0.npy"))
        test_gpt2_bundle(tmp)
        test_cuda_bundle(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
