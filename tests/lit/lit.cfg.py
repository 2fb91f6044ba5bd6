# lit configuration for shardc's golden tests (tests/lit/**/*.ir, *.test).
#
# Run through ctest, or by hand:
#   .venv/bin/lit -sv tests/lit --param shardc=build/shardc \
#       --param filecheck=/usr/lib/llvm-14/bin/FileCheck \
#       --param python=.venv/bin/python --param source_dir=$PWD
# Substitutions: %shardc, %python, %source_dir, and FileCheck (the `filecheck`
# param). `not` is lit's internal-shell builtin.
import os

import lit.formats

config.name = "shardc"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".ir", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.excludes = ["lit.cfg.py", "Inputs"]

params = lit_config.params
here = os.path.dirname(os.path.abspath(__file__))
source_dir = os.path.abspath(params.get("source_dir", os.path.join(here, "..", "..")))
shardc = os.path.abspath(params.get("shardc", os.path.join(source_dir, "build", "shardc")))
filecheck = params.get("filecheck", "/usr/lib/llvm-14/bin/FileCheck")
python = params.get("python", os.path.join(source_dir, ".venv", "bin", "python"))

if not os.path.exists(shardc):
    lit_config.fatal("shardc binary not found at %s (pass --param shardc=...)" % shardc)
if not os.path.exists(filecheck):
    lit_config.fatal("FileCheck not found at %s (pass --param filecheck=...)" % filecheck)

config.test_exec_root = os.path.join(os.path.dirname(shardc), "tests", "lit")
config.substitutions.append(("%shardc", shardc))
config.substitutions.append(("%python", python))
config.substitutions.append(("%source_dir", source_dir))
# FileCheck as a whole word (not inside --check-prefix=...FileCheck...).
config.substitutions.append((r"\bFileCheck\b", filecheck))

config.environment["PATH"] = os.pathsep.join(
    [os.path.dirname(filecheck), config.environment.get("PATH", os.environ.get("PATH", ""))])
for var in ("HOME", "TMPDIR"):
    if var in os.environ:
        config.environment[var] = os.environ[var]

# `REQUIRES: shardc-cuda`: the binary was built with the CUDA emitter (NVRTC):
# SHARDC_CUDA on in its build directory's CMake cache and nvrtc.h present
# (CMakeLists.txt turns the emitter off without it).
_cache = os.path.join(os.path.dirname(shardc), "CMakeCache.txt")
if os.path.exists(_cache):
    _vars = dict(l.split("=", 1) for l in open(_cache).read().splitlines()
                 if "=" in l and not l.startswith(("#", "//")))
    _home = _vars.get("SHARDC_CUDA_HOME:PATH", "/usr/local/cuda")
    if _vars.get("SHARDC_CUDA:BOOL") == "ON" and os.path.exists(
            os.path.join(_home, "include", "nvrtc.h")):
        config.available_features.add("shardc-cuda")
