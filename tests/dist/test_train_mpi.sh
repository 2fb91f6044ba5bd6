#!/usr/bin/env bash
# test_train_mpi.sh — partitioned training with one rank per process, under
# mpirun (--comm mpi), against the same training on thread-ranks.
#
#   GPT-2 sample, 3 AdamW steps, batch 4, at dp=2, at fsdp=2 (ZeRO-3),
#   pipelined at pp=2 (1f1b, 2 microbatches; the stages' crossing sends need
#   MPI's buffered send) and at cp=2 (the ring's hops, each a send and a
#   receive started asynchronously: every rank's send is issued before it
#   waits for its receive):
#   every step's loss and gradient norm equal the thread-ranks' run within
#   rtol 1e-6 (the MPI and local all-reduces may sum in other orders;
#   measured equal to the last printed digit); the fsdp=2 checkpoint (rank 0
#   writes it, every rank gathers its pieces) resumes on one rank and its
#   step 4 equals 4 uninterrupted thread-rank steps (rtol 1e-5), and so does
#   the pp=2 checkpoint's (each piece written by its one copy); at fsdp=3
#   --zero 1 (batch 6, mpirun -np 3: the flat shard) 2 steps equal the
#   thread-ranks' and the checkpoint resumes on one rank, its step 3 equal
#   to the thread-ranks' (rtol 1e-5);
#   SHARDC_FAIL_RANK=1 ends the job non-zero within 20 s with the rank's
#   message.
# Exits 77 (skipped) without mpirun or in a build without MPI.
set -u
BIN=${SC_BINARY_DIR:-$(dirname "$0")/../../build}
SRC=${SC_SOURCE_DIR:-$(dirname "$0")/../..}
SHARDC=${SHARDC:-$BIN/shardc}
PY=${SC_PYTHON:-$SRC/.venv/bin/python}
command -v mpirun >/dev/null 2>&1 || { echo "SKIP: mpirun not found"; exit 77; }
[ -e "$BIN/libshardc_comm_mpi.so" ] || { echo "SKIP: $BIN/libshardc_comm_mpi.so not built (no MPI)"; exit 77; }
. "$(dirname "$0")/mpirun_env.sh"
mpirun_env "$SHARDC"
. "$(dirname "$0")/common.sh" # TMP, fail, now, elapsed, under

"$PY" - "$TMP" <<'PY'
import sys, numpy as np
r = np.random.RandomState(3)
np.save(f"{sys.argv[1]}/ids.npy", r.randint(0, 1000, (8, 16)).astype(np.int64))
np.save(f"{sys.argv[1]}/lab.npy", r.randint(0, 1000, (8, 16)).astype(np.int64))
PY
ARGS=("$SRC/samples/gpt2.onnx" --data "input_ids=$TMP/ids.npy" --labels "$TMP/lab.npy"
      --dim batch=4 --optimizer adamw --lr 1e-3 --threads 1 --quiet)

compare() { # log_a log_b rtol what
  "$PY" - "$1" "$2" "$3" "$4" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
tol, what = float(sys.argv[3]), sys.argv[4]
ok = len(b) >= 1 and all(x["step"] == y["step"] for x, y in zip(a, b))
for x, y in zip(a, b):
    for k in ("loss", "grad_norm"):
        ok &= x[k] is not None and y[k] is not None and abs(x[k] - y[k]) <= tol * abs(x[k])
print(("ok: " if ok else "FAIL: ") + what + f": {[y['loss'] for y in b]} vs {[x['loss'] for x in a]}")
sys.exit(0 if ok else 1)
PY
}

for spec in dp=2 fsdp=2 "pp=2 --microbatches 2 --schedule 1f1b" cp=2; do
  mesh=${spec%% *}
  extra=()
  [ "$spec" != "$mesh" ] && read -r -a extra <<< "${spec#* }"
  "$SHARDC" train "${ARGS[@]}" --steps 3 --mesh $mesh "${extra[@]}" \
    --log-json "$TMP/local_$mesh.jsonl" || fail "$mesh on threads"
  timeout 120 "${MPIRUN[@]}" -np 2 "$SHARDC" train "${ARGS[@]}" --steps 3 --mesh $mesh \
    "${extra[@]}" --comm mpi --log-json "$TMP/mpi_$mesh.jsonl" --save "$TMP/ck_$mesh" \
    >"$TMP/out" 2>"$TMP/err" \
    || { fail "$mesh under mpirun: $(tail -3 "$TMP/err")"; continue; }
  compare "$TMP/local_$mesh.jsonl" "$TMP/mpi_$mesh.jsonl" 1e-6 "$mesh: mpirun -np 2 equals thread-ranks" \
    || fails=$((fails + 1))
done

# the checkpoint written under mpirun resumes on one rank
"$SHARDC" train "${ARGS[@]}" --steps 4 --mesh fsdp=2 --log-json "$TMP/local4.jsonl" || fail "4 steps"
"$SHARDC" train "${ARGS[@]}" --steps 4 --resume "$TMP/ck_fsdp=2" --log-json "$TMP/resumed.jsonl" \
  || fail "resume on one rank"
tail -1 "$TMP/local4.jsonl" > "$TMP/local4_last.jsonl"
compare "$TMP/local4_last.jsonl" "$TMP/resumed.jsonl" 1e-5 \
  "the mpirun fsdp=2 checkpoint resumed on one rank: step 4" || fails=$((fails + 1))
"$SHARDC" train "${ARGS[@]}" --steps 4 --resume "$TMP/ck_pp=2" --log-json "$TMP/resumed_pp.jsonl" \
  || fail "resume the pipeline's checkpoint on one rank"
compare "$TMP/local4_last.jsonl" "$TMP/resumed_pp.jsonl" 1e-5 \
  "the mpirun pp=2 checkpoint resumed on one rank: step 4" || fails=$((fails + 1))

# ZeRO-1 over a flat shard under mpirun -np 3 (fsdp=3 divides no dim of
# GPT-2's but the QKV's): equal to thread-ranks, and its checkpoint (the
# flat optimizer state gathered and written whole, in the parameters'
# shapes) resumes on one rank
"$PY" - "$TMP" <<'PY'
import sys, numpy as np
r = np.random.RandomState(5)
np.save(f"{sys.argv[1]}/ids6.npy", r.randint(0, 1000, (6, 16)).astype(np.int64))
np.save(f"{sys.argv[1]}/lab6.npy", r.randint(0, 1000, (6, 16)).astype(np.int64))
PY
ARGS6=("$SRC/samples/gpt2.onnx" --data "input_ids=$TMP/ids6.npy" --labels "$TMP/lab6.npy"
       --dim batch=6 --optimizer adamw --lr 1e-3 --threads 1 --quiet)
"$SHARDC" train "${ARGS6[@]}" --steps 3 --mesh fsdp=3 --zero 1 --log-json "$TMP/flat_local.jsonl" \
  || fail "fsdp=3 --zero 1 on threads"
if timeout 120 "${MPIRUN[@]}" -np 3 "$SHARDC" train "${ARGS6[@]}" --steps 2 --mesh fsdp=3 \
     --zero 1 --comm mpi --log-json "$TMP/flat_mpi.jsonl" --save "$TMP/ck_flat" \
     >"$TMP/out" 2>"$TMP/err"; then
  compare "$TMP/flat_local.jsonl" "$TMP/flat_mpi.jsonl" 1e-6 \
    "fsdp=3 --zero 1: mpirun -np 3 equals thread-ranks" || fails=$((fails + 1))
  "$SHARDC" train "${ARGS6[@]}" --steps 3 --resume "$TMP/ck_flat" \
    --log-json "$TMP/flat_resumed.jsonl" || fail "resume the flat checkpoint on one rank"
  tail -1 "$TMP/flat_local.jsonl" > "$TMP/flat_last.jsonl"
  compare "$TMP/flat_last.jsonl" "$TMP/flat_resumed.jsonl" 1e-5 \
    "the mpirun fsdp=3 --zero 1 checkpoint resumed on one rank: step 3" || fails=$((fails + 1))
else
  fail "fsdp=3 --zero 1 under mpirun: $(tail -3 "$TMP/err")"
fi

# the rank that speaks says each note once: GPT-2's tied LM head is one note
# from 2 processes, not one per rank
LOUD=()
for a in "${ARGS[@]}"; do [ "$a" = --quiet ] || LOUD+=("$a"); done
timeout 120 "${MPIRUN[@]}" -np 2 "$SHARDC" train "${LOUD[@]}" --steps 1 --mesh dp=2 \
  --comm mpi >"$TMP/out" 2>"$TMP/err" || fail "dp=2 without --quiet: $(tail -3 "$TMP/err")"
notes=$(grep -c "is the transpose of" "$TMP/err")
if [ "$notes" -eq 1 ]; then echo "ok: the tied-weight note printed once by 2 ranks"
else fail "the tied-weight note printed $notes times by 2 ranks"; fi

# a failing rank ends the job
start=$(date +%s)
SHARDC_FAIL_RANK=1 timeout 60 "${MPIRUN[@]}" -np 2 "$SHARDC" train "${ARGS[@]}" --steps 3 \
  --mesh dp=2 --comm mpi >"$TMP/out" 2>"$TMP/err"
rc=$?
took=$(( $(date +%s) - start ))
if [ $rc -eq 0 ] || [ $rc -eq 124 ] || [ $took -gt 20 ] || ! grep -q "injected failure" "$TMP/err"; then
  fail "failing rank: rc=$rc after ${took}s: $(tail -3 "$TMP/err")"
else
  echo "ok: a failing rank ended the job (exit $rc, ${took} s)"
fi

[ $fails -eq 0 ] && echo "all ok" || echo "$fails failure(s)"
[ $fails -eq 0 ]
