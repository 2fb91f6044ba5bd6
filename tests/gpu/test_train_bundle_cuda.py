"""test_train_bundle_cuda.py — the CUDA training bundle (docs/bundle.md,
"Training bundles"): `shardc compile MODEL --train --target cuda --gpu-arch
sm_90` compiles the training step once, here, into the program, its CUDA C,
PTX and NVRTC's sm_90 CUBIN, and `shardc train BUNDLE` trains it on a GPU
without compiling (ctest gpu.test_train_bundle_cuda, 17 to 19 s on the loaded 2-core
machine):

  1. the bundle of samples/make_llama.py's llama-tiny (bf16, AdamW, batch 2,
     --recompute none: run-all's train-speed row) lists kernels.cu,
     kernels.sm_90.ptx and kernels.sm_90.cubin in its manifest; the CUBIN is
     an ELF64 executable for the CUDA machine (e_machine 190) whose flags
     name sm_90, and it holds a code section (.text.NAME) for every kernel
     of program.json;
  2. on the emulated GPU (SHARDC_CUDA_EMU=1; it runs the bundle's CUDA C,
     as it refuses CUBIN images) `train BUNDLE` trains bit for bit as `train
     MODEL --device cuda` with the same options: the same --log-json losses
     and gradient norms over 3 steps (seeded token ids), and the same
     checkpoint files byte for byte; the library's loader (sc_training_load,
     through the Python package) trains it there too, step 1's loss the
     CLI's (as float32);
  3. refusals: the bundle on --device cpu (exit 2, naming --device cuda), an
     option compiled into it (--precision, exit 2), a GPU older than its
     code (--gpu-arch sm_80: exit 1, naming sm_90 and the remedy); a later
     one (--gpu-arch sm_100) runs, as its PTX does there; a CUBIN that is
     not an ELF image (its hash rewritten into the manifest: exit 1 naming
     the file), and a CUBIN changed under the manifest's hash (exit 1,
     "corrupted bundle").
"""
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(SRC, "samples"))
sys.path.insert(0, HERE)
SHARDC = os.environ.get("SHARDC", os.path.join(SRC, "build", "shardc"))
EM_CUDA = 190
STEP = ["--precision", "bf16", "--optimizer", "adamw", "--dim", "batch=2", "--recompute", "none"]

failures = []


def check(ok, what):
    print(("ok: " if ok else "FAIL: ") + what, flush=True)
    if not ok:
        failures.append(what)
    return ok


def shardc(args, emu=True):
    env = dict(os.environ)
    if emu:
        env["SHARDC_CUDA_EMU"] = "1"
    return subprocess.run([SHARDC] + args, capture_output=True, text=True, env=env, timeout=600)


def elf_sections(data):
    """(e_machine, e_flags, section names) of an ELF64 little-endian image."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return None, None, []
    e_type, e_machine = struct.unpack_from("<HH", data, 16)
    e_shoff, = struct.unpack_from("<Q", data, 40)
    e_flags, = struct.unpack_from("<I", data, 48)
    e_shentsize, e_shnum, e_shstrndx = struct.unpack_from("<HHH", data, 58)
    heads = [struct.unpack_from("<IIQQQQ", data, e_shoff + i * e_shentsize)
             for i in range(e_shnum)]
    str_off, str_size = heads[e_shstrndx][4], heads[e_shstrndx][5]
    strtab = data[str_off:str_off + str_size]
    names = [strtab[h[0]:strtab.index(b"\0", h[0])].decode() for h in heads]
    return e_machine, e_flags, names


def rehash(bundle, name):
    """Writes name's new size and SHA-256 into the bundle's manifest."""
    path = os.path.join(bundle, "manifest.json")
    m = json.load(open(path))
    data = open(os.path.join(bundle, name), "rb").read()
    for f in m["files"]:
        if f["name"] == name:
            f["bytes"], f["sha256"] = len(data), hashlib.sha256(data).hexdigest()
    json.dump(m, open(path, "w"), indent=2)


def main():
    import make_llama
    import train_speed
    tmp = tempfile.mkdtemp(prefix="train-bundle-cuda-")
    try:
        model = make_llama.write_model("llama-tiny", tmp, seed=0)
        c = dict(make_llama.MODELS["llama-tiny"], name="llama-tiny")
        ids, labels = train_speed.write_data(tmp, "llama-tiny", c, 2, 3)
        bundle = os.path.join(tmp, "llama-tiny.bundle")
        r = shardc(["compile", model, "--train", "--target", "cuda", "--gpu-arch", "sm_90",
                    "-o", bundle] + STEP, emu=False)
        if r.returncode != 0 and "libnvrtc" in r.stderr:
            print(f"skip: no NVRTC here: {r.stderr[-300:]}")
            return 77
        if not check(r.returncode == 0, f"compile --train --target cuda: {r.stderr[-500:]}"):
            return 1

        # 1. the files and the CUBIN
        man = json.load(open(os.path.join(bundle, "manifest.json")))
        names = {f["name"] for f in man["files"]}
        want = {"program.json", "weights.bin", "kernels.cu", "kernels.sm_90.ptx",
                "kernels.sm_90.cubin", "params.bin", "training.json"}
        check(man.get("kind") == "training" and man["target"] == "cuda" and
              man["archs"] == ["sm_90"] and names == want,
              f"manifest: kind {man.get('kind')}, target {man['target']}, archs {man['archs']}, "
              f"files {sorted(names)}")
        cubin = open(os.path.join(bundle, "kernels.sm_90.cubin"), "rb").read()
        machine, flags, sections = elf_sections(cubin)
        kernels = [k["name"] for k in json.load(open(os.path.join(bundle, "program.json")))
                   ["kernels"]]
        missing = [k for k in kernels if ".text." + k not in sections]
        check(machine == EM_CUDA and flags is not None and (flags >> 8) & 0xff == 90,
              f"kernels.sm_90.cubin: {len(cubin)} bytes, ELF machine {machine} (CUDA: "
              f"{EM_CUDA}), flags {flags:#x} (sm_{(flags or 0) >> 8 & 0xff})")
        check(kernels and not missing,
              f"the CUBIN has a code section for each of the {len(kernels)} kernels of "
              f"program.json (missing: {missing[:5]})")

        # 2. bit for bit against compiling on the spot (emulated GPU)
        run = ["--data", f"input_ids={ids}", "--labels", labels, "--steps", "3", "--lr", "3e-4"]
        logs, saves = {}, {}
        for how, head in (("model", [model, "--device", "cuda"] + STEP), ("bundle", [bundle])):
            logs[how] = os.path.join(tmp, how + ".jsonl")
            saves[how] = os.path.join(tmp, how + ".ckpt")
            r = shardc(["train"] + head + run + ["--log-json", logs[how], "--save", saves[how]])
            check(r.returncode == 0, f"train {how} on the emulated GPU: {r.stderr[-500:]}")
        rows = {h: [json.loads(x) for x in open(p)] if os.path.exists(p) else []
                for h, p in logs.items()}
        key = [(x["loss"], x["grad_norm"]) for x in rows["model"]]
        check(len(key) == 3 and all(x[0] is not None and x[0] == x[0] for x in key) and
              key == [(x["loss"], x["grad_norm"]) for x in rows["bundle"]],
              f"losses and gradient norms equal: {key} and "
              f"{[(x['loss'], x['grad_norm']) for x in rows['bundle']]}")
        # the library's sc_training_load (the Python package) trains it on the GPU too
        lib = os.path.join(os.path.dirname(SHARDC), "libshardc.so")
        if os.path.exists(lib):
            code = ("import sys, numpy as np, shardc; t = shardc.load_training(sys.argv[1]); "
                    "r = t.step({'input_ids': np.load(sys.argv[2])[:2]}, "
                    "labels=np.load(sys.argv[3])[:2], lr=3e-4); print(repr(r.loss))")
            env = dict(os.environ, SHARDC_CUDA_EMU="1", SHARDC_LIBRARY=lib,
                       PYTHONPATH=os.path.join(SRC, "python"))
            r = subprocess.run([sys.executable, "-c", code, bundle, ids, labels],
                               capture_output=True, text=True, env=env, timeout=600)
            f32 = lambda x: struct.unpack("<f", struct.pack("<f", x))[0]  # noqa: E731
            check(r.returncode == 0 and key and
                  f32(float(r.stdout.strip() or "nan")) == f32(key[0][0]),
                  f"sc_training_load (Python) on the emulated GPU: step 1's loss "
                  f"{r.stdout.strip()} (the CLI's {key[0][0] if key else None}) "
                  f"{r.stderr[-300:]}")
        else:
            print(f"skip: no {lib}: the library's loader not checked")
        files = sorted(os.listdir(saves["model"])) if os.path.isdir(saves["model"]) else []
        same = [f for f in files if open(os.path.join(saves["model"], f), "rb").read() ==
                open(os.path.join(saves["bundle"], f), "rb").read()]
        check(files and same == files, f"checkpoints equal byte for byte: {same} of {files}")

        # 3. refusals
        r = shardc(["train", bundle, "--device", "cpu"] + run)
        check(r.returncode == 2 and "trains on --device cuda" in r.stderr,
              f"--device cpu refused (rc {r.returncode}): {r.stderr.strip()[-300:]}")
        r = shardc(["train", bundle, "--precision", "fp32"] + run)
        check(r.returncode == 2 and "--precision is compiled into the bundle" in r.stderr,
              f"--precision refused (rc {r.returncode}): {r.stderr.strip()[-300:]}")
        r = shardc(["train", bundle, "--gpu-arch", "sm_80"] + run)
        check(r.returncode == 1 and "compiled for sm_90" in r.stderr and
              "--gpu-arch sm_80" in r.stderr,
              f"an sm_80 GPU refused (rc {r.returncode}): {r.stderr.strip()[-300:]}")
        r = shardc(["train", bundle, "--gpu-arch", "sm_100", "--steps", "1"] + run[:-4])
        check(r.returncode == 0, f"an sm_100 GPU runs its PTX (rc {r.returncode}): "
              f"{r.stderr.strip()[-300:]}")
        bad = os.path.join(tmp, "bad.bundle")
        shutil.copytree(bundle, bad)
        path = os.path.join(bad, "kernels.sm_90.cubin")
        open(path, "wb").write(b"not an ELF" + cubin[10:])
        r = shardc(["train", bad] + run)
        check(r.returncode == 1 and "corrupted bundle" in r.stderr and
              "kernels.sm_90.cubin" in r.stderr,
              f"a changed CUBIN refused (rc {r.returncode}): {r.stderr.strip()[-300:]}")
        rehash(bad, "kernels.sm_90.cubin")
        r = shardc(["train", bad] + run)
        check(r.returncode == 1 and "kernels.sm_90.cubin is not an ELF image" in r.stderr,
              f"a CUBIN that is no ELF refused (rc {r.returncode}): {r.stderr.strip()[-300:]}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{len(failures)} failures" if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
