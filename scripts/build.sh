#!/usr/bin/env bash
# Configures (once) and builds trainrun into BUILD_DIR (default: build). Extra args go to meson setup.
# Quiet when it works; on failure it prints the tail of what failed and where the full log is.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${BUILD_DIR:-build}
log=$(mktemp)
trap 'rm -f "$log"' EXIT

fail() {  # fail WHAT HINT
  # The error lines themselves (compile commands are long noise); the tail when none match.
  if grep -qiE 'error' "$log"; then
    echo "error: $1 failed:" >&2
    grep -iE 'error|required from|FAILED:' "$log" | cut -c1-400 | head -n 30 | sed 's/^/  | /' >&2
  else
    echo "error: $1 failed; its last lines:" >&2
    tail -n 40 "$log" | sed 's/^/  | /' >&2
  fi
  echo "$2" >&2
  exit 1
}

if [[ ! -f "$dir/build.ninja" ]]; then
  if ! meson setup "$dir" --buildtype=release "$@" >"$log" 2>&1; then
    fail "meson setup" "Full log: $dir/meson-logs/meson-log.txt. Missing dependencies are installed by
scripts/setup.sh; then run this script again."
  fi
fi
ninja -C "$dir" >"$log" 2>&1 || fail "the build (ninja -C $dir)" \
  "Fix the error above (or run 'ninja -C $dir' to see everything), then run this script again."
