"""test_docs_commands.py — the commands the docs give a newcomer run as written.

Runs the ```sh blocks of README.md and docs/getting-started.md (all of
them: training's walk-through and the command line) and of docs/cli.md's
"Examples" (each document's blocks in order, as one bash -e script: a
reader types them in one shell;
cli.md's prose puts build/ on the PATH first, so that is done for it), in a
scratch copy of the repository root (symbolic links to samples/, tests/,
.venv and the build folder as build/), and checks that
  * each block exits 0 (every command in it works: the input files it uses
    exist, `graph.ir` is made before `opt` reads it, ...);
  * nothing is left at the root but what was linked, and scratch/ (which
    the repository's .gitignore covers): following the docs leaves the
    checkout clean;
  * no .npy file is tracked at the repository root;
  * README.md's and getting-started.md's blocks still walk through
    training: `shardc train` with --save, again with --resume, `shardc
    export`, a run of the exported model, and a training with --mesh.
`make` lines (deps, build, demo, test: the build and the suite themselves)
and `pip install .` (the wheel: install.test_wheel) are skipped; without mpirun the mpirun commands are skipped (a note says
so).

Environment: SC_SOURCE_DIR, SC_BINARY_DIR. Exit 0 on success, 1 on failure.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
from checks import check, failures, skip_part, skipped

SRC = os.path.abspath(os.environ.get("SC_SOURCE_DIR",
                                     os.path.join(os.path.dirname(__file__), "..", "..")))
BUILD = os.path.abspath(os.environ.get("SC_BINARY_DIR", os.path.join(SRC, "build")))
LINKS = {"samples": os.path.join(SRC, "samples"), "tests": os.path.join(SRC, "tests"),
         ".venv": os.path.join(SRC, ".venv"), "build": BUILD}


def sh_blocks(path, section=None):
    """The ```sh blocks of a markdown file (of one '## ' section if given)."""
    text = open(path).read()
    if section:
        m = re.search(rf"^## {re.escape(section)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
        text = m.group(1) if m else ""
    return re.findall(r"^```sh\n(.*?)^```", text, re.S | re.M)


def runnable(block):
    """The block without its `make` lines and `pip install .` (the build
    and the wheel: install.test_wheel builds and installs that one), and
    their comment continuation lines."""
    out, skipping = [], False
    for ln in block.splitlines():
        if re.match(r"^(make\b|pip install \.(\s|$))", ln):
            skipping = True
            continue
        if skipping and re.match(r"^\s+#", ln):
            continue
        skipping = False
        out.append(ln)
    return "\n".join(out) + "\n"


def main():
    docs = [("README.md", None, ""), ("docs/getting-started.md", None, ""),
            ("docs/cli.md", "Examples", 'export PATH="$PWD/build:$PATH"\n')]
    prelude = "set -e\n"
    if not shutil.which("mpirun"):
        skip_part("the docs' mpirun commands", "mpirun not found")
        prelude += "mpirun() { echo 'skipped: mpirun'; }\n"
    else:  # Open MPI's own allocations are not ours to check (ASan builds)
        prelude += ('mpirun() { ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" '
                    'command mpirun "$@"; }\n')
    n = 0
    for doc, section, setup in docs:
        blocks = sh_blocks(os.path.join(SRC, doc), section)
        check(blocks, f"{doc}: no sh block found" + (f" in '{section}'" if section else ""))
        if doc != "docs/cli.md":  # the newcomer's training path is there and runs
            text = "".join(blocks)
            for what in (r"shardc train \S+\.onnx[^\n]*(\n  [^\n]*)*--save", r"--resume \S+",
                         r"shardc export \S+", r"shardc run \S*trained\S*\.onnx",
                         r"shardc train [^\n]*(\n  [^\n]*)*--mesh"):
                check(re.search(what, text), f"{doc}: no command matching /{what}/ in its blocks")
        with tempfile.TemporaryDirectory() as root:
            for name, target in LINKS.items():
                os.symlink(target, os.path.join(root, name))
            script = prelude + setup + "".join(runnable(b) for b in blocks)
            r = subprocess.run(["bash", "-xc", script], cwd=root, capture_output=True,
                               text=True, timeout=600)
            n += len(blocks)
            check(r.returncode == 0, f"{doc}: exit {r.returncode}: {r.stderr[-1500:]}")
            left = sorted(set(os.listdir(root)) - set(LINKS) - {"scratch"})
            check(not left, f"{doc}: its commands left {left} at the repository root "
                            "(examples must write under scratch/)")
        print(f"ok: {doc}: {len(blocks)} block(s) ran")
    # scratch/ is ignored and no .npy is tracked at the root
    ign = os.path.join(SRC, ".gitignore")
    check(os.path.exists(ign) and any(ln.strip() in ("/scratch/", "scratch/", "/scratch")
                                      for ln in open(ign)),
          ".gitignore does not cover scratch/")
    if shutil.which("git") and os.path.isdir(os.path.join(SRC, ".git")) or \
            os.path.isfile(os.path.join(SRC, ".git")):
        r = subprocess.run(["git", "-C", SRC, "ls-files", "*.npy"], capture_output=True,
                           text=True)
        root_npy = [f for f in r.stdout.split() if "/" not in f]
        check(r.returncode != 0 or not root_npy, f"tracked .npy files at the root: {root_npy}")
    if failures:
        print(f"{len(failures)} failures")
        return 1
    if skipped:
        print(f"PARTIAL SKIP: {len(skipped)} part(s) not run: " + "; ".join(skipped))
    print(f"ok: the docs' commands ran as written ({n} blocks) and left the checkout clean")
    return 0


if __name__ == "__main__":
    sys.exit(main())
