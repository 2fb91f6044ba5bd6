#!/usr/bin/env bash
# test_install.sh — the shardc binary and library link neither MPI nor
# CUDA; `cmake --install` into a scratch prefix, then the
# embedding sample (samples/embed/embed_gpt2.c: plan, compile, run GPT-2 at
# tp=2 x pp=2 through include/shardc.h only, checked against one rank) is
# built against the INSTALLED copy twice, through pkg-config and through
# the CMake package, and run. The binaries must load the installed
# libshardc.so, not the build tree's.
set -euo pipefail
ROOT=${SC_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
BUILD=${SC_BINARY_DIR:?SC_BINARY_DIR names the build to install}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
PREFIX=$TMP/prefix

# MPI, NCCL, the CUDA runtime and NVRTC are loaded when used, not linked:
# inspect, plan and local runs start on a machine without them.
for bin in "$BUILD/shardc" "$BUILD/libshardc.so"; do
  if ldd "$bin" | grep -E 'libmpi|libnccl|libcudart|libnvrtc|libcuda\.'; then
    echo "FAIL: $bin links MPI or CUDA libraries"; exit 1
  fi
done

cmake --install "$BUILD" --prefix "$PREFIX" >"$TMP/install.log"
for f in include/shardc.h include/shardc_status.h lib/libshardc.so \
         lib/pkgconfig/shardc.pc lib/cmake/shardc/shardcConfig.cmake bin/shardc; do
  [ -e "$PREFIX/$f" ] || { echo "FAIL: $f not installed"; exit 1; }
done
# the public header stands alone: nothing else of the source tree is needed
grep -q '#include "ir/' "$PREFIX/include/shardc.h" && { echo "FAIL: shardc.h includes ir/"; exit 1; }

# A sanitizer build of the library (make test-asan) needs the program built
# with the same runtime, first in the library list.
SAN=""
# (ldd's output is taken whole first: `ldd | grep -q` under pipefail fails
# at random when grep stops reading early and ldd gets SIGPIPE)
LIBS=$(ldd "$BUILD/libshardc.so")
case "$LIBS" in *libasan*) SAN="-fsanitize=address,undefined" ;; esac

# 1. pkg-config
export PKG_CONFIG_PATH=$PREFIX/lib/pkgconfig
cc -std=c11 -Wall -Wextra -Werror $SAN "$ROOT/samples/embed/embed_gpt2.c" \
   $(pkg-config --cflags --libs shardc) -lm -o "$TMP/embed_pc"
EMBED_LIBS=$(ldd "$TMP/embed_pc")
printf '%s\n' "$EMBED_LIBS" | grep 'libshardc\.so' | grep "$PREFIX/" >/dev/null ||
  { echo "FAIL: embed_pc does not load the installed libshardc.so"; ldd "$TMP/embed_pc"; exit 1; }
mkdir -p "$TMP/run1"
"$TMP/embed_pc" "$ROOT/samples/gpt2.onnx" "$TMP/run1" | tee "$TMP/out1"
grep -q '^ok$' "$TMP/out1"

# 2. the CMake package
cmake -S "$ROOT/samples/embed" -B "$TMP/build-embed" -DCMAKE_PREFIX_PATH="$PREFIX" \
      -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS="$SAN" >"$TMP/cmake.log"
cmake --build "$TMP/build-embed" >>"$TMP/cmake.log"
mkdir -p "$TMP/run2"
"$TMP/build-embed/embed_gpt2" "$ROOT/samples/gpt2.onnx" "$TMP/run2" | tee "$TMP/out2"
grep -q '^ok$' "$TMP/out2"

# 3. the installed command runs the bundle the sample saved
"$PREFIX/bin/shardc" run "$TMP/run2/gpt2-tp2-pp2" --random-inputs 1 --quiet \
   --output-dir "$TMP/out" && [ -f "$TMP/out/logits.npy" ]
echo "PASS: installed library, header, pkg-config and CMake package"
