#!/usr/bin/env bash
# Is the data loader ever the bottleneck? The trainer's own step-time breakdown (t_data, the
# wait for the prefetched batch, against step_time, in metrics.jsonl) for configs/llama-small.yaml
# and configs/shakespeare-char.yaml on tiny Shakespeare, read two ways: as bytes (data.text, as
# shipped) and as BPE token shards (`data prepare --tokenizer`, vocab 4096, memory-mapped).
# Steady state: the first SKIP steps and the last (it checkpoints) are dropped. Figures only.
#   BUILD=build bench/data_share.sh [STEPS] [SKIP]
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
need_shakespeare
ensure_built trainrun
steps=${1:-80}
skip=${2:-5}
dir="$RUNS/data_share"
mkdir -p "$dir"

echo "## data_share: data time as a share of the step (1 rank, CPU, fp32)"
load_line
"$TRAINRUN" data tokenizer train "$SHAKESPEARE" --vocab-size 4096 --out "$dir/tok.json" --force >/dev/null
"$TRAINRUN" data prepare "$SHAKESPEARE" --tokenizer "$dir/tok.json" --out "$dir/shards" --force >/dev/null
bytes=(--set data.text="$SHAKESPEARE")
bpe=(--set data.text= --set data.train="$dir/shards/train.bin" --set data.val="$dir/shards/val.bin"
     --set data.tokenizer="$dir/tok.json" --set model.vocab_size=4096)
# train_on bytes|bpe NAME CONFIG [--set K=V]...
train_on() {
  local source=$1
  shift
  if [[ $source == bytes ]]; then train "$@" "${bytes[@]}"; else train "$@" "${bpe[@]}"; fi
}

echo
echo "| config | data | step ms (median) | data ms (mean) | data ms (max) | data share |"
echo "| --- | --- | --- | --- | --- | --- |"
for config in llama-small shakespeare-char; do
  for source in bytes bpe; do
    name="ds-$config-$source"
    train_on "$source" "$name" "configs/$config.yaml" --set train.steps="$steps" \
      --set checkpoint.every=0 --set logging.every=1
    python3 bench/data_share_row.py "$RUNS/$name/metrics.jsonl" "$skip" "$config" "$source"
  done
done
load_line
