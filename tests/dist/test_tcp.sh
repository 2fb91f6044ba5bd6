#!/usr/bin/env bash
# test_tcp.sh — the `tcp` communicator (runtime/comm_tcp.c): one rank per
# process, started as torchrun or Slurm would start them (RANK, WORLD_SIZE,
# MASTER_ADDR, MASTER_PORT; or SLURM_PROCID and SLURM_NTASKS), no MPI.
#
#   comm_driver collectives with 4 and 3 processes: every rank checks every
#     collective (f32, f64, i64, f16; sum, max, min), a send/recv ring and a
#     2x2 split against values it computes itself, and prints "rank R: ok";
#   comm_driver abort: rank 2 aborts ("bad input") while the others wait in
#     a barrier: every process exits non-zero within 10 s and rank 0 names
#     rank 2 and the message;
#   comm_driver kill: rank 1 SIGKILLs itself in a loop of all-reduces: the
#     others exit non-zero within 15 s, saying the connection was lost;
#   shardc train, GPT-2 sample, 3 AdamW steps, batch 4: at dp=2, fsdp=2,
#     pp=2 (1f1b, 2 microbatches), cp=2 (the ring's hops started
#     asynchronously, codegen/overlap.c) and with Slurm's variables at dp=2, every
#     step's loss and gradient norm equal the thread-ranks' run (rtol 1e-6);
#     dp=2 x pp=2 on 4 processes too;
#   a checkpoint saved by 4 processes at dp=2 x pp=2 is sharded (the two
#     processes holding the one copies each write their own files) and
#     resumes on one rank, step 3 equal to the uninterrupted run's;
#   SHARDC_FAIL_RANK=1 ends both processes non-zero within 20 s, rank 0
#     naming rank 1's message.
set -u
BIN=${SC_BINARY_DIR:-$(dirname "$0")/../../build}
SRC=${SC_SOURCE_DIR:-$(dirname "$0")/../..}
SHARDC=${SHARDC:-$BIN/shardc}
DRIVER=$BIN/tests/comm_driver
PY=${SC_PYTHON:-$SRC/.venv/bin/python}
. "$(dirname "$0")/common.sh" # TMP, fail, now, elapsed, under
# a port below the ephemeral range (where every rank's own listener lands),
# free now
free_port() {
  "$PY" -c '
import random, socket
while True:
    p = random.randint(20000, 30000)
    s = socket.socket()
    try:
        s.bind(("0.0.0.0", p))
        print(p)
        break
    except OSError:
        pass
    finally:
        s.close()'
}
export SHARDC_COMM_TIMEOUT=60

# launch N NAME CMD...: N processes with the env bootstrap; their outputs in
# $TMP/NAME.out.R / .err.R; returns the first non-zero exit (0 if none)
launch() {
  local n=$1 name=$2 port pids=() rc=0
  shift 2
  port=$(free_port)
  for ((r = 0; r < n; r++)); do
    if [ "${SLURM_STYLE:-0}" = 1 ]; then
      env -u RANK -u WORLD_SIZE SLURM_PROCID=$r SLURM_NTASKS=$n MASTER_ADDR=127.0.0.1 \
        MASTER_PORT=$port "$@" >"$TMP/$name.out.$r" 2>"$TMP/$name.err.$r" &
    else
      RANK=$r WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$@" \
        >"$TMP/$name.out.$r" 2>"$TMP/$name.err.$r" &
    fi
    pids+=($!)
  done
  local s
  for p in "${pids[@]}"; do
    wait "$p"
    s=$?
    [ $s -ne 0 ] && [ $rc -eq 0 ] && rc=$s
  done
  return $rc
}

export SHARDC_TEST_COMM=tcp
for np in 4 3; do
  timeout 60 bash -c "$(declare -f launch free_port); TMP=$TMP PY=$PY; launch $np coll$np $DRIVER collectives"
  rc=$?
  n_ok=$(cat "$TMP"/coll$np.out.* | grep -c ': ok$')
  if [ $rc -ne 0 ] || [ "$n_ok" -ne $np ]; then
    fail "collectives with $np processes: rc=$rc, $n_ok ranks ok: $(cat "$TMP"/coll$np.err.* | tail -5)"
  else
    echo "ok: collectives with $np processes"
  fi
done

# ends N MODE LIMIT PATTERN WHAT: comm_driver MODE as N processes ends
# non-zero within LIMIT s, rank 0 saying PATTERN
ends() {
  local t0 rc t
  t0=$(now)
  timeout 30 bash -c "$(declare -f launch free_port); TMP=$TMP PY=$PY; launch $1 $2 $DRIVER $2"
  rc=$?
  t=$(elapsed "$t0")
  if [ $rc -eq 0 ] || ! under "$t" "$3" || ! grep -q "$4" "$TMP/$2.err.0"; then
    fail "$2: rc=$rc after ${t}s: $(cat "$TMP/$2.err.0")"
  else
    echo "ok: $5 (${t} s)"
  fi
}
ends 4 abort 10 "rank 2 aborted: bad input" "an abort ends every process"
ends 3 kill 15 "connection to rank 1 was lost" "a killed rank ends the others"
unset SHARDC_TEST_COMM

"$PY" - "$TMP" <<'PY'
import sys, numpy as np
r = np.random.RandomState(3)
np.save(f"{sys.argv[1]}/ids.npy", r.randint(0, 1000, (8, 16)).astype(np.int64))
np.save(f"{sys.argv[1]}/lab.npy", r.randint(0, 1000, (8, 16)).astype(np.int64))
PY
ARGS=("$SRC/samples/gpt2.onnx" --data "input_ids=$TMP/ids.npy" --labels "$TMP/lab.npy"
      --dim batch=4 --optimizer adamw --lr 1e-3 --threads 1 --quiet --steps 3)
same() { # log_a log_b what
  "$PY" - "$1" "$2" "$3" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
ok = len(a) == len(b) == 3
for x, y in zip(a, b):
    for k in ("loss", "grad_norm"):
        ok &= x[k] is not None and y[k] is not None and abs(x[k] - y[k]) <= 1e-6 * abs(x[k])
print(("ok: " if ok else "FAIL: ") + sys.argv[3] + f": {[y['loss'] for y in b]} vs {[x['loss'] for x in a]}")
sys.exit(0 if ok else 1)
PY
}
i=0
for spec in "2 dp=2" "2 fsdp=2" "2 pp=2 --microbatches 2 --schedule 1f1b" "4 dp=2,pp=2 --microbatches 2" \
            "slurm dp=2" "2 cp=2"; do
  i=$((i + 1))
  n=${spec%% *}
  rest=${spec#* }
  style=0
  [ "$n" = slurm ] && { n=2; style=1; }
  read -r -a mesh <<< "$rest"
  "$SHARDC" train "${ARGS[@]}" --mesh "${mesh[@]}" --log-json "$TMP/local$i.jsonl" || fail "$rest on threads"
  SLURM_STYLE=$style timeout 120 bash -c "$(declare -f launch free_port); TMP=$TMP PY=$PY; \
    launch $n train$i $SHARDC train $(printf '%q ' "${ARGS[@]}") --mesh $(printf '%q ' "${mesh[@]}") \
    --comm tcp --log-json $TMP/tcp$i.jsonl"
  rc=$?
  if [ $rc -ne 0 ]; then
    fail "$spec over tcp: rc=$rc: $(tail -3 "$TMP/train$i.err.0")"
    continue
  fi
  same "$TMP/local$i.jsonl" "$TMP/tcp$i.jsonl" "$spec: $n processes over tcp equal thread-ranks" ||
    fails=$((fails + 1))
done

# a sharded save by 4 processes (each writes its own files into rank 0's
# folder), resumed on one rank: step 3 equals the uninterrupted run's
SLURM_STYLE=0 timeout 120 bash -c "$(declare -f launch free_port); TMP=$TMP PY=$PY; \
  launch 4 save $SHARDC train $(printf '%q ' "${ARGS[@]}") --steps 2 --mesh dp=2,pp=2 \
  --microbatches 2 --comm tcp --save $TMP/ck"
rc=$?
"$SHARDC" train "${ARGS[@]}" --resume "$TMP/ck" --log-json "$TMP/resumed.jsonl" >/dev/null 2>&1 ||
  fail "resume the tcp checkpoint"
tail -1 "$TMP/local1.jsonl" > "$TMP/local1_last.jsonl"
if [ $rc -ne 0 ] || [ "$(ls "$TMP/ck" | grep -c 'rank0000[01].safetensors')" -ne 4 ]; then
  fail "sharded save over tcp: rc=$rc, files: $(ls "$TMP/ck" | tr '\n' ' ')"
else
  "$PY" - "$TMP/local1_last.jsonl" "$TMP/resumed.jsonl" <<'PY' || fails=$((fails + 1))
import json, sys
a, b = (json.loads(open(f).readline()) for f in sys.argv[1:3])
ok = b["step"] == 3 and abs(a["loss"] - b["loss"]) <= 1e-5 * abs(a["loss"])
print(("ok: " if ok else "FAIL: ") + f"4 processes' sharded checkpoint resumed on one rank: step 3 {b['loss']} vs {a['loss']}")
sys.exit(0 if ok else 1)
PY
fi

t0=$(now)
SHARDC_FAIL_RANK=1 timeout 60 bash -c "$(declare -f launch free_port); TMP=$TMP PY=$PY; \
  launch 2 fail $SHARDC train $(printf '%q ' "${ARGS[@]}") --mesh dp=2 --comm tcp"
rc=$?
t=$(elapsed "$t0")
if [ $rc -eq 0 ] || ! under "$t" 20 || ! grep -q "rank 1 aborted: injected failure" "$TMP/fail.err.0"; then
  fail "failing rank: rc=$rc after ${t}s: $(tail -3 "$TMP/fail.err.0")"
else
  echo "ok: a failing rank ended both processes (${t} s)"
fi

[ $fails -eq 0 ] && echo "all ok" || echo "$fails failure(s)"
[ $fails -eq 0 ]
