#!/usr/bin/env bash
# Device check for the CUDA backend, in one command on a GPU machine (fits in ~8 minutes on one
# H200, safe from a fresh clone):
#   bench/gpu_check.sh LOGDIR
# 1. builds with -Dcuda=enabled into build-gpu/ (plugin + test_backend_ops + trainrun)
# 2. runs the meson `gpu` suite (tests/test_backend_ops.cpp: every op vs the CPU reference, f32
#    and bf16, awkward shapes up to GPT-2 small), then its --quick cases under compute-sanitizer
#    memcheck, racecheck and initcheck
# 3. if trainrun can train on cuda: a few steps of configs/shakespeare-char.yaml on cpu and on
#    cuda (losses compared), then timed GPT-2 124M steps
# Everything is logged under LOGDIR; a short summary table is printed last.
set -uo pipefail

LOGDIR=${1:?usage: bench/gpu_check.sh LOGDIR}
mkdir -p "$LOGDIR"
LOGDIR=$(cd "$LOGDIR" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
BUILD=build-gpu
declare -a SUMMARY=()
status=0
note() { SUMMARY+=("$(printf '%-28s %s' "$1" "$2")"); }

nvidia-smi > "$LOGDIR/nvidia-smi.txt" 2>&1 || true

# ---- 1. build ----
t0=$(date +%s)
if { [ -d "$BUILD" ] || meson setup "$BUILD" -Dcuda=enabled -Dbuildtype=release; } \
    > "$LOGDIR/build.log" 2>&1 &&
   ninja -C "$BUILD" trainrun kernels/libtrainrun_cuda.so tests/test_backend_ops >> "$LOGDIR/build.log" 2>&1; then
  note "build" "ok ($(( $(date +%s) - t0 )) s)"
else
  note "build" "FAILED (see $LOGDIR/build.log)"
  tail -30 "$LOGDIR/build.log"
  printf '\n== summary ==\n'; printf '%s\n' "${SUMMARY[@]}"
  exit 1
fi
if ldd "$BUILD/kernels/libtrainrun_cuda.so" | grep -q 'libcuda\.so'; then
  note "plugin links libcuda" "YES (it must not)"; status=1
else
  note "plugin links libcuda" "no (good)"
fi

# ---- 2. every op against the CPU reference: the meson `gpu` suite, then under compute-sanitizer ----
# The suite exits 77 (meson: SKIP) when it finds no GPU or plugin: that counts as a failure here.
gpu_suite() {  # gpu_suite LOGNAME TIMEOUT [meson test options...]
  local log="$LOGDIR/$1.txt" limit=$2
  shift 2
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
r=$(gpu_suite gpu-suite 300) || status=1
note "gpu suite" "$r ($(( $(date +%s) - t0 )) s)"
SANITIZER=$(command -v compute-sanitizer || echo "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer")
for tool in memcheck racecheck initcheck; do
  if [ ! -x "$SANITIZER" ]; then
    note "compute-sanitizer $tool" "not run: compute-sanitizer not found"; status=1; continue
  fi
  t0=$(date +%s)
  r=$(gpu_suite "sanitizer-$tool" 150 --test-args '--quick --no-timing' \
      --wrapper "$SANITIZER --tool $tool --error-exitcode 99") || status=1
  note "compute-sanitizer $tool" "$r ($(( $(date +%s) - t0 )) s)"
done

# ---- 3. training on cpu vs cuda, then GPT-2 124M step time ----
TR="$BUILD/trainrun"
if "$TR" --help 2>&1 | grep -q device || "$TR" run --help 2>&1 | grep -qi device ||
   grep -q '^device:' configs/shakespeare-char.yaml; then
  DATA=data/tinyshakespeare.txt
  if [ ! -s "$DATA" ]; then  # no network on GPU machines: any few hundred KB of text will do
    DATA="$LOGDIR/text.txt"
    cat docs/*.md man/* README* 2>/dev/null > "$DATA"
    while [ "$(stat -c %s "$DATA")" -lt 400000 ]; do cat "$DATA" "$DATA" > "$DATA.2"; mv "$DATA.2" "$DATA"; done
  fi
  for dev in cpu cuda; do
    timeout 120 "$TR" run configs/shakespeare-char.yaml --run-dir "$LOGDIR/char-$dev" \
      --set device=$dev --set train.steps=20 --set logging.every=5 --set train.eval_every=1000 \
      --set checkpoint.every=1000 --set "data.text=$DATA" > "$LOGDIR/char-$dev.log" 2>&1
  done
  last_loss() {  # the last training loss in a run's metrics.jsonl
    local f="$1/metrics.jsonl"
    [ -f "$f" ] || { echo "none"; return; }
    grep -o '"loss":[ ]*[0-9.eE+-]*' "$f" | tail -1 | sed 's/.*: *//'
  }
  lc=$(last_loss "$LOGDIR/char-cpu"); lg=$(last_loss "$LOGDIR/char-cuda")
  if [ "$lc" != none ] && [ "$lg" != none ] && [ -n "$lc" ] && [ -n "$lg" ]; then
    verdict=$(awk -v a="$lc" -v b="$lg" 'BEGIN{d=a-b; if(d<0)d=-d; print (d/a < 0.02) ? "match" : "DIFFER"}')
    note "char 20 steps cpu vs cuda" "loss $lc vs $lg: $verdict"
    [ "$verdict" = match ] || status=1
  else
    note "char 20 steps cpu vs cuda" "no losses (see char-cpu.log, char-cuda.log)"
  fi
  t0=$(date +%s)
  timeout 180 "$TR" run configs/gpt2-124m.yaml --run-dir "$LOGDIR/gpt2" --set train.steps=10 \
    --set logging.every=1 --set checkpoint.every=100000 --set "data.text=$DATA" \
    > "$LOGDIR/gpt2.log" 2>&1
  rc=$?
  if [ -f "$LOGDIR/gpt2/metrics.jsonl" ]; then
    ms=$(grep -o '"step_ms":[ ]*[0-9.eE+-]*' "$LOGDIR/gpt2/metrics.jsonl" | tail -3 | sed 's/.*: *//' | paste -sd' ')
    note "gpt2-124m 10 steps" "rc=$rc, last step ms: ${ms:-?} ($(( $(date +%s) - t0 )) s)"
  else
    note "gpt2-124m 10 steps" "rc=$rc, no metrics (see gpt2.log)"
  fi
else
  note "training comparison" "skipped: this trainrun has no device option yet"
fi

printf '\n== summary (logs in %s) ==\n' "$LOGDIR"
printf '%s\n' "${SUMMARY[@]}" | tee "$LOGDIR/summary.txt"
exit $status
