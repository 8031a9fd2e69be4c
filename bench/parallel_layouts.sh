#!/usr/bin/env bash
# What the memory layouts of issue 45 cost in time on this machine (2 cores), side by side in one
# run, alternating three rounds (step times drift by tens of percent between runs here):
#   activation checkpointing: a 6-layer GPT (d_model 256) at seq_len 256, 1 rank, none against
#     selective and full:
#     median step time, the plan's and the measured peak memory (the reference is none: the same
#     model and tokens, bit-identical losses);
#   the device mesh: a 19 M-parameter GPT on 4 ranks (oversubscribed: 2 cores), ZeRO-1 flat
#     (dp_shard 4) against hybrid (dp_replicate 2 x dp_shard 2): median step time and the
#     exposed communication per step (t_comm_exposed).
#
#   bench/parallel_layouts.sh      (about 3 minutes)
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
ensure_built trainrun
QS=configs/quickstart.yaml
AC=(--set model.n_layer=6 --set model.d_model=256 --set model.n_head=8 --set model.seq_len=256
    --set train.batch_size=8 --set train.steps=30 --set logging.every=1
    --set checkpoint.every=0 --set distributed.nproc=1)
MESH=(--set model.n_layer=6 --set model.d_model=512 --set model.n_head=8 --set train.batch_size=8 --set train.steps=30 --set logging.every=1 --set checkpoint.every=0
      --set distributed.nproc=4 --set distributed.oversubscribe=true --set distributed.zero=1)
load_line
for round in 1 2 3; do
  for ac in none selective full; do
    train "ac-$ac-$round" "$QS" "${AC[@]}" --set "train.activation_checkpointing=$ac"
  done
  for r in 1 2; do
    train "mesh-r$r-$round" "$QS" "${MESH[@]}" --set "distributed.dp_replicate=$r"
  done
done
for ac in none selective full; do
  "$TRAINRUN" plan "$QS" "${AC[@]}" --set "train.activation_checkpointing=$ac" --json \
    >"$RUNS/ac-$ac.plan.json"
done
load_line
python3 - "$RUNS" <<'PY'
import json, pathlib, re, statistics, sys
runs = pathlib.Path(sys.argv[1])

def steps(rd):
    rows = [json.loads(l) for l in open(rd / "metrics.jsonl")]
    return [r for r in rows if r.get("kind") == "train" and 5 < r["step"] < 30]

def median_ms(rd):
    return statistics.median(r["step_time"] for r in steps(rd)) * 1e3

def peak(rd):
    m = re.search(r"peak resident memory (\d+) MiB", (rd / "logs" / "rank-0.log").read_text())
    return int(m.group(1))

print("| activation checkpointing | step ms, rounds 1 2 3 | median | plan activations | "
      "plan total | peak RSS |")
print("| --- | --- | ---: | ---: | ---: | ---: |")
base = None
for ac in ("none", "selective", "full"):
    ms = [median_ms(runs / f"ac-{ac}-{r}") for r in (1, 2, 3)]
    plan = json.load(open(runs / f"ac-{ac}.plan.json"))["bytes"]
    med = statistics.median(ms)
    base = base or med
    print(f"| {ac} | {' '.join(f'{x:.0f}' for x in ms)} | {med:.0f} ({med / base:.2f}x) | "
          f"{plan['activations'] / 2**20:.0f} MiB | {plan['total'] / 2**20:.0f} MiB | "
          f"{peak(runs / f'ac-{ac}-1')} MiB |")
print()
print("| 4 ranks, ZeRO-1 | step ms, rounds 1 2 3 | median | exposed comm ms/step |")
print("| --- | --- | ---: | ---: |")
for r, name in ((1, "flat: dp_shard 4"), (2, "hybrid: dp_replicate 2 x dp_shard 2")):
    ms = [median_ms(runs / f"mesh-r{r}-{k}") for k in (1, 2, 3)]
    wait = statistics.median(x["t_comm_exposed"] for k in (1, 2, 3)
                             for x in steps(runs / f"mesh-r{r}-{k}")) * 1e3
    print(f"| {name} | {' '.join(f'{x:.0f}' for x in ms)} | {statistics.median(ms):.0f} | "
          f"{wait:.1f} |")
PY
