"""mpirun's start-up is bounded and stoppable. Until the first rank is up (its heartbeat), the
launcher alone can end the job: an mpirun that never starts its ranks is ended after
fault_tolerance.launch_timeout (exit 6, saying why and what to do), a stop signal ends it
promptly (75 or 130), and neither leaves mpirun or what it started behind. The known cause,
hwloc's GL probe waiting for an X server on 127.0.0.1:6000-6009 (TensorBoard's 6006), is
avoided (HWLOC_COMPONENTS=-gl): a real 2-rank run beside such a listener finishes.

The stand-in mpirun is a script first on PATH (trainrun runs the mpirun it finds there). The
listener lives in a private network namespace (and PID namespace, so that nothing it holds can
outlive the test); no traffic leaves loopback. Needs root (unshare), as CI runs."""
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

from conftest import REPO, TINY, TRAINRUN, losses, run, sets, wait_for

QS = str(REPO / "configs/quickstart.yaml")
BASE = [*TINY, "train.steps=4", "distributed.nproc=2"]
GRACE = 3  # StartBound::kGrace: what mpirun gets after the SIGTERM or the relayed stop

# Deaf to every signal the launcher relays, never ending by itself: an mpirun blocked before it
# starts any rank. It has started one process in a session of its own, as mpirun starts each
# rank in a process group of its own.
BLOCKED_MPIRUN = """#!/bin/bash
trap '' TERM INT USR1 USR2 HUP
setsid sleep 1000 &
echo "$$ $!" > "$STANDIN_PIDS"
while :; do sleep 0.2; done
"""


def alive(pid):
    """Running: not gone, not a zombie waiting for its reaper."""
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


class BlockedMpirun:
    """PATH and environment for a trainrun whose mpirun never starts its ranks."""

    def __init__(self, tmp_path):
        bindir = tmp_path / "bin"
        bindir.mkdir()
        (bindir / "mpirun").write_text(BLOCKED_MPIRUN)
        (bindir / "mpirun").chmod(0o755)
        self.pids_file = tmp_path / "standin-pids"
        self.env = {"PATH": f"{bindir}:{os.environ['PATH']}", "STANDIN_PIDS": str(self.pids_file)}

    def written(self):
        return self.pids_file.exists() and len(self.pids_file.read_text().split()) == 2

    def pids(self):
        """The stand-in's pid and its "rank"'s, once it has started."""
        assert wait_for(self.written, timeout=30), "the stand-in mpirun never started"
        return [int(x) for x in self.pids_file.read_text().split()]

    def kill(self):
        """Kills what is left of it, by pid (before the fix it outlived trainrun, holding
        trainrun's stdout open)."""
        if self.written():
            for pid in (int(x) for x in self.pids_file.read_text().split()):
                if alive(pid):
                    os.kill(pid, signal.SIGKILL)


@pytest.fixture
def blocked_mpirun(tmp_path):
    standin = BlockedMpirun(tmp_path)
    yield standin
    standin.kill()  # whatever the test's outcome


def test_an_mpirun_that_starts_no_rank_is_ended_after_launch_timeout(tmp_path, blocked_mpirun):
    t0 = time.time()
    p = run([QS, *sets(*BASE, "fault_tolerance.launch_timeout=2"), "--run-dir",
             str(tmp_path / "r")], env=blocked_mpirun.env, timeout=120, check=6)
    elapsed = time.time() - t0
    assert 2 <= elapsed < 2 + GRACE + 15, elapsed
    assert "error: mpirun started no rank within 2 s (fault_tolerance.launch_timeout)" in \
        p.stderr, p.stderr
    assert "HWLOC_COMPONENTS=-gl" in p.stderr and "127.0.0.1:6000-6009" in p.stderr
    standin = blocked_mpirun.pids()
    assert not [pid for pid in standin if alive(pid)], "the stand-in or its rank outlived trainrun"


@pytest.mark.parametrize("signals,code", [([signal.SIGTERM], 75), ([signal.SIGINT], 130),
                                          ([signal.SIGINT, signal.SIGINT], 130)],
                         ids=["SIGTERM", "SIGINT", "second-SIGINT"])
def test_a_stop_before_any_rank_started_ends_the_launch(tmp_path, blocked_mpirun, signals, code):
    proc = subprocess.Popen([TRAINRUN, QS, *sets(*BASE), "--run-dir", str(tmp_path / "r")],
                            env=dict(os.environ, **blocked_mpirun.env), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        standin = blocked_mpirun.pids()  # it runs, "blocked": launch_timeout's default is minutes
        for sig in signals:
            proc.send_signal(sig)
            time.sleep(0.1)
        t0 = time.time()
        _, err = proc.communicate(timeout=30)
        elapsed = time.time() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            blocked_mpirun.kill()  # else its copy of trainrun's stdout keeps communicate waiting
            proc.communicate()
    assert proc.returncode == code, err
    assert f"stop requested (signal {signals[0]}) during the launch, before any rank started" \
        in err, err
    # Promptly: mpirun's grace, then the kill; a second SIGINT does not wait for the grace.
    assert elapsed < (GRACE - 0.5 if len(signals) > 1 else GRACE + 7), elapsed
    assert not [pid for pid in standin if alive(pid)], "the stand-in or its rank outlived trainrun"


# In the namespaces: loopback up, a listener on 127.0.0.1:6006 (as TensorBoard's), then trainrun
# ($0 "$@"), then whatever still runs there besides this shell and the listener (zombies aside:
# this shell, the namespace's init, reaps nobody).
IN_NAMESPACE = """
ip link set lo up
"$PYTHON" -m http.server 6006 --bind 127.0.0.1 >/dev/null 2>&1 &
i=0
until "$PYTHON" -c "import socket; socket.create_connection(('127.0.0.1', 6006), 1)" 2>/dev/null; do
  i=$((i + 1)); [ $i -lt 100 ] || { echo "no listener on 6006" >&2; exit 99; }; sleep 0.1
done
"$0" "$@"
rc=$?
"$PYTHON" - "$$" "$!" <<'END' >&2
import os, sys
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        stat = open(f"/proc/{pid}/stat").read()
    except OSError:
        continue
    name, state = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2]
    if pid not in (*sys.argv[1:], str(os.getpid())) and state != "Z":
        print("left:", pid, name)
END
exit $rc
"""


def in_namespaces(args, env=None, timeout=120):
    """trainrun ARGS in a private network and PID namespace beside a listener on 6006. When
    unshare ends (or the test kills it), the namespace's first process gets SIGKILL, and with it
    every process of the namespace: a hung mpirun cannot outlive the test."""
    assert os.geteuid() == 0, "a private network namespace needs root (CI runs the tests as root)"
    e = dict(os.environ, PYTHON=sys.executable, **(env or {}))
    for k in ("OMP_NUM_THREADS", "GOMP_SPINCOUNT", "OMP_WAIT_POLICY"):
        e.pop(k, None)
    cmd = ["unshare", "--net", "--pid", "--fork", "--kill-child", "--mount-proc", "sh", "-c",
           IN_NAMESPACE, TRAINRUN, *args]
    proc = subprocess.Popen(cmd, env=e, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"trainrun did not end within {timeout} s beside a listener on "
                    f"127.0.0.1:6006 (mpirun hangs in hwloc's GL probe)\n{err[-3000:]}")
    return proc.returncode, out, err


def test_a_real_mpirun_beside_a_listener_on_port_6006_runs(tmp_path):
    rd = tmp_path / "r"
    t0 = time.time()
    rc, out, err = in_namespaces([QS, *sets(*BASE), "--run-dir", str(rd)])
    assert rc == 0, err[-3000:]
    assert time.time() - t0 < 60
    assert sorted(losses(rd)) == [1, 2, 3, 4]
    assert "left:" not in err, err[-3000:]


def test_the_hang_is_real_and_the_bound_ends_it_with_the_real_mpirun(tmp_path):
    # A user's HWLOC_COMPONENTS that names gl is theirs: trainrun leaves it, and the listener
    # then blocks Open MPI's mpirun as reported. This shows the test above tests something,
    # and that the bound ends a real blocked mpirun, leaving nothing behind.
    rc, out, err = in_namespaces([QS, *sets(*BASE, "fault_tolerance.launch_timeout=5"),
                                  "--run-dir", str(tmp_path / "r")],
                                 env={"HWLOC_COMPONENTS": "gl"})
    assert rc == 6, err[-3000:]
    assert "mpirun started no rank within 5 s" in err
    assert "left:" not in err, err[-3000:]
