#!/usr/bin/env bash
# Device check for the CUDA backend, in one command on a GPU machine (fits in ~8 minutes on one
# H200, safe from a fresh clone):
#   bench/gpu_check.sh LOGDIR
#   bench/gpu_check.sh --sim LOGDIR   the rehearsal: every step against the CPU-executed device
#                                     (kernels/sim/, docs/cuda.md) on any machine, so a GPU's
#                                     minutes go to GPU work only; its timings mean nothing, its
#                                     shapes are shrunk, and compute-sanitizer is not run
# 1. builds with -Dcuda=enabled into build-gpu/ (plugin + test_backend_ops + trainrun); --sim:
#    build/ with the sim plugin
# 2. runs the meson `gpu` suite (tests/test_backend_ops.cpp: every op vs the CPU reference, f32
#    and bf16, awkward shapes up to GPT-2 small), then its --quick cases under compute-sanitizer
#    memcheck, racecheck and initcheck
# 3. if trainrun can train on cuda: a few steps of configs/shakespeare-char.yaml on cpu and on
#    cuda (losses compared), then timed GPT-2 124M steps
# Everything is logged under LOGDIR; a short summary table is printed last.
set -uo pipefail

SIM=0
if [ "${1:-}" = --sim ]; then SIM=1; shift; fi
LOGDIR=${1:?usage: bench/gpu_check.sh [--sim] LOGDIR}
mkdir -p "$LOGDIR"
LOGDIR=$(cd "$LOGDIR" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
if [ "$SIM" = 1 ]; then
  BUILD=build
  PLUGIN=$BUILD/kernels/sim/libtrainrun_cudasim.so
  SETUP=(meson setup "$BUILD" -Dbuildtype=release)
  export TRAINRUN_CUDA_PLUGIN=$ROOT/$PLUGIN
else
  BUILD=build-gpu
  PLUGIN=$BUILD/kernels/libtrainrun_cuda.so
  SETUP=(meson setup "$BUILD" -Dcuda=enabled -Dbuildtype=release)
fi
declare -a SUMMARY=()
status=0
# One device call has a time limit: every step's own limit is cut to what is left of BUDGET_S
# (default 540 s from the start), so the summary is always printed and the logs come back.
DEADLINE=$(( $(date +%s) + ${BUDGET_S:-540} ))
cap() {  # cap SECONDS: SECONDS, or what is left before the deadline (at least 1: timeout 0
  local left=$(( DEADLINE - $(date +%s) - 15 ))  # would mean no limit at all)
  (( left < 1 )) && left=1
  echo $(( $1 < left ? $1 : left ))
}
note() { SUMMARY+=("$(printf '%-28s %s' "$1" "$2")"); }

nvidia-smi > "$LOGDIR/nvidia-smi.txt" 2>&1 || true

# ---- 1. build ----
t0=$(date +%s)
if { [ -d "$BUILD" ] || "${SETUP[@]}"; } > "$LOGDIR/build.log" 2>&1 &&
   ninja -C "$BUILD" trainrun "${PLUGIN#"$BUILD"/}" tests/test_backend_ops >> "$LOGDIR/build.log" 2>&1; then
  note "build" "ok ($(( $(date +%s) - t0 )) s)"
else
  note "build" "FAILED (see $LOGDIR/build.log)"
  tail -30 "$LOGDIR/build.log"
  printf '\n== summary ==\n'; printf '%s\n' "${SUMMARY[@]}"
  exit 1
fi
if ldd "$PLUGIN" | grep -q 'libcuda\.so'; then
  note "plugin links libcuda" "YES (it must not)"; status=1
else
  note "plugin links libcuda" "no (good)"
fi

# ---- 2. every op against the CPU reference: the meson `gpu` suite, then under compute-sanitizer ----
# The suite exits 77 (meson: SKIP) when it finds no GPU or plugin: that counts as a failure here.
gpu_suite() {  # gpu_suite LOGNAME TIMEOUT [meson test options...]
  local log="$LOGDIR/$1.txt" limit
  limit=$(cap "$2")
  shift 2
  if [ "$limit" -le 1 ]; then echo "not run: out of time (BUDGET_S)"; return 1; fi
  OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)} timeout "$limit" \
    meson test -C "$BUILD" --suite gpu --no-rebuild --verbose "$@" > "$log" 2>&1
  local rc=$?
  local cases
  cases=$(grep -Eo '[0-9]+ passed, [0-9]+ failed, [0-9]+ not supported' "$log" | tail -1)
  if [ "$rc" -eq 0 ] && ! grep -q 'SKIP' "$log"; then
    echo "ok: ${cases:-?}"
  else
    echo "FAILED rc=$rc: ${cases:-no summary} (see $1.txt)"
    return 1
  fi
}
t0=$(date +%s)
if [ "$SIM" = 1 ]; then  # the sim runs the quick shapes (GPT-2's micro-batch would take hours)
  r=$(gpu_suite gpu-suite 300 --test-args '--quick --no-timing') || status=1
else
  r=$(gpu_suite gpu-suite 180) || status=1
fi
note "gpu suite" "$r ($(( $(date +%s) - t0 )) s)"
# Attention in bf16 on tensor cores (attention_tc.cu) against the CUDA-core kernels
# (TRAINRUN_CUDA_ATTENTION=cuda_cores), the same cases one after the other: the longest shape's
# forward and backward times.
if [ "$SIM" = 0 ]; then
  for path in tensor_cores cuda_cores; do
    TRAINRUN_CUDA_ATTENTION=$path timeout "$(cap 90)" "$BUILD/tests/test_backend_ops" \
      --backend cuda --require --op attention > "$LOGDIR/attention-$path.txt" 2>&1
    times=$(awk '$2 == "bf16" && / gpt2 / && !/n_kv_head/ {for (i = 1; i < NF; i++)
            if ($(i + 1) == "ms") printf "%s %s ms, ", $1, $i}' "$LOGDIR/attention-$path.txt")
    note "attention bf16 $path" "${times:-no timing (see attention-$path.txt)}"
  done
fi
SANITIZER=$(command -v compute-sanitizer || echo "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer")
for tool in memcheck racecheck initcheck; do
  if [ "$SIM" = 1 ]; then
    note "compute-sanitizer $tool" "not on the sim (its own checkers ran in the suite)"; continue
  fi
  if [ ! -x "$SANITIZER" ]; then
    note "compute-sanitizer $tool" "not run: compute-sanitizer not found"; status=1; continue
  fi
  t0=$(date +%s)
  r=$(gpu_suite "sanitizer-$tool" 75 --test-args '--quick --no-timing' \
      --wrapper "$SANITIZER --tool $tool --error-exitcode 99") || status=1
  note "compute-sanitizer $tool" "$r ($(( $(date +%s) - t0 )) s)"
done

# ---- 3. training on cpu vs cuda (every step's loss), then GPT-2 124M steps ----
TR="$BUILD/trainrun"
DATA=data/tinyshakespeare.txt
if [ ! -s "$DATA" ]; then  # no network on GPU machines: any few hundred KB of text will do
  DATA="$LOGDIR/text.txt"
  cat docs/*.md man/* README* 2>/dev/null > "$DATA"
  while [ "$(stat -c %s "$DATA")" -lt 400000 ]; do cat "$DATA" "$DATA" > "$DATA.2"; mv "$DATA.2" "$DATA"; done
fi
# metrics.jsonl's train rows: one field's values, space-separated (trainrun writes step_time in s).
field() { python3 -c 'import json,sys
print(" ".join(str(r[sys.argv[2]]) for r in map(json.loads, open(sys.argv[1]))
               if r.get("kind") == "train" and sys.argv[2] in r))' "$1/metrics.jsonl" "$2" 2>/dev/null; }
# The largest relative difference between two runs' losses at the same steps.
worst() { python3 -c 'import sys
a, b = (list(map(float, x.split())) for x in sys.argv[1:3])
print(max(abs(x - y) / abs(y) for x, y in zip(a, b)) if a and len(a) == len(b) else "n/a")' "$1" "$2"; }
CHAR=(--set train.steps=20 --set logging.every=1 --set train.eval_every=1000
      --set checkpoint.every=1000 --set "data.text=$DATA")
[ "$SIM" = 1 ] && CHAR+=(--set model.seq_len=64 --set train.batch_size=4)
for prec in fp32 bf16; do
  for dev in cpu cuda; do
    timeout "$(cap 120)" "$TR" run configs/shakespeare-char.yaml --run-dir "$LOGDIR/char-$prec-$dev" \
      --set device=$dev --set train.precision=$prec "${CHAR[@]}" \
      > "$LOGDIR/char-$prec-$dev.log" 2>&1
  done
  d=$(worst "$(field "$LOGDIR/char-$prec-cuda" loss)" "$(field "$LOGDIR/char-$prec-cpu" loss)")
  lim=$([ "$prec" = fp32 ] && echo 1e-4 || echo 2e-2)
  verdict=$(python3 -c "import sys; print('match' if sys.argv[1] != 'n/a' and float(sys.argv[1]) <= $lim else 'DIFFER')" "$d")
  note "char 20 steps $prec cpu/cuda" "worst step loss difference $d (limit $lim): $verdict"
  [ "$verdict" = match ] || status=1
done
t0=$(date +%s)
GPT2=(--set distributed.nproc=1 --set train.precision=bf16 --set train.steps=10 --set logging.every=1
      --set checkpoint.every=100000 --set train.eval_every=100000 --set data.train= --set data.val=
      --set "data.text=$DATA" --set train.batch_size=16 --set train.micro_batch_size=16)
# Steps 5-7 are also traced op by op (each op between two CUDA events, no waiting; the first op
# of a step waits once for the device; the figures come from the last step, untraced): the per-op
# table below says where a GPU step goes.
PROFILE=(--profile 5:8)
GPT2_CAP=180
# The sim interprets the kernels: two traced steps of the shrunk model take minutes there.
[ "$SIM" = 1 ] && GPT2+=(--set model.n_layer=2 --set model.seq_len=64 --set train.batch_size=2
                         --set train.micro_batch_size=2 --set train.steps=2) &&
  PROFILE=(--profile 1:2) && GPT2_CAP=300
PLAN_SETS=("${GPT2[@]}")
GPT2+=("${PROFILE[@]}")
timeout "$(cap "$GPT2_CAP")" "$TR" run configs/gpt2-124m.yaml --run-dir "$LOGDIR/gpt2" "${GPT2[@]}" \
  > "$LOGDIR/gpt2.log" 2>&1
rc=$?
st=$(field "$LOGDIR/gpt2" step_time | awk '{print $NF}')
if [ -n "$st" ]; then
  note "gpt2-124m bf16" "rc=$rc, last step $st s, $(field "$LOGDIR/gpt2" tokens_per_sec | awk '{print $NF}') tok/s, MFU $(field "$LOGDIR/gpt2" mfu | awk '{print $NF}') ($(( $(date +%s) - t0 )) s)"
else
  note "gpt2-124m bf16" "rc=$rc, no metrics (see gpt2.log)"; status=1
fi
# The plan beside the run (docs/observability.md, "Kernel roofline"): its device memory against
# what the GPU held (within 10% is the goal), its step time against the last, untraced step.
if [ -n "$st" ] && "$TR" plan configs/gpt2-124m.yaml "${PLAN_SETS[@]}" --json \
     > "$LOGDIR/gpt2-plan.json" 2> "$LOGDIR/gpt2-plan.log"; then
  note "gpt2 plan vs run" "$(python3 -c 'import json, re, sys
p = json.load(open(sys.argv[1]))
m = re.findall(r"device memory in use (\d+) MiB, the plan (\d+) MiB", open(sys.argv[2]).read())
t = float(sys.argv[3])
mem = (f"memory {m[-1][0]} MiB held, {m[-1][1]} MiB planned "
       f"({100 * (int(m[-1][1]) - int(m[-1][0])) / int(m[-1][0]):+.1f}%)") if m else "memory not logged"
s, mfu = p["predicted_step_seconds"], p["predicted_mfu"]
print(f"step {t * 1e3:.1f} ms measured, {s * 1e3:.1f} ms predicted ({100 * (s - t) / t:+.1f}%), "
      f"MFU predicted {100 * mfu:.1f}%; {mem}")' "$LOGDIR/gpt2-plan.json" "$LOGDIR/gpt2/logs/rank-0.log" "$st")"
fi
# The per-kernel table: the ops that take the most time in a traced step (trace/ops-rank-0.txt:
# calls and device ms per step, from CUDA events) beside the plan's FLOPs and bytes for the same op
# and step: achieved TFLOP/s and GB/s against the GPU's peaks, and the roofline's prediction.
if [ -f "$LOGDIR/gpt2/trace/ops-rank-0.txt" ] && [ -f "$LOGDIR/gpt2-plan.json" ]; then
  while IFS=$'\t' read -r op line; do
    note "  op $op" "$line"
  done < <(python3 -c 'import json, sys
p = json.load(open(sys.argv[1]))
peak_flops, peak_bw = p["device"]["flops"], p["device"]["mem_bw"]
plan = {k["op"]: k for k in p.get("kernels", [])}
rows = [l.split() for l in open(sys.argv[2]) if not l.startswith("#")][1:]
for r in [r for r in rows if not r[0].startswith("(") and r[0] != "step"][:10]:
    op, calls, ms = r[0], float(r[1]), float(r[2])
    k, s = plan.get(op), ms * 1e-3
    line = f"{calls:.0f} calls, {ms:.3f} ms/step"
    if k and s > 0:
        flops, bw, pred = k["flops"] / s, k["bytes"] / s, k["seconds"] * 1e3
        line += (f", {flops / 1e12:.1f} TFLOP/s ({100 * flops / peak_flops:.0f}% of peak)"
                 f", {bw / 1e9:.0f} GB/s ({100 * bw / peak_bw:.0f}% of peak), roofline {pred:.3f} ms")
    print(op + chr(9) + line)' "$LOGDIR/gpt2-plan.json" "$LOGDIR/gpt2/trace/ops-rank-0.txt")
fi

printf '\n== summary (logs in %s) ==\n' "$LOGDIR"
printf '%s\n' "${SUMMARY[@]}" | tee "$LOGDIR/summary.txt"
exit $status
