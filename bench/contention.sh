#!/usr/bin/env bash
# Sharing the cores: one 2-thread trainrun alone, then two identical ones started together on
# the same cores, for each OpenMP wait policy (train.omp_spincount; include/trainrun/runtime/omp_wait.h).
# Median ms/step per run; "x alone" is the paired median over the alone median (2.0 = a fair
# share). Goal (issue 19): the default within 5% of libgomp's own default alone, and at most
# 2.5x alone when paired. Config A = llm.c's CPU shape, D = nanoGPT's CPU recipe shape.
#   BUILD=build bench/contention.sh            (ROUNDS=2 by default)
# S_* variables are assigned by load_summary (eval).
# shellcheck source=bench/lib.sh disable=SC2154
source "$(dirname "$0")/lib.sh"
need_shakespeare
ensure_built trainrun

ROUNDS=${ROUNDS:-2}
declare -A CONFIG=(
  [A]="--set train.steps=16"
  [D]="--set model.d_model=128 --set model.seq_len=64 --set train.batch_size=12 --set train.steps=40"
)
POLICIES=("3000 (default)|--set train.omp_spincount=3000" "libgomp default|--set train.omp_spincount=-1"
  "passive|--set train.omp_spincount=0")

# one NAME SETS...: a fresh 2-thread run of bench/configs/llmc-cpu.yaml in $RUNS/NAME.
one() {
  local name=$1
  shift
  rm -rf "${RUNS:?}/$name"
  OMP_NUM_THREADS=2 "$TRAINRUN" bench/configs/llmc-cpu.yaml --set run_dir="$RUNS/$name" \
    --set data.text="$SHAKESPEARE" --set logging.every=1 "$@" >"$RUNS/$name.log" 2>&1 ||
    { echo "trainrun failed for $name:" >&2; tail -5 "$RUNS/$name.log" >&2; exit 1; }
}
ms() { load_summary "$1" 3; printf '%.1f' "$(bc -l <<<"$S_step_time*1000")"; }

echo "## contention: 2-thread trainrun alone vs two at once on the same cores"
load_line
echo "| config | policy | round | alone ms/step | paired ms/step (each) | x alone | load |"
echo "|---|---|---:|---:|---:|---:|---:|"
for cfg in A D; do
  for round in $(seq "$ROUNDS"); do
    for pol in "${POLICIES[@]}"; do
      label=${pol%%|*}
      # shellcheck disable=SC2086
      read -ra sets <<<"${CONFIG[$cfg]} ${pol#*|}"
      one cont-alone "${sets[@]}"
      alone=$(ms cont-alone)
      one cont-p1 "${sets[@]}" &
      one cont-p2 "${sets[@]}" &
      wait
      p1=$(ms cont-p1) p2=$(ms cont-p2)
      ratio=$(bc -l <<<"($p1+$p2)/2/$alone")
      printf '| %s | %s | %d | %s | %s / %s | %.2f | %s |\n' "$cfg" "$label" "$round" "$alone" \
        "$p1" "$p2" "$ratio" "$(cut -d' ' -f1 /proc/loadavg)"
    done
  done
done
