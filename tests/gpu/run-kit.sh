#!/usr/bin/env bash
# run-kit.sh — tests/gpu/run-all.sh from a tarball made by tests/gpu/pack.sh,
# on a GPU machine that has the driver, the CUDA toolkit and Python (numpy,
# onnx) but not the build's own libraries.
#
#   bash tests/gpu/run-kit.sh KIT.tar.xz [run-all.sh's options]
#   bash tests/gpu/run-kit.sh KIT.tar.xz device-check [--budget S] [--out DIR]
#                          (tests/gpu/device-check.sh instead of run-all.sh)
#
# Unpacks the kit into a temporary folder, finds CUDA's libraries that the
# kit leaves out (libcudart, libnccl, libcublasLt, libnvrtc and its
# builtins) under /usr/local/cuda*, /usr/lib and the Python packages
# (nvidia/*/lib) and puts their folders on LD_LIBRARY_PATH, prints what it
# found and the host (nvidia-smi, the OS, glibc), checks that shardc starts,
# then runs run-all.sh (or device-check.sh) with SC_BINARY_DIR at the kit's
# build/. Exit: as
# run-all.sh; 1 when the kit does not unpack or shardc cannot start.
set -u
here=$(cd "$(dirname "$0")" && pwd)
kit=${1:?usage: run-kit.sh KIT.tar.xz [run-all options]}
shift
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
tar -xJf "$kit" -C "$dir" || { echo "run-kit: cannot unpack $kit"; exit 1; }

echo "== host"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -4
else
  echo "nvidia-smi: not found"
fi
grep -m1 PRETTY_NAME /etc/os-release 2>/dev/null
ldd --version 2>&1 | head -1
dirs=""
# PyTorch's CUDA wheels bring them too (nvidia/cu13/lib, nvidia/nccl/lib)
pkgs=$(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null)
for lib in libcudart.so.13 libnccl.so.2 libcublasLt.so.13 libnvrtc.so.13 libnvrtc-builtins.so.13.0; do
  found=$(find /usr/local/cuda/lib64/ /usr/local/cuda*/targets /usr/lib /usr/local /opt $pkgs \
            -name "$lib" 2>/dev/null | head -1)
  echo "$lib: ${found:-not found}"
  [ -n "$found" ] && case ":$dirs:" in *":$(dirname "$found"):"*) ;; *) dirs="$dirs:$(dirname "$found")" ;; esac
done
export LD_LIBRARY_PATH="${dirs#:}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
if ! "$dir/build/shardc" --version; then
  ldd "$dir/build/shardc" | grep "not found"
  echo "run-kit: the kit's shardc cannot start here"
  exit 1
fi
script=run-all.sh
if [ "${1:-}" = device-check ]; then script=device-check.sh; shift; fi
SC_BINARY_DIR=$dir/build PYTHONUNBUFFERED=1 bash "$here/$script" "$@"
