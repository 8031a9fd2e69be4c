#!/usr/bin/env bash
# The test command (CI calls it): installs what is missing, builds with warnings as errors,
# runs the unit tests, the 2-rank MPI tests, the unit tests again under AddressSanitizer and
# UBSan, the format check, the integration tests that run the trainrun binary, and the tests
# across two hosts (tests/multihost: network namespaces on this machine, as root).
#
#   scripts/test.sh [--until STAGE] [PYTEST_ARGS...]
#
# Stages, in order: install, build, unit, asan, format, integration, multihost. `--until STAGE`
# stops after that stage (tests/fresh runs `--until unit` in the clone the quick start filled);
# PYTEST_ARGS go to the integration tests' pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

stages=(install build unit asan format integration multihost)
until_stage=multihost
if [[ "${1:-}" == "--until" ]]; then
  until_stage=${2:-}
  shift 2 || true
  [[ " ${stages[*]} " == *" $until_stage "* ]] || {
    echo "error: --until ${until_stage:-(nothing)}: not a stage; one of: ${stages[*]}" >&2
    exit 2
  }
fi
step() { printf '\n==== %s ====\n' "$*"; }
# done_after STAGE: ends the command after STAGE when --until named it.
done_after() {
  if [[ $1 == "$until_stage" ]]; then
    printf '\n==== stopped after the %s stage (--until %s) ====\n' "$1" "$1"
    exit 0
  fi
}

step "install (scripts/setup.sh --test)"
scripts/setup.sh --test
done_after install

step "build (release, -Werror)"
# Always configured again when it exists: the quick start (scripts/build.sh) configures build/
# before setup.sh --test installed the test suite's dependencies (Boost.Context for the
# CPU-executed CUDA device), and Meson looks for dependencies only when it configures. A
# reconfigure that changes nothing rebuilds nothing. A build/ the quick start configured keeps
# its warnings shown but not fatal: turning -Werror on changes every compile command, and the
# rebuild would cost as long as the first build again; a clean clone (CI's) configures -Werror.
if [[ -f build/build.ninja ]]; then
  meson setup --reconfigure build >/dev/null
  meson introspect build --buildoptions |
    jq -e '.[] | select(.name == "werror") | .value' >/dev/null ||
    echo "note: build/ was configured without -Werror (by the quick start): warnings are shown," \
      "not errors; a clean clone's test command (CI's) makes them errors"
else
  meson setup build --buildtype=release -Dwerror=true >/dev/null
fi
ninja -C build
# The CPU-executed CUDA device runs every CUDA kernel in the unit suite: it must have been built.
[[ -f build/kernels/sim/libtrainrun_cudasim.so ]] || {
  echo "error: build/kernels/sim/libtrainrun_cudasim.so was not built although build/ was" \
    "configured after scripts/setup.sh --test: is libboost-context-dev installed? (see" \
    "build/meson-logs/meson-log.txt)" >&2
  exit 1
}
done_after build

step "unit and MPI tests"
meson test -C build --suite unit --suite mpi --print-errorlogs
done_after unit

step "unit tests under AddressSanitizer + UBSan"
# Built with clang (the release build is GCC's): it compiles this build in about 6 minutes where
# GCC took 10 (bench/RESULTS.md 46), its UBSan checks more (float-to-int conversions, pointer
# wrap-around: it found two real bugs GCC's did not), and a second compiler keeps the code
# portable. Warnings are errors but for -Wpass-failed, clang's note that a loop marked
# `omp simd` did not vectorise at -O1. -O1 with line tables only (-g1) is what
# AddressSanitizer's docs recommend.
asan_opts=(-Doptimization=1 -Ddebug=false -Dwerror=true '-Dcpp_args=-Wno-pass-failed -g1'
           -Db_sanitize=address,undefined -Db_lundef=false -Dcuda=disabled)
# A build-asan/ an older test command configured with GCC: Meson keeps a directory's compiler.
if [[ -f build-asan/build.ninja ]] && ! grep -q '^ command = clang++ ' build-asan/build.ninja; then
  rm -rf build-asan
fi
if [[ -f build-asan/build.ninja ]]; then
  meson setup --reconfigure build-asan "${asan_opts[@]}" >/dev/null
else
  CC=clang CXX=clang++ meson setup build-asan "${asan_opts[@]}" >/dev/null
fi
# The CPU-executed CUDA device and its fault plugins run under AddressSanitizer here (memcheck).
# Only the unit suite runs here: the MPI suite's programs (run under mpirun in the release build)
# are not built.
ninja -C build-asan $(cd build-asan && ninja -t targets all |
  sed -n 's/^\(tests\/test_[a-z0-9_]*\|kernels\/sim\/libtrainrun_cudasim[a-z_]*\.so\): .*/\1/p' |
  grep -v -e comm_mpi -e train_mpi -e tp_mpi -e sim_nccl | sort -u)
UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ASAN_OPTIONS=detect_leaks=1 \
  meson test -C build-asan --suite unit --print-errorlogs --no-rebuild
done_after asan

step "format (.clang-format)"
scripts/check-format.sh
done_after format

step "integration tests (the trainrun binary)"
TRAINRUN_BIN="$PWD/build/trainrun" /usr/bin/python3 -m pytest -q tests/integration "$@"
done_after integration

step "two hosts on this machine (network namespaces + ssh; root with CAP_NET_ADMIN)"
# Fails, saying why, where root or `ip netns add` is missing: it does not skip.
TRAINRUN_BIN="$PWD/build/trainrun" /usr/bin/python3 -m pytest -q tests/multihost
