# shellcheck shell=bash
# Shared by the bench/*.sh scripts (sourced, not run). Set BUILD to pick the build directory
# (default: build), RUNS for the scratch run directories (default: /tmp/trainrun-bench-runs).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
BUILD=${BUILD:-build}
RUNS=${RUNS:-/tmp/trainrun-bench-runs}
TRAINRUN="$BUILD/trainrun"
# tiny Shakespeare: data/ (scripts/get-data.sh) or the shared copy beside the repository.
SHAKESPEARE=${SHAKESPEARE:-}
if [[ -z "$SHAKESPEARE" ]]; then
  for f in data/tinyshakespeare.txt ../shared/data/tinyshakespeare.txt; do
    [[ -f "$f" ]] && SHAKESPEARE="$ROOT/$f" && break
  done
fi
mkdir -p "$RUNS"

# ensure_built TARGET...: configures BUILD when missing and builds the named ninja targets.
ensure_built() {
  [[ -d "$BUILD" ]] || meson setup "$BUILD" >/dev/null
  ninja -C "$BUILD" "$@" >/dev/null
}

need_shakespeare() {
  if [[ -z "$SHAKESPEARE" || ! -f "$SHAKESPEARE" ]]; then
    echo "tiny Shakespeare not found: run scripts/get-data.sh tinyshakespeare or set SHAKESPEARE" >&2
    exit 1
  fi
}

# train NAME CONFIG [--set K=V]...: a fresh run in $RUNS/NAME; console output in $RUNS/NAME.log.
train() {
  local name=$1 config=$2
  shift 2
  rm -rf "${RUNS:?}/$name"
  if ! "$TRAINRUN" "$config" --set run_dir="$RUNS/$name" --set name="$name" \
      --set train.eval_every=0 "$@" >"$RUNS/$name.log" 2>&1; then
    echo "trainrun failed for $name; its output:" >&2
    tail -20 "$RUNS/$name.log" >&2
    exit 1
  fi
}

# load_summary NAME [SKIP]: sets S_<field> shell variables (steady-state figures of the run).
load_summary() {
  eval "$(python3 "$ROOT/bench/summarize.py" "$RUNS/$1" "${2:-3}")"
}

load_line() { echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"; }
