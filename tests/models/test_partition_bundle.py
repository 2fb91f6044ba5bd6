"""test_partition_bundle.py — partitioned bundles (docs/bundle.md,
"Partitioned bundles").

  * `shardc compile samples/gpt2.onnx --dim batch=4 --mesh tp=2,pp=2 -o B`
    writes B/partition.json, B/stage0/, B/stage1/ and B/weights/rank0..3.bin,
    with partition.json naming the mesh, axes, stages and each rank's file
    (size and SHA-256 matching the file);
  * `shardc run B --random-inputs 5` gives the outputs of `shardc run
    samples/gpt2.onnx --dim batch=4 --mesh tp=2,pp=2 --random-inputs 5`
    (rtol 1e-5, atol 1e-6), also with --microbatches 2 and, when mpirun is
    installed, under --comm mpi;
  * a corrupted weights/rank1.bin, a truncated one and an edited
    partition.json are refused (exit 1) with a message naming the file;
  * --mesh with a partitioned bundle is a usage error (exit 2).

Environment: SHARDC, SC_SOURCE_DIR. Exit 0 on success, 1 on any failure.
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
from checks import check, finish, skip_part

SHARDC = os.environ.get("SHARDC")
SRC = os.environ.get("SC_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
GPT2 = os.path.join(SRC, "samples", "gpt2.onnx")


def shardc(args, prefix=()):
    env = dict(os.environ)
    if prefix:  # Open MPI's own allocations are not ours to check (ASan builds)
        env["ASAN_OPTIONS"] = ":".join(filter(None, [env.get("ASAN_OPTIONS"), "detect_leaks=0"]))
    return subprocess.run(list(prefix) + [SHARDC] + args, capture_output=True, text=True,
                          timeout=600, env=env)


def logits(d):
    return np.load(os.path.join(d, "logits.npy"))


def same(tag, a, b):
    check(a.shape == b.shape, f"{tag}: shapes {a.shape} vs {b.shape}")
    if a.shape == b.shape:
        check(np.allclose(a, b, rtol=1e-5, atol=1e-6),
              f"{tag}: max abs diff {np.max(np.abs(a - b))}")


def case(tmp, tag, extra, seed):
    b = os.path.join(tmp, tag)
    r = shardc(["compile", GPT2, "--dim", "batch=4"] + extra + ["-o", b])
    if not check(r.returncode == 0, f"{tag}: compile: {r.stderr}"):
        return None
    ref, got = os.path.join(tmp, tag + ".ref"), os.path.join(tmp, tag + ".got")
    r = shardc(["run", GPT2, "--dim", "batch=4"] + extra +
               ["--random-inputs", str(seed), "--output-dir", ref, "-q"])
    check(r.returncode == 0, f"{tag}: run model: {r.stderr}")
    r = shardc(["run", b, "--random-inputs", str(seed), "--output-dir", got, "-q"])
    if check(r.returncode == 0, f"{tag}: run bundle: {r.stderr}"):
        same(tag, logits(got), logits(ref))
    return b, ref


def main():
    if not SHARDC:
        print("SHARDC not set")
        return 1
    tmp = tempfile.mkdtemp(prefix="sc_pbundle_")
    try:
        res = case(tmp, "tp2pp2", ["--mesh", "tp=2,pp=2"], 5)
        if res is None:
            return 1
        b, ref = res
        for f in ["partition.json", "stage0/manifest.json", "stage1/kernels.o"] + \
                 [f"weights/rank{r}.bin" for r in range(4)]:
            check(os.path.isfile(os.path.join(b, f)), f"missing {f}")
        pj = json.load(open(os.path.join(b, "partition.json")))
        check(pj["format"] == "shardc-partition" and pj["version"] == 1, "format/version")
        check(pj["mesh"] == "tp=2,pp=2", f"mesh {pj['mesh']}")
        check(pj["pp_axis"] == "pp" and pj["tp_axis"] == "tp" and pj["dp_axis"] is None, "axes")
        check(pj["n_stages"] == 2 and pj["microbatches"] == 1, "counts")
        check([i["name"] for i in pj["inputs"]] == ["input_ids"], "inputs")
        check(pj["inputs"][0]["shape"] == [4, 16], f"input shape {pj['inputs'][0]['shape']}")
        check(pj["stages"][1]["outputs"] == ["logits"], "stage 1 outputs")
        # tp=2,pp=2: pp is the minor axis, rank r is in stage r % 2
        check([r["stage"] for r in pj["ranks"]] == [0, 1, 0, 1], "rank stages")
        for r in pj["ranks"]:
            data = open(os.path.join(b, r["file"]), "rb").read()
            check(len(data) == r["bytes"], f"{r['file']}: size")
            check(hashlib.sha256(data).hexdigest() == r["sha256"], f"{r['file']}: sha256")
            check(len(r["consts"]) > 0, f"{r['file']}: no pieces")
        # tp ranks of one stage hold different pieces
        check(pj["ranks"][0]["sha256"] != pj["ranks"][2]["sha256"], "tp pieces differ")

        case(tmp, "mb2", ["--mesh", "pp=2,tp=2", "--microbatches", "2"], 3)

        if shutil.which("mpirun"):
            p = ["mpirun", "--oversubscribe", "-np", "4"]
            if os.getuid() == 0:
                p.append("--allow-run-as-root")
            got = os.path.join(tmp, "mpi.got")
            r = shardc(["run", b, "--comm", "mpi", "--random-inputs", "5", "--output-dir", got,
                        "-q"], prefix=p)
            if check(r.returncode == 0, f"mpi: {r.stderr}"):
                same("mpi", logits(got), logits(ref))
        else:
            skip_part("the bundle under mpirun (--comm mpi)", "mpirun not found")

        # corruption: one flipped byte, a truncated file, an edited index
        def bad(tag, edit, *needles):
            c = os.path.join(tmp, "bad_" + tag)
            shutil.copytree(b, c)
            edit(c)
            r = shardc(["run", c, "--random-inputs", "5", "--output-dir",
                        os.path.join(tmp, "o_" + tag)])
            check(r.returncode == 1, f"{tag}: exit {r.returncode}")
            for needle in needles:
                check(needle in r.stderr, f"{tag}: message {r.stderr!r} lacks {needle!r}")

        def flip(c):
            path = os.path.join(c, "weights", "rank1.bin")
            data = bytearray(open(path, "rb").read())
            data[100] ^= 0xFF
            open(path, "wb").write(bytes(data))

        def truncate(c):
            path = os.path.join(c, "weights", "rank1.bin")
            data = open(path, "rb").read()
            open(path, "wb").write(data[:-64])

        def edit_index(c):
            path = os.path.join(c, "partition.json")
            j = json.load(open(path))
            j["ranks"][1]["consts"][0]["offset"] += 64
            json.dump(j, open(path, "w"))

        def wrong_dir(c):
            path = os.path.join(c, "partition.json")
            j = json.load(open(path))
            j["stages"][0]["dir"] = "../stage0"
            json.dump(j, open(path, "w"))

        bad("flip", flip, "weights/rank1.bin: ", "SHA-256", "corrupted bundle")
        bad("truncate", truncate, "weights/rank1.bin")
        bad("index", edit_index, "ranks[1].consts[0]")
        bad("dir", wrong_dir, "'dir' must be \"stage0\"")

        r = shardc(["run", b, "--mesh", "tp=2,pp=2", "--random-inputs", "5"])
        check(r.returncode == 2, f"--mesh with a bundle: exit {r.returncode}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
