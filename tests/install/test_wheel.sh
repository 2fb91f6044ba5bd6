#!/usr/bin/env bash
# test_wheel.sh — the Python package from a clean clone: `pip wheel .` of a
# fresh `git clone` of this checkout (what is committed, nothing of the
# build tree) builds the library through scikit-build-core and the
# project's CMake; the wheel installs into a scratch venv; there, with the
# current directory outside the source, `import shardc` loads the bundled
# libshardc.so, runs the MLP sample, and its output equals `shardc run`'s of
# this build (rtol 1e-5, atol 1e-6: the wheel is a Release build, this one
# RelWithDebInfo; no NaN); the `shardc` console command runs the bundled
# binary, and the communicator modules are in the package; then `pip
# install .` of the same clone into a second venv runs the same model.
# Time: the wheel rebuilds the library. Measured on 2 cores: the wheel in
# 33 s and the whole test in 74 s with ccache warm; 12 minutes cold while
# other builds shared the cores. ccache is used when present, with the
# build folder fixed under the build tree so that its hits carry over.
# Needs the package index for scikit-build-core and numpy: without it,
# skipped (77).
set -euo pipefail
ROOT=${SC_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
BUILD=${SC_BINARY_DIR:?SC_BINARY_DIR names the build to compare with}
SHARDC=${SHARDC:-$BUILD/shardc}
W=$BUILD/wheel-test
rm -rf "$W/src" "$W/dist" "$W/venv" "$W/run"
mkdir -p "$W/run"
git clone -q --no-hardlinks "$ROOT" "$W/src"
python3 -m venv "$W/venv"
PIP=("$W/venv/bin/pip" -q --disable-pip-version-check)
if ! "${PIP[@]}" download --no-deps -d "$W/probe" scikit-build-core >/dev/null 2>&1; then
  echo "SKIP: the package index is not reachable (scikit-build-core)"; exit 77
fi
CFG=(-C build-dir="$W/build")
if command -v ccache >/dev/null; then
  CFG+=(-C cmake.define.CMAKE_C_COMPILER_LAUNCHER=ccache
        -C cmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
t0=$(date +%s)
(cd "$W/src" && nice "${PIP[@]}" wheel . --no-deps -w "$W/dist" "${CFG[@]}") \
  > "$W/wheel.log" 2>&1 || { tail -40 "$W/wheel.log"; echo "FAIL: pip wheel"; exit 1; }
echo "wheel built in $(( $(date +%s) - t0 )) s: $(ls "$W/dist")"
"${PIP[@]}" install "$W"/dist/shardc-*.whl
# the library, its modules and the command are in the package
SITE=$("$W/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')
for f in lib/libshardc.so lib/shardc/libshardc_comm_mpi.so bin/shardc; do
  [ -e "$SITE/shardc/$f" ] || { echo "FAIL: shardc/$f not in the wheel"; exit 1; }
done
"$W/venv/bin/shardc" --version
# the CLI of this build on seeded inputs, then the package in the venv
cd "$W/run"
"$W/venv/bin/python" -c '
import numpy as np
np.save("x.npy", np.random.default_rng(43).standard_normal((4, 64), dtype=np.float32))'
"$SHARDC" run "$ROOT/samples/mlp.onnx" --dim batch=4 --input x=x.npy --output-dir . --quiet
env -u SHARDC_LIBRARY -u PYTHONPATH "$W/venv/bin/python" - "$ROOT" "$SITE" <<'PY'
import sys
import numpy as np
import shardc
root, site = sys.argv[1], sys.argv[2]
assert shardc.__file__.startswith(site), shardc.__file__   # the installed copy
assert shardc._lib.path.startswith(site), shardc._lib.path  # its own library
exe = shardc.compile(shardc.load(f"{root}/samples/mlp.onnx", dims={"batch": 4}))
got = exe.run({"x": np.load("x.npy")})["y"]
want = np.load("y.npy")
assert got.shape == want.shape and not np.isnan(got).any()
np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
print(f"wheel: y {got.shape} equals shardc run's, max |diff| {np.abs(got - want).max():.3g}")
PY
# `pip install .` from the clean clone too (the same build folder: the
# build is incremental), into a venv of its own, and the package there
# imports its own library and runs the same model
python3 -m venv "$W/venv2"
(cd "$W/src" && nice "$W/venv2/bin/pip" -q --disable-pip-version-check install . "${CFG[@]}") \
  > "$W/install.log" 2>&1 || { tail -40 "$W/install.log"; echo "FAIL: pip install ."; exit 1; }
SITE2=$("$W/venv2/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')
"$W/venv2/bin/shardc" --version
env -u SHARDC_LIBRARY -u PYTHONPATH "$W/venv2/bin/python" - "$ROOT" "$SITE2" <<'PY'
import sys
import numpy as np
import shardc
root, site = sys.argv[1], sys.argv[2]
assert shardc._lib.path.startswith(site), shardc._lib.path
exe = shardc.compile(shardc.load(f"{root}/samples/mlp.onnx", dims={"batch": 4}))
got = exe.run({"x": np.load("x.npy")})["y"]
np.testing.assert_allclose(got, np.load("y.npy"), rtol=1e-5, atol=1e-6)
print("pip install .: the package runs the MLP as shardc run does")
PY
rm -rf "$W/src" "$W/venv" "$W/venv2" "$W/run" "$W/probe"
echo "PASS"
