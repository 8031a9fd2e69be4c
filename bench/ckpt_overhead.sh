#!/usr/bin/env bash
# Step-time cost of checkpointing every N steps: none vs synchronous vs asynchronous (background
# writer), one file and sharded (one rank here: the sharded writer's own speed), on a small model (llm.c's CPU shape, ~40 MB of state) and a bigger one (8 x 512,
# ~300 MB of state). Per-step wall = step_time + t_checkpoint, averaged over steps (the final
# step, where trainrun always checkpoints, is left out). Figures only.
#   BUILD=build bench/ckpt_overhead.sh
#   EVERY=50 SMALL_STEPS=151 BIG_STEPS=151 BUILD=build bench/ckpt_overhead.sh   (issue 16's case)
#   MODELS=big MODES="none async sharded-async" ... (a subset; "none" first: it is the reference)
# S_* variables are assigned by load_summary (eval).
# shellcheck source=bench/lib.sh disable=SC2154
source "$(dirname "$0")/lib.sh"
need_shakespeare
ensure_built trainrun

EVERY=${EVERY:-4}
echo "## ckpt_overhead: checkpoint every $EVERY steps, sync vs async vs none"
load_line
rows=()
# model LABEL STEPS SETS...
model() {
  local label=$1 steps=$2
  shift 2
  local base=""
  for mode in ${MODES:-none sync async sharded-sync sharded-async}; do
    local ck=(--set checkpoint.every=0)
    case $mode in
      sync | sharded-sync) ck=(--set checkpoint.every="$EVERY" --set checkpoint.async=false) ;;
      async | sharded-async) ck=(--set checkpoint.every="$EVERY" --set checkpoint.async=true) ;;
    esac
    [[ $mode == sharded-* ]] && ck+=(--set checkpoint.sharded=true)
    OMP_NUM_THREADS=2 train "ckpt-$label-$mode" bench/configs/llmc-cpu.yaml \
      --set data.text="$SHAKESPEARE" --set train.steps="$steps" --set logging.every=1 \
      --set checkpoint.keep_last=2 "$@" "${ck[@]}"
    load_summary "ckpt-$label-$mode" 1
    [[ -z $base ]] && base=$S_mean_wall
    local state_mb
    state_mb=$(bc -l <<<"$S_params*12/1000000")
    local cost=0
    [[ $mode != none ]] && cost=$(bc -l <<<"($S_ckpt_blocked+$S_after_ckpt)/($EVERY*$S_step_time)*100")
    rows+=("$(printf '| %s (%.0f MB state) | %s | %.0f | %.0f | %.0f | %.0f | %.0f | %+.1f%% | %.1f%% |' "$label" \
      "$state_mb" "$mode" "$(bc -l <<<"$S_step_time*1000")" "$(bc -l <<<"$S_mean_step_time*1000")" \
      "$(bc -l <<<"$S_ckpt_blocked*1000")" "$(bc -l <<<"$S_after_ckpt*1000")" \
      "$(bc -l <<<"$S_mean_wall*1000")" "$(bc -l <<<"($S_mean_wall/$base-1)*100")" "$cost")")
  done
}
MODELS=${MODELS:-small big}
[[ $MODELS == *small* ]] && model small "${SMALL_STEPS:-17}"
[[ $MODELS == *big* ]] && model big "${BIG_STEPS:-13}" --set model.d_model=512 --set model.n_layer=8 --set model.n_head=8 \
  --set model.seq_len=64 --set train.batch_size=4

echo
echo "| model | checkpointing | median step_time ms | mean step_time ms | blocked per checkpoint ms | extra ms in the 15 steps after | mean wall per step ms | vs none | cost per save / steps between |"
echo "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
printf '%s\n' "${rows[@]}"
echo
echo "reference: the run without checkpoints (vs none = +0%); 'blocked per checkpoint' is the mean t_checkpoint"
echo "of the steps that checkpointed"
echo "(the training loop's wait per checkpoint: snapshot copy, plus the whole write when sync);"
echo "'extra ms after' compares the 15 steps after each save with the steps around them (summarize.py),"
echo "and 'cost per save' = (blocked + extra after) / (EVERY x median step): the overhead measured within"
echo "one run, immune to the drift between runs that 'vs none' suffers on a shared machine."
load_line
