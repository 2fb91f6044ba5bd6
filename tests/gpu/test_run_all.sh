#!/usr/bin/env bash
# test_run_all.sh — rehearses tests/gpu/run-all.sh on the emulated GPU
# (SHARDC_CUDA_EMU=1, --quick: no timings), so that the script a GPU
# machine runs is known to work before a device is lent: it must end with
# "N passed, 0 failed" (N >= 3: with --quick, the kernels, the samples,
# the arena and the planner's calibrate, plan and train, with its accuracy
# line as information) and write a JSON summary whose counts agree. Then
# --only, --deadline (a deadline already past skips every check) and --log;
# then the train-speed section on the tiny configs (tests/gpu/train_speed.py),
# their CUBINs made ahead as pack.sh makes them and found by every run;
# a check cut at the --deadline (a skip saying so); then
# tests/gpu/device-check.sh, the one device command, with a budget too small
# for any part and with two of its parts.
# Exits 77 (skipped) when shardc was built without NVRTC: no GPU path.
set -u
here=$(cd "$(dirname "$0")" && pwd)
py=${PYTHON:-python3}
# a build without NVRTC has no GPU path to rehearse
if [ -n "${SHARDC:-}" ] && ! "$py" -c "import sys; sys.path.insert(0, sys.argv[1])
from checks import has_cuda_target; sys.exit(0 if has_cuda_target(sys.argv[2]) else 1)" \
    "$here/../models" "$SHARDC"; then
  echo "SKIPPED: $SHARDC has no cuda target (built without NVRTC)"; exit 77
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
SHARDC_CUDA_EMU=1 bash "$here/run-all.sh" --quick --json "$out/summary.json" >"$out/log" 2>&1
rc=$?
last=$(tail -n 1 "$out/log")
echo "run-all: exit $rc, '$last'"
if [ $rc -ne 0 ] || ! echo "$last" | grep -Eq '^([3-9]|[1-9][0-9]+) passed, 0 failed$'; then
  echo "FAIL: run-all.sh rehearsal"
  # the failed checks whole (the log's tail is the summary's last ones)
  "$py" - "$out/summary.json" <<'PY' || tail -n 40 "$out/log"
import json, sys
for c in json.load(open(sys.argv[1]))["checks"]:
    if c["status"] == "fail":
        print(f"failed: {c['name']}: {c['detail'][-3000:]}")
PY
  exit 1
fi
"$py" - "$out/summary.json" "$last" <<'PY' || exit 1
import json, sys
s = json.load(open(sys.argv[1]))
passed = int(sys.argv[2].split()[0])
assert s["emulated"] is True, s
assert s["passed"] == passed and s["failed"] == 0, s
names = {c["name"] for c in s["checks"] if c["status"] == "pass"}
assert {"kernels", "samples", "arena", "planner.calibrate", "planner.plan",
        "planner.train"} <= names, names
acc = [c for c in s["checks"] if c["name"] == "planner.accuracy"]
assert len(acc) == 1 and acc[0]["status"] == "info", acc
a = acc[0]
assert a["predicted_s"] > 0 and a["measured_s"] > 0, a
assert abs(a["ratio"] - a["predicted_s"] / a["measured_s"]) < 1e-9, a
assert "ratio" in a["detail"] and "15 %" in a["detail"], a
print("ok")
PY

# --only picks checks; --log keeps every command's output; a --deadline
# already past skips what would start after it (as skips, not failures)
SHARDC_CUDA_EMU=1 bash "$here/run-all.sh" --only env,arena,gemm,planner --deadline 1 \
  --log "$out/cmds.log" --json "$out/short.json" >"$out/log2" 2>&1
rc=$?
"$py" - "$out/short.json" "$out/cmds.log" "$rc" <<'PY' || { tail -n 20 "$out/log2"; exit 1; }
import json, sys
s = json.load(open(sys.argv[1]))
got = {c["name"]: c["status"] for c in s["checks"]}
assert int(sys.argv[3]) == 0, sys.argv[3]
assert got == {"env": "skip", "arena": "skip", "gemm": "skip", "planner": "skip"}, got
assert all("--deadline" in c["detail"] for c in s["checks"]), s["checks"]
assert s["passed"] == 0 and s["failed"] == 0, s
PY
SHARDC_CUDA_EMU=1 bash "$here/run-all.sh" --only arena --log "$out/cmds.log" \
  --json "$out/one.json" >"$out/log3" 2>&1
"$py" - "$out/one.json" "$out/cmds.log" <<'PY' || { tail -n 20 "$out/log3"; exit 1; }
import json, sys
s = json.load(open(sys.argv[1]))
assert [(c["name"], c["status"]) for c in s["checks"]] == [("arena", "pass")], s["checks"]
log = open(sys.argv[2]).read()
assert "SHARDC_CUDA_VERBOSE=1" in log and "[rc 0," in log and "arena" in log, log[-500:]
print("ok: --only, --deadline, --log")
PY

# the train-speed section, named (it is not in the default run): the tiny
# configs on the emulated GPU, shardc's side end to end; PyTorch's side runs
# on the CPU where torch is installed, else is skipped saying so. Its CUBINs
# made first as pack.sh makes them for the kit (train_speed.py
# --make-cubins): every shardc run finds its program's CUBIN there (the
# emulated GPU runs the CUDA C; a GPU would load the CUBIN, NVRTC not called)
"$py" "$here/train_speed.py" --make-cubins "$out/cubins" --tiny \
  --shardc "${SHARDC:-$here/../../build/shardc}" >"$out/log-cubins" 2>&1 ||
  { cat "$out/log-cubins"; echo "FAIL: train_speed.py --make-cubins --tiny"; exit 1; }
SHARDC_CUDA_EMU=1 SHARDC_CUDA_CACHE="$out/cubins" bash "$here/run-all.sh" train-speed \
  --out "$out/ts" --json "$out/ts.json" >"$out/log4" 2>&1
rc=$?
"$py" - "$out/ts.json" "$out/ts" "$rc" <<'PY' || { tail -n 30 "$out/log4"; exit 1; }
import json, math, os, sys
s = json.load(open(sys.argv[1]))
assert int(sys.argv[3]) == 0, sys.argv[3]
got = {c["name"]: c for c in s["checks"]}
for n in ("gpt2-tiny.shardc.none", "llama-tiny.shardc.none", "llama-tiny.shardc.selective",
          "llama-tiny.shardc.fp8"):
    assert got["train-speed." + n]["status"] == "pass", got.get("train-speed." + n)
# the fp8 row against shardc's bf16 row: a ratio and the losses' distance
v = got["train-speed.llama-tiny.fp8.vs.bf16"]
assert v["status"] == "info" and v["ratio"] > 0 and math.isfinite(v["rel_diff"]), v
for m in ("gpt2-tiny", "llama-tiny"):
    for v in ("eager", "compile"):
        c = got["train-speed.%s.%s" % (m, v)]
        assert c["status"] in ("info", "skip"), c
        assert c["status"] == "info" or "PyTorch" in c["detail"], c
r = json.load(open(os.path.join(sys.argv[2], "train-speed.json")))
assert r["emulated"] and r["tiny"] and r["peak_bf16_flops"] == 989.4e12, r
assert [m["model"] for m in r["models"]] == ["gpt2-tiny", "llama-tiny"], r["models"]
variants = {m["model"]: [v["variant"] for v in m["variants"] if v["side"] == "shardc"]
            for m in r["models"]}
assert variants["llama-tiny"] == ["shardc (none)", "shardc (selective)", "shardc (fp8)"], variants
runs = {}
for m in r["models"]:
    for v in m["variants"]:
        if v["side"] != "shardc":
            continue
        assert v["rc"] == 0 and len(v["losses"]) == r["warmup"] + r["steps"], v
        assert all(math.isfinite(x) for x in v["losses"]), v
        assert v["median_ms"] > 0 and v["tokens_per_s"] > 0 and v["mfu"] > 0, v
        assert v["peak_bytes"] > 0 and v["state_in_place"] is not None, v
        # the CUBIN made ahead is this run's program's (the same CUDA C)
        assert v["kernels"] == "emulated" and v["cubin_cache"] == "in SHARDC_CUDA_CACHE", v
        runs[(m["model"], v["variant"])] = v
# recompute runs the same operations again: the losses are identical
assert runs[("llama-tiny", "shardc (none)")]["losses"] == \
    runs[("llama-tiny", "shardc (selective)")]["losses"], runs
md = open(os.path.join(sys.argv[2], "train-speed.md")).read()
assert "## llama-tiny" in md and "| shardc (selective) |" in md, md
assert "| shardc (fp8) |" in md and "| shardc (fp8) | shardc (none) |" in md, md
print("ok: train-speed rehearsal")
PY

# a check whose command is cut at the --deadline is a skip saying so, not
# a failure (the samples check takes minutes; --record keeps each result)
SHARDC_CUDA_EMU=1 bash "$here/run-all.sh" --only samples --deadline 12 \
  --record "$out/cut.jsonl" >"$out/log7" 2>&1
rc=$?
"$py" - "$out/cut.jsonl" "$rc" <<'PY' || { tail -n 20 "$out/log7"; exit 1; }
import json, sys
rows = [json.loads(ln) for ln in open(sys.argv[1])]
assert int(sys.argv[2]) == 0, sys.argv[2]
assert [(r["name"], r["status"]) for r in rows] == [("samples", "skip")], rows
assert rows[0]["detail"].startswith("cut at the --deadline: "), rows
print("ok: a check cut at the --deadline")
PY

# tests/gpu/device-check.sh, the one device command: a budget too small for
# any part skips every part, saying so; then two of its parts, the second
# (torch.compile of GPT-2) keeping the first's rows (shardc bf16, eager) in
# the table; every result in results.jsonl as it came
SHARDC_CUDA_EMU=1 bash "$here/device-check.sh" --budget 10 --out "$out/dc0" >"$out/log5" 2>&1
rc=$?
[ $rc -eq 0 ] && [ "$(grep -c ': skipped, ' "$out/dc0/device-check.txt")" -eq 6 ] ||
  { echo "FAIL: device-check --budget 10 (rc $rc)"; cat "$out/log5"; exit 1; }
SHARDC_CUDA_EMU=1 bash "$here/device-check.sh" --budget 400 --parts gpt2,compile \
  --out "$out/dc" >"$out/log6" 2>&1
rc=$?
"$py" - "$out/dc" "$rc" <<'PY' || { tail -n 30 "$out/log6"; exit 1; }
import json, os, sys
d = sys.argv[1]
assert int(sys.argv[2]) == 0, sys.argv[2]
txt = open(os.path.join(d, "device-check.txt")).read()
assert "== part 1 gpt2: --deadline" in txt and "== part 4 compile: --deadline" in txt, txt
assert "part 2" not in txt and "part 6" not in txt, txt
rows = [json.loads(ln) for ln in open(os.path.join(d, "results.jsonl"))]
got = {r["name"]: r for r in rows}
assert got["train-speed.gpt2-tiny.shardc.none"]["status"] == "pass", got
# the second part takes the model the first wrote (--train-scratch)
models = [r["detail"] for r in rows if r["name"] == "train-speed.gpt2-tiny.model"]
assert len(models) == 2 and "graph, weights and data written" in models[0] and \
    "graph and weights reused" in models[1], models
assert not any("llama" in n for n in got), sorted(got)
for v in ("eager", "compile"):
    assert got["train-speed.gpt2-tiny." + v]["status"] in ("info", "skip"), got
for n in ("part-1-gpt2.json", "part-4-compile.json"):
    s = json.load(open(os.path.join(d, n)))
    assert s["failed"] == 0 and s["emulated"], s
r = json.load(open(os.path.join(d, "train-speed.json")))
assert [m["model"] for m in r["models"]] == ["gpt2-tiny"], r["models"]
assert [v["variant"] for v in r["models"][0]["variants"]] == \
    ["shardc (none)", "eager", "compile"], r["models"][0]["variants"]
assert r["models"][0]["variants"][0]["ok"], r["models"][0]["variants"][0]
print("ok: device-check rehearsal")
PY
