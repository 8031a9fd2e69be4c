#!/usr/bin/env bash
# Quick start: installs what is missing, builds, and trains the built-in default job
# (configs/quickstart.yaml: a small GPT on a seeded Markov source, no download needed).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
echo "building trainrun (the first time takes a few minutes)..."
scripts/build.sh
# --new: running the quick start again starts over (the previous run moves to
# runs/quickstart/archive-TIME/) instead of being refused as a second run in the same directory.
exec ./build/trainrun configs/quickstart.yaml --new "$@"
