#!/usr/bin/env bash
# test_gpu.sh — run the generated CUDA kernels on a real GPU and compare them
# with the CPU.
#
# The work is done by two unit-test binaries, each run with
# SC_CUDA_REQUIRE_GPU=1, which turns "no device" into a failure so the GPU
# path cannot pass by skipping:
#   test_cuda          (tests/unit/test_cuda.c) test_gpu_matches_interpreter:
#                      the emitter's test kernels on seeded random data (full
#                      grid, a 2-block grid-stride launch, the range split
#                      over two launches) against kir_interpret;
#   test_cuda_samples  (tests/unit/test_cuda_samples.c)
#                      test_gpu_samples_match_cpu: every sample model (batch
#                      2, random inputs) run step by step on the CPU device;
#                      before each kernel step its params are copied to a
#                      device mirror of the arena, the CUDA kernel runs over
#                      its whole range, and the written params must match the
#                      CPU's results for that step.
# Both compile with NVRTC for the device's compute capability and load the
# PTX through the CUDA driver API (libcuda, opened with dlopen: see
# tests/unit/cuda_driver.h), so they build and link without a GPU.
#
#   test_gpu.sh               exit 77 (skipped) at once without a visible GPU
#   test_gpu.sh --build-only  build both binaries (no GPU needed) and stop
#
# Environment: SC_BINARY_DIR (the CMake build folder; ctest sets it),
# SC_SOURCE_DIR. Exit: 0 pass, 1 fail, 77 skipped.
set -u
here=$(cd "$(dirname "$0")" && pwd)
src=${SC_SOURCE_DIR:-$(cd "$here/../.." && pwd)}
bin=${SC_BINARY_DIR:-$src/build}
exes="test_cuda test_cuda_samples"

if [ "${1:-}" = "--build-only" ]; then
  for t in $exes; do
    exe=$bin/tests/$t
    cmake --build "$bin" --target "$t" -j 2 || { echo "test_gpu: building $t failed" >&2; exit 1; }
    [ -x "$exe" ] || { echo "test_gpu: $exe was not built" >&2; exit 1; }
    # the binary must not need libcuda to start (it dlopens it)
    if ldd "$exe" | grep -q 'libcuda\.so'; then
      echo "test_gpu: $exe links libcuda directly" >&2; exit 1
    fi
    echo "test_gpu: built $exe (GPU run not attempted)"
  done
  exit 0
fi

# Fast no-device path: no nvidia-smi, or it lists no GPU.
if ! command -v nvidia-smi >/dev/null 2>&1; then
  echo "test_gpu: skipped: nvidia-smi not found"; exit 77
fi
if ! timeout 20 nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "test_gpu: skipped: no GPU visible"; exit 77
fi

for t in $exes; do
  if [ ! -x "$bin/tests/$t" ]; then
    echo "test_gpu: $bin/tests/$t missing (build the tree first)" >&2; exit 1
  fi
done
nvidia-smi -L
failed=""
for t in $exes; do
  echo "test_gpu: running $t"
  SC_CUDA_REQUIRE_GPU=1 "$bin/tests/$t"
  rc=$?
  if [ $rc -ne 0 ]; then echo "test_gpu: $t FAILED (exit $rc)" >&2; failed="$failed $t"; fi
done
if [ -n "$failed" ]; then echo "test_gpu: FAILED:$failed" >&2; exit 1; fi
echo "test_gpu: passed"
exit 0
