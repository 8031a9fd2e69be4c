#!/usr/bin/env bash
# Installs what trainrun needs from Debian 12's packages, only what is missing.
#   scripts/setup.sh          build + run dependencies
#   scripts/setup.sh --test   also what the test suite needs (pytest, Slurm, munge, ...)
set -euo pipefail

pkgs=(g++ meson ninja-build pkg-config cmake libyaml-cpp-dev libcli11-dev libfmt-dev
      libspdlog-dev libhdf5-dev hdf5-tools doctest-dev libopenmpi-dev openmpi-bin libdnnl-dev
      gnuplot-nox)
if [[ "${1:-}" == "--test" ]]; then
  pkgs+=(python3 python3-pytest python3-yaml python3-h5py jq slurm-wlm munge clang-format)
fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

if [[ $(id -u) -eq 0 ]]; then
  sudo=()
elif command -v sudo >/dev/null; then
  sudo=(sudo)
else
  echo "error: need root or sudo to install: ${missing[*]}" >&2
  exit 1
fi
echo "installing: ${missing[*]}"
"${sudo[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends \
  "${missing[@]}" >/dev/null
