#!/usr/bin/env bash
# Configures (once) and builds trainrun into BUILD_DIR (default: build). Extra args go to meson setup.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${BUILD_DIR:-build}
if [[ ! -f "$dir/build.ninja" ]]; then
  meson setup "$dir" --buildtype=release "$@" >/dev/null
fi
ninja -C "$dir" >/dev/null
