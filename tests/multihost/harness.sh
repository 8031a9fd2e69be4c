#!/usr/bin/env bash
# Two throw-away "hosts" on this one machine, for tests of trainrun across hosts (run as root,
# with CAP_NET_ADMIN):
#
#   tests/multihost/harness.sh start DIR   # prints the names; source DIR/env for mpirun's ssh
#   tests/multihost/harness.sh slurm DIR   # after start: a two-node Slurm on them (DIR/slurm)
#   tests/multihost/harness.sh stop DIR    # kills everything in the namespaces, deletes them
#
# Each host is a network namespace (trmhA-ID / trmhB-ID, ID = the starting harness's pid, so
# parallel or leftover runs do not collide) with `lo` up and one end of a veth pair (trvA-ID /
# trvB-ID) addressed 10.251.0.1/24 and 10.251.0.2/24, a private range this harness creates
# itself; nothing else on the machine (other addresses, the host's interfaces) is touched. Every
# process of a host runs in its own UTS namespace with its own host name (trnode1, trnode2):
#
#   ip netns exec NS unshare --uts sh -c 'hostname trnode1; exec CMD...'
#
# Each host runs an OpenSSH server on its test address only (port 22), root login by key only,
# with a host key, a client key, authorized_keys and the pid file in DIR. DIR/ssh_config is the
# client side (IdentityFile, no host key checks, BatchMode, ConnectTimeout 5) and DIR/env sets
# OMPI_MCA_plm_rsh_agent so mpirun's ssh uses it; DIR/hostfile names trnode1 and trnode2 (which
# that ssh config resolves), DIR/hostfile-addresses the two addresses. DIR/names holds NS1, NS2,
# VETH1, VETH2, the addresses and host names (shell syntax) for `stop` and for tests. Outside
# DIR only /run/sshd is made (sshd's compiled-in privilege separation folder), if missing.
# A run killed before its `stop` leaves its two namespaces (names unique, harmless): list them
# with `ip netns list | grep trmh` and delete them with `ip netns del`.
#
# The file system is shared between the two hosts: network and UTS namespaces do not isolate
# mounts, so DIR, the build and every run directory are the same files on both. That stands in
# for a cluster file system (NFS, Lustre) as a real multi-node job would have.
set -Eeuo pipefail

usage() {
  echo "usage: $0 start|slurm|stop DIR" >&2
  exit 2
}
[[ $# -eq 2 ]] || usage
cmd=$1
dir=$(realpath -m "$2")

log() { echo "multihost-harness: $*" >&2; }
# sshd, munged, slurmctld and slurmd live in sbin, which a user's PATH may lack.
export PATH=/usr/local/sbin:/usr/sbin:/sbin:$PATH

ADDR1=10.251.0.1
ADDR2=10.251.0.2
HOST1=trnode1
HOST2=trnode2

start() {
  if [[ -e "$dir/names" ]]; then
    log "$dir already holds hosts: stop them first"
    exit 1
  fi
  [[ $(id -u) -eq 0 ]] || { log "must run as root (network namespaces, sshd)"; exit 1; }
  for p in ip unshare ssh ssh-keygen /usr/sbin/sshd; do
    command -v "$p" >/dev/null || {
      log "$p not found: install iproute2, util-linux and openssh-server (scripts/setup.sh --test)"
      exit 1
    }
  done
  local id=$$
  local ns1=trmhA-$id ns2=trmhB-$id veth1=trvA-$id veth2=trvB-$id
  mkdir -p "$dir"
  chmod 0755 "$dir"
  cat >"$dir/names" <<EOF
NS1=$ns1
NS2=$ns2
VETH1=$veth1
VETH2=$veth2
ADDR1=$ADDR1
ADDR2=$ADDR2
HOST1=$HOST1
HOST2=$HOST2
EOF
  # If anything below fails, leave nothing behind.
  trap 'log "start failed: removing what was made"; stop || true' ERR

  if ! ip netns add "$ns1" 2>"$dir/netns.err"; then
    log "ip netns add failed ($(cat "$dir/netns.err")): needs root with CAP_NET_ADMIN"
    false
  fi
  ip netns add "$ns2"
  ip link add "$veth1" netns "$ns1" type veth peer name "$veth2" netns "$ns2"
  ip -n "$ns1" addr add "$ADDR1/24" dev "$veth1"
  ip -n "$ns2" addr add "$ADDR2/24" dev "$veth2"
  for ns in "$ns1" "$ns2"; do ip -n "$ns" link set lo up; done
  ip -n "$ns1" link set "$veth1" up
  ip -n "$ns2" link set "$veth2" up

  # Keys: one host key for both servers (their names differ, the key need not), one client key.
  ssh-keygen -q -t ed25519 -N '' -f "$dir/host_key" -C trainrun-multihost-host
  ssh-keygen -q -t ed25519 -N '' -f "$dir/client_key" -C trainrun-multihost-client
  cp "$dir/client_key.pub" "$dir/authorized_keys"
  chmod 0600 "$dir/host_key" "$dir/client_key" "$dir/authorized_keys"
  mkdir -p /run/sshd  # sshd's compiled-in privilege separation folder (Debian's package makes it at boot)
  chmod 0755 /run/sshd

  # The host names resolve through this ssh config only (no /etc/hosts entry): enough for
  # mpirun's rsh launch, so a hostfile may name the hosts as on a real cluster.
  cat >"$dir/ssh_config" <<EOF
Host $HOST1
  HostName $ADDR1
Host $HOST2
  HostName $ADDR2
Host *
  IdentityFile $dir/client_key
  IdentitiesOnly yes
  User root
  StrictHostKeyChecking no
  UserKnownHostsFile /dev/null
  LogLevel ERROR
  BatchMode yes
  ConnectTimeout 5
EOF
  echo "export OMPI_MCA_plm_rsh_agent='ssh -F $dir/ssh_config'" >"$dir/env"
  # Two hostfiles, one rank slot per host: by host name (mpirun's messages then name trnode2)
  # and by address (they name 10.251.0.2; the ranks' logs and records still say trnode2).
  printf '%s slots=1\n' "$HOST1" "$HOST2" >"$dir/hostfile"
  printf '%s slots=1\n' "$ADDR1" "$ADDR2" >"$dir/hostfile-addresses"

  local n addr ns host
  for n in 1 2; do
    if [[ $n == 1 ]]; then
      ns=$ns1 addr=$ADDR1 host=$HOST1
    else
      ns=$ns2 addr=$ADDR2 host=$HOST2
    fi
    cat >"$dir/sshd$n.conf" <<EOF
ListenAddress $addr
Port 22
HostKey $dir/host_key
PidFile $dir/sshd$n.pid
AuthorizedKeysFile $dir/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
# Sessions (mpirun's orted) get a plain environment; PATH as a root login shell has it.
SetEnv PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
LogLevel ERROR
EOF
    # -D: sshd stays in the foreground here, so $! is its pid (ip netns exec, unshare and sh
    # all exec); it still serves each connection in a child. Everything it starts inherits the
    # host's network and UTS namespaces.
    ip netns exec "$ns" unshare --uts sh -c "hostname $host; exec /usr/sbin/sshd -D -e -f '$dir/sshd$n.conf'" \
      </dev/null >>"$dir/sshd$n.log" 2>&1 &
    echo $! >"$dir/sshd$n.launch-pid"
  done

  # Both servers answer, and each host reaches the other over the veth.
  local ok=""
  for ((i = 0; i < 100; i++)); do
    if ip netns exec "$ns1" ssh -F "$dir/ssh_config" "$ADDR2" hostname >"$dir/probe" 2>&1 &&
      [[ $(cat "$dir/probe") == "$HOST2" ]] &&
      ip netns exec "$ns2" ssh -F "$dir/ssh_config" "$ADDR1" hostname >"$dir/probe" 2>&1 &&
      [[ $(cat "$dir/probe") == "$HOST1" ]]; then
      ok=1
      break
    fi
    sleep 0.1
  done
  if [[ -z $ok ]]; then
    log "sshd not reachable over ssh after 10 s: $(cat "$dir/probe" 2>/dev/null)"
    tail -n 20 "$dir"/sshd*.log >&2 || true
    false
  fi
  trap - ERR
  log "up: $HOST1=$ADDR1 (netns $ns1), $HOST2=$ADDR2 (netns $ns2); source $dir/env"
  cat "$dir/names"
}

# A two-node Slurm (22.05) on the hosts `start` made: munged and slurmctld on trnode1, a slurmd
# on each host (NodeAddr = its test address), every file under DIR/slurm; DIR/slurm/env sets
# SLURM_CONF for the clients, which must run in a namespace (the controller listens on
# 10.251.0.1 only). Settings as tests/slurm/slurm-harness.sh's (see FACTS.md, "Slurm 22.05").
# slurmd does not start under `ip netns exec` (it remounts /sys, hiding /sys/fs/cgroup), so the
# daemons enter the network namespace with nsenter and take a mount namespace of their own.
slurm_start() {
  [[ -f "$dir/names" ]] || { log "start the hosts first: $0 start $dir"; exit 1; }
  # shellcheck disable=SC1091
  source "$dir/names"
  for p in munged mungekey slurmctld slurmd sinfo nsenter; do
    command -v "$p" >/dev/null || { log "$p not found: install slurm-wlm and munge"; exit 1; }
  done
  local d=$dir/slurm
  [[ -e $d/slurm.conf ]] && { log "$d already holds a Slurm"; exit 1; }
  mkdir -p "$d"/{munge,state,log,spool-$HOST1,spool-$HOST2,tmp-$HOST1,tmp-$HOST2}
  chmod 0755 "$d" "$d/munge"  # munged refuses a socket folder others cannot search
  trap 'log "slurm start failed: see $d/log"; tail -n 20 "$d"/log/*.log >&2 || true' ERR
  mungekey -c -k "$d/munge.key" >/dev/null
  chmod 0600 "$d/munge.key"
  # munged's socket is a path on the shared file system: both hosts' daemons reach it.
  ip netns exec "$NS1" munged --socket="$d/munge/munge.sock" --key-file="$d/munge.key" \
    --pid-file="$d/munged.pid" --log-file="$d/log/munged.log" \
    --seed-file="$d/munge/munge.seed" --force
  cat >"$d/slurm.conf" <<CONF
# Generated by tests/multihost/harness.sh: a two-node test cluster on two network namespaces.
ClusterName=trainrun-multihost
SlurmctldHost=${HOST1}(${ADDR1})
SlurmctldPort=6817
SlurmdPort=6818
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=${d}/munge/munge.sock,cred_expire=10
StateSaveLocation=${d}/state
# Per node (%n): both slurmds share this file system.
SlurmdSpoolDir=${d}/spool-%n
TmpFS=${d}/tmp-%n
SlurmdPidFile=${d}/slurmd-%n.pid
SlurmdLogFile=${d}/log/slurmd-%n.log
SlurmctldPidFile=${d}/slurmctld.pid
SlurmctldLogFile=${d}/log/slurmctld.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=pmix
ReturnToService=2
MailProg=/bin/true
KillWait=2
SchedulerParameters=batch_sched_delay=0,sched_interval=2,bf_interval=2
NodeName=${HOST1} NodeAddr=${ADDR1} CPUs=1 State=UNKNOWN
NodeName=${HOST2} NodeAddr=${ADDR2} CPUs=1 State=UNKNOWN
PartitionName=debug Nodes=${HOST1},${HOST2} Default=YES MaxTime=INFINITE State=UP
CONF
  echo "export SLURM_CONF=$d/slurm.conf" >"$d/env"
  export SLURM_CONF="$d/slurm.conf"
  # The daemons fork into the background; they stay in the namespaces (stop kills them there).
  nsenter --net="/run/netns/$NS1" unshare -m --uts sh -c "hostname $HOST1; exec slurmctld -f '$SLURM_CONF'"
  nsenter --net="/run/netns/$NS1" unshare -m --uts sh -c "hostname $HOST1; exec slurmd -f '$SLURM_CONF' -N $HOST1"
  nsenter --net="/run/netns/$NS2" unshare -m --uts sh -c "hostname $HOST2; exec slurmd -f '$SLURM_CONF' -N $HOST2"
  local states=""
  for ((i = 0; i < 300; i++)); do
    states=$(ip netns exec "$NS1" sinfo -h -N -o %T 2>/dev/null | sort | tr '\n' ' ' || true)
    [[ $states == "idle idle " ]] && break
    sleep 0.1
  done
  if [[ $states != "idle idle " ]]; then
    log "nodes not idle after 30 s (states '${states}')"
    false
  fi
  trap - ERR
  log "slurm up: $HOST1 and $HOST2 idle; source $d/env (clients in netns $NS1)"
}

stop() {
  [[ -f "$dir/names" ]] || return 0
  # shellcheck disable=SC1091
  source "$dir/names"
  local ns pids p
  # Every process in either namespace (sshd, its sessions, orted, ranks, a test's mpirun):
  # `ip netns pids` lists them by pid. Two rounds, for anything forked meanwhile.
  for _ in 1 2; do
    for ns in "$NS1" "$NS2"; do
      ip netns list 2>/dev/null | grep -qw "$ns" || continue
      pids=$(ip netns pids "$ns" 2>/dev/null || true)
      for p in $pids; do
        [[ $p == "$$" ]] && continue
        kill -KILL "$p" 2>/dev/null || true
      done
    done
    sleep 0.2
  done
  for n in 1 2; do
    p=$(cat "$dir/sshd$n.launch-pid" 2>/dev/null || true)
    [[ -n $p ]] && kill -KILL "$p" 2>/dev/null || true
  done
  # Deleting a namespace deletes the veth end in it, and with it the peer.
  for ns in "$NS1" "$NS2"; do
    ip netns list 2>/dev/null | grep -qw "$ns" && ip netns del "$ns" 2>/dev/null || true
  done
  for v in "$VETH1" "$VETH2"; do
    ip link show "$v" >/dev/null 2>&1 && ip link del "$v" 2>/dev/null || true
  done
  rm -f "$dir/names"
  log "stopped: $NS1 $NS2 deleted"
}

case $cmd in
  start) start ;;
  stop) stop ;;
  slurm) slurm_start ;;
  *) usage ;;
esac
