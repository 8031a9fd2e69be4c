#!/usr/bin/env bash
# Loading a GPT-2-size tokenizer.json (50,257 tokens, 50,001 merges, 2.7 MB; generated, as no
# download is possible here): `trainrun data tokenizer encode` of a one-line text, which is almost
# all load, against PyPI tokenizers' Tokenizer.from_file on the same file (build/test-venv), and
# optionally against another trainrun binary (REF=path/to/trainrun, e.g. a build from before a
# change), side by side, median of RUNS (default 5). Figures only; nothing is asserted.
#   BUILD=build [REF=...] bench/tokenizer_load.sh [RUNS]
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
ensure_built trainrun
runs=${1:-5}
dir="$RUNS/tokenizer_load"
mkdir -p "$dir"
python3 - "$dir/gpt2size.json" <<'PY'
import json, random, sys
bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
cs, n = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b); cs.append(256 + n); n += 1
base = [chr(c) for c in cs]
vocab = {t: i for i, t in enumerate(base)}
toks, merges = list(base), []
random.seed(1)
while len(toks) < 50257:
    a = random.choice(toks)
    b = random.choice(base if random.random() < 0.5 else toks)
    if a + b in vocab or len(a + b) > 16:
        continue
    vocab[a + b] = len(toks); toks.append(a + b); merges.append([a, b])
model = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
         "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
         "vocab": vocab, "merges": merges}
json.dump({"version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
           "normalizer": None, "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False,
                                                 "trim_offsets": True, "use_regex": True},
           "post_processor": None,
           "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                       "use_regex": True},
           "model": model},
          open(sys.argv[1], "w"), ensure_ascii=False)
PY
echo "hello world" > "$dir/t.txt"

median_ms() {  # command...: the median wall time of $runs runs, in ms
  local times=()
  for _ in $(seq "$runs"); do
    local s; s=$(date +%s%N)
    "$@" > /dev/null || { echo "failed: $*" >&2; return 1; }
    times+=($((($(date +%s%N) - s) / 1000000)))
  done
  printf '%s\n' "${times[@]}" | sort -n | sed -n "$(((runs + 1) / 2))p"
}

echo "## tokenizer_load: a GPT-2-size tokenizer.json ($(du -h "$dir/gpt2size.json" | cut -f1))"
load_line
echo "trainrun ($TRAINRUN): $(median_ms "$TRAINRUN" data tokenizer encode "$dir/gpt2size.json" "$dir/t.txt") ms"
if [[ -n "${REF:-}" ]]; then
  echo "reference trainrun ($REF): $(median_ms "$REF" data tokenizer encode "$dir/gpt2size.json" "$dir/t.txt") ms"
fi
VENV_PY=$ROOT/build/test-venv/bin/python
if "$VENV_PY" -c "import tokenizers" 2>/dev/null; then
  echo "tokenizers $("$VENV_PY" -c 'import tokenizers; print(tokenizers.__version__)') from_file + encode (python start included): $(median_ms "$VENV_PY" -c "import tokenizers; tokenizers.Tokenizer.from_file('$dir/gpt2size.json').encode('hello world')") ms"
  echo "python start alone: $(median_ms "$VENV_PY" -c "import tokenizers") ms"
fi
