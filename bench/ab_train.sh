#!/usr/bin/env bash
# Side-by-side training throughput of two trainrun binaries (e.g. this commit and the one before
# a refactor) on llm.c's CPU model shape, alternating A and B so both see the same load.
#   bench/ab_train.sh BIN_A BIN_B [ROUNDS]      (default 3 rounds of 15 steps each)
# Prints each round's median ms/step and the ratio B/A of the medians over all rounds.
# shellcheck source=bench/lib.sh disable=SC2154
source "$(dirname "$0")/lib.sh"
need_shakespeare
a=$1 b=$2 rounds=${3:-3}
echo "## ab_train: llm.c CPU model (4x256, T=128, B=8), OMP_NUM_THREADS=2"
load_line
declare -A ms=([A]="" [B]="")
for ((r = 1; r <= rounds; r++)); do
  for side in A B; do
    bin=$a
    [[ $side == B ]] && bin=$b
    TRAINRUN=$bin OMP_NUM_THREADS=2 train "ab-$side" bench/configs/llmc-cpu.yaml \
      --set data.text="$SHAKESPEARE" --set train.steps=15
    load_summary "ab-$side" 3
    m=$(bc -l <<<"$S_step_time*1000")
    ms[$side]+="$m "
    printf 'round %d %s: %.1f ms/step (%s)\n' "$r" "$side" "$m" "$bin"
  done
done
median() { tr ' ' '\n' | sed '/^$/d' | sort -g | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
ma=$(median <<<"${ms[A]}")
mb=$(median <<<"${ms[B]}")
printf '| binary | median ms/step |\n| --- | ---: |\n| A %s | %.1f |\n| B %s | %.1f |\n' "$a" "$ma" "$b" "$mb"
printf 'B/A = %.3f (below 1: B is faster)\n' "$(bc -l <<<"$mb/$ma")"
load_line
