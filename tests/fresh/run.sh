#!/usr/bin/env bash
# The pristine-machine check: the README's two commands on a Debian 12 that has nothing installed.
#
#   tests/fresh/run.sh [WORKDIR]     (root; WORKDIR defaults to build/fresh)
#
# It debootstraps a minbase bookworm root (cached in /var/cache/trainrun, outside the clone, so a
# rerun on the same machine, from any clone, starts in seconds; TRAINRUN_FRESH_CACHE moves it),
# clones this checkout's HEAD into it and, in a chroot with a clean environment, runs the
# README's two commands in order in that one clone, as a user does:
#   1. scripts/quickstart.sh: it must exit 0 and print its final loss line;
#   2. the test command itself, scripts/test.sh, in the clone the quick start filled (its build/
#      configured by the quick start, its runs/quickstart written), through its install, build
#      and unit stages (`--until unit`): the stages a build configured by the quick start broke
#      (it lacked Boost.Context, which only the test command installs; the build there adds
#      the CPU-executed device to the quick start's, with the quick start's warning flags, not
#      a second whole build with -Werror: CI's clean clone builds with -Werror). Then every
#      tool the later stages call must be there, and the dry-run tests run in the filled clone
#      (a test that used the default run directory once failed there with exit 73).
#   Left to CI's own clean clone (.ci/run runs the whole test command just before this): the
#   ASan/UBSan rebuild and its unit run, the integration tests and the two-host tests. They read
#   nothing that the quick start leaves behind but runs/ (which the dry-run tests cover), and
#   running them here again would add about 25 minutes to CI's budget of 60. The two-host tests
#   also need network and mount namespaces of a real root, which a chroot has not.
# The chroot gets this machine's apt sources, its Acquire:: settings and its site CA certificates
# (how this machine reaches its mirror and PyPI), and nothing else from the host. No mirror reachable means the check fails.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
work=$(realpath -m "${1:-build/fresh}")
root=$work/root
cache=${TRAINRUN_FRESH_CACHE:-/var/cache/trainrun}/bookworm-minbase.tar.gz

die() { echo "fresh: FAIL: $*" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || die "needs root (debootstrap, chroot, mount)"
command -v debootstrap >/dev/null || die "debootstrap is missing: scripts/setup.sh --test installs it"

# The bookworm mirror this machine's apt uses (deb822 .sources or one-line .list entries).
mirror() {
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [[ -f $f ]] || continue
    awk 'BEGIN{RS=""} /Suites:[^\n]*bookworm( |\n|$)/ && /Types:[^\n]*deb( |\n|$)/ {
           if (match($0, /URIs:[ \t]*[^ \t\n]+/)) { s = substr($0, RSTART, RLENGTH);
             sub(/URIs:[ \t]*/, "", s); print s; exit } }' "$f"
  done
  { cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null || true; } |
    awk '$1 == "deb" && $0 ~ / bookworm / { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) { print $i; exit } }'
}
url=$(mirror | head -n 1) || true
[[ -n $url ]] || die "no bookworm mirror in /etc/apt/sources.list*"

mounts=(proc sys dev dev/pts dev/shm)
cleanup() {
  local i m
  # Anything the tests mounted below the root (ip netns add mounts /run/netns), deepest first.
  { findmnt -rn -o TARGET | grep "^$root/" || true; } | sort -r | while read -r m; do
    umount -l "$m" 2>/dev/null || true
  done
  for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do
    mountpoint -q "$root/${mounts[i]}" 2>/dev/null && umount -l "$root/${mounts[i]}"
  done
  # Only ever delete the root when nothing is mounted below it (else rm would reach the host's /dev).
  if [[ -d $root ]] && ! findmnt -rn -o TARGET | grep -q "^$root/"; then
    rm -rf --one-file-system "$root"
  fi
}
trap cleanup EXIT
cleanup

mkdir -p "$work"
if [[ -f $cache ]]; then
  echo "fresh: rootfs from the cache $cache"
  mkdir -p "$root"
  tar -xzf "$cache" -C "$root"
else
  echo "fresh: debootstrap --variant=minbase bookworm from $url (about 2 minutes)"
  log=$work/debootstrap.log
  if ! debootstrap --variant=minbase bookworm "$root" "$url" >"$log" 2>&1; then
    tail -n 20 "$log" >&2
    die "debootstrap could not build the root from $url (log: $log)"
  fi
  mkdir -p "$(dirname "$cache")"
  tar -czf "$cache.tmp" -C "$root" . && mv "$cache.tmp" "$cache"
fi

# How this machine reaches its mirror: sources and Acquire settings; no packages, no other state.
rm -f "$root"/etc/apt/sources.list "$root"/etc/apt/sources.list.d/*
cp -a /etc/apt/sources.list.d/*.sources "$root/etc/apt/sources.list.d/" 2>/dev/null || true
[[ -f /etc/apt/sources.list ]] && cp /etc/apt/sources.list "$root/etc/apt/"
for f in /etc/apt/apt.conf.d/*; do
  grep -q '^Acquire::' "$f" 2>/dev/null && cp "$f" "$root/etc/apt/apt.conf.d/"
done
cp /etc/resolv.conf "$root/etc/resolv.conf"
# A site's own CA certificates (a TLS-inspecting proxy) are part of reaching the network too;
# the ca-certificates package, which setup.sh pulls in, adds them when it installs.
if [[ -d /usr/local/share/ca-certificates ]]; then
  mkdir -p "$root/usr/local/share/ca-certificates"
  cp -a /usr/local/share/ca-certificates/. "$root/usr/local/share/ca-certificates/"
fi

for m in "${mounts[@]}"; do
  mkdir -p "$root/$m"
  mount --bind "/$m" "$root/$m"
done

git clone -q --no-local "$repo" "$root/root/trainrun"
in_root() {
  chroot "$root" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    bash -c "cd /root/trainrun && $1"
}

echo "fresh: scripts/quickstart.sh in the pristine root"
size_mb() { du -sxm "$root" | cut -f1; }
before=$(size_mb)
t0=$SECONDS
out=$work/quickstart.log
set +e
in_root scripts/quickstart.sh 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}
set -e
[[ $rc -eq 0 ]] || die "scripts/quickstart.sh exited $rc on a pristine Debian 12 (log: $out)"
grep -q "final train loss" "$out" || die "scripts/quickstart.sh printed no final loss line (log: $out)"
# The README states these costs of a first quick start.
echo "fresh: quick start took $((SECONDS - t0)) s and $(($(size_mb) - before)) MB of disk (packages + build)"

echo "fresh: scripts/test.sh --until unit in the same clone (install, build, unit stages)"
out=$work/test-command.log
set +e
in_root "scripts/test.sh --until unit" 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}
set -e
[[ $rc -eq 0 ]] ||
  die "scripts/test.sh exited $rc after the quick start in the same clone (log: $out)"
grep -q "stopped after the unit stage" "$out" ||
  die "scripts/test.sh did not reach the end of its unit stage (log: $out)"
in_root '[[ -f build/kernels/sim/libtrainrun_cudasim.so ]]' ||
  die "the test command's build has no CPU-executed CUDA device after the quick start"
# Every tool the test command and the integration tests call.
missing=$(in_root 'for t in meson ninja mpirun gnuplot jq clang-format slurmctld slurmd munged \
                     mungekey sbatch srun scancel debootstrap chromium clang++ prometheus \
                     sshd ssh ssh-keygen ip nsenter unshare; do
                     command -v $t >/dev/null || echo $t; done
                   python3 -c "import pytest, h5py, numpy, yaml, PIL" 2>/dev/null ||
                     echo "python3: pytest/h5py/numpy/yaml/PIL"
                   build/test-venv/bin/python -c "import tensorboard, tokenizers" 2>/dev/null ||
                     echo "build/test-venv: tensorboard/tokenizers"
                   [[ -f $(clang++ -print-file-name=libclang_rt.asan-x86_64.a) ]] ||
                     echo "clang'"'"'s ASan runtime (libclang-rt-14-dev)"')
[[ -z $missing ]] || die "the test command's install stage left these missing: $missing"

echo "fresh: after the quick start, in the same clone: a dry run and the dry-run tests"
in_root '[[ -d runs/quickstart/checkpoints ]]' ||
  die "the quick start left no run in runs/quickstart: the check below would prove nothing"
in_root "build/trainrun configs/quickstart.yaml --set distributed.nproc=2 --dry-run" ||
  die "a dry run of the quick start's config failed in the clone the quick start filled"
in_root 'TRAINRUN_BIN=$PWD/build/trainrun /usr/bin/python3 -m pytest -q -p no:cacheprovider \
           tests/integration/test_run_dir.py -k dry_run' ||
  die "the dry-run tests failed in the clone the quick start filled"
echo "fresh: PASS (the quick start, then the test command's install, build and unit stages in the same clone, and the tests a filled clone broke, on a pristine Debian 12)"
