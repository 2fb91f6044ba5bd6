#!/usr/bin/env bash
# make demo: the main job as it stands, on the built-in default (CPU,
# in-process ranks). Inspects the GPT-2 sample, compiles and runs it with
# seeded inputs, prints its outputs and compares them with onnxruntime; then
# partitions it over 4 in-process ranks (tp=2 x pp=2): prints the plan,
# compiles one artifact (both stages' programs, each rank's weight shard),
# runs it and shows that its outputs equal the single-rank ones. Then trains
# a tiny transformer to reverse digits, exports and runs it; trains it again
# from Python (the shardc package, docs/python.md); and again over 4
# in-process ranks (fsdp=2 x tp=2: ZeRO-3 and tensor parallel)
# beside one rank, showing that the loss curves are the same.
# Every figure printed says what it is: `shardc run` prints each output as
# "NAME DTYPE[SHAPE] [its first values] -> FILE" (announced before it).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
SHARDC=$BUILD/shardc
PY=.venv/bin/python
OUT=$BUILD/demo
MODEL=samples/gpt2.onnx
mkdir -p "$OUT"

echo "== shardc inspect $MODEL --dim batch=2"
"$SHARDC" inspect "$MODEL" --dim batch=2

echo
echo "== seeded inputs (numpy), then shardc run"
echo "(each output: name, dtype[shape], [its first values], -> the .npy file written)"
"$PY" - "$OUT" <<'PY'
import sys, numpy as np
rng = np.random.default_rng(2026)
np.save(f"{sys.argv[1]}/input_ids.npy", rng.integers(0, 1000, size=(2, 16), dtype=np.int64))
PY
"$SHARDC" run "$MODEL" --dim batch=2 --input input_ids="$OUT/input_ids.npy" \
  --output-dir "$OUT" --time-passes 2> "$OUT/time-passes.txt"
echo "timings from --time-passes (the whole report: $OUT/time-passes.txt):"
sed -n 's/^ *Total Execution Time: \(.*\)/  graph passes (bind-dims, infer-shapes, fold, dce, fuse): \1 in all/p' \
  "$OUT/time-passes.txt"
sed -n 's/^compile \([0-9.]* ms\) (passes, lowering, memplan), session \([0-9.]* ms\) (JIT \([0-9.]* ms\)), run \([0-9.]* ms\) on \([0-9]*\) threads, arena \([0-9]*\) bytes/  compile (passes, lowering, memory plan): \1\n  session setup: \2 (of which the LLVM JIT of the kernels: \3)\n  one run on \5 threads: \4\n  activation arena: \6 bytes/p' \
  "$OUT/time-passes.txt"

echo
echo "== the same inputs through onnxruntime"
"$PY" - "$OUT" "$MODEL" <<'PY'
import sys, numpy as np, onnxruntime as ort
out, model = sys.argv[1], sys.argv[2]
x = np.load(f"{out}/input_ids.npy")
want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"input_ids": x})[0]
got = np.load(f"{out}/logits.npy")
diff = float(np.max(np.abs(got - want)))
ok = got.shape == want.shape and not np.isnan(got).any() and np.allclose(got, want, rtol=1e-4, atol=1e-5)
print(f"logits {got.shape}: max |shardc - onnxruntime| = {diff:.3g} "
      f"({'within' if ok else 'OUTSIDE'} rtol 1e-4, atol 1e-5)")
sys.exit(0 if ok else 1)
PY

echo
echo "== shardc plan $MODEL --dim batch=2 --mesh tp=2,pp=2"
"$SHARDC" plan "$MODEL" --dim batch=2 --mesh tp=2,pp=2

echo
echo "== shardc compile over 4 in-process ranks (tp=2, pp=2), then shardc run of the artifact"
rm -rf "$OUT/gpt2_tp2pp2"
"$SHARDC" compile "$MODEL" --dim batch=2 --mesh tp=2,pp=2 -o "$OUT/gpt2_tp2pp2"
echo "the artifact's files (docs/bundle.md): the partition, one bundle per stage, one weight file per rank:"
(cd "$OUT/gpt2_tp2pp2" && find . -maxdepth 2 -mindepth 1 | sort | sed 's|^\./|  |')
echo "(each output: name, dtype[shape], [its first values], -> the .npy file written)"
mkdir -p "$OUT/tp2pp2"
"$SHARDC" run "$OUT/gpt2_tp2pp2" --input input_ids="$OUT/input_ids.npy" \
  --output-dir "$OUT/tp2pp2"
"$PY" - "$OUT" <<'PY'
import sys, numpy as np
out = sys.argv[1]
one = np.load(f"{out}/logits.npy")
four = np.load(f"{out}/tp2pp2/logits.npy")
diff = float(np.max(np.abs(one - four)))
ok = one.shape == four.shape and not np.isnan(four).any() and np.allclose(four, one, rtol=1e-4, atol=1e-5)
print(f"logits {four.shape} on 4 ranks: max |4 ranks - 1 rank| = {diff:.3g} "
      f"({'within' if ok else 'OUTSIDE'} rtol 1e-4, atol 1e-5)")
sys.exit(0 if ok else 1)
PY

echo
echo "== training: a tiny transformer learns to reverse 8 digits (samples/train/make_reverse.py)"
"$PY" samples/train/make_reverse.py "$OUT/reverse"
R=$OUT/reverse
echo "(each line: step, the batch's cross-entropy loss before the update, learning rate, gradient norm, step time)"
"$SHARDC" train "$R/reverse.onnx" --data x="$R/train_x.npy" --labels "$R/train_y.npy" \
  --dim batch=32 --steps 600 --optimizer adamw --lr 3e-3 --weight-decay 0 \
  --lr-schedule cosine --warmup-steps 30 --save "$R/checkpoint" --log-json "$R/log.jsonl" \
  | awk 'NR == 1 || /^step / && ($2 ~ /^(1|10|25|50|100|200|300|400|500|600)\//)'
"$SHARDC" export "$R/checkpoint" --model "$R/reverse.onnx" -o "$R/trained.onnx"
"$SHARDC" run "$R/trained.onnx" --dim batch=8 --input x="$R/test_x.npy" \
  --output-dir "$R/out" --quiet
"$PY" - "$R" <<'PY'
import json, sys, numpy as np
r = sys.argv[1]
log = [json.loads(line) for line in open(f"{r}/log.jsonl")]
first, last = log[0]["loss"], np.mean([x["loss"] for x in log[-20:]])
pred = np.load(f"{r}/out/logits.npy").argmax(-1)
seqs = np.load(f"{r}/test_digits.npy")
print("unseen sequences, the trained model's answer (exported to ONNX, run by shardc run):")
right = 0
for s, p in zip(seqs, pred):
    ok = (p == s[::-1]).all()
    right += ok
    print(f"  {''.join(map(str, s))} -> {''.join(map(str, p))}  {'reversed' if ok else 'not yet'}")
print(f"loss: {first:.3f} at step 1, {last:.4f} (mean of the last 20 steps); "
      f"{right} of {len(seqs)} unseen sequences reversed exactly")
sys.exit(0 if last < 0.5 * first else 1)
PY

echo
echo "== the same training from Python (samples/train/train_reverse.py, docs/python.md):"
echo "   the shardc package over this build's libshardc.so"
# A library built with AddressSanitizer (make test-asan) loads into an
# interpreter that is not: the sanitizer's runtime must come first, and the
# interpreter's own allocations are not shardc's to leak-check.
PY_ENV=()
ASAN_LIB=$(ldd "$BUILD/libshardc.so" | awk '/libasan/ {print $3; exit}')
if [ -n "$ASAN_LIB" ]; then
  PY_ENV=(LD_PRELOAD="$ASAN_LIB" ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0")
fi
env "${PY_ENV[@]}" SHARDC_LIBRARY="$BUILD/libshardc.so" PYTHONPATH=python \
  "$PY" samples/train/train_reverse.py "$R"

echo
echo "== distributed training: the same model over 4 in-process ranks (--mesh fsdp=2,tp=2:"
echo "   ZeRO-3 sharding of weights, gradients and AdamW state, and tensor parallelism),"
echo "   100 steps beside one rank with the same data and options"
for mesh in "" "fsdp=2,tp=2"; do
  tag=${mesh:-one}
  "$SHARDC" train "$R/reverse.onnx" --data x="$R/train_x.npy" --labels "$R/train_y.npy" \
    --dim batch=32 --steps 100 --optimizer adamw --lr 3e-3 --weight-decay 0 \
    --log-json "$R/log_$tag.jsonl" --quiet ${mesh:+--mesh "$mesh"} 2> "$R/stderr_$tag.txt" \
    || { cat "$R/stderr_$tag.txt" >&2; exit 1; }
done
"$SHARDC" plan "$R/reverse.onnx" --train --dim batch=32 --optimizer adamw --weight-decay 0 \
  --mesh fsdp=2,tp=2 | sed -n '/^mesh/p;/^  params/p;/^  optimizer state/p;/^  arena/p;/sent per rank/p'
"$PY" - "$R" <<'PY'
import json, sys
r = sys.argv[1]
one = [json.loads(line) for line in open(f"{r}/log_one.jsonl")]
four = [json.loads(line) for line in open(f"{r}/log_fsdp=2,tp=2.jsonl")]
print("step   loss on one rank   loss on four ranks")
for a, b in zip(one, four):
    if a["step"] in (1, 10, 25, 50, 75, 100):
        print(f"{a['step']:4d}   {a['loss']:16.6f}   {b['loss']:17.6f}")
worst = max(abs(a["loss"] - b["loss"]) for a, b in zip(one, four))
ok = len(one) == len(four) == 100 and all(
    abs(a["loss"] - b["loss"]) <= 1e-4 * abs(a["loss"]) + 1e-6 for a, b in zip(one, four))
print(f"max |4 ranks - 1 rank| loss over the 100 steps: {worst:.2e} "
      f"({'within' if ok else 'OUTSIDE'} 1e-4 relative + 1e-6: the same training, to fp32 rounding)")
sys.exit(0 if ok else 1)
PY
