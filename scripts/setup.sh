#!/usr/bin/env bash
# Installs what trainrun needs from Debian 12's packages, only what is missing.
#   scripts/setup.sh          build + run dependencies
#   scripts/setup.sh --test   also what the test suite needs (pytest, Slurm, munge, ...)
set -euo pipefail

pkgs=(g++ meson ninja-build pkg-config libyaml-cpp-dev libcli11-dev libfmt-dev
      libspdlog-dev libhdf5-dev hdf5-tools doctest-dev libopenmpi-dev openmpi-bin libdnnl-dev
      gnuplot-nox)
if [[ "${1:-}" == "--test" ]]; then
  pkgs+=(python3 python3-pytest python3-yaml python3-h5py jq slurm-wlm munge clang-format debootstrap)
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
log=$(mktemp)
trap 'rm -f "$log"' EXIT
apt_fail() {
  echo "error: $1 failed; its last lines:" >&2
  tail -n 30 "$log" | sed 's/^/  | /' >&2
  echo "Check the network and /etc/apt/sources.list*, then run $0 again." >&2
  exit 1
}
"${sudo[@]}" apt-get update -qq >"$log" 2>&1 || apt_fail "apt-get update"
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends \
  "${missing[@]}" >"$log" 2>&1 || apt_fail "apt-get install ${missing[*]}"
