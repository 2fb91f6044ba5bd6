#!/usr/bin/env bash
# pack.sh — a built tree's GPU pieces and the libraries they need, in one
# tarball, for a GPU machine that has a driver, the CUDA toolkit and Python
# (numpy, onnx) but not the build's own dependencies (LLVM, oneDNN,
# protobuf-c, jansson, cmocka).
#
#   bash tests/gpu/pack.sh [BUILD] [OUT.tar.xz]     (default build/, shardc-gpu.tar.xz)
#
# It also holds build/cubins/: the CUBINs of the training steps that
# run-all's train-speed section runs, compiled here by NVRTC for sm_90 (no
# GPU needed: tests/gpu/train_speed.py make_cubins, `shardc compile --train
# --target cuda` with the section's options), filed by the SHA-256 of their
# CUDA C; run-all.sh makes that folder SHARDC_CUDA_CACHE, so the GPU
# machine loads them instead of compiling (docs/cuda-backend.md). PACK_CUBINS
# says which: real (default: GPT-2 small and the 1.3B, each variant; the
# models are written into a temporary folder, 5.5 GB for the 1.3B), tiny
# (the tiny configs), none, or a folder made before (train_speed.py
# --make-cubins DIR), copied as it is.
#
# The tarball holds build/ (shardc, libshardc.so, the NCCL communicator
# module, the fake driver, the unit binaries test_cuda,
# test_cuda_samples, test_comm_cuda_local and test_cuda_attention) and lib/ (every
# library they load that is not the C runtime, the C++ runtime, zlib or
# CUDA's own). Each binary's and library's RUNPATH is rewritten relative to
# itself ($ORIGIN), so that nothing needs LD_LIBRARY_PATH but CUDA's
# libraries (libcudart, libnccl, libcublasLt, libnvrtc), which come from
# the GPU machine. There, from the source tree:
#
#   bash tests/gpu/run-kit.sh shardc-gpu.tar.xz [run-all.sh's options]
#
# (it unpacks the kit, finds CUDA's libraries and runs run-all.sh on it;
# with SHARDC_CUDA_EMU=1 the same runs here, on the emulated GPU).
#
# Needs patchelf. The host's glibc must be no older than the build's.
set -eu
bin=$(cd "${1:-build}" && pwd)
out=${2:-shardc-gpu.tar.xz}
command -v patchelf >/dev/null || { echo "pack: needs patchelf" >&2; exit 1; }
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/build/tests" "$stage/lib"
cp -P "$bin"/shardc "$bin"/libshardc.so* "$stage/build/"
[ -f "$bin/libshardc_comm_nccl.so" ] && cp "$bin/libshardc_comm_nccl.so" "$stage/build/"
# the fake driver too, so that the kit can be rehearsed on the emulated GPU
[ -f "$bin/fakecuda/libcuda.so.1" ] && mkdir -p "$stage/build/fakecuda" &&
  cp "$bin/fakecuda/libcuda.so.1" "$stage/build/fakecuda/"
for t in test_cuda test_cuda_samples test_comm_cuda_local test_cuda_attention; do cp "$bin/tests/$t" "$stage/build/tests/"; done
cubins=${PACK_CUBINS:-real}
src=$(cd "$(dirname "$0")/../.." && pwd)
py=${PYTHON:-$src/.venv/bin/python}
[ -x "$py" ] || py=python3
case $cubins in
  none) ;;
  real | tiny)
    mkdir -p "$stage/build/cubins"
    "$py" "$src/tests/gpu/train_speed.py" --make-cubins "$stage/build/cubins" \
      --shardc "$bin/shardc" $([ "$cubins" = tiny ] && echo --tiny) ;;
  *) [ -d "$cubins" ] || { echo "pack: PACK_CUBINS=$cubins: not real, tiny, none or a folder" >&2; exit 1; }
     mkdir -p "$stage/build/cubins" && cp "$cubins"/*.cubin "$stage/build/cubins/" ;;
esac

# what the host has, or must come from CUDA: left out
keep_out='/(libc|libm|libdl|libpthread|librt|libutil|libstdc\+\+|libgcc_s|libz|ld-linux-x86-64|libcuda|libcudart|libnccl|libcublas|libcublasLt|libnvrtc)\.so'
objs=$(find "$stage/build" -type f \( -name shardc -o -name '*.so*' -o -name 'test_*' \))
ldd $objs 2>/dev/null | awk '/=> \//{print $3}' | sort -u | grep -vE "$keep_out" |
  grep -v "^$bin/" | while read -r f; do cp -L "$f" "$stage/lib/"; done

for f in $objs; do
  case $f in
    */tests/* | */fakecuda/*) patchelf --set-rpath '$ORIGIN/..:$ORIGIN/../../lib' "$f" ;;
    *) patchelf --set-rpath '$ORIGIN:$ORIGIN/../lib' "$f" ;;
  esac
done
for f in "$stage"/lib/*; do patchelf --set-rpath '$ORIGIN' "$f"; done
tar -C "$stage" -cf - . | xz -T0 -6 >"$out"
echo "pack: $out ($(du -h "$out" | cut -f1)): $(ls "$stage/lib" | wc -l) libraries," \
  "$(ls "$stage/build/cubins" 2>/dev/null | wc -l) CUBINs ($(du -sh "$stage/build/cubins" 2>/dev/null | cut -f1))"
