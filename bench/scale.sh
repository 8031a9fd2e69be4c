#!/usr/bin/env bash
# Scale rehearsal at 64 ranks on one machine (issue 31 parts 1 and 7; the 32-rank version runs in
# CI, tests/integration/test_scale.py). A tiny GPT, 64 oversubscribed ranks, OMP_NUM_THREADS=1,
# through the normal launcher. Prints: wall time of a clean run and of its sharded checkpoint
# (64 files and the MANIFEST); the straggler events of the clean run (false positives); resume on
# 8 and 1 ranks against the clean run's losses; a rank killed by SIGKILL and the parameters after
# the restart; one rank slowed from outside by a SIGSTOP/SIGCONT duty cycle and whether the
# detector names it; and, sampled mid-run, each rank's open files and sockets (what grows with the
# rank count). Figures only.
#   BUILD=build bench/scale.sh [RANKS] [STEPS]
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
ensure_built trainrun
ranks=${1:-64}
steps=${2:-40}
dir="$RUNS/scale"
rm -rf "$dir"
mkdir -p "$dir"
cores=$(nproc --all)  # before OMP_NUM_THREADS, which nproc honours
export OMP_NUM_THREADS=1
common=(--set model.n_layer=1 --set model.d_model=32 --set model.n_head=2 --set model.seq_len=16
        --set model.vocab_size=32 --set data.synthetic_tokens=65536 --set train.eval_every=0
        --set "train.batch_size=$ranks" --set "train.steps=$steps" --set logging.every=5
        --set checkpoint.every=10 --set checkpoint.sharded=true --set checkpoint.keep_last=10
        --set "distributed.nproc=$ranks" --set distributed.oversubscribe=true
        --set fault_tolerance.restart_backoff=0)
qs=configs/quickstart.yaml

checksums() { grep -ho "parameter checksum [0-9a-f]* at step $steps" "$1"/logs/rank-*.log | sort | uniq -c; }
events() { python3 -c '
import json, sys
rows = [r for r in map(json.loads, open(sys.argv[1])) if r.get("event") == sys.argv[2]]
print(len(rows), sorted({r.get("rank") for r in rows}))' "$1/metrics.jsonl" "$2"; }

echo "## scale: $ranks ranks on $cores cores, $steps steps"
load_line
t0=$(date +%s.%N)
"$TRAINRUN" $qs "${common[@]}" --run-dir "$dir/clean" >"$dir/clean.log" 2>&1
t1=$(date +%s.%N)
echo "clean run: $(echo "$t1 - $t0" | bc) s wall; shard files in the last checkpoint: $(find "$dir/clean/checkpoints/step-$(printf %07d "$steps")" -name 'rank-*' | wc -l); straggler events (false positives): $(events "$dir/clean" straggler)"
echo "checksums at step $steps:"; checksums "$dir/clean"

for then in 8 1; do
  rm -rf "$dir/cut$then"
  TRAINRUN_FAULTS="exit:step=$((steps / 2 + 5)):code=9" "$TRAINRUN" $qs "${common[@]}" \
    --run-dir "$dir/cut$then" >"$dir/cut$then.log" 2>&1 || true
  "$TRAINRUN" --resume "$dir/cut$then" --set "distributed.nproc=$then" >>"$dir/cut$then.log" 2>&1
  python3 - "$dir/clean" "$dir/cut$then" "$then" <<'PY'
import json, sys
def losses(d):
    return {r["step"]: r["loss"] for r in map(json.loads, open(f"{d}/metrics.jsonl"))
            if r.get("kind") == "train"}
a, b = losses(sys.argv[1]), losses(sys.argv[2])
worst = max(abs(a[s] - b[s]) / abs(a[s]) for s in a)
print(f"resume on {sys.argv[3]} rank(s): steps {len(b)}/{len(a)}, largest relative loss "
      f"difference {worst:.2e}")
PY
done

TRAINRUN_FAULTS="kill:rank=$((ranks / 3)):step=$((steps / 2 + 3))" "$TRAINRUN" $qs "${common[@]}" \
  --set fault_tolerance.max_restarts=1 --run-dir "$dir/killed" >"$dir/killed.log" 2>&1
echo "rank $((ranks / 3)) killed (SIGKILL), restarted: restarts $(events "$dir/killed" restart); checksums at step $steps:"
checksums "$dir/killed"

# One rank slowed from outside: stopped 60 ms of every 120 ms while the run lasts.
slow=$((ranks * 5 / 8))
"$TRAINRUN" $qs "${common[@]}" --set "train.steps=$((steps * 10))" --run-dir "$dir/slow" \
  >"$dir/slow.log" 2>&1 &
run_pid=$!
pid=""
for _ in $(seq 200); do
  for p in $(pgrep -f "trainrun.*$dir/slow" || true); do
    if tr '\0' '\n' </proc/"$p"/environ 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$slow"; then
      pid=$p
    fi
  done
  [[ -n "$pid" ]] && break
  sleep 0.1
done
if [[ -n "$pid" ]]; then
  sleep 0.5
  echo "rank $slow (pid $pid) mid-run: $(find /proc/"$pid"/fd -mindepth 1 | wc -l) open files, $(find /proc/"$pid"/fd -mindepth 1 -lname 'socket:*' | wc -l) sockets; mpirun: $(find /proc/"$(pgrep -n mpirun)"/fd -mindepth 1 2>/dev/null | wc -l) open files"
  while kill -0 "$pid" 2>/dev/null; do
    kill -STOP "$pid" 2>/dev/null || break
    sleep 0.06
    kill -CONT "$pid" 2>/dev/null || break
    sleep 0.06
  done &
  duty=$!
fi
wait "$run_pid" || true
if [[ -n "${duty:-}" ]]; then kill "$duty" 2>/dev/null || true; fi
echo "rank $slow under a SIGSTOP/SIGCONT duty cycle (50%): straggler events $(events "$dir/slow" straggler)"
load_line
