#!/usr/bin/env bash
# run.sh — builds the libFuzzer targets with clang-14 and fuzzes them.
#
#   FUZZ_SECONDS  total fuzzing time (default 60): 3/4 to fuzz_import (ONNX
#                 import + canonical passes), 1/4 to fuzz_text (IR parser)
#   FUZZ_BUILD    build folder (default build-fuzz at the repo root)
#   FUZZ_JOBS     parallel compile jobs (default 2)
#
# The build is a separate CMake configuration (clang-14, -DSHARDC_FUZZ=ON,
# -DSHARDC_TESTS=OFF; everything compiled with ASan + UBSan + fuzzer
# coverage). Corpora grow in $FUZZ_BUILD/corpus/<target> across runs; seeds
# are samples/*.onnx and the hostile models of tests/bad for the importer,
# tests/lit/**/*.ir for the text parser. A crash, leak, timeout (10 s per
# input), out-of-memory (2 GiB) or UB report leaves its input in
# $FUZZ_BUILD/artifacts/ and makes this script exit non-zero.
# Exit 77 when clang-14 or libFuzzer is missing (the ctest smoke run skips).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
FUZZ_SECONDS=${FUZZ_SECONDS:-60}
FUZZ_BUILD=${FUZZ_BUILD:-$ROOT/build-fuzz}
FUZZ_JOBS=${FUZZ_JOBS:-2}
CC=${FUZZ_CC:-clang-14}

if ! command -v "$CC" >/dev/null 2>&1; then
  echo "fuzz: $CC not found (scripts/install-deps.sh installs it): skipped"
  exit 77
fi
probe_dir=$(mktemp -d)
trap 'rm -rf "$probe_dir"' EXIT
printf '#include <stddef.h>\n#include <stdint.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n' \
  > "$probe_dir/p.c"
if ! "$CC" -fsanitize=fuzzer,address,undefined "$probe_dir/p.c" -o "$probe_dir/p" 2>"$probe_dir/err"; then
  echo "fuzz: $CC cannot link libFuzzer (libclang-rt-14-dev missing?): skipped"
  cat "$probe_dir/err"
  exit 77
fi

echo "fuzz: building in $FUZZ_BUILD"
cmake -S "$ROOT" -B "$FUZZ_BUILD" -DCMAKE_C_COMPILER="$CC" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DSHARDC_FUZZ=ON -DSHARDC_TESTS=OFF -DSHARDC_WERROR=OFF >"$FUZZ_BUILD.configure.log" 2>&1 \
  || { cat "$FUZZ_BUILD.configure.log"; exit 1; }
cmake --build "$FUZZ_BUILD" --target fuzzers -j "$FUZZ_JOBS" >"$FUZZ_BUILD.build.log" 2>&1 \
  || { tail -50 "$FUZZ_BUILD.build.log"; exit 1; }
# clang sees warnings gcc does not; show them (the fuzz build is not -Werror).
grep -E 'warning:' "$FUZZ_BUILD.build.log" | sort -u | sed 's/^/fuzz: clang: /' || true
rm -f "$FUZZ_BUILD.configure.log" "$FUZZ_BUILD.build.log"

# Seeds (read-only inputs) and corpora (where new coverage is written).
SEEDS=$FUZZ_BUILD/seeds
ART=$FUZZ_BUILD/artifacts
rm -rf "$SEEDS"
mkdir -p "$SEEDS/import" "$SEEDS/text" "$FUZZ_BUILD/corpus/import" "$FUZZ_BUILD/corpus/text" "$ART"
cp "$ROOT"/samples/*.onnx "$SEEDS/import/"
PY=${PYTHON:-$ROOT/.venv/bin/python}
if [ -x "$PY" ] && "$PY" "$ROOT/tests/bad/make_bad_models.py" "$probe_dir/bad" >/dev/null 2>&1; then
  # Small hostile models only (chain_200k and deep_nesting exceed what helps).
  find "$probe_dir/bad/m" -name model.onnx -type f -size -256k | while read -r f; do
    cp "$f" "$SEEDS/import/bad-$(basename "$(dirname "$f")").onnx"
  done
fi
find "$ROOT/tests/lit" -name '*.ir' -type f 2>/dev/null | while read -r f; do
  cp "$f" "$SEEDS/text/$(echo "${f#"$ROOT"/tests/lit/}" | tr / _)"
done
echo "fuzz: seeds: $(ls "$SEEDS/import" | wc -l) models, $(ls "$SEEDS/text" | wc -l) IR files"

# Dictionaries: op names from ir/ops.def (both targets), the IR grammar's
# tokens (docs/ir.md) for the text parser, ONNX attribute and field names for
# the importer.
DICT=$FUZZ_BUILD/dict
mkdir -p "$DICT"
sed -n 's/^OP([A-Z_0-9]*, *"\([A-Za-z]*\)".*/"\1"/p' "$ROOT/ir/ops.def" | sort -u >"$DICT/ops.dict"
{
  cat "$DICT/ops.dict"
  for t in 'shardc.ir 1' graph opset input const param output '%' ':' '=' ',' '_' '?' \
           '[*]' '{' '}' '(' ')' '[' ']' '\"' '//' f32 f16 bf16 f64 i8 i16 i32 i64 \
           u8 u16 u32 u64 bool string c64 c128 undef axis perm nan inf -1 \
           9223372036854775807 -9223372036854775808 1e308; do
    printf '"%s"\n' "$t"
  done
} >"$DICT/text.dict"
{
  cat "$DICT/ops.dict"
  for t in com.microsoft ai.onnx.ml location offset length axis axes perm shape to \
           kernel_shape strides pads dilations group keepdims value then_branch; do
    printf '"%s"\n' "$t"
  done
} >"$DICT/import.dict"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}

t_import=$((FUZZ_SECONDS * 3 / 4))
[ "$t_import" -ge 1 ] || t_import=1
t_text=$((FUZZ_SECONDS - t_import))
[ "$t_text" -ge 1 ] || t_text=1

status=0
run_target() { # name seconds
  local name=$1 secs=$2 log=$FUZZ_BUILD/$1.log rc=0
  echo "fuzz: $name for ${secs}s"
  "$FUZZ_BUILD/tests/fuzz/$name" -max_total_time="$secs" -max_len=4000000 \
    -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 -close_fd_mask=1 \
    -dict="$DICT/${name#fuzz_}.dict" \
    -artifact_prefix="$ART/$name-" "$FUZZ_BUILD/corpus/${name#fuzz_}" \
    "$SEEDS/${name#fuzz_}" >"$log" 2>&1 || rc=$?
  local execs speed rss
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$log" | tail -1)
  echo "fuzz: $name: exit $rc, ${execs:-?} execs, ${speed:-?} exec/s, peak RSS ${rss:-?} MB," \
       "corpus $(ls "$FUZZ_BUILD/corpus/${name#fuzz_}" | wc -l) files"
  if [ "$rc" != 0 ]; then
    echo "fuzz: $name FAILED (log $log; artifacts in $ART):"
    grep -E 'ERROR|SUMMARY|==[0-9]+==|runtime error|Assertion|assert|Test unit written' "$log" | head -20 || true
    tail -40 "$log"
    status=1
  fi
}
run_target fuzz_import "$t_import"
run_target fuzz_text "$t_text"
exit $status
