#!/usr/bin/env bash
# run.sh — builds the libFuzzer targets with clang-14 and fuzzes them.
#
#   FUZZ_SECONDS  total fuzzing time (default 60), split 23:10:7:10:6:5:3 over
#                 fuzz_import (ONNX import + canonical passes), fuzz_text (IR
#                 parser), fuzz_npy (.npy reader), fuzz_program_json (bundle
#                 program.json reader/writer), fuzz_plan_json (plan JSON
#                 reader/writer), fuzz_cluster_json (cluster file reader
#                 and placement) and fuzz_profile_json (calibration profile
#                 reader/writer); each target gets at least 1 s
#   FUZZ_ONLY     run only these targets (space-separated names, e.g.
#                 "fuzz_npy"); each still gets its share of FUZZ_SECONDS
#   FUZZ_BUILD    build folder (default build-fuzz at the repo root)
#   FUZZ_JOBS     parallel compile jobs (default 2)
#
# The build is a separate CMake configuration (clang-14, -DSHARDC_FUZZ=ON,
# -DSHARDC_TESTS=OFF; everything compiled with ASan + UBSan + fuzzer
# coverage). Corpora grow in $FUZZ_BUILD/corpus/<target> across runs; seeds
# are samples/*.onnx and the hostile models of tests/bad for the importer,
# tests/lit/**/*.ir for the text parser, .npy files written with the venv's
# NumPy (make_npy_seeds.py), the program.json of the samples compiled with
# `shardc compile --target cpu` ($SHARDC, else the fuzz build's own shardc),
# the example of docs/plan-format.md plus a few hand-written plans, the
# cluster presets of samples/clusters/ plus a minimal cluster file, three
# hand-written calibration profiles (two a CPU's, one a GPU's), and every
# file in tests/fuzz/regressions/<target>/ (inputs that once found a bug,
# replayed on every run). A crash, leak, timeout (10 s per
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
cmake --build "$FUZZ_BUILD" --target fuzzers shardc -j "$FUZZ_JOBS" >"$FUZZ_BUILD.build.log" 2>&1 \
  || { tail -50 "$FUZZ_BUILD.build.log"; exit 1; }
# clang sees warnings gcc does not; show them (the fuzz build is not -Werror).
grep -E 'warning:' "$FUZZ_BUILD.build.log" | sort -u | sed 's/^/fuzz: clang: /' || true
rm -f "$FUZZ_BUILD.configure.log" "$FUZZ_BUILD.build.log"

# Seeds (read-only inputs) and corpora (where new coverage is written).
SEEDS=$FUZZ_BUILD/seeds
ART=$FUZZ_BUILD/artifacts
TARGETS="import text npy program_json plan_json cluster_json profile_json"
rm -rf "$SEEDS"
for t in $TARGETS; do mkdir -p "$SEEDS/$t" "$FUZZ_BUILD/corpus/$t"; done
mkdir -p "$ART"
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
if [ -x "$PY" ]; then
  "$PY" "$ROOT/tests/fuzz/make_npy_seeds.py" "$SEEDS/npy" \
    || echo "fuzz: warning: make_npy_seeds.py failed; fuzz_npy starts from regressions only"
fi
SHARDC_BIN=${SHARDC:-$FUZZ_BUILD/shardc}
for m in mlp gpt2 resnet llama; do
  if "$SHARDC_BIN" compile "$ROOT/samples/$m.onnx" --target cpu -o "$probe_dir/bundle-$m" \
       >/dev/null 2>&1; then
    cp "$probe_dir/bundle-$m/program.json" "$SEEDS/program_json/$m.json"
  else
    echo "fuzz: warning: $SHARDC_BIN compile $m failed; no program.json seed for it"
  fi
done
sed -n '/^```json$/,/^```$/p' "$ROOT/docs/plan-format.md" | sed '1d;$d' >"$SEEDS/plan_json/doc-example.json"
printf '{"version": 1, "mesh": {"axes": ""}}\n' >"$SEEDS/plan_json/minimal.json"
printf '{"version": 1, "mesh": {"axes": "dp=4", "ranks_per_node": 2},
 "data_parallel": {"axis": "dp"}, "precision": "f32",
 "training": {"zero_stage": 3, "shard_group_size": 2, "recompute": ["a", "b"]}}\n' \
  >"$SEEDS/plan_json/dp.json"
printf '{"version": 1, "mesh": {"axes": "pp=3,tp=2"}, "tensor_parallel": {"axis": "tp",
 "blocks": ["/h.0/", "/h.1/"], "sequence_parallel": true, "vocab_parallel": false},
 "pipeline": {"axis": "pp", "stages": 3, "boundaries": ["n1", "n2"], "microbatches": 4,
 "schedule": "gpipe", "node_stages": {"n0": 0, "n1": 1, "n2": 2}},
 "shardings": {"w0": "[_,tp]", "w1": "[(pp,tp),_]", "w2": "[tp]partial(pp)"}}\n' \
  >"$SEEDS/plan_json/tp-pp.json"
cp "$ROOT"/samples/clusters/*.json "$SEEDS/cluster_json/"
printf '{"gpus_per_node": 1, "gpu": {"name": "x", "memory_bytes": 1e9, "peak_flops": {"fp32": 1e12},
 "hbm_bytes_per_s": 1e11}}\n' \
  >"$SEEDS/cluster_json/minimal.json"
printf '{"format": "shardc-profile-1", "device": {"kind": "cpu", "name": "c", "threads": 1},
 "gemm": [{"m": 1, "n": 1, "k": 1, "dtype": "fp32", "seconds": 1, "flops_per_s": 2}],
 "memory_bytes_per_s": 1e10, "step_overhead_s": 1e-6}\n' >"$SEEDS/profile_json/minimal.json"
printf '{"format": "shardc-profile-1", "device": {"kind": "cpu", "name": "AMD EPYC", "threads": 2},
 "gemm": [{"m": 64, "n": 64, "k": 64, "dtype": "fp32", "seconds": 2.62144e-6, "flops_per_s": 2e11},
  {"m": 256, "n": 256, "k": 256, "dtype": "bf16", "seconds": 8.388608e-5, "flops_per_s": 4e11}],
 "memory_bytes_per_s": 2e10, "memory_thread_bytes_per_s": 1e10, "step_overhead_s": 1e-6,
 "attention": [{"dtype": "fp32", "grad": false, "row_s": 1e-9, "score_s": 2e-9, "mac_s": 1e-10},
  {"dtype": "bf16", "grad": true, "row_s": 1e-9, "score_s": 4e-9, "mac_s": 3e-10}],
 "comms": [{"name": "local", "max_ranks": 4, "latency_s": 1e-5, "bandwidth_bytes_per_s": 5e9,
  "overhead_s": 2e-6}], "sync": [{"ranks": 2, "call_s": 2e-5, "stretch": 1.1},
  {"ranks": 4, "call_s": 3e-5, "stretch": 2.2}], "calibrate_s": 3.5}\n' >"$SEEDS/profile_json/two.json"
printf '{"format": "shardc-profile-1", "device": {"kind": "cuda", "name": "g", "threads": 1},
 "gemm": [{"m": 1024, "n": 1024, "k": 1024, "dtype": "bf16", "seconds": 2.147483648e-5,
  "flops_per_s": 1e14}], "memory_bytes_per_s": 2e12, "step_overhead_s": 2e-6,
 "attention": [{"dtype": "bf16", "grad": false, "heads": 2, "sq": 256, "d": 64,
  "seconds": 4.210688e-7, "flops_per_s": 4e13}]}\n' >"$SEEDS/profile_json/gpu.json"
for t in $TARGETS; do
  if [ -d "$ROOT/tests/fuzz/regressions/$t" ]; then
    find "$ROOT/tests/fuzz/regressions/$t" -type f ! -name '*.md' -exec cp {} "$SEEDS/$t/" \;
  fi
done
echo "fuzz: seeds: $(ls "$SEEDS/import" | wc -l) models, $(ls "$SEEDS/text" | wc -l) IR files," \
     "$(ls "$SEEDS/npy" | wc -l) .npy, $(ls "$SEEDS/program_json" | wc -l) program.json," \
     "$(ls "$SEEDS/plan_json" | wc -l) plans, $(ls "$SEEDS/cluster_json" | wc -l) clusters," \
     "$(ls "$SEEDS/profile_json" | wc -l) profiles"

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
# The JSON targets: every key and keyword their reader knows (the string
# literals of the reader's source) plus JSON punctuation.
json_dict() { # source file
  grep -o '"[A-Za-z_][A-Za-z_0-9.]*"' "$1" | sort -u
  for t in '{' '}' '[' ']' ':' ',' true false null -1 0 64 9223372036854775807 1e999 '\"'; do
    printf '"%s"\n' "$t"
  done
}
json_dict "$ROOT/codegen/program_json.c" >"$DICT/program_json.dict"
json_dict "$ROOT/passes/plan/plan_json.c" >"$DICT/plan_json.dict"
json_dict "$ROOT/passes/plan/cluster.c" >"$DICT/cluster_json.dict"
json_dict "$ROOT/passes/plan/profile.c" >"$DICT/profile_json.dict"
{
  printf '"\\x93NUMPY"\n"\\x01\\x00"\n"\\x02\\x00"\n"\\x03\\x00"\n'
  for t in descr fortran_order shape True False "'<f4'" "'>f8'" "'|b1'" "'<f2'" "'|u1'" \
           "'<i8'" "'=i4'" "'<c8'" "'O'" '{' '}' '(' ')' ':' ',' "'" '),' 0 -1 \
           9223372036854775807; do
    printf '"%s"\n' "$t"
  done
} >"$DICT/npy.dict"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}

share() { # weight (of 64): that share of FUZZ_SECONDS, at least 1 s
  local s=$((FUZZ_SECONDS * $1 / 64))
  [ "$s" -ge 1 ] || s=1
  echo "$s"
}
t_text=$(share 10)
t_npy=$(share 7)
t_program=$(share 10)
t_plan=$(share 6)
t_cluster=$(share 5)
t_profile=$(share 3)
# The importer gets the rest (at FUZZ_SECONDS=60: 25, 9, 6, 9, 5, 4, 2).
t_import=$((FUZZ_SECONDS - t_text - t_npy - t_program - t_plan - t_cluster - t_profile))
[ "$t_import" -ge 1 ] || t_import=1

status=0
run_target() { # name seconds
  local name=$1 secs=$2 log=$FUZZ_BUILD/$1.log rc=0
  case " ${FUZZ_ONLY:-$name} " in *" $name "*) ;; *) return 0 ;; esac
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
run_target fuzz_npy "$t_npy"
run_target fuzz_program_json "$t_program"
run_target fuzz_plan_json "$t_plan"
run_target fuzz_cluster_json "$t_cluster"
run_target fuzz_profile_json "$t_profile"
exit $status
