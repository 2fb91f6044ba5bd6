#!/usr/bin/env bash
# run-all.sh — every GPU check of shardc in one run, for a machine with a
# GPU (under 8 minutes on one H200): tests/gpu/run_all.py says what each
# check does. Prints a JSON summary and the closing line "N passed, N
# failed".
#
#   bash tests/gpu/run-all.sh            on a GPU; exit 77 at once without one
#   SHARDC_CUDA_EMU=1 bash tests/gpu/run-all.sh
#                                        the rehearsal on the emulated GPU
#                                        (no device needed; what CI runs)
#   --quick                              leave out the timings (GEMM TFLOP/s,
#                                        GPT-2 small) and the samples check's
#                                        mesh matrices
#   --json FILE                          also write the summary there
#   --only CHECK,...                     only these checks (env, modules, arena,
#                                        nccl, kernels, attention, planner, cuda-local, gemm,
#                                        real-models, samples, train-speed); the names may also
#                                        be given as arguments
#   train-speed                          shardc's training step against PyTorch
#                                        (eager, torch.compile) on GPT-2 small and
#                                        a Llama-style 1.3B: only when named;
#                                        --train-models M,..., --tiny (implied
#                                        emulated), --train-steps N,
#                                        --compile-budget S, --train-variants
#                                        V,... (none, selective, fp8, eager, compile),
#                                        --train-scratch DIR (models kept there for
#                                        the next run) (tests/gpu/train_speed.py)
#   --out DIR                            the files a section keeps (train-speed.json,
#                                        train-speed.md); default gpu-out/
#   --deadline S                         checks that would start after S seconds
#                                        are skipped, commands are cut at it
#   --log FILE                           every command with its whole output
#   --record FILE                        every result appended as one JSON line as
#                                        it comes (a run cut short keeps them)
#
# tests/gpu/device-check.sh runs it in parts under one time budget, the
# training-speed figures first: the GPU measurement in one command.
#
# On a GPU machine without the build's libraries (LLVM, oneDNN, ...):
# tests/gpu/pack.sh here, then SC_BINARY_DIR=kit/build there (pack.sh says how).
#
# Environment: SC_BINARY_DIR (the build folder; default build/, built
# first when it has no shardc; its cubins/ folder, when there is one, becomes
# SHARDC_CUDA_CACHE), PYTHON (with numpy and onnx; default the
# project's .venv, else python3). Exit: 0 all passed, 1 a check failed, 77
# no GPU (and no emulation asked for).
set -u
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
bin=${SC_BINARY_DIR:-$src/build}

if [ "${SHARDC_CUDA_EMU:-0}" != "1" ]; then
  if ! command -v nvidia-smi >/dev/null 2>&1 || ! timeout 20 nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    echo "run-all: no GPU visible (set SHARDC_CUDA_EMU=1 to rehearse on the emulated GPU)"
    echo "0 passed, 0 failed"
    exit 77
  fi
  nvidia-smi -L
fi

if [ ! -x "$bin/shardc" ]; then
  echo "run-all: building into $bin"
  cmake -S "$src" -B "$bin" -DCMAKE_BUILD_TYPE=Release >/dev/null &&
    cmake --build "$bin" -j "$(nproc)" >/dev/null || { echo "run-all: the build failed"; echo "0 passed, 1 failed"; exit 1; }
fi
# the binary must start here: name what is missing rather than fail later
missing=$(ldd "$bin/shardc" 2>/dev/null | grep "not found" || true)
if [ -n "$missing" ]; then
  echo "run-all: $bin/shardc cannot start: libraries missing: $missing"
  echo "0 passed, 1 failed"
  exit 1
fi
for t in test_cuda test_cuda_samples test_comm_cuda_local test_cuda_attention; do
  [ -x "$bin/tests/$t" ] || cmake --build "$bin" --target "$t" -j "$(nproc)" >/dev/null
done

# CUBINs compiled ahead (tests/gpu/pack.sh puts the train-speed runs' in the
# kit's build/cubins): the CUDA device loads a program's CUBIN from there
# instead of compiling its CUDA C with NVRTC, and files there those it compiles
if [ -z "${SHARDC_CUDA_CACHE:-}" ] && [ -d "$bin/cubins" ]; then
  export SHARDC_CUDA_CACHE=$bin/cubins
  echo "run-all: SHARDC_CUDA_CACHE=$SHARDC_CUDA_CACHE ($(ls "$bin/cubins" | grep -c '\.cubin$') CUBINs)"
fi

py=${PYTHON:-}
if [ -z "$py" ]; then
  if [ -x "$src/.venv/bin/python" ]; then py=$src/.venv/bin/python; else py=python3; fi
fi
exec "$py" "$here/run_all.py" --shardc "$bin/shardc" --build "$bin" --python "$py" "$@"
