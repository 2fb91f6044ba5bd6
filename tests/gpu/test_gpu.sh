#!/usr/bin/env bash
# test_gpu.sh — run the generated CUDA kernels on a real GPU and compare them
# with the kernel-IR interpreter on the CPU.
#
# The work is done by the unit-test binary test_cuda (tests/unit/test_cuda.c):
# its test_gpu_matches_interpreter builds the test kernels, compiles them with
# NVRTC for the device's compute capability, loads the PTX through the CUDA
# driver API (libcuda, opened with dlopen, so the binary builds and links
# without a GPU), runs each kernel on seeded random data (full grid, a 2-block
# grid-stride launch, and the range split over two launches) and compares
# with kir_interpret. Here SC_CUDA_REQUIRE_GPU=1 turns "no device" into a
# failure, so the GPU path cannot pass by skipping.
#
#   test_gpu.sh               exit 77 (skipped) at once without a visible GPU
#   test_gpu.sh --build-only  build test_cuda (no GPU needed) and stop
#
# Environment: SC_BINARY_DIR (the CMake build folder; ctest sets it),
# SC_SOURCE_DIR. Exit: 0 pass, 1 fail, 77 skipped.
set -u
here=$(cd "$(dirname "$0")" && pwd)
src=${SC_SOURCE_DIR:-$(cd "$here/../.." && pwd)}
bin=${SC_BINARY_DIR:-$src/build}
exe=$bin/tests/test_cuda

if [ "${1:-}" = "--build-only" ]; then
  cmake --build "$bin" --target test_cuda -j 2 || { echo "test_gpu: building test_cuda failed" >&2; exit 1; }
  [ -x "$exe" ] || { echo "test_gpu: $exe was not built" >&2; exit 1; }
  # the binary must not need libcuda to start (it dlopens it)
  if ldd "$exe" | grep -q 'libcuda\.so'; then
    echo "test_gpu: $exe links libcuda directly" >&2; exit 1
  fi
  echo "test_gpu: built $exe (GPU run not attempted)"
  exit 0
fi

# Fast no-device path: no nvidia-smi, or it lists no GPU.
if ! command -v nvidia-smi >/dev/null 2>&1; then
  echo "test_gpu: skipped: nvidia-smi not found"; exit 77
fi
if ! timeout 20 nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "test_gpu: skipped: no GPU visible"; exit 77
fi

if [ ! -x "$exe" ]; then
  echo "test_gpu: $exe missing (build the tree first)" >&2; exit 1
fi
nvidia-smi -L
SC_CUDA_REQUIRE_GPU=1 "$exe"
rc=$?
if [ $rc -ne 0 ]; then echo "test_gpu: FAILED (test_cuda exit $rc)" >&2; exit 1; fi
echo "test_gpu: passed"
exit 0
