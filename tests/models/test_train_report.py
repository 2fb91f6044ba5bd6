"""test_train_report.py — `shardc report LOG.jsonl... --html` (tools/report.c,
docs/report.md) on real training logs: the MLP sample trained 4 steps on
one rank and on dp=2 (thread-ranks), each with --log-json, then:

  - report prints a line per run (its file, 4 steps (1..4), the loss first
    and last as the log's, to 6 digits);
  - the page is one self-contained file (the Content-Security-Policy, no
    src= or href=, two script elements), its data (<script id=
    "report-data">) names both files in order and holds, per run, every
    step's step, loss, lr, grad_norm and tokens_per_s equal to the log's
    values (exactly: both are the 9 significant digits train writes), the
    column lengths the log's line count;
  - malformed logs are errors naming the file and the line: not JSON (line
    3), a missing "lr" (line 2), a loss that is a string, a step not above
    the one before, an empty file; no page is written; usage errors (no
    log, an unknown option, --html without a file) exit 2.
The page in a browser (curves, legend, hover): test_html_report.py.
Environment: SHARDC, SC_SOURCE_DIR. Exit 0 on success, 1 on any failure."""
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

from checks import check, finish

SHARDC = os.environ.get("SHARDC")
SRC = os.path.abspath(os.environ.get("SC_SOURCE_DIR",
                                     os.path.join(os.path.dirname(__file__), "..", "..")))
MLP = os.path.join(SRC, "samples", "mlp.onnx")
STEPS = 4
KEYS = ("step", "loss", "lr", "grad_norm", "tokens_per_s")


def run(*args):
    p = subprocess.run([SHARDC, *args], capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


def report_data(html):
    text = open(html, encoding="utf-8").read()
    m = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', text, re.S)
    return text, (json.loads(m.group(1)) if m else {})


def train_log(tmp, name, extra):
    log = os.path.join(tmp, name + ".jsonl")
    rc, out, err = run("train", MLP, "--dim", "batch=8", "--data",
                       "x=" + os.path.join(tmp, "x.npy"), "--labels", os.path.join(tmp, "lab.npy"),
                       "--steps", str(STEPS), "--quiet", "--log-json", log, *extra)
    check(rc == 0, f"train {name} (exit {rc}): {err}")
    return log, [json.loads(l) for l in open(log)] if rc == 0 else []


def main():
    if not SHARDC:
        print("SHARDC is not set")
        return 1
    tmp = tempfile.mkdtemp(prefix="shardc-test-report-")
    r = np.random.RandomState(5)
    np.save(os.path.join(tmp, "x.npy"), r.randn(40, 64).astype(np.float32))
    np.save(os.path.join(tmp, "lab.npy"), r.randint(0, 10, 40).astype(np.int64))
    one, one_rows = train_log(tmp, "one-rank", [])
    dp2, dp2_rows = train_log(tmp, "dp2", ["--mesh", "dp=2"])
    check(len(one_rows) == STEPS and len(dp2_rows) == STEPS,
          f"{STEPS} lines in each log: {len(one_rows)}, {len(dp2_rows)}")

    page = os.path.join(tmp, "report.html")
    rc, out, err = run("report", one, dp2, "--html", page)
    check(rc == 0 and os.path.exists(page), f"report --html (exit {rc}): {err}")
    lines = out.splitlines()
    for i, (log, rows) in enumerate(((one, one_rows), (dp2, dp2_rows))):
        want = (f"{log}: {STEPS} steps (1..{STEPS}), loss {rows[0]['loss']:.6g} -> "
                f"{rows[-1]['loss']:.6g}, mean ")
        check(len(lines) == 2 and lines[i].startswith(want), f"the summary line {want!r}: {out}")
    if rc != 0:
        return finish()
    text, d = report_data(page)
    check('content="default-src \'none\'; style-src \'unsafe-inline\'; script-src '
          '\'unsafe-inline\'"' in text and "src=" not in text.replace("default-src", "")
          .replace("style-src", "").replace("script-src", "") and "href=" not in text
          and text.count("<script") == 2, "self-contained: its own CSP, nothing fetched")
    check(d.get("command") == "shardc report" and [r["file"] for r in d.get("runs", [])] ==
          [one, dp2], f"the runs named in order: {[r.get('file') for r in d.get('runs', [])]}")
    for run_d, rows, name in zip(d.get("runs", []), (one_rows, dp2_rows), ("one rank", "dp=2")):
        for k in KEYS:
            got, want = run_d.get(k), [row[k] for row in rows]
            check(got == want, f"{name}: {k} equals the log's: {got} against {want}")
    # one rank and dp=2 train the same steps: the losses agree within 1e-5
    # relative (the dp=2 gradient's all-reduce sums in another order)
    for a, b in zip(one_rows, dp2_rows):
        check(abs(a["loss"] - b["loss"]) <= 1e-5 * abs(a["loss"]),
              f"step {a['step']}: one rank's loss {a['loss']} and dp=2's {b['loss']} agree")

    # malformed logs: the file and the line named, no page
    good = open(one).read().splitlines()
    bad_cases = [
        ("notjson", good[:2] + ["{\"step\": 3, \"loss\": "] + good[3:], ":3: not JSON"),
        ("nolr", good[:1] + [json.dumps({k: v for k, v in one_rows[1].items() if k != "lr"})],
         ":2: \"lr\" is missing"),
        ("strloss", [json.dumps(dict(one_rows[0], loss="low"))], ":1: \"loss\" is not a number"),
        ("backwards", [good[1], good[0]], ":2: step 1 after step 2"),
        ("empty", [], ": no steps"),
    ]
    for name, body, want in bad_cases:
        path = os.path.join(tmp, name + ".jsonl")
        open(path, "w").write("\n".join(body) + ("\n" if body else ""))
        out_page = os.path.join(tmp, name + ".html")
        rc, out, err = run("report", one, path, "--html", out_page)
        check(rc == 1 and f"shardc: error: {path}{want}" in err and not os.path.exists(out_page),
              f"{name}: exit 1 naming {path}{want}, no page (exit {rc}): {err}")
    for args, want in ((["--html", page], "report needs a log"),
                       ([one, "--bogus"], "unknown option --bogus"),
                       ([one, "--html"], "--html needs a file")):
        rc, out, err = run("report", *args)
        check(rc == 2 and want in err, f"usage {args}: exit 2 saying {want!r} (exit {rc}): {err}")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
