"""test_direct_conv.py — the CPU device's direct convolutions (oneDNN,
runtime/cpu_conv.c) against onnxruntime, and the products it leaves to the
im2col GEMM.

Each case is a Conv (weights and bias as initializers, so constants) with
a Relu or a residual Add + Relu after it, built with onnx.helper, run by
`shardc run` (--no-fuse and fused) and by onnxruntime on the same seeded
inputs (uniform in ±[0.05, 2), never zero); outputs within rtol 1e-4,
atol 1e-4 (sums of up to 784 products of order 1, in other orders), no
NaN. The cases cover 3x3 with padding, strides, dilations, asymmetric
pads, auto_pad SAME_UPPER, a 7x7 first layer on 3 channels, a 1x1 stride-2
downsample, no bias, a residual add (the GEMM's beta of 1), batch 1 to 8
and 16 to 64 output channels.

Then, from `SHARDC_PROFILE=1 shardc run --repeat 2` on the same models:
every case above runs as a direct convolution on a CPU with AVX2 (oneDNN
has JIT kernels for it; elsewhere it may decline and the GEMM runs, which
is then checked instead), its pad and im2col steps are skipped (and, with a
bias, the kernel that would fill the output with it: the convolution adds
its bias itself), and a
conv with 24 output channels (not a multiple of 16) or two groups stays
an im2col GEMM and is still right. Finally a direct convolution gives
bit-identical outputs with 1 and 2 threads, and a compiled bundle of it
(program.json carries the convolution) runs it directly with the same
outputs.

Blocked activations (docs/runtime.md#blocked-activations): a chain of
residual blocks between a max-pool (which writes the chain's first buffer)
and a BatchNormalization and a global average pool (which read its last),
batch 2 on 7x7 images (49 pixels: not a whole number of 8-pixel blocks;
a plane that small puts both images in one tile), of 16 channels (one
tile, written in place) and of 64 (two tiles, copied image by image),
fused and --no-fuse (where the BatchNormalization reads its input in place
of its output): equal to onnxruntime, its inner convolutions hold their
input and output blocked (the profile's note says so; unfused, where the
BatchNormalization reads in place, only those of the inner blocks), and the outputs
are bit-identical to those with every buffer in NCHW
(SHARDC_CONV_LAYOUT=nchw), with 1 and 2 threads.

Epilogues on each tile (docs/runtime.md#epilogues-on-each-tile): a
residual convolution + add + ReLU, batch 3 with 32 channels on 9x9 (the
epilogue on whole images) and batch 2 with 64 channels on 7x7 (on each
image's part of a two-image tile): equal to onnxruntime; on a CPU with
AVX2 the profile notes "epilogue per tile" on the step; outputs
bit-identical to those with the epilogue after the last tile
(SHARDC_EPILOGUE_TILES=0, whose profile notes none), with 1 and 2 threads.

Max-pools (docs/runtime.md#max-pools): ResNet's stem in small (7x7
stride-2 Conv, Relu, MaxPool, a residual 3x3 Conv, GlobalAveragePool) with
a 3x3 stride-2 padded pool (batch 2), a ceil_mode one whose last window
passes the end (batch 1) and a 2x2 stride-2 one without pads: equal to
onnxruntime; on a CPU with AVX2 the profile notes "direct max-pool, oneDNN
jit..., nChw8c" (or nChw16c) and the interior kernel's step skipped; outputs
bit-identical to those with every buffer in NCHW (the pool then runs as its
kernels), 1 and 2 threads.

Winograd (docs/runtime.md#winograd-convolutions): 3x3 stride-1
convolutions of one 16x16 image and of four 7x7 images in one tile run as
oneDNN's F(4x4, 3x3) on an AVX-512 machine, one 7x7 image (49 pixels per
tile) stays direct; each equals onnxruntime, lies within 1e-5 of the
largest output from the direct convolution (SHARDC_CONV_ALGO=direct), and
1 and 2 threads give the same bits.

Blocked layouts are nChw8c with oneDNN's AVX2 kernels and nChw16c with its
AVX-512 ones; ctest runs this file twice, the second time with
ONEDNN_MAX_CPU_ISA=AVX2 (models.test_direct_conv_avx2), so that an AVX-512
machine checks both.

Environment: SHARDC. Exit 0 on success, 1 on any failure.
"""
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto as T, helper, numpy_helper
from checks import check, equals_onnxruntime, finish, has_avx2, has_avx512

SHARDC = os.environ.get("SHARDC")
# a oneDNN convolution runs the step (not im2col + GEMM)
RAN_DIRECT = r"(direct|Winograd) convolution, oneDNN"


def rand(rng, shape):
    return (rng.uniform(0.05, 2.0, shape) * rng.choice([-1.0, 1.0], shape)).astype(np.float32)


def conv_model(rng, name, x, w, bias=True, residual=False, **attrs):
    """Conv(x, W[, B]) then Relu, or + x then Relu when residual."""
    inits = [numpy_helper.from_array(rand(rng, w) * 0.2, "W")]
    ins = ["x", "W"]
    if bias:
        inits.append(numpy_helper.from_array(rand(rng, [w[0]]), "B"))
        ins.append("B")
    nodes = [helper.make_node("Conv", ins, ["c"], name="conv", **attrs)]
    if residual:
        nodes.append(helper.make_node("Add", ["c", "x"], ["s"]))
        nodes.append(helper.make_node("Relu", ["s"], ["y"]))
    else:
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", T.FLOAT, x)],
                          [helper.make_tensor_value_info("y", T.FLOAT, ["n", "m", "h", "w"])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def direct_cases(rng):
    return [
        ("pad1", conv_model(rng, "pad1", [1, 8, 10, 12], [16, 8, 3, 3], pads=[1, 1, 1, 1])),
        ("stride_dil_asym", conv_model(rng, "sda", [2, 5, 13, 11], [32, 5, 3, 2], bias=False,
                                       strides=[2, 1], dilations=[2, 2], pads=[0, 1, 2, 1])),
        ("first_layer_7x7", conv_model(rng, "f7", [1, 3, 20, 20], [16, 3, 7, 7], strides=[2, 2],
                                       pads=[3, 3, 3, 3])),
        ("downsample_1x1", conv_model(rng, "d1", [3, 16, 9, 9], [32, 16, 1, 1], strides=[2, 2])),
        ("residual", conv_model(rng, "res", [1, 16, 8, 8], [16, 16, 3, 3], residual=True,
                                pads=[1, 1, 1, 1])),
        ("same_upper", conv_model(rng, "su", [1, 4, 7, 9], [16, 4, 3, 3], strides=[2, 2],
                                  auto_pad="SAME_UPPER")),
        ("batch8_m64", conv_model(rng, "b8", [8, 16, 6, 6], [64, 16, 3, 3], pads=[1, 1, 1, 1])),
    ]


def chain_model(rng, c):
    """MaxPool, two residual blocks of c channels, then BatchNormalization,
    Relu and GlobalAveragePool."""
    inits, nodes = [], [helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[3, 3],
                                         pads=[1, 1, 1, 1])]

    def conv(name, src, dst, k, relu=True):
        inits.append(numpy_helper.from_array(rand(rng, [c, c, k, k]) * (0.3 / k), name + "W"))
        inits.append(numpy_helper.from_array(rand(rng, [c]), name + "B"))
        nodes.append(helper.make_node("Conv", [src, name + "W", name + "B"],
                                      [dst + "_c" if relu else dst], pads=[k // 2] * 4))
        if relu:
            nodes.append(helper.make_node("Relu", [dst + "_c"], [dst]))

    conv("c1", "p", "a", 3)
    conv("c2", "a", "b", 3, relu=False)
    nodes += [helper.make_node("Add", ["b", "p"], ["s1"]), helper.make_node("Relu", ["s1"], ["r1"])]
    conv("c3", "r1", "d", 3)
    conv("c4", "d", "e", 3, relu=False)
    nodes += [helper.make_node("Add", ["e", "r1"], ["s2"]), helper.make_node("Relu", ["s2"], ["r2"])]
    for n, v in (("scale", rand(rng, [c])), ("bias", rand(rng, [c])), ("mean", rand(rng, [c])),
                 ("var", np.abs(rand(rng, [c])))):
        inits.append(numpy_helper.from_array(v, "bn_" + n))
    nodes += [helper.make_node("BatchNormalization", ["r2", "bn_scale", "bn_bias", "bn_mean",
                                                      "bn_var"], ["n"]),
              helper.make_node("Relu", ["n"], ["nr"]),
              helper.make_node("GlobalAveragePool", ["nr"], ["y"])]
    g = helper.make_graph(nodes, f"chain{c}", [helper.make_tensor_value_info("x", T.FLOAT, [2, c, 7, 7])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [2, c, 1, 1])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def same_bits(got, want, what):
    """got equals want bit for bit (either None: a run failed, already
    reported)."""
    if got is not None and want is not None:
        check(got.tobytes() == want.tobytes(),
              f"{what}: max |diff| {np.max(np.abs(got - want))}")


def run_profiled(tmp, name, out, threads, env, extra=()):
    """`shardc run` of TMP/NAME.onnx on TMP/NAME_x.npy with SHARDC_PROFILE=1
    and env, outputs in TMP/OUT: (y or None, the profile text)."""
    out = os.path.join(tmp, out)
    r = subprocess.run([SHARDC, "run", os.path.join(tmp, name + ".onnx"), "--input",
                        "x=" + os.path.join(tmp, name + "_x.npy"), "-q", "--repeat", "2",
                        "--threads", threads, "--output-dir", out] + list(extra),
                       capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, SHARDC_PROFILE="1", **env))
    check(r.returncode == 0, f"{out}: exit {r.returncode}: {r.stderr.strip()}")
    return (np.load(os.path.join(out, "y.npy")) if r.returncode == 0 else None), r.stderr


def run_chain(tmp, tag, threads, layout, extra):
    return run_profiled(tmp, "chain", f"chain_{tag}_{threads}_{layout}", threads,
                        {"SHARDC_CONV_LAYOUT": layout}, extra)


def blocked_chain(tmp, rng, avx2, c):
    m = chain_model(rng, c)
    path = os.path.join(tmp, "chain.onnx")
    onnx.save(m, path)
    x = rand(rng, [2, c, 7, 7])
    np.save(os.path.join(tmp, "chain_x.npy"), x)
    equals_onnxruntime(SHARDC, tmp, f"chain{c}", m, {"x": x}, 1e-4, 1e-4)
    for tag, extra in (("fused", []), ("no_fuse", ["--no-fuse"])):
        base, _ = run_chain(tmp, tag, "1", "nchw", extra)
        for threads in ("1", "2"):
            got, text = run_chain(tmp, tag, threads, "blocked", extra)
            # unfused, the BatchNormalization reads the last block's output in
            # place of its own: that class stays NCHW, the inner ones do not
            want = r"input and output nChw(8|16)c" if tag == "fused" else r"nChw(8|16)c"
            if avx2:
                check(re.search(want, text) is not None,
                      f"chain {tag}: no convolution holds its activations blocked:\n{text}")
                # 49-pixel planes: both images in one tile (images_per_tile;
                # measured with oneDNN's AVX2 kernels, which take the group)
                check("jit:avx2" not in text or "2 images per tile" in text,
                      f"chain {tag}: images not grouped:\n{text}")
                # fused, the ReLU and residual add + ReLU run on each tile's
                # output (unfused they are steps of their own)
                check(tag != "fused" or "epilogue per tile" in text,
                      f"chain {tag}: no epilogue runs on the tiles:\n{text}")
            same_bits(got, base, f"chain {tag}, {threads} threads: blocked and NCHW differ")
        print(f"ok: chain of {c} channels ({tag}): blocked activations, bit-identical to NCHW, "
              "1 and 2 threads")


def against_base(tmp, name, m, x, base_env, base_lacks, check_run):
    """m against onnxruntime on x; then `shardc run` with base_env, 1
    thread, whose profile must not contain base_lacks, and as it is with 1
    and 2 threads: check_run(profile text) on each, and outputs bit-identical
    to the base run."""
    equals_onnxruntime(SHARDC, tmp, name, m, {"x": x}, 1e-4, 1e-4)  # saves m and x
    base, text = run_profiled(tmp, name, name + "_base", "1", base_env)
    check(base_lacks not in text, f"{name}: {base_env} still shows '{base_lacks}':\n{text}")
    for threads in ("1", "2"):
        got, text = run_profiled(tmp, name, f"{name}_{threads}", threads, {})
        check_run(text)
        same_bits(got, base, f"{name}, {threads} threads: differs from the run with {base_env}")


def tile_epilogues(tmp, rng, avx2):
    """A residual convolution's add + ReLU run on each tile's output:
    whole images (batch 3, 32 channels on 9x9: a tile per image) and image
    parts (batch 2, 64 channels on 7x7: both images in tiles of 32
    channels)."""
    for name, x_shape in (("tiles_whole", [3, 32, 9, 9]), ("tiles_parts", [2, 64, 7, 7])):
        c = x_shape[1]
        m = conv_model(rng, name, x_shape, [c, c, 3, 3], residual=True, pads=[1, 1, 1, 1])

        def per_tile(text, name=name):
            steps = [ln for ln in text.splitlines() if "epilogue per tile" in ln]
            if avx2:
                check(len(steps) == 1,
                      f"{name}: {len(steps)} steps run their epilogue per tile, want 1:\n{text}")
        against_base(tmp, name, m, rand(rng, x_shape), {"SHARDC_EPILOGUE_TILES": "0"},
                     "epilogue per tile", per_tile)
        print(f"ok: {name}: the epilogue per tile, bit-identical to after the last tile, "
              "1 and 2 threads")


def stem_model(rng, name, x_shape, c, **pool):
    """ResNet's stem in small: a 7x7 stride-2 Conv of c channels, Relu,
    MaxPool (attributes pool), a 3x3 Conv + residual Add + Relu, then
    GlobalAveragePool."""
    cin = x_shape[1]
    inits = [numpy_helper.from_array(rand(rng, [c, cin, 7, 7]) * 0.05, "w1"),
             numpy_helper.from_array(rand(rng, [c]), "b1"),
             numpy_helper.from_array(rand(rng, [c, c, 3, 3]) * 0.1, "w2"),
             numpy_helper.from_array(rand(rng, [c]), "b2")]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["s"], strides=[2, 2], pads=[3] * 4),
             helper.make_node("Relu", ["s"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["p"], **pool),
             helper.make_node("Conv", ["p", "w2", "b2"], ["q"], pads=[1] * 4),
             helper.make_node("Add", ["q", "p"], ["a"]),
             helper.make_node("Relu", ["a"], ["ar"]),
             helper.make_node("GlobalAveragePool", ["ar"], ["y"])]
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", T.FLOAT, x_shape)],
                          [helper.make_tensor_value_info("y", T.FLOAT, [x_shape[0], c, 1, 1])],
                          inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def stem_pools(tmp, rng, avx2):
    """A max-pool between two convolutions runs as a oneDNN pooling on
    their blocked buffers: 3x3 stride 2 with pads (the stem's: edge columns),
    ceil_mode with the last window past the end, 2x2 stride 2 without pads;
    batch 1 (parts of 8 channels) and 2."""
    cases = (("pool_stem", [2, 3, 20, 20], 16, dict(kernel_shape=[3, 3], strides=[2, 2],
                                                   pads=[1, 1, 1, 1])),
             ("pool_ceil", [1, 3, 24, 24], 32, dict(kernel_shape=[3, 3], strides=[2, 2],
                                                   ceil_mode=1)),
             ("pool_2x2", [2, 3, 24, 24], 16, dict(kernel_shape=[2, 2], strides=[2, 2])))
    for name, x_shape, c, pool in cases:
        m = stem_model(rng, name, x_shape, c, **pool)

        def direct(text, name=name):
            # the convolutions hold both buffers in nChw8c (AVX2) or nChw16c
            if avx2:
                check(re.search(r"direct max-pool, oneDNN jit[^,]*, nChw(8|16)c", text) is not None,
                      f"{name}: the max-pool does not run directly:\n{text}")
                check("skipped: its max-pool runs directly" in text or "pool_2x2" == name,
                      f"{name}: the pool's interior kernel still runs:\n{text}")
        # SHARDC_CONV_LAYOUT=nchw: the max-pool runs as its kernels
        against_base(tmp, name, m, rand(rng, x_shape), {"SHARDC_CONV_LAYOUT": "nchw"},
                     "direct max-pool", direct)
        print(f"ok: {name}: the max-pool as a oneDNN pooling, bit-identical to its kernels, "
              "1 and 2 threads")


def winograd(tmp, rng, avx512):
    """3x3 stride-1 convolutions with at least 100 output pixels per tile
    run as oneDNN's Winograd F(4x4, 3x3) where it has it (AVX-512): one
    image of 16x16 (tiles of channels), four 7x7 images in one tile (196
    pixels; its weights laid out for the group); one 7x7 image (49 pixels)
    stays direct. Equal to onnxruntime; within 1e-5 of the largest output
    from the direct convolution (SHARDC_CONV_ALGO=direct); 1 and 2 threads
    bit-identical."""
    for name, x_shape, c, wino in (("wino_plane", [1, 32, 16, 16], 64, True),
                                   ("wino_group", [4, 64, 7, 7], 64, True),
                                   ("wino_small", [1, 64, 7, 7], 64, False)):
        m = conv_model(rng, name, x_shape, [c, x_shape[1], 3, 3], residual=x_shape[1] == c,
                       pads=[1, 1, 1, 1])
        equals_onnxruntime(SHARDC, tmp, name, m, {"x": rand(rng, x_shape)}, 1e-4, 1e-4)
        direct, text = run_profiled(tmp, name, name + "_direct", "1",
                                    {"SHARDC_CONV_ALGO": "direct"})
        check("Winograd" not in text, f"{name}: SHARDC_CONV_ALGO=direct runs Winograd:\n{text}")
        outs = []
        for threads in ("1", "2"):
            got, text = run_profiled(tmp, name, f"{name}_{threads}", threads, {})
            outs.append(got)
            ran = re.search(r"Winograd convolution, oneDNN jit_wino_4x3", text) is not None
            if avx512:
                check(ran == wino, f"{name}: Winograd {'not ' if wino else ''}taken:\n{text}")
            if got is not None and direct is not None:
                # Winograd's rounding error scales with the whole output's
                # magnitude, not each element's
                err = float(np.max(np.abs(got - direct)) / np.max(np.abs(direct)))
                check(np.isfinite(got).all() and err <= 1e-5,
                      f"{name}: {err:.2e} (of the largest output) from the direct convolution")
                print(f"   {name}: {err:.1e} of the largest output from the direct convolution")
        same_bits(outs[1], outs[0], f"{name}: 1 and 2 threads differ")
        print(f"ok: {name} runs as {'Winograd' if avx512 and wino else 'direct'}, within 1e-5 "
              "of direct, 1 and 2 threads bit-identical")


def gemm_cases(rng):
    return [
        ("m24", conv_model(rng, "m24", [1, 8, 6, 6], [24, 8, 3, 3], pads=[1, 1, 1, 1])),
        ("group2", conv_model(rng, "g2", [1, 8, 6, 6], [32, 4, 3, 3], group=2, pads=[1, 1, 1, 1])),
    ]


def profile(tmp, name, extra=()):
    path = os.path.join(tmp, name + ".onnx")
    r = subprocess.run([SHARDC, "run", path, "--random-inputs", "1", "--repeat", "2", "-q",
                        "--output-dir", os.path.join(tmp, name + "_prof")] + list(extra),
                       capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, SHARDC_PROFILE="1"))
    check(r.returncode == 0, f"{name}: profile run: exit {r.returncode}: {r.stderr.strip()}")
    return r.stderr


def main():
    if not SHARDC:
        print("SHARDC not set")
        return 1
    rng = np.random.default_rng(20261202)
    avx2 = has_avx2()
    with tempfile.TemporaryDirectory() as tmp:
        for direct, cases in ((True, direct_cases(rng)), (False, gemm_cases(rng))):
            for name, m in cases:
                shape = [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]
                equals_onnxruntime(SHARDC, tmp, name, m, {"x": rand(rng, shape)}, 1e-4, 1e-4)
                text = profile(tmp, name)
                ran_direct = re.search(RAN_DIRECT, text) is not None
                if direct and avx2:
                    check(ran_direct, f"{name}: not run as a direct convolution:\n{text}")
                    check("skipped: its convolution runs directly" in text,
                          f"{name}: the im2col step was not skipped:\n{text}")
                    # with a bias, the convolution adds it: the kernel that
                    # filled the output with it first is skipped too
                    bias_steps = [ln for ln in text.splitlines() if "_bias (" in ln]
                    has_bias = any(i.name == "B" for i in m.graph.initializer)
                    check(not has_bias or (bias_steps and all("skipped" in ln for ln in bias_steps)),
                          f"{name}: the bias kernel still runs:\n{text}")
                if not direct:
                    check(not ran_direct, f"{name}: ran as a direct convolution:\n{text}")
                print(f"ok: {name} runs as {'a direct convolution' if ran_direct else 'im2col + GEMM'}")
        # 16 channels: one tile of both images, written in place; 64: two
        # tiles of 32 channels, each copied image by image into the output
        for c in (16, 64):
            blocked_chain(tmp, rng, avx2, c)
        tile_epilogues(tmp, rng, avx2)
        stem_pools(tmp, rng, avx2)
        winograd(tmp, rng, has_avx512())
        # bit-identical with 1 and 2 threads
        path = os.path.join(tmp, "batch8_m64.onnx")
        outs = []
        for threads in ("1", "2"):
            out = os.path.join(tmp, "threads" + threads)
            r = subprocess.run([SHARDC, "run", path, "--random-inputs", "7", "-q", "--threads",
                                threads, "--output-dir", out], capture_output=True, text=True,
                               timeout=120)
            check(r.returncode == 0, f"threads {threads}: exit {r.returncode}: {r.stderr.strip()}")
            outs.append(np.load(os.path.join(out, "y.npy")) if r.returncode == 0 else None)
        if outs[0] is not None and outs[1] is not None:
            check(outs[0].tobytes() == outs[1].tobytes(),
                  "batch8_m64: 1 and 2 threads differ: max |diff| "
                  f"{np.max(np.abs(outs[0] - outs[1]))}")
            print("ok: 1 and 2 threads give bit-identical outputs")
        # a bundle carries the convolution (program.json's gemm.conv): run from it, the step
        # is still direct and the outputs are those of the JIT run
        bundle = os.path.join(tmp, "bundle")
        r = subprocess.run([SHARDC, "compile", path, "-o", bundle], capture_output=True,
                           text=True, timeout=120)
        check(r.returncode == 0, f"compile: exit {r.returncode}: {r.stderr.strip()}")
        out = os.path.join(tmp, "from_bundle")
        r = subprocess.run([SHARDC, "run", bundle, "--random-inputs", "7", "-q", "--repeat", "2",
                            "--output-dir", out], capture_output=True, text=True, timeout=120,
                           env=dict(os.environ, SHARDC_PROFILE="1"))
        if check(r.returncode == 0, f"bundle run: exit {r.returncode}: {r.stderr.strip()}"):
            if avx2:
                check(re.search(RAN_DIRECT, r.stderr) is not None,
                      f"bundle: not run as a direct convolution:\n{r.stderr}")
            got = np.load(os.path.join(out, "y.npy"))
            if outs[1] is not None:
                check(got.tobytes() == outs[1].tobytes(), "bundle run differs from the JIT run")
                print("ok: the bundle runs the direct convolution, same outputs")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
