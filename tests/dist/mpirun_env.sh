# mpirun_env.sh — sourced by the tests that run shardc under Open MPI
# (test_comm_mpi.sh, test_train_mpi.sh): `mpirun_env BINARY` sets MPIRUN
# (an array) and the environment.
#   --allow-run-as-root: this sandbox runs as root (harmless otherwise);
#   --oversubscribe: more ranks than cores; no MCA settings were needed here
#   (Open MPI 4.1, shared-memory transport between local ranks).
# Under the sanitizer build, Open MPI's own allocations (MCA components it
# dlopens, op tables) are not freed by MPI_Finalize and LeakSanitizer would
# report them at exit. Leak checking of our communicator code is done by
# unit.test_comm (local backend, same shared code); here it is switched off
# for the MPI processes only. Address and UB checks stay on.
mpirun_env() {
  MPIRUN=(mpirun --oversubscribe)
  [ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)
  export OMPI_MCA_rmaps_base_oversubscribe=1
  if [ -n "${ASAN_OPTIONS+x}" ] || ldd "$1" 2>/dev/null | grep -q libasan; then
    export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
  fi
}
