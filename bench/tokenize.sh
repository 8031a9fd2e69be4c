#!/usr/bin/env bash
# Tokenizer throughput: trainrun's byte-level BPE encoder against PyPI's tokenizers (the venv that
# scripts/setup.sh --test makes) on the same text, the same tokenizer.json and the same thread
# count, in MB/s, MB/s per thread and MB per CPU-second (per core, whatever else the machine
# runs); plus training time. Text: tiny Shakespeare repeated in
# memory to MIN_MB, encoded in segments of SEG_KB (each one encode call; tokenizers gets the
# same pieces as a batch, cut after a newline). Figures only; nothing is asserted.
#   BUILD=build bench/tokenize.sh [VOCAB] [MIN_MB]
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
need_shakespeare
ensure_built trainrun bench/bench_tokenize
VENV_PY=$ROOT/build/test-venv/bin/python
if ! "$VENV_PY" -c "import tokenizers" 2>/dev/null; then
  echo "no tokenizers in build/test-venv: run scripts/setup.sh --test" >&2
  exit 1
fi
vocab=${1:-8192}
min_mb=${2:-16}
dir="$RUNS/tokenize"
mkdir -p "$dir"

echo "## tokenize: byte-level BPE encode, trainrun vs tokenizers $("$VENV_PY" -c \
  'import tokenizers; print(tokenizers.__version__)')"
load_line
start=$(date +%s%N)
"$TRAINRUN" data tokenizer train "$SHAKESPEARE" --vocab-size "$vocab" --out "$dir/tok.json" --force
echo "trainrun data tokenizer train (vocab $vocab): $((($(date +%s%N) - start) / 1000000)) ms"

hf() {  # THREADS SEG_KB
  RAYON_NUM_THREADS=$1 TOKENIZERS_PARALLELISM=true "$VENV_PY" - "$dir/tok.json" "$SHAKESPEARE" \
    "$1" "$min_mb" "$2" <<'PY'
import sys, time
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[1])
one = open(sys.argv[2], "rb").read().decode("utf-8")
threads, min_mb, seg = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]) << 10
text = one
while len(text.encode()) < min_mb << 20:
    text += one
segs, pos = [], 0
while pos < len(text):
    q = text.find("\n", pos + seg)
    q = len(text) if q < 0 else q
    segs.append(text[pos:q])
    pos = q
nbytes = len(text.encode())
t0, cpu0 = time.perf_counter(), time.process_time()
n = sum(len(e.ids) for e in tok.encode_batch(segs, add_special_tokens=False))
s, cpu = time.perf_counter() - t0, time.process_time() - cpu0
mbs = nbytes / 1e6 / s
print(f"tokenizers threads={threads} segment={seg >> 10}KB bytes={nbytes} tokens={n} "
      f"seconds={s:.2f} MB/s={mbs:.1f} per-thread={mbs / threads:.1f} cpu-seconds={cpu:.2f} "
      f"MB/cpu-s={nbytes / 1e6 / cpu:.1f}")
PY
}

for seg in 4 1024; do
  for t in 1 "$(nproc)"; do
    "$BUILD/bench/bench_tokenize" "$dir/tok.json" "$SHAKESPEARE" "$t" "$min_mb" "$seg"
    hf "$t" "$seg"
  done
done
load_line
