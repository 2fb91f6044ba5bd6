"""_cli.py — the `shardc` console entry point: runs the command line the
wheel bundles (shardc/bin/shardc) with the same arguments."""
import os
import sys


def main():
    exe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "shardc")
    if not os.path.exists(exe):
        sys.exit("shardc: the command is not in this installation (shardc/bin/shardc)")
    os.execv(exe, [exe] + sys.argv[1:])
