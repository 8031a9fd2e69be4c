#!/usr/bin/env bash
# `data prepare --tokenizer` at corpus scale (issue 30 part 5): a generated 2 GB text corpus (64
# files of 32 MiB, each tiny Shakespeare's lines in a seeded random order) tokenized by trainrun
# with every core, beside PyPI's tokenizers encoding the same files with the same tokenizer.json
# and thread count (in 4 KiB segments cut after a newline, its fastest batch size in
# bench/tokenize.sh; encode only, nothing written, so its figure is an upper bound on what a
# prepare built on it would reach). tokenizers stops after TOK_SECONDS (default 900) and reports
# the rate over the files it finished; their token counts are checked against trainrun's
# manifest. dd's read rate over the corpus is printed beside. Figures only; nothing is asserted.
#   BUILD=build bench/prepare_corpus.sh [GB]
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
need_shakespeare
ensure_built trainrun
VENV_PY=$ROOT/build/test-venv/bin/python
if ! "$VENV_PY" -c "import tokenizers" 2>/dev/null; then
  echo "no tokenizers in build/test-venv: run scripts/setup.sh --test" >&2
  exit 1
fi
gb=${1:-2}
dir="$RUNS/prepare_corpus"
mkdir -p "$dir/text"

echo "## prepare_corpus: data prepare --tokenizer on $gb GB, trainrun vs tokenizers $("$VENV_PY" \
  -c 'import tokenizers; print(tokenizers.__version__)')"
load_line
/usr/bin/python3 - "$SHAKESPEARE" "$dir/text" "$gb" <<'PY'
import os, random, sys
lines = open(sys.argv[1], encoding="utf-8").read().splitlines(keepends=True)
files = int(float(sys.argv[3]) * 32)  # 32 MiB each
for i in range(files):
    path = os.path.join(sys.argv[2], f"{i:03d}.txt")
    if os.path.exists(path) and os.path.getsize(path) >= 32 << 20:
        continue
    rng, out, n = random.Random(i), [], 0
    while n < 32 << 20:
        ln = lines[rng.randrange(len(lines))]
        out.append(ln)
        n += len(ln.encode())
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.writelines(out)
    os.rename(path + ".tmp", path)
PY
du -sh "$dir/text"
"$TRAINRUN" data tokenizer train "$SHAKESPEARE" --vocab-size 8192 --out "$dir/tok.json" --force \
  >/dev/null
cat "$dir"/text/*.txt >/dev/null  # warm: both encoders read from the page cache
echo "dd (sequential, warm): $(cat "$dir"/text/*.txt | dd of=/dev/null bs=16M 2>&1 | tail -1 |
  awk -F', ' '{print $NF}')"

threads=$(nproc)
rm -rf "$dir/out"
/usr/bin/time -f "trainrun data prepare: wall %e s, cpu %U+%S s, max RSS %M KB" \
  "$TRAINRUN" data prepare "$dir/text" --tokenizer "$dir/tok.json" --out "$dir/out" \
  --threads "$threads" 2>&1 | grep -v "^\s*$" | tail -3
bytes=$(du -cb "$dir"/text/*.txt | tail -1 | cut -f1)

RAYON_NUM_THREADS=$threads TOKENIZERS_PARALLELISM=true "$VENV_PY" - "$dir" "$threads" \
  "${TOK_SECONDS:-900}" "$bytes" <<'PY'
import glob, json, os, sys, time
from tokenizers import Tokenizer
d, threads, cap, total = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
tok = Tokenizer.from_file(os.path.join(d, "tok.json"))
want = {os.path.basename(i["path"]): i["tokens"]
        for i in json.load(open(os.path.join(d, "out", "manifest.json")))["inputs"]}
t0, cpu0 = time.perf_counter(), time.process_time()
done_bytes = files = same = 0
for path in sorted(glob.glob(os.path.join(d, "text", "*.txt"))):
    if time.perf_counter() - t0 > cap:
        break
    text = open(path, encoding="utf-8").read()
    segs, pos = [], 0
    while pos < len(text):
        q = text.find("\n", pos + 4096)
        q = len(text) if q < 0 else q + 1
        segs.append(text[pos:q])
        pos = q
    n = sum(len(e.ids) for e in tok.encode_batch(segs, add_special_tokens=False))
    done_bytes += len(text.encode())
    files += 1
    same += n == want.get(os.path.basename(path))
s, cpu = time.perf_counter() - t0, time.process_time() - cpu0
print(f"tokenizers threads={threads}: {files} files, {done_bytes / 1e6:.0f} of {total / 1e6:.0f} MB "
      f"in {s:.1f} s: {done_bytes / 1e6 / s:.1f} MB/s, {done_bytes / 1e6 / cpu:.1f} MB/cpu-s; "
      f"token counts equal to trainrun's for {same} of {files} files")
PY
echo "trainrun: $bytes bytes"
load_line
