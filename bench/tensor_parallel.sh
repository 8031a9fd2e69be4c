#!/usr/bin/env bash
# Tensor parallelism (issue 46), side by side in one run:
#   measured, this machine (2 cores): a 4-layer GPT whose GEMMs dominate (d_model 1024, 50 M
#     parameters, 1024 rows per micro-batch) on 1 rank (2 OpenMP threads) and at tp 2 on 2 ranks
#     (1 thread each), with the overlap of the column-parallel layers' backward all-reduces with
#     their weight-gradient GEMMs (distributed.tp_overlap=true) and without it (false, what auto
#     chooses over MPI), three
#     alternating rounds: median step time; and from a --profile trace of each tp 2 setting the
#     time the rank spent in the tp all-reduces and in waiting for the overlapped ones (exposed);
#   predicted, `trainrun plan --search`: Llama-3-70B at seq_len 8192 on 64 H200 (8 nodes of 8),
#     the three fastest layouts that fit, beside torchtitan's published Llama-3-70B FSDP x TP 8
#     on 256 H100 (829 tokens/s per GPU; 876 with async TP).
#
#   bench/tensor_parallel.sh      (about 3 minutes)
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
ensure_built trainrun
QS=configs/quickstart.yaml
RUN=(--set model.n_layer=4 --set model.d_model=1024 --set model.n_head=16 --set model.seq_len=128
     --set model.vocab_size=64 --set train.batch_size=8 --set train.steps=20 --set logging.every=1
     --set checkpoint.every=0)
load_line
for round in 1 2 3; do
  train "one-$round" "$QS" "${RUN[@]}" --set distributed.nproc=1
  train "tp2-$round" "$QS" "${RUN[@]}" --set distributed.nproc=2 --set distributed.tp=2 \
    --set distributed.tp_overlap=true
  train "serial-$round" "$QS" "${RUN[@]}" --set distributed.nproc=2 --set distributed.tp=2 \
    --set distributed.tp_overlap=false
done
train "tp2-trace" "$QS" "${RUN[@]}" --set distributed.nproc=2 --set distributed.tp=2 \
  --set distributed.tp_overlap=true --profile 10:20
train "serial-trace" "$QS" "${RUN[@]}" --set distributed.nproc=2 --set distributed.tp=2 \
  --set distributed.tp_overlap=false --profile 10:20
load_line
L70=(--set model.type=llama --set model.n_layer=80 --set model.d_model=8192 --set model.n_head=64
     --set model.n_kv_head=8 --set model.ffn_hidden=28672 --set model.vocab_size=128256
     --set model.seq_len=8192 --set model.tie_embeddings=false --set train.precision=bf16
     --set device=cuda --set distributed.nproc=8 --set distributed.nodes=8
     --set train.batch_size=64)
"$TRAINRUN" plan "$QS" "${L70[@]}" --gpu H200 --search --top 3 >"$RUNS/l70-search.txt"
python3 - "$RUNS" <<'PY'
import json, pathlib, statistics, sys
runs = pathlib.Path(sys.argv[1])

def median_ms(rd):
    rows = [json.loads(l) for l in open(rd / "metrics.jsonl")]
    return statistics.median(r["step_time"] for r in rows
                             if r.get("kind") == "train" and r["step"] > 5) * 1e3

print("| 4 layers, d_model 1024, 1024 rows | step ms, rounds 1 2 3 | median |")
print("| --- | --- | ---: |")
base = None
for name, title in (("one", "1 rank, 2 threads"),
                    ("tp2", "tp 2 on 2 ranks, 1 thread each, distributed.tp_overlap=true"),
                    ("serial", "tp 2, distributed.tp_overlap=false (auto's choice over MPI)")):
    ms = [median_ms(runs / f"{name}-{r}") for r in (1, 2, 3)]
    med = statistics.median(ms)
    base = base or med
    print(f"| {title} | {' '.join(f'{x:.0f}' for x in ms)} | {med:.0f} ({med / base:.2f}x) |")
print()
for name, title in (("tp2", "overlap"), ("serial", "no overlap")):
    ev = [e for e in json.load(open(runs / f"{name}-trace" / "trace" / "rank-0.json"))["traceEvents"]
          if e.get("ph") == "X"]
    blocking = [e for e in ev if e["cat"] == "comm" and e["name"] == "tp allreduce"]
    waits = [e for e in ev if e["cat"] == "comm" and e["name"] == "tp allreduce wait"]
    steps = [e for e in ev if e["cat"] == "phase"]
    span = (max(e["ts"] + e["dur"] for e in steps) - min(e["ts"] for e in steps)) if steps else 0
    ms = lambda es: sum(e["dur"] for e in es) / 1e3
    exposed = ms(blocking) + ms(waits)
    print(f"tp 2 trace ({title}), steps 10-19, rank 0: {len(blocking)} blocking tp all-reduces"
          f" {ms(blocking):.1f} ms, {len(waits)} overlapped ones' waits {ms(waits):.1f} ms;"
          f" exposed {exposed:.1f} ms of {span / 1e3:.1f} ms ({1e5 * exposed / max(span, 1):.1f}%)")
print()
print((runs / "l70-search.txt").read_text())
print("torchtitan, Llama-3-70B, FSDP x TP 8, 256 H100 (published): 829 tokens/s per GPU, 876 "
      "with async TP")
PY
