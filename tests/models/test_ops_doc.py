"""docs/ops.md's op table matches ir/ops.def (regenerate with scripts/gen-ops-doc.py)."""
import os
import subprocess
import sys

root = os.environ.get("SC_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
sys.exit(subprocess.call([sys.executable, os.path.join(root, "scripts", "gen-ops-doc.py"), "--check"]))
