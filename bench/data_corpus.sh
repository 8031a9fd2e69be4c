#!/usr/bin/env bash
# The data loader on a 2 GB corpus (issue 30 part 4): four generated GPT-2-width shards (u16,
# vocab 50304, 256 Mi tokens each). Prints (1) the read rate of `dd` over the corpus, cold (page
# cache dropped, when this user may) and warm; (2) bench_loader's rate for one loader thread in
# windows and epochs order, cold and warm, and how long opening the corpus took (no token scan:
# the headers bound the ids); (3) t_data as a share of the step for a data.mix of the shards at
# 1 and 8 ranks (8 oversubscribed on small machines: every rank's step is slower, which only
# lowers the share). Figures only.
#   BUILD=build bench/data_corpus.sh [STEPS]
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
ensure_built trainrun bench/bench_loader
steps=${1:-30}
dir="$RUNS/data_corpus"
mkdir -p "$dir/a" "$dir/b"

echo "## data_corpus: the loader on a 2 GB corpus"
load_line
/usr/bin/python3 - "$dir" <<'PY'  # numpy: Debian's python3-numpy
import os, struct, sys
import numpy as np
d = sys.argv[1]
n = 256 << 20  # tokens per shard: 512 MB
rng = np.random.default_rng(1)
for i, sub in enumerate(["a/0.bin", "a/1.bin", "b/0.bin", "b/1.bin"]):
    path = os.path.join(d, sub)
    if os.path.exists(path) and os.path.getsize(path) == 64 + 2 * n:
        continue
    head = b"TRNTOKEN" + struct.pack("<IIQI", 1, 2, n, 50304) + bytes(36)
    with open(path + ".tmp", "wb") as f:
        f.write(head)
        for _ in range(16):
            f.write(rng.integers(0, 50304, n // 16, dtype=np.uint16).tobytes())
    os.rename(path + ".tmp", path)
PY
du -sh "$dir"
drop() { sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null; }
if drop; then cold=yes; else cold=no; echo "(cannot drop the page cache here: cold figures are warm)"; fi

echo
echo "| reader | cache | rate |"
echo "| --- | --- | --- |"
dd_rate() { dd if="$dir/a/0.bin" of=/dev/null bs=16M 2>&1 | tail -1 | awk -F', ' '{print $NF}'; }
drop; echo "| dd (sequential, one 512 MB shard) | cold=$cold | $(dd_rate) |"
echo "| dd (sequential, one 512 MB shard) | warm | $(dd_rate) |"
samples=200000
for spec in "windows 1" "epochs 1" "epochs 64"; do
  read -r order block <<<"$spec"
  label="bench_loader $order, block $block, T=1024, 1 GB"
  drop
  echo "| $label | cold=$cold | $(build/bench/bench_loader "$dir/a" 1024 "$samples" "$order" "$block" | sed 's/.*: //') |"
  echo "| $label | warm | $(build/bench/bench_loader "$dir/a" 1024 "$samples" "$order" "$block" | sed 's/.*: //') |"
done
build/bench/bench_loader "$dir/a" 1024 64 windows | grep -o "open [0-9.]* s" | sed 's/^/opening 1 GB of shards (headers and mapping, no scan): /'

mix="data.mix=[{path: $dir/a, weight: 0.7, name: a}, {path: $dir/b, weight: 0.3, name: b}]"
echo
echo "| ranks | step ms (median) | t_data ms (mean) | t_data ms (max) | data share |"
echo "| --- | --- | --- | --- | --- |"
for ranks in 1 8; do
  name="corpus-$ranks"
  train "$name" configs/quickstart.yaml --set data.synthetic= --set "$mix" \
    --set data.val_fraction=0.001 --set model.vocab_size=50304 --set model.seq_len=256 \
    --set model.n_layer=2 --set model.d_model=128 --set train.batch_size=$((8 * ranks)) \
    --set distributed.nproc=$ranks --set distributed.oversubscribe=true \
    --set train.steps="$steps" --set checkpoint.every=0 --set logging.every=1
  python3 bench/data_share_row.py "$RUNS/$name/metrics.jsonl" 3 "$ranks"
done
load_line
