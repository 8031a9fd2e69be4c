#!/usr/bin/env bash
# What document masking saves on packed short documents (issue 30 part 2): the attention skips the
# key blocks before the earliest document start of each query block (docs/data-format.md), so a
# 1024-token sample of ~100-token documents computes a small part of the causal square.
#
#   bench/document_masking.sh        (tiny Shakespeare; about a minute on 2 cores)
#
# Tiny Shakespeare cut at blank lines (each speech a document: 7222, median 84 bytes) is prepared
# into byte-level shards (end-of-text byte 0 between documents, document indexes beside them);
# the same small GPT at seq_len 1024 trains on them unmasked and masked, side by side in this run,
# three times each, alternating (this machine's step times drift by tens of percent between
# runs), each traced op by op for steps 6-25 (--profile); the table gives each round's median
# step time and the attention ops' time per step from its trace, and the medians over the
# rounds. The reference is the unmasked run: the same model on the same tokens.
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
need_shakespeare
ensure_built trainrun

work=$RUNS/document-masking
rm -rf "$work" && mkdir -p "$work/docs"
python3 - "$SHAKESPEARE" "$work/docs" <<'EOF'
import pathlib, sys
text = pathlib.Path(sys.argv[1]).read_text()
docs = [d.strip() + "\n" for d in text.split("\n\n") if d.strip()]
for i, d in enumerate(docs):
    pathlib.Path(sys.argv[2], f"{i:06d}.txt").write_text(d)
lens = sorted(len(d) for d in docs)
print(f"{len(docs)} documents, median {lens[len(lens) // 2]} bytes, longest {lens[-1]}")
EOF
"$TRAINRUN" data prepare "$work/docs" --out "$work/shards" > "$work/prepare.log" 2>&1

MODEL=(--set model.n_layer=2 --set model.d_model=128 --set model.n_head=4 --set model.vocab_size=256
       --set model.seq_len=1024 --set train.batch_size=4 --set train.steps=26 --set logging.every=1
       --set checkpoint.every=0 --set data.synthetic= --set "data.train=$work/shards/train.bin"
       --set "data.val=$work/shards/val.bin" --set distributed.nproc=1)
load_line
for round in 1 2 3; do
  for mode in unmasked masked; do
    extra=()
    [[ $mode == masked ]] && extra=(--set data.document_masking=true)
    train "docmask-$mode-$round" configs/quickstart.yaml "${MODEL[@]}" "${extra[@]}" --profile 6:26
  done
done
python3 - "$RUNS" <<'EOF'
import json, pathlib, statistics, sys
runs = pathlib.Path(sys.argv[1])
rows = {"unmasked": [], "masked": []}
for rnd in (1, 2, 3):
    for mode in rows:
        rd = runs / f"docmask-{mode}-{rnd}"
        steps = [r["step_time"] for r in map(json.loads, open(rd / "metrics.jsonl"))
                 if r.get("kind") == "train" and r["step"] > 5]
        attn = 0.0  # the table is per traced step already
        for line in open(rd / "trace" / "ops-rank-0.txt"):
            f = line.split()
            if f and f[0] in ("attention", "attention_backward"):
                attn += float(f[2])
        rows[mode].append((statistics.median(steps) * 1e3, attn))
print(f"{'':10} {'step time (median), rounds 1 2 3':>36} {'attention fwd+bwd per step':>34}")
for mode, r in rows.items():
    print(f"{mode:10} {'  '.join(f'{s:7.1f}' for s, _ in r):>33} ms "
          f"{'  '.join(f'{a:7.1f}' for _, a in r):>31} ms")
med = {m: (statistics.median(s for s, _ in r), statistics.median(a for _, a in r))
       for m, r in rows.items()}
u, m = med["unmasked"], med["masked"]
print(f"medians: step {u[0]:.1f} -> {m[0]:.1f} ms ({m[0] / u[0]:.2f}x), "
      f"attention {u[1]:.1f} -> {m[1]:.1f} ms ({m[1] / u[1]:.2f}x)")
EOF
load_line
