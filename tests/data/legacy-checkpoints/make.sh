#!/usr/bin/env bash
# Regenerates the legacy checkpoint fixtures and expected.json (issue 44 part 4: checkpoints made
# by the release before the one-layout rewrite must keep resuming exactly as they did).
#   tests/data/legacy-checkpoints/make.sh BIN      (PYTHON=... picks a python3 that has pytest)
# BIN must be a binary that still WRITES the old formats: the committed files were made by
# /work/trainrun-before (trainrun 0.1.0, the commit before issue 44's rewrite, a7622c3). A binary
# that writes the new layout would overwrite the fixtures with new-format checkpoints: the script
# refuses any whose `inspect` does not say format_version 3 / 4.
#
# What is made (config: configs/quickstart.yaml + the overrides below; seed 1337, the config's;
# the built-in Markov source; a 1080-parameter GPT so that all files stay about 60 KB):
#   format3/step-0000004.h5   single file (checkpoint.sharded=false), 1 rank, AdamW m and v,
#                             step 4 of an 8-step run (so the learning-rate schedule and the
#                             moments are mid-way when it resumes)
#   format4/step-0000004/     sharded (checkpoint.sharded=true), 2 ranks, distributed.zero=1:
#                             MANIFEST + rank-00000-of-00002.h5 + rank-00001-of-00002.h5, step 4
#   expected.json             what BIN does when it resumes each of them to step 8 (losses,
#                             parameter checksums, inspect, export): written by
#                             tests/integration/test_legacy_checkpoints.py --write-expected,
#                             the same code the test runs.
set -euo pipefail
bin=$(realpath "${1:?usage: make.sh BIN (a trainrun that writes format 3 and 4 checkpoints)}")
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The integration tests' TINY (tests/integration/conftest.py) shrunk to d_model 8, vocab 16,
# seq_len 8, batch 4 (TINY's 14k parameters make a 195 KB single file).
sets=(model.n_layer=1 model.d_model=8 model.n_head=2 model.seq_len=8 model.vocab_size=16
      train.batch_size=4 train.eval_every=0 logging.every=1 optimizer.warmup_steps=2
      data.synthetic_tokens=4096 train.steps=8 checkpoint.every=4 checkpoint.keep_last=2
      distributed.oversubscribe=true)
args=()
for s in "${sets[@]}"; do args+=(--set "$s"); done

"$bin" "$root/configs/quickstart.yaml" "${args[@]}" --set checkpoint.sharded=false \
  --run-dir "$work/single" >"$work/single.log" 2>&1 || { cat "$work/single.log" >&2; exit 1; }
"$bin" "$root/configs/quickstart.yaml" "${args[@]}" --set checkpoint.sharded=true \
  --set distributed.nproc=2 --set distributed.zero=1 \
  --run-dir "$work/sharded" >"$work/sharded.log" 2>&1 || { cat "$work/sharded.log" >&2; exit 1; }

check_format() {  # PATH VERSION
  "$bin" inspect "$1" | grep -qx "format_version[:=] *$2" ||
    { echo "make.sh: $1 is not format $2: $bin writes another layout" >&2; exit 1; }
}
check_format "$work/single/checkpoints/step-0000004.h5" 3
check_format "$work/sharded/checkpoints/step-0000004" 4

rm -rf "$here/format3" "$here/format4"
mkdir -p "$here/format3" "$here/format4"
cp "$work/single/checkpoints/step-0000004.h5" "$here/format3/"
cp -r "$work/sharded/checkpoints/step-0000004" "$here/format4/"
TRAINRUN_BIN=$bin "${PYTHON:-python3}" "$root/tests/integration/test_legacy_checkpoints.py" --write-expected
du -ab "$here" | tail -1
