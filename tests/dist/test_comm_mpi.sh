#!/usr/bin/env bash
# test_comm_mpi.sh — the `mpi` communicator in real processes under mpirun.
#
# Runs tests/dist/comm_driver.c (built by tests/CMakeLists.txt when MPI is
# found) with Open MPI:
#   collectives at -np 4 and -np 3: every rank checks every collective
#     against values it computes itself; all print "rank R: ok", exit 0
#   abort: rank 2 calls sc_comm_abort("bad input") while the others wait in
#     a barrier: mpirun exits non-zero within 10 s and stderr names rank 2
#     and the message
#   kill: rank 1 SIGKILLs itself in a loop of all_reduces: the job ends
#     non-zero within 15 s (mpirun notices the dead process)
# Exits 77 (skipped) without mpirun or without the driver (MPI not built).
# mpirun's flags and environment: mpirun_env.sh.
set -u
BIN=${SC_BINARY_DIR:-$(dirname "$0")/../../build}
DRIVER=$BIN/tests/comm_driver
command -v mpirun >/dev/null 2>&1 || { echo "SKIP: mpirun not found"; exit 77; }
[ -x "$DRIVER" ] && [ -e "$BIN/libshardc_comm_mpi.so" ] || { echo "SKIP: $DRIVER or the MPI module not built (MPI not found)"; exit 77; }

. "$(dirname "$0")/mpirun_env.sh"
mpirun_env "$DRIVER"
. "$(dirname "$0")/common.sh" # TMP, fail, now, elapsed, under

for np in 4 3; do
  timeout 40 "${MPIRUN[@]}" -np $np "$DRIVER" collectives >"$TMP/out" 2>"$TMP/err"
  rc=$?
  n_ok=$(grep -c ': ok$' "$TMP/out")
  if [ $rc -ne 0 ] || [ "$n_ok" -ne $np ]; then
    fail "collectives -np $np: rc=$rc, $n_ok of $np ranks ok"
    cat "$TMP/out" "$TMP/err"
  else
    echo "ok: collectives -np $np"
  fi
done

t0=$(now)
timeout 30 "${MPIRUN[@]}" -np 4 "$DRIVER" abort >"$TMP/out" 2>"$TMP/err"
rc=$?
t=$(elapsed "$t0")
if [ $rc -eq 0 ] || [ $rc -eq 124 ] || ! under "$t" 10; then
  fail "abort: rc=$rc after ${t}s (want non-zero within 10 s)"
elif ! grep -q 'rank 2' "$TMP/err" || ! grep -q 'bad input' "$TMP/err"; then
  fail "abort: stderr lacks 'rank 2' and 'bad input'"
  cat "$TMP/err"
elif grep -q 'barrier returned' "$TMP/err"; then
  fail "abort: a rank's barrier returned instead of the job ending"
else
  echo "ok: abort ended the job in ${t}s (rc=$rc): $(grep -m1 'bad input' "$TMP/err")"
fi

t0=$(now)
timeout 30 "${MPIRUN[@]}" -np 4 "$DRIVER" kill >"$TMP/out" 2>"$TMP/err"
rc=$?
t=$(elapsed "$t0")
if [ $rc -eq 0 ] || [ $rc -eq 124 ] || ! under "$t" 15; then
  fail "kill: rc=$rc after ${t}s (want non-zero within 15 s)"
  cat "$TMP/err"
else
  echo "ok: killed rank ended the job in ${t}s (rc=$rc)"
fi

[ $fails -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "all ok"
