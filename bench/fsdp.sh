#!/usr/bin/env bash
# ZeRO-2 and ZeRO-3 (issue 45) against ZeRO-0 and ZeRO-1, side by side in one run:
#   measured, this machine (2 cores): a 6-layer GPT (d_model 512, 19 M parameters) on 2 ranks,
#     three alternating rounds of each stage: median step time, the exposed communication per
#     step (t_comm_exposed), peak resident memory against the plan's; and from a --profile trace
#     of ZeRO-3 the share of the all-gathers' time the step loop did not wait for (hidden);
#   predicted, `trainrun plan` on H200 (and H100) tables: GPT-2 124M, Llama-3-8B and
#     Llama-3-70B under each stage: memory per rank, whether it fits, tokens/s per GPU and MFU
#     (model FLOPs), beside torchtitan's published Llama-3.1-8B FSDP on 8 H100 (5,762 tokens/s
#     per GPU, 33-39% MFU).
#
#   bench/fsdp.sh      (about 3 minutes)
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
ensure_built trainrun
QS=configs/quickstart.yaml
RUN=(--set model.n_layer=6 --set model.d_model=512 --set model.n_head=8 --set train.batch_size=8
     --set train.steps=30 --set logging.every=1 --set checkpoint.every=0
     --set distributed.nproc=2)
load_line
for round in 1 2 3; do
  for z in 0 1 2 3; do
    train "z$z-$round" "$QS" "${RUN[@]}" --set "distributed.zero=$z"
  done
done
train "z3-trace" "$QS" "${RUN[@]}" --set distributed.zero=3 --profile 10:20
for z in 0 1 2 3; do
  "$TRAINRUN" plan "$QS" "${RUN[@]}" --set "distributed.zero=$z" --json >"$RUNS/z$z.plan.json"
done
LLAMA8=(--set model.type=llama --set model.n_layer=32 --set model.d_model=4096
        --set model.n_head=32 --set model.n_kv_head=8 --set model.ffn_hidden=14336
        --set model.vocab_size=128256 --set model.seq_len=8192 --set model.tie_embeddings=false
        --set train.precision=bf16 --set device=cuda --set train.micro_batch_size=1)
LLAMA70=(--set model.type=llama --set model.n_layer=80 --set model.d_model=8192
         --set model.n_head=64 --set model.n_kv_head=8 --set model.ffn_hidden=28672
         --set model.vocab_size=128256 --set model.seq_len=8192 --set model.tie_embeddings=false
         --set train.precision=bf16 --set device=cuda --set train.micro_batch_size=1)
plan() {  # name gpu config args...
  local name=$1 gpu=$2 config=$3
  shift 3
  "$TRAINRUN" plan "$config" "$@" --gpu "$gpu" --json >"$RUNS/plan-$name.json"
}
for z in 0 1 2 3; do
  plan "gpt2-z$z" H200 configs/gpt2-124m.yaml --set distributed.nproc=8 \
    --set "distributed.zero=$z"
  plan "l8-z$z" H200 "$QS" "${LLAMA8[@]}" --set distributed.nproc=8 --set train.batch_size=8 \
    --set "distributed.zero=$z"
  plan "l8h100-z$z" H100 "$QS" "${LLAMA8[@]}" --set distributed.nproc=8 \
    --set train.batch_size=8 --set "distributed.zero=$z"
  plan "l70-z$z" H200 "$QS" "${LLAMA70[@]}" --set distributed.nproc=8 \
    --set distributed.nodes=8 --set train.batch_size=64 --set "distributed.zero=$z" \
    --set train.activation_checkpointing=full
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

print("| 2 ranks, 19 M parameters | step ms, rounds 1 2 3 | median | exposed comm ms/step | "
      "peak RSS rank 0 | plan |")
print("| --- | --- | ---: | ---: | ---: | ---: |")
base = None
for z in range(4):
    ms = [median_ms(runs / f"z{z}-{r}") for r in (1, 2, 3)]
    med = statistics.median(ms)
    base = base or med
    wait = statistics.median(x["t_comm_exposed"] for r in (1, 2, 3)
                             for x in steps(runs / f"z{z}-{r}")) * 1e3
    plan = json.load(open(runs / f"z{z}.plan.json"))["bytes"]["total"] / 2**20
    print(f"| ZeRO-{z} | {' '.join(f'{x:.0f}' for x in ms)} | {med:.0f} ({med / base:.2f}x) | "
          f"{wait:.1f} | {peak(runs / f'z{z}-1')} MiB | {plan:.0f} MiB |")

ev = [e for e in json.load(open(runs / "z3-trace" / "trace" / "rank-0.json"))["traceEvents"]
      if e.get("ph") == "X"]
gathers = sum(e["dur"] for e in ev if e["cat"] == "comm" and e["name"].startswith("all_gather"))
waited = sum(e["dur"] for e in ev if e["cat"] == "comm_wait")
print()
print(f"ZeRO-3 trace, steps 10-19, rank 0: all-gathers ran {gathers / 1e3:.1f} ms, the step loop "
      f"waited {waited / 1e3:.1f} ms for them: {100 * (1 - waited / max(gathers, 1e-9)):.0f}% "
      f"hidden")

print()
print("| model, cluster | stage | memory per rank | fits | tokens/s per GPU | MFU |")
print("| --- | --- | ---: | --- | ---: | ---: |")
for name, title, gpus in (("gpt2", "GPT-2 124M, 8 H200", 8), ("l8", "Llama-3-8B, 8 H200", 8),
                          ("l8h100", "Llama-3-8B, 8 H100", 8),
                          ("l70", "Llama-3-70B (full recompute), 64 H200", 64)):
    for z in range(4):
        p = json.load(open(runs / f"plan-{name}-z{z}.json"))
        print(f"| {title} | {z} | {p['bytes']['total'] / 2**30:.1f} GiB | "
              f"{'yes' if p['fits'] else 'no'} | "
              f"{p['predicted_tokens_per_second'] / gpus:,.0f} | "
              f"{100 * p['predicted_mfu']:.1f}% |")
print("| torchtitan, Llama-3.1-8B FSDP, 8 H100 (published) | 3 | | yes | 5,762 | 33-39% |")
PY
