#!/usr/bin/env bash
# device-check.sh — the GPU measurement in one command under a time budget:
# the training-speed figures first (tests/gpu/train_speed.py), the most
# wanted first, then the planner's predicted against measured step, then
# the rest of run-all.sh, each part a run-all.sh command with a --deadline
# so that the parts together end within the budget
# (docs/cuda-backend.md, "Running it").
#
#   bash tests/gpu/device-check.sh [--budget S] [--out DIR] [--parts P,...]
#                                         (S default 540; P: the parts' names)
#   bash tests/gpu/run-kit.sh KIT.tar.xz device-check [--budget S] [--out DIR]
#   SHARDC_CUDA_EMU=1 bash tests/gpu/device-check.sh ...       the rehearsal
#                                                              (tiny configs)
#
# Parts, in order; each ends by the given share of the budget (a part that
# finishes early leaves its time to the next), the last three by the budget:
#
#   1 gpt2      GPT-2 small: shardc bf16 (--recompute none), PyTorch eager   0.20
#   2 llama     the 1.3B Llama: shardc bf16 (none), PyTorch eager            0.55
#   3 planner   run-all's planner check: predicted against measured step     0.70
#
# (the shardc steps' CUBINs come with the kit, tests/gpu/pack.sh: no part
# waits for NVRTC to compile them)
#   4 compile   GPT-2 small with torch.compile                               1
#   5 llama-more  the 1.3B: shardc selective and fp8, torch.compile          1
#   6 rest      run-all.sh --quick: every other check                        1
#
# --parts runs only the parts named. A part is skipped when under 20 s of the budget are left for it. Writes to
# DIR (default gpu-out/): device-check.txt (every part's output as it comes),
# results.jsonl (every result, one JSON line each, written as it is
# measured: a run cut short keeps what it did), part-N-NAME.json (a part's
# run-all summary), commands.log (every command with its whole output),
# train-speed.json and train-speed.md (the parts' figures in one table). The
# models and their weights are written once, into a temporary folder that
# the parts share (run-all.sh --train-scratch) and that is removed at the end.
# Exit: 1 when a check failed, else 0 (77 without a GPU, as run-all.sh).
set -u
here=$(cd "$(dirname "$0")" && pwd)
budget=540
out=gpu-out
parts=gpt2,llama,planner,compile,llama-more,rest
while [ $# -gt 0 ]; do
  case $1 in
    --budget) budget=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --parts) parts=$2; shift 2 ;;
    *) echo "device-check: unknown option $1 (have --budget S, --out DIR, --parts P,...)"
       exit 2 ;;
  esac
done
mkdir -p "$out"
out=$(cd "$out" && pwd)
gpt2=gpt2-small llama=llama-1p3b
if [ "${SHARDC_CUDA_EMU:-0}" = "1" ]; then gpt2=gpt2-tiny llama=llama-tiny; fi
# the models and their weights (the 1.3B's 5.5 GB), written once for every part
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
start=$(date +%s)
failed=0
n=0

# part NAME SHARE(percent of the budget it must end by) run-all.sh's arguments...
part() {
  local name=$1 share=$2
  shift 2
  n=$((n + 1))
  case ",$parts," in *",$name,"*) ;; *) return ;; esac
  local now end left
  now=$(date +%s)
  end=$((start + budget * share / 100))
  left=$((end - now))
  if [ $left -lt 20 ]; then
    echo "== part $n $name: skipped, ${left} s left of its share" | tee -a "$out/device-check.txt"
    return
  fi
  echo "== part $n $name: --deadline $left ($(($(date +%s) - start)) s into $budget)" |
    tee -a "$out/device-check.txt"
  bash "$here/run-all.sh" "$@" --deadline "$left" --out "$out" --record "$out/results.jsonl" \
    --log "$out/commands.log" --json "$out/part-$n-$name.json" 2>&1 |
    grep -v '^[ {}]' | tee -a "$out/device-check.txt"
  local rc=${PIPESTATUS[0]}
  [ "$rc" = 77 ] && exit 77
  [ "$rc" = 0 ] || failed=1
}

ts=(train-speed --train-scratch "$scratch")
part gpt2 20 "${ts[@]}" --train-models "$gpt2" --train-variants none,eager
part llama 55 "${ts[@]}" --train-models "$llama" --train-variants none,eager
part planner 70 --only planner
part compile 100 "${ts[@]}" --train-models "$gpt2" --train-variants compile \
  --compile-budget "$budget"
part llama-more 100 "${ts[@]}" --train-models "$llama" \
  --train-variants selective,fp8,compile --compile-budget "$budget"
part rest 100 --quick --only env,modules,arena,nccl,kernels,attention,cuda-local,samples
verdict="nothing failed"
[ $failed = 0 ] || verdict="a check failed"
echo "device-check: $(($(date +%s) - start)) s of $budget; $verdict; files in $out" |
  tee -a "$out/device-check.txt"
exit $failed
