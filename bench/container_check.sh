#!/usr/bin/env bash
# The container image, built and run here (issue 32 part 7): the Dockerfile's CPU variant on a
# pristine Debian 12, its quick start, and the MPIJob that `trainrun k8s` writes, run for real as
# containers; also `trainrun k8s`'s core objects checked by a real schema validator.
#
#   bench/container_check.sh            (root; first run about 6 minutes on 2 cores, then ~2)
#   bench/container_check.sh --no-docker    only the kubernetes-validate stage
#   bench/container_check.sh --worktree     build the work tree's sources, not git HEAD's
#   bench/container_check.sh --clean        also delete the Docker state kept between runs
#
# Not in CI (.ci/run): CI's 45 minutes are spent; this is a bench script, run by hand.
#
# Stages, each printed as PASS/FAIL with its time:
#   validate   `trainrun k8s` for a CPU, a GPU and an existing-claim job: every core object, and
#              each MPIJob pod template wrapped as a core PodTemplate, checked by PyPI's
#              kubernetes-validate in strict mode (unknown fields rejected) against Kubernetes
#              1.37 (in build/k8s-venv). The MPIJob itself is a CRD it has no schema for:
#              tests/integration/test_k8s.py checks it against v2beta1's fields, in CI.
#   dockerd    a dockerd of its own: --bridge=none --iptables=false --ip-forward=false (no
#              docker0, no iptables or sysctl change), its own socket, pid file, data and exec
#              roots under $TRAINRUN_DOCKER_ROOT (default /var/tmp/trainrun-docker). Stopped by
#              its pid on exit. Every container runs with --network host or none: no traffic
#              leaves loopback except the image build's apt downloads from this machine's mirror.
#   base       tests/fresh/run.sh's pristine debootstrapped Debian 12 root
#              (/var/cache/trainrun/bookworm-minbase.tar.gz; run tests/fresh/run.sh once to make
#              it) `docker import`ed as a base image (no registry is reachable), plus, as
#              tests/fresh gives its chroot, this machine's apt sources, Acquire:: settings and
#              site CA certificates (how it reaches its mirror), and nothing else.
#   build      the CPU variant from the repository's Dockerfile: both bases = that root,
#              CUDA=disabled; from git HEAD's sources (others may be editing the work tree) with
#              the work tree's Dockerfile. Checks `trainrun --version` and that no CUDA plugin
#              shipped.
#   quickstart the README's quick start job inside the image, with no network at all.
#   mpijob     the MPIJob of `trainrun k8s configs/quickstart.yaml --nodes 2`, as mpi-operator
#              v2beta1 runs it: two worker containers running the manifest's worker command
#              (`/usr/sbin/sshd -De`, the image's sshd) and a launcher container running the
#              manifest's launcher command (mpirun -np 2 ... trainrun run /config/config.yaml
#              --resume) with the operator's hostfile (/etc/mpi/hostfile, pod FQDNs, slots) and
#              OMPI_MCA_* variables, the ConfigMap at /config, one shared folder as the claim at
#              /runs, and the job's ssh keys mounted read-only at sshAuthMountPath like the
#              operator's Secret (0600 files, world-writable folder, no known_hosts). What host
#              networking forces on one machine: each pod has its own loopback address
#              (127.0.0.2, .3; the launcher 127.0.0.1) and hostname, sshd listens on port 2222
#              of its address (mpirun's ssh gets -p 2222), Open MPI is kept to `lo`, and name
#              look-ups go only to /etc/hosts (a resolv.conf naming 127.0.0.1). Proves each rank
#              ran in its own worker container (docker top, the host each rank's log names)
#              and none in the launcher; Debian's prometheus scrapes rank 0's endpoint at
#              127.0.0.2 every second and every scraped (step, loss) must equal metrics.jsonl's.
#              Two controls show why the image has its ssh settings: without its ssh_config
#              drop-in ssh fails host key verification, and an sshd with StrictModes=yes
#              refuses the key in the Secret-like folder. The job starts on an empty claim, as
#              a new job does; if its launcher fails there because the run directory does not
#              exist yet, the stage says DEFECT, makes the directory by hand and runs the
#              launcher again to check the rest, and still fails.
#
# Kept between runs, in the data root (a rerun skips the import and the package downloads, and
# the compile too when HEAD has not moved): the imported base, the base with apt's settings, and
# the build stage (tagged trainrun-check/trainrun-build:cpu) with its layers. Removed on exit:
# every container, the built image, older untagged layers, the dockerd. --clean deletes the data
# root too (about 1.5 GB).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

docker_stages=1 source_mode=head clean=0
for a in "$@"; do
  case $a in
    --no-docker) docker_stages=0 ;;
    --worktree) source_mode=worktree ;;
    --clean) clean=1 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "container_check: unknown option $a (see --help)" >&2; exit 2 ;;
  esac
done

state=${TRAINRUN_DOCKER_ROOT:-/var/tmp/trainrun-docker}
tarball=${TRAINRUN_FRESH_CACHE:-/var/cache/trainrun}/bookworm-minbase.tar.gz
trainrun=${TRAINRUN_BIN:-$repo/build/trainrun}
venv=$repo/build/k8s-venv
k8s_version=1.37.0
image="trainrun-check/trainrun:cpu"
build_stage="trainrun-check/trainrun-build:cpu"
sock=$state/docker.sock
work=$state/work
ssh_port=2222

declare -a results=() launcher_args=()
declare -A seen=()
failed=0
dockerd_pid='' prom_pid=''

say() { echo "container_check: $*"; }
# stage NAME FUNCTION: runs it, prints PASS/FAIL and its time; a failure skips the later stages.
stage() {
  local name=$1 fn=$2 t0=$SECONDS rc=0
  if ((failed)); then
    results+=("SKIP  $name")
    say "SKIP $name (an earlier stage failed)"
    return 0
  fi
  say "--- $name"
  "$fn" || rc=$?
  local dt=$((SECONDS - t0))
  if ((rc == 0)); then
    results+=("PASS  $name  ${dt} s")
    say "PASS $name (${dt} s)"
  else
    results+=("FAIL  $name  ${dt} s")
    say "FAIL $name (${dt} s)"
    failed=1
  fi
}
fail() { say "error: $*" >&2; return 1; }

dk() { DOCKER_BUILDKIT=0 "$docker_cli" -H "unix://$sock" "$@"; }

cleanup() {
  local rc=$? c
  set +e
  if [[ -n $prom_pid ]] && kill -0 "$prom_pid" 2>/dev/null; then
    kill "$prom_pid"; wait "$prom_pid" 2>/dev/null
  fi
  if [[ -n $dockerd_pid ]] && kill -0 "$dockerd_pid" 2>/dev/null; then
    for c in $(dk ps -aq --filter name=trainrun-check- 2>/dev/null); do
      dk rm -f "$c" >/dev/null 2>&1
    done
    dk rmi "$image" >/dev/null 2>&1
    dk image prune -f >/dev/null 2>&1
    kill "$dockerd_pid"
    for _ in $(seq 100); do kill -0 "$dockerd_pid" 2>/dev/null || break; sleep 0.2; done
    if kill -0 "$dockerd_pid" 2>/dev/null; then
      say "dockerd (pid $dockerd_pid) did not stop in 20 s: killing it"
      kill -9 "$dockerd_pid"
    fi
    wait "$dockerd_pid" 2>/dev/null
    say "dockerd stopped"
  fi
  if ((clean)); then
    rm -rf --one-file-system "$state" && say "deleted $state (--clean)"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- validate: kubernetes-validate on `trainrun k8s` output -----------------------------------
validate_k8s() {
  [[ -x $trainrun ]] ||
    fail "no trainrun binary at $trainrun (build it, or set TRAINRUN_BIN)" || return
  if ! "$venv/bin/python" -c 'import kubernetes_validate' 2>/dev/null; then
    say "installing kubernetes-validate==$k8s_version (PyPI) into $venv"
    /usr/bin/python3 -m venv "$venv" &&
      "$venv/bin/pip" install -q --disable-pip-version-check "kubernetes-validate==$k8s_version" ||
      fail "could not install kubernetes-validate from PyPI" || return
  fi
  local dir=$work/validate name rc=0
  rm -rf "$dir" && mkdir -p "$dir"
  declare -A sets=(
    [cpu]="--set distributed.nproc=2"
    [gpu]="--nodes 2 --gpus-per-node 8 --ranks-per-node 8 --image registry.example/trainrun:0.1
           --namespace ml --storage 500Gi --set train.batch_size=64
           --set logging.prometheus_port=9500"
    [existing-claim]="--nodes 2 --pvc team-runs --cpu 2 --memory 8Gi"
  )
  for name in cpu gpu existing-claim; do
    # shellcheck disable=SC2086  # the option sets are word lists
    "$trainrun" k8s "$repo/configs/quickstart.yaml" ${sets[$name]} >"$dir/$name.yaml" ||
      { fail "trainrun k8s ($name) failed"; rc=1; continue; }
    # The MPIJob's pod templates are core PodTemplateSpecs: validated as PodTemplate objects.
    "$venv/bin/python" - "$dir/$name.yaml" "$dir/$name.core.yaml" <<'PY' || rc=1
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
out, kinds = [], []
for d in docs:
    if d["apiVersion"] == "v1":
        out.append(d)
        kinds.append(d["kind"])
    elif d["kind"] == "MPIJob":
        for role, spec in d["spec"]["mpiReplicaSpecs"].items():
            out.append({"apiVersion": "v1", "kind": "PodTemplate",
                        "metadata": {"name": f"{d['metadata']['name']}-{role.lower()}",
                                     "namespace": d["metadata"]["namespace"]},
                        "template": spec["template"]})
            kinds.append(f"PodTemplate({role})")
    else:
        sys.exit(f"unexpected object {d['apiVersion']} {d['kind']}")
yaml.safe_dump_all(out, open(sys.argv[2], "w"), sort_keys=False)
print("  " + ", ".join(kinds))
PY
    "$venv/bin/kubernetes-validate" --strict -k "$k8s_version" "$dir/$name.core.yaml" |
      sed "s|$dir/||; s/^/  /" || rc=1
  done
  return "$rc"
}

# ---- dockerd ---------------------------------------------------------------------------------
start_dockerd() {
  command -v dockerd >/dev/null || fail "dockerd is missing: apt-get install docker.io" || return
  docker_cli=$(dirname "$(command -v dockerd)")/../bin/docker
  [[ -x $docker_cli ]] || docker_cli=$(command -v docker) || fail "no docker CLI" || return
  if [[ -f $state/dockerd.pid ]] && kill -0 "$(cat "$state/dockerd.pid")" 2>/dev/null; then
    fail "a dockerd (pid $(cat "$state/dockerd.pid")) already uses $state" || return
  fi
  mkdir -p "$state/data" "$state/exec" && chmod 700 "$state"
  echo '{}' >"$state/daemon.json"  # not /etc/docker/daemon.json: nothing of the host's
  rm -f "$sock"
  dockerd --config-file "$state/daemon.json" --data-root "$state/data" \
    --exec-root "$state/exec" --pidfile "$state/dockerd.pid" -H "unix://$sock" \
    --bridge=none --iptables=false --ip-forward=false --ip-masq=false \
    --storage-driver=overlay2 --log-level=warn >"$state/dockerd.log" 2>&1 &
  dockerd_pid=$!
  for _ in $(seq 150); do
    dk version >/dev/null 2>&1 && break
    kill -0 "$dockerd_pid" 2>/dev/null || break
    sleep 0.2
  done
  dk version >/dev/null 2>&1 || { tail -n 20 "$state/dockerd.log"; fail "dockerd did not start"; } ||
    return
  say "dockerd $(dk version -f '{{.Server.Version}}') pid $dockerd_pid, $(dk info -f \
    '{{.Driver}}, cgroup {{.CgroupVersion}}'), data root $state/data"
  # No bridge: if docker0 appeared, this dockerd was not started as meant.
  ! ip link show docker0 >/dev/null 2>&1 || fail "docker0 exists: a bridge was created" || return
  # Leftovers of an interrupted run.
  local c
  for c in $(dk ps -aq --filter name=trainrun-check-); do dk rm -f "$c" >/dev/null; done
}

# ---- base: the pristine Debian 12 root as an image -------------------------------------------
base_image() {
  [[ -f $tarball ]] ||
    fail "no $tarball: run tests/fresh/run.sh once (it debootstraps and caches the root)" || return
  local sha pristine
  sha=$(sha256sum "$tarball" | cut -c1-12)
  pristine=trainrun-check/bookworm-pristine:$sha
  base=trainrun-check/bookworm-apt:$sha
  if dk image inspect "$pristine" >/dev/null 2>&1; then
    say "$pristine: imported by an earlier run (same tarball)"
  else
    dk import --change 'CMD ["/bin/bash"]' "$tarball" "$pristine" >/dev/null || return
    say "imported $tarball as $pristine"
  fi
  # As tests/fresh/run.sh gives its chroot: this machine's apt sources, Acquire:: settings and
  # site CA certificates (a TLS-inspecting proxy's), and nothing else from the host.
  local ctx=$work/base f
  rm -rf "$ctx"
  mkdir -p "$ctx/root/etc/apt/sources.list.d" "$ctx/root/etc/apt/apt.conf.d" \
    "$ctx/root/usr/local/share/ca-certificates"
  cp -a /etc/apt/sources.list.d/*.sources "$ctx/root/etc/apt/sources.list.d/" 2>/dev/null || true
  if [[ -f /etc/apt/sources.list ]]; then cp /etc/apt/sources.list "$ctx/root/etc/apt/"; fi
  for f in /etc/apt/apt.conf.d/*; do
    if grep -q '^Acquire::' "$f" 2>/dev/null; then cp "$f" "$ctx/root/etc/apt/apt.conf.d/"; fi
  done
  if [[ -d /usr/local/share/ca-certificates ]]; then
    cp -a /usr/local/share/ca-certificates/. "$ctx/root/usr/local/share/ca-certificates/"
  fi
  cat >"$ctx/Dockerfile" <<'EOF'
ARG PRISTINE
FROM ${PRISTINE}
RUN rm -f /etc/apt/sources.list /etc/apt/sources.list.d/*
COPY root/ /
EOF
  dk build -q --network host --build-arg "PRISTINE=$pristine" -t "$base" "$ctx" >/dev/null ||
    return
  say "$base: the pristine root plus $(find "$ctx/root" -type f | wc -l) files of this" \
    "machine's apt and CA setup"
}

# ---- build: the CPU variant of the Dockerfile --------------------------------------------------
build_image() {
  local ctx=$work/context log=$work/build.log t0=$SECONDS
  rm -rf "$ctx" && mkdir -p "$ctx"
  if [[ $source_mode == head ]]; then
    git archive HEAD | tar -x -C "$ctx"
    cp Dockerfile "$ctx/Dockerfile"
    say "sources: git HEAD $(git rev-parse --short HEAD); Dockerfile: the work tree's$(
      git diff --quiet HEAD -- Dockerfile || echo ' (differs from HEAD)')"
  else
    tar -c --exclude=./.git --exclude='./build*' --exclude=./runs --exclude=./data . |
      tar -x -C "$ctx"
    say "sources: the work tree as it is"
  fi
  # The build stage gets a tag of its own: it stays as the cache of the next run (its apt layer
  # above all), and `image prune` at exit removes only older, untagged leftovers.
  local -a args=(--network host --build-arg "BUILD_IMAGE=$base" --build-arg "RUNTIME_IMAGE=$base"
    --build-arg CUDA=disabled)
  if ! { dk build "${args[@]}" --target build -t "$build_stage" "$ctx" &&
    dk build "${args[@]}" -t "$image" "$ctx"; } >"$log" 2>&1; then
    tail -n 30 "$log" | sed 's/^/  | /'
    fail "docker build failed (log: $log)" || return
  fi
  say "built $image in $((SECONDS - t0)) s ($(grep -c 'Using cache' "$log") steps from the cache), $(
    dk image inspect -f '{{.Size}}' "$image" | awk '{printf "%.0f MB", $1 / 1e6}')"
  say "runtime packages (from ldd): $(dk run --rm --network none "$build_stage" \
    cat /out/runtime-packages.txt | tr '\n' ' ')"
  local out
  out=$(dk run --rm --network none "$image" sh -c 'trainrun --version && ls /opt/trainrun/bin') ||
    return
  local l
  while IFS= read -r l; do echo "  $l"; done <<<"$out"
  ! grep -q libtrainrun_cuda <<<"$out" || fail "the CPU variant shipped the CUDA plugin" || return
}

# ---- quickstart: the README's quick start job in the image --------------------------------------
quickstart() {
  local log=$work/quickstart.log
  dk run --rm --name trainrun-check-quickstart --network none "$image" \
    trainrun /opt/trainrun/configs/quickstart.yaml >"$log" 2>&1 ||
    { tail -n 20 "$log"; fail "the quick start failed in the image (log: $log)"; } || return
  grep -E 'final train loss|best possible loss' "$log" | sed 's/^/  /'
  grep -q 'final train loss' "$log" || fail "no final loss line (log: $log)"
}

# ---- mpijob: the MPIJob topology as containers -------------------------------------------------
free_port() {
  /usr/bin/python3 -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])'
}

mpijob() {
  local mj=$work/mpijob metrics_port prom_port
  rm -rf "$mj" && mkdir -p "$mj"/{config,runs,ssh,etc-mpi,openmpi,prometheus}
  metrics_port=$(free_port) prom_port=$(free_port)
  # The manifest, from the image's own trainrun. 3000 steps: 25 s on idle cores (600 took 5 s
  # there, two scrapes), minutes under load: long enough for 1 s scrapes either way.
  dk run --rm --network none "$image" trainrun k8s /opt/trainrun/configs/quickstart.yaml \
    --nodes 2 --ranks-per-node 1 --image "$image" --set train.steps=3000 \
    --set "logging.prometheus_port=$metrics_port" --set logging.prometheus_address=127.0.0.2 \
    >"$mj/manifest.yaml" || fail "trainrun k8s failed" || return
  # What the operator would read from it: the ConfigMap's file, the two pods' commands and env.
  /usr/bin/python3 - "$mj" <<'PY' || fail "the manifest is not the MPIJob expected" || return
import sys, yaml
d = sys.argv[1]
objs = {o["kind"]: o for o in yaml.safe_load_all(open(f"{d}/manifest.yaml")) if o}
open(f"{d}/config/config.yaml", "w").write(objs["ConfigMap"]["data"]["config.yaml"])
job = objs["MPIJob"]
spec = job["spec"]
assert spec["mpiImplementation"] == "OpenMPI", spec
def container(role):
    return spec["mpiReplicaSpecs"][role]["template"]["spec"]["containers"][0]
launcher, worker = container("Launcher"), container("Worker")
open(f"{d}/launcher.cmd", "w").write("".join(a + "\n" for a in launcher["command"]))
open(f"{d}/launcher.env", "w").write("".join(f"{e['name']}={e['value']}\n"
                                             for e in launcher.get("env", [])))
open(f"{d}/worker.cmd", "w").write("".join(a + "\n" for a in worker["command"]))
mounts = {m["name"]: m["mountPath"] for m in worker["volumeMounts"]}
assert mounts == {m["name"]: m["mountPath"] for m in launcher["volumeMounts"]}
facts = dict(name=job["metadata"]["name"], namespace=job["metadata"]["namespace"],
             workers=spec["mpiReplicaSpecs"]["Worker"]["replicas"],
             slots=spec.get("slotsPerWorker", 1),
             ssh_path=spec.get("sshAuthMountPath", "/root/.ssh"),
             config_mount=mounts["config"], runs_mount=mounts["runs"],
             run_dir=yaml.safe_load(objs["ConfigMap"]["data"]["config.yaml"])["run_dir"])
open(f"{d}/facts", "w").write("".join(f"{k}={v}\n" for k, v in facts.items()))
PY
  local name namespace workers slots ssh_path config_mount runs_mount run_dir
  # shellcheck disable=SC1091  # written just above
  source "$mj/facts"
  local -a launcher_cmd worker_cmd env_args=() hosts=() common
  mapfile -t launcher_cmd <"$mj/launcher.cmd"
  mapfile -t worker_cmd <"$mj/worker.cmd"
  while IFS= read -r e; do env_args+=(-e "$e"); done <"$mj/launcher.env"
  say "job $name: $workers workers x $slots slots; launcher: ${launcher_cmd[*]};" \
    "workers: ${worker_cmd[*]}"
  ((workers == 2 && slots == 1)) || fail "expected 2 workers of 1 slot" || return

  # mpi-operator's hostfile and DNS names (pod hostname + the job's headless Service).
  local i addr svc=$name.$namespace.svc
  hosts+=(--add-host "$name-launcher:127.0.0.1" --add-host "$name-launcher.$svc:127.0.0.1")
  : >"$mj/etc-mpi/hostfile"
  for ((i = 0; i < workers; i++)); do
    addr=127.0.0.$((i + 2))
    hosts+=(--add-host "$name-worker-$i:$addr" --add-host "$name-worker-$i.$svc:$addr")
    echo "$name-worker-$i.$svc slots=$slots" >>"$mj/etc-mpi/hostfile"
  done
  # Look-ups of anything not in /etc/hosts go to loopback, nowhere else.
  printf 'nameserver 127.0.0.1\noptions timeout:1 attempts:1\n' >"$mj/resolv.conf"
  # Host networking shares every interface: Open MPI's daemons and ranks talk over lo only
  # (read by mpirun, and by orted and the ranks on the workers: root's own MCA file).
  printf 'oob_tcp_if_include = lo\nbtl_tcp_if_include = lo\n' >"$mj/openmpi/mca-params.conf"
  # The job's ssh Secret as the operator mounts it: id_rsa (an ECDSA P-521 key, as the
  # operator makes), id_rsa.pub, authorized_keys, mode 0600, in a world-writable folder.
  ssh-keygen -q -t ecdsa -b 521 -N '' -C "trainrun-check" -f "$mj/ssh/id_rsa"
  cp "$mj/ssh/id_rsa.pub" "$mj/ssh/authorized_keys"
  chmod 0600 "$mj/ssh"/* && chmod 0777 "$mj/ssh"
  common=(--network host "${hosts[@]}" -v "$mj/resolv.conf:/etc/resolv.conf:ro"
    -v "$mj/config:$config_mount:ro" -v "$mj/runs:$runs_mount" -v "$mj/ssh:$ssh_path:ro"
    -v "$mj/openmpi:/root/.openmpi:ro")

  for ((i = 0; i < workers; i++)); do
    addr=127.0.0.$((i + 2))
    # A core of its own, as separate nodes would have (else each rank's OpenMP threads spin
    # against the other's on the same cores).
    dk run -d --name "trainrun-check-worker-$i" --hostname "$name-worker-$i" "${common[@]}" \
      --cpuset-cpus $((i % $(nproc))) -e K_MPI_JOB_ROLE=worker \
      "$image" "${worker_cmd[@]}" -o "ListenAddress=$addr:$ssh_port" >/dev/null || return
  done
  for ((i = 0; i < workers; i++)); do
    addr=127.0.0.$((i + 2))
    for _ in $(seq 50); do (: <"/dev/tcp/$addr/$ssh_port") 2>/dev/null && break; sleep 0.2; done
    (: <"/dev/tcp/$addr/$ssh_port") 2>/dev/null ||
      { dk logs "trainrun-check-worker-$i" | tail; fail "worker $i's sshd is not listening"; } ||
      return
  done
  say "workers' sshd listening on 127.0.0.2:$ssh_port and 127.0.0.3:$ssh_port"

  # Controls: the image's ssh settings are what make the operator's key mount work. Without
  # them, ssh as mpirun runs it (no terminal) and an sshd with StrictModes both refuse.
  local out
  : >"$mj/empty.conf"
  if out=$(dk run --rm "${common[@]}" -v "$mj/empty.conf:/etc/ssh/ssh_config.d/mpi-operator.conf:ro" \
    "$image" ssh -p "$ssh_port" "$name-worker-0.$svc" true 2>&1 </dev/null); then
    fail "ssh reached the worker without the image's ssh_config settings"; return
  fi
  echo "  control, ssh without the image's ssh_config settings: $(tail -n 1 <<<"$out")"
  [[ $out == *"Host key verification failed"* ]] || fail "unexpected: $out" || return
  dk run -d --name trainrun-check-strictmodes "${common[@]}" "$image" "${worker_cmd[@]}" \
    -o "ListenAddress=127.0.0.9:$ssh_port" -o StrictModes=yes >/dev/null || return
  for _ in $(seq 50); do (: <"/dev/tcp/127.0.0.9/$ssh_port") 2>/dev/null && break; sleep 0.2; done
  if out=$(dk run --rm "${common[@]}" "$image" ssh -p "$ssh_port" 127.0.0.9 true 2>&1 </dev/null)
  then
    fail "sshd with StrictModes=yes took the key from the Secret-like folder"; return
  fi
  echo "  control, sshd with StrictModes=yes: $(tail -n 1 <<<"$out")"
  [[ $out == *"Permission denied"* ]] || fail "unexpected: $out" || return
  dk rm -f trainrun-check-strictmodes >/dev/null

  # Debian's prometheus scraping rank 0's endpoint (first worker) every second.
  cat >"$mj/prometheus/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: trainrun
    static_configs:
      - targets: ['127.0.0.2:$metrics_port']
EOF
  prometheus --config.file="$mj/prometheus/prometheus.yml" \
    --storage.tsdb.path="$mj/prometheus/tsdb" --web.listen-address="127.0.0.1:$prom_port" \
    --log.level=warn >"$mj/prometheus/log" 2>&1 &
  prom_pid=$!
  for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$prom_port/-/ready" >/dev/null && break; sleep 0.2
  done
  curl -sf "http://127.0.0.1:$prom_port/-/ready" >/dev/null ||
    fail "prometheus did not start ($mj/prometheus/log)" || return

  # The launcher, as the operator starts it: the manifest's command and env plus the operator's.
  launcher_args=(--name trainrun-check-launcher --hostname "$name-launcher" "${common[@]}"
    -v "$mj/etc-mpi:/etc/mpi:ro" "${env_args[@]}" -e K_MPI_JOB_ROLE=launcher
    -e OMPI_MCA_orte_keep_fqdn_hostnames=true -e OMPI_MCA_orte_default_hostfile=/etc/mpi/hostfile
    -e "OMPI_MCA_plm_rsh_args=-o ConnectionAttempts=10 -p $ssh_port"
    -e "OMPI_MCA_orte_set_default_slots=$slots" "$image" "${launcher_cmd[@]}")
  local rc=0 first_start=''
  run_launcher "$mj/launcher.log" || rc=$?
  if ((rc != 0)) && grep -q 'no such run directory or checkpoint file' "$mj/launcher.log"; then
    # On a new claim the run directory does not exist yet, and `trainrun run --resume` refuses
    # that: the pod would restart into the same error until backoffLimit fails the job.
    first_start="the manifest's launcher exits $rc on an empty claim: $(
      grep -m1 'no such run directory' "$mj/launcher.log")"
    say "DEFECT: $first_start"
    say "rerunning the launcher with $run_dir made on the claim by hand, to check the rest"
    mkdir -p "$mj/runs/${run_dir#"$runs_mount"/}"
    rc=0
    run_launcher "$mj/launcher-2.log" || rc=$?
    cp "$mj/launcher-2.log" "$mj/launcher.log"
  fi
  sed -n '/metrics for Prometheus/p; /done:/p; /best possible/p' "$mj/launcher.log" |
    sed 's/^/  /'
  ((rc == 0)) || { tail -n 30 "$mj/launcher.log"; fail "the launcher exited $rc"; } || return
  [[ -n ${seen[worker-0]:-} && -n ${seen[worker-1]:-} ]] ||
    fail "a rank was not seen in each worker container (${!seen[*]})" || return
  [[ -z ${seen[launcher]:-} ]] || fail "a rank ran in the launcher container" || return
  say "one rank in each worker container, none in the launcher"
  # And each rank's own word on its host (the start line of its log on the claim).
  local r where
  for ((r = 0; r < workers * slots; r++)); do
    where=$(grep -m1 -o "rank $r/[0-9]* on [^ ]*" \
      "$mj/runs/${run_dir#"$runs_mount"/}/logs/rank-$r.log")
    echo "  $where"
    [[ $where == *" on $name-worker-$r" ]] ||
      fail "rank $r did not run on $name-worker-$r" || return
  done
  grep -q "metrics for Prometheus: http://$name-worker-0:$metrics_port/metrics" \
    "$mj/launcher.log" || fail "rank 0 did not report serving from $name-worker-0" || return

  # Every scraped (step, loss) is metrics.jsonl's row for that step, digit for digit.
  /usr/bin/python3 - "http://127.0.0.1:$prom_port" \
    "$mj/runs/${run_dir#"$runs_mount"/}/metrics.jsonl" \
    <<'PY' || fail "Prometheus's samples do not match metrics.jsonl" || return
import json, sys, urllib.parse, urllib.request
base, jsonl = sys.argv[1:]
def series(q):
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": q})
    body = json.load(urllib.request.urlopen(url, timeout=10))
    assert body["status"] == "success", body
    return body["data"]["result"]
loss, step = (series(f"{m}[10m]") for m in ("trainrun_loss", "trainrun_step"))
assert len(loss) == 1 and len(step) == 1, (loss, step)
steps = {ts: int(float(v)) for ts, v in step[0]["values"]}
got = {steps[ts]: float(v) for ts, v in loss[0]["values"] if ts in steps}
rows = [json.loads(l) for l in open(jsonl)]
want = {r["step"]: r["loss"] for r in rows if r.get("kind") == "train"}
bad = {s: (v, want.get(s)) for s, v in got.items() if want.get(s) != v}
print(f"  prometheus stored {len(got)} scrapes of (trainrun_step, trainrun_loss) from "
      f"{loss[0]['metric'].get('instance')}; metrics.jsonl has {len(want)} train rows")
for s in sorted(got)[:3] + sorted(got)[-1:]:
    print(f"    step {s}: scraped {got[s]!r}, metrics.jsonl {want.get(s)!r}")
info = series("last_over_time(trainrun_info[10m])")
if info:
    labels = {k: v for k, v in info[0]["metric"].items() if k != "__name__"}
    print("  trainrun_info labels:", labels)
assert not bad, f"scraped values differ from metrics.jsonl: {bad}"
assert len(got) >= 3, f"only {len(got)} scrapes stored"
PY
  [[ -z $first_start ]] || fail "everything else passed, but $first_start"
}

# Runs the launcher container (launcher_args) to its end, logging to $1, and records in `seen`
# which containers ran a rank: a process whose argv[0] is trainrun (its name is `exe`: trainrun
# re-executes itself; mpirun's arguments name trainrun too, but not as argv[0]).
run_launcher() {
  local log=$1 pid c t0=$SECONDS rc=0
  dk rm -f trainrun-check-launcher >/dev/null 2>&1 || true
  seen=()
  dk run "${launcher_args[@]}" >"$log" 2>&1 &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    if ((SECONDS - t0 > 300)); then
      say "the job is still running after 300 s: stopping it"
      dk kill trainrun-check-launcher >/dev/null 2>&1
    fi
    for c in launcher worker-0 worker-1; do
      [[ -z ${seen[$c]:-} ]] || continue
      dk top "trainrun-check-$c" -eo pid,comm,args >"$work/top" 2>/dev/null || continue
      if awk 'NR > 1 && $3 == "trainrun" { f = 1 } END { exit !f }' "$work/top"; then
        awk -v c="$c" 'NR > 1 && ($3 == "trainrun" || $2 == "orted") { print "  [" c "] " $0 }' \
          "$work/top" | cut -c1-110
        seen[$c]=1
      fi
    done
    sleep 0.5
  done
  wait "$pid" || rc=$?
  return "$rc"
}

if ((docker_stages)) && [[ $(id -u) -ne 0 ]]; then
  echo "container_check: needs root (dockerd)" >&2
  exit 1
fi
stage validate validate_k8s
if ((docker_stages)); then
  failed=0  # the docker stages do not need the validation
  stage dockerd start_dockerd
  stage base base_image
  stage build build_image
  stage quickstart quickstart
  stage mpijob mpijob
fi
say "summary:"
printf '  %s\n' "${results[@]}"
if grep -q '^FAIL' < <(printf '%s\n' "${results[@]}"); then
  say "FAIL"
  exit 1
fi
say "PASS"
