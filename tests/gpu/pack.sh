#!/usr/bin/env bash
# pack.sh — a built tree's GPU pieces and the libraries they need, in one
# tarball, for a GPU machine that has a driver, the CUDA toolkit and Python
# (numpy, onnx) but not the build's own dependencies (LLVM, oneDNN,
# protobuf-c, jansson, cmocka).
#
#   bash tests/gpu/pack.sh [BUILD] [OUT.tar.xz]     (default build/, shardc-gpu.tar.xz)
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
echo "pack: $out ($(du -h "$out" | cut -f1)): $(ls "$stage/lib" | wc -l) libraries"
