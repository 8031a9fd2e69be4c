#!/usr/bin/env bash
# trainrun CPU training throughput on three model sizes, with the sgemm peak measured in the
# same run (trainrun's own measurement, which its MFU uses, and bench_gemm on the GEMM shapes).
# Steady state: the first SKIP logged steps are dropped. Figures only; nothing is asserted.
#   BUILD=build bench/train_cpu.sh
# S_* variables are assigned by load_summary (eval).
# shellcheck source=bench/lib.sh disable=SC2154
source "$(dirname "$0")/lib.sh"
need_shakespeare
ensure_built trainrun bench/bench_gemm

echo "## train_cpu: trainrun training throughput (1 rank, CPU, fp32)"
load_line
echo
echo "### sgemm in this run (build/bench/bench_gemm, OMP_NUM_THREADS=2)"
OMP_NUM_THREADS=2 "$BUILD/bench/bench_gemm" | sed 's/^/    /'
echo

# llm.c-format shard of random GPT-2 token ids (magic 20240520, version 1, u16 tokens): the
# GPT-2-small row needs a 50304 vocabulary, and the built-in Markov source only emits 256 symbols.
shard="$RUNS/gpt2-shard/train_000000.bin"
if [[ ! -f "$shard" ]]; then
  mkdir -p "$(dirname "$shard")"
  python3 - "$shard" <<'PY'
import random, struct, sys
n = 1 << 18
random.seed(1337)
header = [20240520, 1, n] + [0] * 253
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", *header))
    f.write(struct.pack(f"<{n}H", *(random.randrange(50257) for _ in range(n))))
PY
fi

rows=()
# row LABEL THREADS REFERENCE
row() {
  local ref=$3
  rows+=("$(printf '| %s | %s | %.0f | %.0f (%.0f-%.0f) | %.1f | %.1f | %.1f%% | %s |' "$1" "$2" \
    "$S_tokens_per_sec" "$(bc -l <<<"$S_step_time*1000")" "$(bc -l <<<"$S_step_time_min*1000")" \
    "$(bc -l <<<"$S_step_time_max*1000")" "$S_gflops" "$S_peak" "$(bc -l <<<"$S_mfu*100")" "$ref")")
}

common=(--set checkpoint.every=0 --set logging.every=1)

# (a) configs/shakespeare-char.yaml as shipped (4 x 128, context 64, batch 12)
OMP_NUM_THREADS=2 train shakespeare configs/shakespeare-char.yaml --set data.text="$SHAKESPEARE" \
  --set train.steps=40 "${common[@]}"
load_summary shakespeare 5
row "shakespeare-char (0.8M params)" 2 "no outside reference; nanoGPT's CPU recipe shape"

# (b) llm.c's CPU reference model: 4 x 256, 4 heads, context 128, batch 8, vocab 256
llmc_ms=()
for th in 2 1; do
  OMP_NUM_THREADS=$th train "llmc-t$th" bench/configs/llmc-cpu.yaml --set data.text="$SHAKESPEARE" \
    --set train.steps=15 "${common[@]}"
  load_summary "llmc-t$th" 3
  ms=$(bc -l <<<"$S_step_time*1000")
  llmc_ms+=("$th thread(s): $(printf '%.0f' "$ms") ms/step = $(printf '%.2f' "$(bc -l <<<"800/$ms")")x llm.c's ~800 ms, $(printf '%.2f' "$(bc -l <<<"$ms/200")")x the 200 ms goal")
  row "llm.c CPU model (3.3M params)" "$th" "llm.c ~800 ms/step here; goal <= 200 ms/step"
done

# (c) GPT-2-small-shaped: 12 x 768, 12 heads, vocab 50304, short context and batch
OMP_NUM_THREADS=2 train gpt2-small bench/configs/gpt2-small-cpu.yaml --set data.train="$shard" \
  --set train.steps=6 "${common[@]}"
load_summary gpt2-small 2
row "GPT-2-small shape, T=64 B=4 (124M)" 2 "GFLOP/s vs the sgemm peak beside it (MFU)"

echo "### training throughput (medians over steady-state steps; ms/step min-max in brackets)"
echo "| run | threads | tokens/s | ms/step | achieved GFLOP/s | sgemm peak GFLOP/s (same run) | MFU | reference |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"
printf '%s\n' "${rows[@]}"
echo
echo "llm.c CPU model vs llm.c's CPU trainer (~800 ms/step on this machine) and the goal (<= 200 ms/step):"
printf '  %s\n' "${llmc_ms[@]}"
load_line
