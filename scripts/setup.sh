#!/usr/bin/env bash
# Installs what trainrun needs from Debian 12's packages, only what is missing.
#   scripts/setup.sh          build + run dependencies
#   scripts/setup.sh --test   also what the test suite needs (pytest, Slurm, munge, Chromium,
#                             Prometheus, ...), and build/test-venv with PyPI's tensorboard
#                             (see the end)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

pkgs=(g++ meson ninja-build pkg-config libyaml-cpp-dev libcli11-dev libfmt-dev
      libspdlog-dev libhdf5-dev hdf5-tools doctest-dev libopenmpi-dev openmpi-bin libdnnl-dev
      gnuplot-nox libboost-dev nlohmann-json3-dev libssl-dev)
if [[ "${1:-}" == "--test" ]]; then
  # python3-numpy: the equivalence test recomputes the models in numpy (python3-h5py has it too)
  # openssh-server, iproute2: tests/multihost's two "hosts" (network namespaces, `ip`), each
  # with an sshd
  pkgs+=(python3 python3-pytest python3-yaml python3-h5py python3-numpy jq slurm-wlm munge
         openssh-server iproute2
         clang-format debootstrap python3-venv python3-pil chromium clang prometheus tmux
         libboost-context-dev  # the CPU-executed CUDA device's fibers (kernels/sim/)
         libclang-rt-14-dev  # clang's sanitizer runtimes (the ASan + UBSan build; only recommended)
         libomp-dev)  # clang's own omp.h: the thread-safety check compiles trainer.cpp with clang
fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

log=$(mktemp)
trap 'rm -f "$log"' EXIT
fail() {
  echo "error: $1 failed; its last lines:" >&2
  tail -n 30 "$log" | sed 's/^/  | /' >&2
  echo "$2" >&2
  exit 1
}

if [[ ${#missing[@]} -gt 0 ]]; then
  if [[ $(id -u) -eq 0 ]]; then
    sudo=()
  elif command -v sudo >/dev/null; then
    sudo=(sudo)
  else
    echo "error: need root or sudo to install: ${missing[*]}" >&2
    exit 1
  fi
  echo "installing: ${missing[*]}"
  apt_hint="Check the network and /etc/apt/sources.list*, then run $0 again."
  "${sudo[@]}" apt-get update -qq >"$log" 2>&1 || fail "apt-get update" "$apt_hint"
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >"$log" 2>&1 || fail "apt-get install ${missing[*]}" "$apt_hint"
fi

# The TensorBoard tests read the event files with the real reader and server, and the tokenizer
# tests cross-check trainrun's BPE against Hugging Face's tokenizers; only PyPI has them.
# Debian's python3 is externally managed (PEP 668), so they go into a venv of their own (build/
# holds what is built, not the source); --system-site-packages lets it use Debian's numpy. The
# tests find it there (tests/integration/test_tensorboard.py, test_tokenizer.py).
if [[ "${1:-}" == "--test" ]]; then
  venv=$root/build/test-venv
  tensorboard=tensorboard==2.21.0
  tokenizers=tokenizers==0.23.3
  if ! "$venv/bin/python" -c "import tensorboard, tokenizers
assert tokenizers.__version__ == '${tokenizers#*==}'" 2>/dev/null; then
    echo "installing: $tensorboard $tokenizers (PyPI) into $venv"
    mkdir -p "$root/build"
    /usr/bin/python3 -m venv --system-site-packages "$venv" >"$log" 2>&1 || fail "python3 -m venv" ""
    "$venv/bin/pip" install -q --disable-pip-version-check "$tensorboard" "$tokenizers" \
      >"$log" 2>&1 || fail "pip install $tensorboard $tokenizers" \
      "Check that PyPI is reachable, then run $0 --test again."
  fi
fi
