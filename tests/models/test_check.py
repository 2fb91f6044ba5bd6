"""test_check.py — `shardc check`, the CI gate (docs/ci.md), on the MLP and
GPT-2 samples; its JUnit file is read with junitparser (a JUnit consumer):

  - pass and skip: the MLP's training step at dp=2 on h100-sxm:1x2 exits 0;
    import, fits, equivalence and reproducible pass, performance is skipped
    (no --baseline) saying so; the JUnit file holds one testcase per check
    in those states; the report's figures hold the predicted step and rank
    0's memory, its artifacts the bundle's hashes;
  - the report round-trips as a baseline: the same command against it
    passes performance (every gate +0.00 %);
  - a deliberately regressed baseline (its step time, its exposed dp
    communication halved, rank 0's gradients made smaller) fails with exit
    1, the JUnit failure naming time/comm dp and memory/rank 0/gradients as
    what grew; GPT-2 (tp=2, inference) against a baseline with half of
    block 1's FLOPs names that block and not block 0; at pp=2
    (1F1B, 2 microbatches) a baseline without pipeline rank 1's stash names
    that stash; --max-time-regression 150% lets the time through and the
    memory still fails;
  - --format github prints one workflow command per check (::error for the
    failure, ::notice for a pass, ::warning for a skip), escaped on one line;
    --format json the report;
  - fits fails on a cluster whose device holds 100 000 bytes, naming the
    rank, by how much and what uses it; the peak that failed is `shardc
    plan --train --json`'s for that GPU (its device's lines counted);
  - on a GPU cluster (h100-sxm:8x1) the report's memory/RANK/peak equal
    `shardc plan --json`'s: GPT-2's training step at dp=2,tp=2 (its parts,
    cuBLASLt's 32 MiB workspace among them, summing to the peak; equivalence
    still run on this host), at pp=2,dp=2 per pipeline rank, and its
    inference at pp=2,tp=2 (the largest stage);
  - import fails on a model with two unsupported nodes (built here with
    onnx), naming both, the other checks skipped as not run;
  - skips: inference without --cluster and with --no-weights skips fits,
    performance, equivalence (no --train) and reproducible, each saying why;
    exit 0;
  - --auto: GPT-2 at a global batch of 8 (--dim) on h100-sxm:8x1, shapes
    only: the search's chosen plan (said on stderr) is checked, import and
    fits passing, the rest skipped saying why;
  - --html: the page of the plan checked (the training step at dp=2, GPT-2's
    inference at tp=2, shapes only): its embedded data names the command,
    each memory bar's parts sum to the report's memory/<rank>/peak, and its
    timeline and collectives equal `shardc plan --html`'s for the same
    options (one page writer); inference without a mesh is a usage error;
  - usage errors exit 2: an unknown --format, a bad percentage,
    --global-batch (the batch is --dim's), no
    model, a missing --baseline file; a baseline that is not a report fails
    performance naming the file and the key;
  - docs/ci.md's GitHub Actions workflow and GitLab CI job: valid against
    SchemaStore's schemas (check-jsonschema's vendor.github-workflows and
    vendor.gitlab-ci), a copy of each with a misspelt key refused naming
    it; every run/script line clean under shellcheck; the image this
    machine's Debian (debian:VERSION_ID of /etc/os-release); the build
    lines the README's build commands (make deps, make build), the
    container's package line naming packages installed here; and every
    other line run as written, in order, with bash in a checkout-like
    scratch folder (build/ being this build, the baseline made first by the
    first job's command with --report ci/shardc-baseline.json): each job's
    check exits 0 with every check passed in its JUnit file (GPT-2's
    training step at tp=2 with AdamW: equivalence on thread-ranks among
    them), and the files its artifact steps keep exist. PyYAML,
    check-jsonschema and shellcheck are installed by
    scripts/install-deps.sh: without one, a failure.

Environment: SHARDC, SC_SOURCE_DIR. Exit 0 on success, 1 on any failure."""
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

import onnx
from onnx import TensorProto, helper
from junitparser import JUnitXml
from checks import check, finish, skip_part

SHARDC = os.environ.get("SHARDC")
SRC = os.path.abspath(os.environ.get("SC_SOURCE_DIR",
                                     os.path.join(os.path.dirname(__file__), "..", "..")))
MLP = os.path.join(SRC, "samples", "mlp.onnx")
GPT2 = os.path.join(SRC, "samples", "gpt2.onnx")
MLP_TRAIN = [MLP, "--train", "--dim", "batch=4", "--mesh", "dp=2", "--cluster", "h100-sxm:1x2"]


def shardc(*args):
    p = subprocess.run([SHARDC, "check", *args], capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


def junit_cases(path):
    """{check name: (state, message)} from the JUnit file, read by junitparser."""
    out = {}
    for suite in JUnitXml.fromfile(path):
        for case in suite:
            if case.is_passed:
                out[case.name] = ("passed", case.system_out or "")
            elif case.is_skipped:
                out[case.name] = ("skipped", case.result[0].message or "")
            elif case.is_failure:
                res = case.result[0]
                out[case.name] = ("failed", (res.message or "") + "\n" + (res.text or ""))
            else:
                out[case.name] = ("error", "")
    return out


def page_data(html):
    """The plan's data embedded in a page written by --html."""
    text = open(html, encoding="utf-8").read()
    m = re.search(r'<script type="application/json" id="plan-data">(.*?)</script>', text, re.S)
    return json.loads(m.group(1)) if m else {}


def check_html(tmp, args, rank):
    """check --html against the report's figures and plan --html's page."""
    page, rep = os.path.join(tmp, "check.html"), os.path.join(tmp, "html-report.json")
    rc, out, err = shardc(*args, "--no-weights", "--html", page, "--report", rep)
    check(rc == 0 and os.path.exists(page), f"check --html writes the page (exit {rc}): {out}{err}")
    if rc != 0:
        return
    d = page_data(page)
    peak = json.load(open(rep))["metrics"].get(f"memory/{rank}/peak")
    bars = d.get("memory", {}).get("bars", [])
    check(d.get("command", "").startswith("shardc check") and len(bars) == 1
          and sum(bars[0]["bytes"]) == peak,
          f"the page's bar sums to the report's {rank} peak {peak}: {bars}")
    plan_page = os.path.join(tmp, "plan.html")
    p = subprocess.run([SHARDC, "plan", *args, "--no-weights", "--html", plan_page],
                       capture_output=True, text=True, timeout=300)
    pd = page_data(plan_page) if p.returncode == 0 else {}
    check(p.returncode == 0 and d.get("timeline") and d["timeline"] == pd.get("timeline")
          and d["collectives"] == pd.get("collectives") and d["mesh"] == pd.get("mesh"),
          f"the timeline and collectives are plan --html's: {p.stderr}")


def plan_peaks(args):
    """{rank: peak bytes} of `shardc plan ARGS --json`: the training step's
    total with the device's lines (per pipeline rank when pipelined), or
    an inference plan's largest rank's (predicted.peak_bytes_per_rank)."""
    p = subprocess.run([SHARDC, "plan", *args, "--json"], capture_output=True, text=True,
                       timeout=300)
    if p.returncode != 0:
        check(False, f"plan {args} --json: {p.stderr}")
        return {}
    d = json.loads(p.stdout)
    if "--train" not in args:
        return {"largest": d["predicted"]["peak_bytes_per_rank"]}
    if "pipeline" in d:
        return {f"pipeline rank {r['rank']}": r["total_with_device"]
                for r in d["pipeline"]["ranks"]}
    return {"rank 0": d["total_with_device"]}


def gpu_memory(tmp):
    """On a GPU cluster check plans each rank's memory as plan does (the
    CUDA device's: cuBLASLt's workspace in the arena, the weights' padding,
    NCCL's buffers): the report's memory/RANK/peak equal plan --json's."""
    rep = os.path.join(tmp, "gpu.json")
    for args in ([GPT2, "--train", "--dim", "batch=2", "--cluster", "h100-sxm:8x1", "--mesh",
                  "dp=2,tp=2"],
                 [GPT2, "--train", "--dim", "batch=4", "--cluster", "h100-sxm:8x1", "--mesh",
                  "pp=2,dp=2", "--microbatches", "2", "--no-weights"],
                 [GPT2, "--dim", "batch=2", "--cluster", "h100-sxm:8x1", "--mesh", "pp=2,tp=2",
                  "--no-weights"]):
        rc, out, err = shardc(*args, "--report", rep)
        m = json.load(open(rep))["metrics"] if rc == 0 else {}
        got = {k[len("memory/"):-len("/peak")]: v for k, v in m.items()
               if k.startswith("memory/") and k.endswith("/peak")}
        want = plan_peaks(args)
        if "largest" in want:
            got = {"largest": max(got.values())} if got else {}
        # NCCL's buffers: 294 MiB for each piece with a communicator (pipeline
        # rank 0 of pp=2,dp=2 has one: its weight piece reduces nothing, the
        # position embedding's gradient accumulating pending into the norm
        # piece's reduction)
        check(rc == 0 and got == want and all(v > 256 << 20 for v in got.values()),
              f"check --report's peaks are plan --json's on the GPU (NCCL's buffers in them) "
              f"for {' '.join(args[1:])} (exit {rc}): {got} vs {want}{err}")
        if "--no-weights" not in args:
            parts = sum(v for k, v in m.items() if k.startswith("memory/rank 0/")
                        and k != "memory/rank 0/peak")
            check(parts == m.get("memory/rank 0/peak")
                  and m.get("memory/rank 0/gemm workspace") == 32 << 20,
                  f"the parts (cuBLASLt's 32 MiB workspace one) sum to the peak: {m}")
            check(json.load(open(rep))["checks"][3]["status"] == "passed",
                  "equivalence still runs on this host's CPU")


def states(cases):
    return {k: v[0] for k, v in cases.items()}


def main():
    if not SHARDC:
        print("SHARDC is not set")
        return 1
    tmp = tempfile.mkdtemp(prefix="shardc-test-check-")
    report, junit = os.path.join(tmp, "report.json"), os.path.join(tmp, "junit.xml")

    # pass and skip
    rc, out, err = shardc(*MLP_TRAIN, "--report", report, "--junit", junit)
    check(rc == 0, f"the MLP at dp=2 passes (exit {rc}): {out}{err}")
    cases = junit_cases(junit)
    check(list(cases) == ["import", "fits", "performance", "equivalence", "reproducible"],
          f"one JUnit testcase per check, in order: {list(cases)}")
    check(states(cases) == {"import": "passed", "fits": "passed", "performance": "skipped",
                            "equivalence": "passed", "reproducible": "passed"},
          f"states: {states(cases)}")
    check("--baseline" in cases.get("performance", ("", ""))[1],
          f"the skip says why: {cases.get('performance')}")
    check("thread-ranks as one rank" in cases.get("equivalence", ("", ""))[1],
          f"equivalence says what it compared: {cases.get('equivalence')}")
    rep = json.load(open(report))
    m = rep["metrics"]
    check(m.get("step_time_s", 0) > 0 and m.get("time/comm dp", 0) > 0,
          f"the report holds the predicted step: {m}")
    check(m.get("memory/rank 0/peak", 0) > 0 and m.get("memory/rank 0/gradients", 0) > 0,
          f"the report holds rank 0's memory: {m}")
    parts = sum(v for k, v in m.items() if k.startswith("memory/rank 0/") and k != "memory/rank 0/peak")
    check(parts == m.get("memory/rank 0/peak"), f"rank 0's parts sum to its peak: {parts}")
    check(len(rep["artifacts"]) > 0 and all(len(h) == 64 for h in rep["artifacts"].values()),
          f"the artifacts' SHA-256: {rep['artifacts']}")
    check([c["status"] for c in rep["checks"]] ==
          ["passed", "passed", "skipped", "passed", "passed"], f"report checks: {rep['checks']}")

    # the report as the baseline: no regression
    rc, out, err = shardc(*MLP_TRAIN, "--baseline", report, "--junit", junit)
    cases = junit_cases(junit)
    check(rc == 0 and cases["performance"][0] == "passed",
          f"against its own report performance passes (exit {rc}): {out}{err}")
    check("+0.00 %" in out, f"every gate unchanged: {out}")

    # a regressed baseline
    bad = json.load(open(report))
    bad["metrics"]["step_time_s"] *= 0.5
    bad["metrics"]["time/comm dp"] *= 0.5
    # the peak (the GPU's: NCCL's buffers in it) 10 % smaller, past the 2 %
    # gate, and what it is made of smaller by the gradients' part
    bad["metrics"]["memory/rank 0/peak"] *= 0.9
    bad["metrics"]["memory/rank 0/gradients"] -= 16384
    bad_path = os.path.join(tmp, "regressed.json")
    json.dump(bad, open(bad_path, "w"))
    rc, out, err = shardc(*MLP_TRAIN, "--baseline", bad_path, "--junit", junit)
    cases = junit_cases(junit)
    perf = cases.get("performance", ("", ""))
    check(rc == 1, f"a regressed baseline exits 1 (got {rc}): {out}{err}")
    check(perf[0] == "failed", f"performance fails: {perf}")
    check("step_time_s" in perf[1] and "REGRESSED" in perf[1], f"names the step time: {perf}")
    check("grew: time/comm dp" in perf[1], f"names the collective's time that grew: {perf}")
    check("grew: memory/rank 0/gradients" in perf[1], f"names rank 0's part that grew: {perf}")
    check("block/" not in json.dumps(rep["metrics"]), "no block figures without blocks")
    check(sum(s == "failed" for s, _ in cases.values()) == 1, f"only performance fails: {cases}")
    rc, out, err = shardc(*MLP_TRAIN, "--baseline", bad_path, "--max-time-regression", "150%")
    check(rc == 1 and "step_time_s" in out and "limit +150.00 %)\n" in out
          and "memory/rank 0/peak" in out and out.count("REGRESSED") == 1,
          f"with --max-time-regression 150% only memory regresses: {out}")

    # a block that grew: GPT-2's inference at tp=2, shapes only
    g = [GPT2, "--dim", "batch=2", "--mesh", "tp=2", "--cluster", "h100-sxm:1x2", "--no-weights"]
    g_report = os.path.join(tmp, "gpt2.json")
    rc, out, err = shardc(*g, "--report", g_report)
    base = json.load(open(g_report)) if rc == 0 else {"metrics": {}}
    m = base["metrics"]
    check(rc == 0 and m.get("block/transformer.h.1/flops", 0) > 0
          and m.get("block/transformer.h.1/param_bytes", 0) > 0,
          f"GPT-2's blocks in the report (exit {rc}): {m}")
    if rc == 0:
        m["step_time_s"] *= 0.5
        m["block/transformer.h.1/flops"] *= 0.5
        json.dump(base, open(g_report, "w"))
        rc, out, err = shardc(*g, "--baseline", g_report)
        check(rc == 1 and "grew: block/transformer.h.1/flops" in out
              and "block/transformer.h.0" not in out, f"names the block that grew: {out}")

    # a pipeline rank's stash that grew (shapes only: the figures alone)
    pp = [MLP, "--train", "--dim", "batch=4", "--mesh", "pp=2", "--microbatches", "2",
          "--schedule", "1f1b", "--cluster", "h100-sxm:1x2", "--no-weights"]
    pp_report = os.path.join(tmp, "pp.json")
    rc, out, err = shardc(*pp, "--report", pp_report)
    base = json.load(open(pp_report)) if rc == 0 else {"metrics": {}}
    m = base["metrics"]
    check(rc == 0 and m.get("memory/pipeline rank 1/stash", 0) > 0,
          f"pp=2 reports each pipeline rank's stash (exit {rc}): {m}")
    if m.get("memory/pipeline rank 1/stash", 0) > 0:
        m["memory/pipeline rank 1/peak"] *= 0.9  # past the 2 % gate
        m["memory/pipeline rank 1/stash"] = 0
        json.dump(base, open(pp_report, "w"))
        rc, out, err = shardc(*pp, "--baseline", pp_report)
        check(rc == 1 and "memory/pipeline rank 1/peak" in out
              and "grew: memory/pipeline rank 1/stash" in out
              and "memory/pipeline rank 0/peak" in out and out.count("REGRESSED") == 1,
              f"names pipeline rank 1's stash, rank 0 unchanged: {out}")

    # --format github
    rc, out, err = shardc(*MLP_TRAIN, "--baseline", bad_path, "--format", "github")
    lines = out.splitlines()
    check(rc == 1 and len(lines) == 5, f"one annotation per check: {out}")
    check(lines and lines[2].startswith("::error file=") and "title=shardc check performance failed::"
          in lines[2] and "%0A" in lines[2] and "%25" in lines[2],
          f"the failure is an ::error, escaped: {lines[2] if len(lines) > 2 else out}")
    check(all(l.startswith("::notice ") for i, l in enumerate(lines) if i != 2),
          f"the passes are notices: {out}")
    rc, out, err = shardc(MLP, "--format", "github", "--no-weights")
    check(rc == 0 and out.count("::warning ") == 4 and out.count("::notice ") == 1,
          f"skips are warnings: {out}{err}")

    rc, out, err = shardc(MLP, "--format", "json", "--no-weights")
    try:
        doc = json.loads(out)
    except ValueError:
        doc = {}
    check(rc == 0 and doc.get("format") == "shardc-check-report"
          and [c["status"] for c in doc.get("checks", [])] == ["passed"] + ["skipped"] * 4,
          f"--format json prints the report: {out}")

    # fits fails on a small device
    cluster = os.path.join(tmp, "tiny.json")
    json.dump({"name": "tiny", "nodes": 1, "gpus_per_node": 2,
               "gpu": {"name": "tiny", "memory_bytes": 100000,
                       "peak_flops": {"fp32": 1e12}, "hbm_bytes_per_s": 1e11},
               "intra_node": {"bandwidth_bytes_per_s": 1e10, "latency_s": 1e-5},
               "inter_node": {"bandwidth_bytes_per_s": 1e9, "latency_s": 1e-5}},
              open(cluster, "w"))
    rc, out, err = shardc(MLP, "--train", "--dim", "batch=4", "--mesh", "dp=2", "--cluster",
                          cluster, "--junit", junit)
    cases = junit_cases(junit)
    fits = cases.get("fits", ("", ""))
    check(rc == 1 and fits[0] == "failed", f"fits fails on a 100000-byte device (exit {rc}): {out}{err}")
    check("rank 0 (and the 1 rank alike):" in fits[1] and "over" in fits[1]
          and "gradients" in fits[1] and "2 of 2 ranks" in fits[1],
          f"names the rank, by how much and what uses it: {fits}")

    # the same tiny cluster: the peak that failed is plan's for that GPU
    rc, out, err = shardc(MLP, "--train", "--dim", "batch=4", "--mesh", "dp=2", "--cluster",
                          cluster, "--report", report)
    peaks = plan_peaks([MLP, "--train", "--dim", "batch=4", "--mesh", "dp=2", "--cluster",
                        cluster])
    m = json.load(open(report))["metrics"] if rc == 1 else {}
    check(peaks and m.get("memory/rank 0/peak") == peaks.get("rank 0")
          and m.get("memory/rank 0/device", 0) > 0,
          f"the tiny device's peak is plan --json's, its lines counted: {peaks} {m}")
    gpu_memory(tmp)

    # --html
    check_html(tmp, MLP_TRAIN, "rank 0")
    check_html(tmp, [GPT2, "--dim", "batch=2", "--mesh", "tp=2", "--cluster", "h100-sxm:1x2"],
               "rank 0")
    rc, out, err = shardc(MLP, "--no-weights", "--html", os.path.join(tmp, "x.html"))
    check(rc == 2 and "--html draws an inference plan" in err, f"inference --html needs a mesh: {err}")

    # import fails, naming every unsupported node
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="ok_relu"),
             helper.make_node("FooBar", ["a"], ["b"], name="first_bad"),
             helper.make_node("Tanh", ["b"], ["c"], name="ok_tanh"),
             helper.make_node("Zonk", ["c"], ["d"], name="second_bad", domain="com.example"),
             helper.make_node("Identity", ["d"], ["y"], name="out")]
    model = helper.make_model(helper.make_graph(nodes, "bad", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17),
                                             helper.make_opsetid("com.example", 1)])
    bad_model = os.path.join(tmp, "unsupported.onnx")
    onnx.save(model, bad_model)
    rc, out, err = shardc(bad_model, "--junit", junit)
    cases = junit_cases(junit)
    imp = cases.get("import", ("", ""))
    check(rc == 1 and imp[0] == "failed", f"import fails (exit {rc}): {out}{err}")
    check("node 'first_bad' (FooBar)" in imp[1] and "node 'second_bad' (com.example.Zonk)" in imp[1]
          and "2 nodes" in imp[1], f"both unsupported nodes named: {imp}")
    check(all(cases[k][0] == "skipped" and "does not import" in cases[k][1]
              for k in cases if k != "import"), f"the rest skipped, saying why: {cases}")

    # skips
    rc, out, err = shardc(MLP, "--no-weights", "--junit", junit)
    cases = junit_cases(junit)
    check(rc == 0 and states(cases) == {"import": "passed", "fits": "skipped",
                                        "performance": "skipped", "equivalence": "skipped",
                                        "reproducible": "skipped"},
          f"inference without a cluster, no weights (exit {rc}): {cases}")
    check("--cluster" in cases["fits"][1] and "--cluster" in cases["performance"][1]
          and "--train" in cases["equivalence"][1] and "--no-weights" in cases["reproducible"][1],
          f"each skip says why: {cases}")

    # --auto: the search's chosen plan checked
    rc, out, err = shardc(GPT2, "--train", "--auto", "--cluster", "h100-sxm:8x1", "--dim",
                          "batch=8", "--no-weights", "--junit", junit, "--report", report)
    cases = junit_cases(junit)
    check(rc == 0 and "--mesh auto chose --cluster h100-sxm:8x1 --mesh " in err,
          f"--auto checks the search's choice, saying it (exit {rc}): {err}")
    check(states(cases) == {"import": "passed", "fits": "passed", "performance": "skipped",
                            "equivalence": "skipped", "reproducible": "skipped"},
          f"--auto --no-weights: {cases}")
    found = re.search(r"chose .*? --mesh (\S+)", err)
    chosen = found.group(1) if found else "?"
    check(json.load(open(report))["plan"] == chosen, f"the report's plan is the chosen mesh {chosen}")

    # usage errors, and a baseline that is not a report
    for args, what in [([MLP, "--format", "xml"], "an unknown --format"),
                       ([MLP, "--max-time-regression", "five"], "a bad percentage"),
                       ([MLP, "--train", "--global-batch", "8"], "--global-batch"),
                       ([], "no model"),
                       ([MLP, "--baseline", os.path.join(tmp, "none.json")], "a missing baseline")]:
        rc, out, err = shardc(*args)
        check(rc == 2 and "error" in err, f"{what}: exit 2 (got {rc}): {err}")
    not_report = os.path.join(tmp, "not_report.json")
    json.dump({"format": "shardc-check-report", "version": 1, "metrics": {"step_time_s": "x"}},
              open(not_report, "w"))
    rc, out, err = shardc(*MLP_TRAIN, "--baseline", not_report, "--junit", junit)
    perf = junit_cases(junit).get("performance", ("", ""))
    check(rc == 1 and perf[0] == "failed" and not_report in perf[1]
          and "metrics.step_time_s" in perf[1], f"a bad baseline is named with its key: {perf}")
    docs_jobs(tmp)
    return finish()


# The actions the GitHub job uses: a runner runs them, this test cannot.
ACTIONS = {"actions/checkout@v4", "actions/upload-artifact@v4", "mikepenz/action-junit-report@v4"}
# A deliberate mistake per schema: the copy must be refused, naming the key.
BROKEN = {"vendor.github-workflows": ("    runs-on:", "    runs_on:", "runs-on"),
          "vendor.gitlab-ci": ("  script:", "  scripts:", "scripts")}


def readme_build_commands():
    """The README's build commands up to `make build` (its ## Build block,
    comments left out): what a job runs to build."""
    text = open(os.path.join(SRC, "README.md")).read()
    m = re.search(r"^## Build\n.*?^```sh\n(.*?)^```", text, re.S | re.M)
    lines = [ln.split("#")[0].strip() for ln in (m.group(1) if m else "").splitlines()]
    lines = [ln for ln in lines if ln]
    return lines[:lines.index("make build") + 1] if "make build" in lines else lines


def job_lines(doc):
    """(image, [(kind, value)] in the order a runner takes them): kind "uses"
    (an action), "run" (a shell script), "artifact" (a path kept afterwards)."""
    out = []
    if "jobs" in doc:  # GitHub: one job, its steps
        (job,) = doc["jobs"].values()
        image = job.get("container")
        for step in job["steps"]:
            if "uses" in step:
                out.append(("uses", step["uses"]))
                with_ = step.get("with", {})
                for key in ("path", "report_paths"):
                    out += [("artifact", x) for x in str(with_.get(key, "")).split()]
            else:
                out.append(("run", step["run"]))
    else:  # GitLab: one job, before_script then script
        (job,) = [j for j in doc.values() if isinstance(j, dict)]
        image = job.get("image")
        out += [("run", x) for x in job.get("before_script", []) + job.get("script", [])]
        art = job.get("artifacts", {})
        out += [("artifact", x) for x in art.get("paths", []) + [art.get("reports", {}).get("junit")]
                if x]
    return image, out


def docs_jobs(tmp):
    """docs/ci.md's CI jobs: valid against their schemas (a broken copy
    refused), their shell scripts clean under shellcheck, and their steps
    run as a runner would, in order, from a checkout-like scratch folder
    (docs/ci.md, "What is verified")."""
    text = open(os.path.join(SRC, "docs", "ci.md")).read()
    blocks = re.findall(r"```yaml\n(.*?)```", text, re.S)
    check(len(blocks) == 2, f"docs/ci.md has the GitHub workflow and the GitLab job: {len(blocks)}")
    bindir = os.path.dirname(sys.executable)
    validator = os.path.join(bindir, "check-jsonschema")
    try:
        import yaml
    except ImportError:
        yaml = None
    for what, ok in [("PyYAML", yaml is not None), ("check-jsonschema", os.path.exists(validator)),
                     ("shellcheck", shutil.which("shellcheck") is not None)]:
        check(ok, f"{what} is installed (scripts/install-deps.sh: make deps)")
    if yaml is None or not os.path.exists(validator) or not shutil.which("shellcheck"):
        return
    os_release = dict(line.rstrip().split("=", 1) for line in open("/etc/os-release")
                      if "=" in line)
    distro = os_release.get("ID", "").strip('"')
    version = os_release.get("VERSION_ID", "").strip('"')
    build_cmds = readme_build_commands()
    check(build_cmds == ["make deps", "make build"], f"README's build commands: {build_cmds}")
    work = os.path.join(tmp, "ci")
    os.makedirs(os.path.join(work, "ci"))
    for name in ("samples", "scripts", "Makefile", ".venv"):
        os.symlink(os.path.join(SRC, name), os.path.join(work, name))
    os.symlink(os.path.dirname(os.path.abspath(SHARDC)), os.path.join(work, "build"))
    env = dict(os.environ, CI="true")
    for i, block in enumerate(blocks):
        schema = "vendor.github-workflows" if i == 0 else "vendor.gitlab-ci"
        path = os.path.join(tmp, f"job{i}.yml")
        open(path, "w").write(block)
        p = subprocess.run([validator, "--builtin-schema", schema, path], capture_output=True,
                           text=True, timeout=120)
        check(p.returncode == 0, f"{schema}: docs/ci.md's job {i} is valid: {p.stdout}{p.stderr}")
        old, bad, key = BROKEN[schema]
        check(old in block, f"job {i} has '{old.strip()}' to break")
        broken = os.path.join(tmp, f"job{i}_broken.yml")
        open(broken, "w").write(block.replace(old, bad, 1))
        p = subprocess.run([validator, "--builtin-schema", schema, broken], capture_output=True,
                           text=True, timeout=120)
        check(p.returncode == 1 and key in p.stdout,
              f"{schema}: a copy with '{bad.strip()}' is refused naming it: {p.stdout}{p.stderr}")

        doc = yaml.safe_load(block)
        check(isinstance(doc, dict), f"a YAML mapping: {block[:80]}")
        image, lines = job_lines(doc)
        if distro == "debian":
            check(image == f"debian:{version}",
                  f"job {i} builds in this machine's Debian (debian:{version}): {image}")
        else:
            skip_part(f"job {i}'s image", f"this machine is {distro} {version}, not Debian")
        runs = [v for k, v in lines if k == "run"]
        for script in runs:
            p = subprocess.run(["shellcheck", "-s", "bash", "-"], input=script,
                               capture_output=True, text=True, timeout=60)
            check(p.returncode == 0, f"shellcheck, job {i}: {script!r}: {p.stdout}{p.stderr}")
        build = [ln.strip() for r in runs for ln in r.splitlines() if ln.startswith("make ")]
        check(build == build_cmds, f"job {i} builds with the README's commands: {build}")
        cmd = [r for r in runs if "shardc check" in r]
        check(len(cmd) == 1, f"one shardc check command per job: {cmd}")
        artifacts = []
        for kind, value in lines:
            if kind == "uses":
                check(value in ACTIONS, f"job {i} uses a known action: {value}")
                continue
            if kind == "artifact":
                artifacts.append(value)
                continue
            packages = re.fullmatch(r"apt-get update && apt-get install -y "
                                    r"--no-install-recommends ([a-z0-9. +-]+)", value.strip())
            if packages:  # the container's own: already here (not run: root, apt)
                for pkg in packages.group(1).split():
                    q = subprocess.run(["dpkg-query", "-W", "-f=${Status}", pkg],
                                       capture_output=True, text=True)
                    check("install ok installed" in q.stdout,
                          f"job {i} installs Debian's {pkg}, installed here")
                continue
            # the build lines (checked above) are not run: this build folder is build/
            value = "\n".join(ln for ln in value.splitlines() if not ln.startswith("make "))
            if not value.strip():
                continue
            if "shardc check" in value and not os.path.exists(
                    os.path.join(work, "ci", "shardc-baseline.json")):
                argv = shlex.split(value)  # the baseline, committed first (ci.md)
                k = argv.index("--baseline")
                first = argv[:k] + argv[k + 2:]
                first[first.index("--report") + 1] = argv[k + 1]
                p = subprocess.run(first, cwd=work, env=env, capture_output=True, text=True,
                                   timeout=300)
                check(p.returncode == 0, f"the job's command with --report makes the baseline: "
                      f"{p.stdout}{p.stderr}")
            p = subprocess.run(["bash", "-e", "-c", value], cwd=work, env=env,
                               capture_output=True, text=True, timeout=300)
            check(p.returncode == 0, f"job {i}: {value.strip()!r} exits 0: {p.stdout}{p.stderr}")
        junit = os.path.join(work, "shardc-junit.xml")
        cases = junit_cases(junit) if os.path.exists(junit) else {}
        check(all(cases.get(c, ("",))[0] == "passed"
                  for c in ("import", "fits", "performance", "equivalence", "reproducible")),
              f"job {i}'s check passes every check against the baseline: {cases}")
        check(artifacts and all(os.path.exists(os.path.join(work, a)) for a in artifacts),
              f"job {i} keeps files its steps made: {artifacts}")
        for a in set(artifacts):
            if os.path.exists(os.path.join(work, a)):
                os.remove(os.path.join(work, a))

if __name__ == "__main__":
    sys.exit(main())
