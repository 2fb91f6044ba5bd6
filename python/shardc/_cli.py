"""_cli.py — the `shardc` console entry point: runs the command line the
wheel bundles (shardc/bin/shardc) with the same arguments; command(): that
binary's path, for what the package asks of the command line (the plan
search of auto=True)."""
import os
import sys


def command():
    """The `shardc` binary beside this package's library: $SHARDC, else the
    installed package's shardc/bin/shardc, else the one in the folder of
    $SHARDC_LIBRARY (a build tree); None when there is none."""
    from ._lib import path
    here = os.path.dirname(os.path.abspath(__file__))
    for exe in (os.environ.get("SHARDC"), os.path.join(here, "bin", "shardc"),
                os.path.join(os.path.dirname(os.path.abspath(path)), "shardc")):
        if exe and os.path.isfile(exe) and os.access(exe, os.X_OK):
            return exe
    return None


def main():
    exe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "shardc")
    if not os.path.exists(exe):
        sys.exit("shardc: the command is not in this installation (shardc/bin/shardc)")
    os.execv(exe, [exe] + sys.argv[1:])
