"""Stops and failures end with the man page's code on every launcher trainrun runs: SIGTERM or
SIGINT to a launching trainrun under mpirun checkpoint and end 75/130 (not mpirun's 1), a signal
after "done" leaves 0, a second SIGINT stops at once without a checkpoint (also mid-evaluation),
a stop during the restart backoff ends the supervisor, and a killed rank is 128+N, named."""
import os
import re
import signal
import socket
import subprocess
import time

import pytest

from conftest import REPO, TINY, TRAINRUN, losses, run, sets, wait_for

QS = str(REPO / "configs/quickstart.yaml")


def start(args, rd, **env):
    e = dict(os.environ, **env)
    e.pop("OMP_NUM_THREADS", None)
    return subprocess.Popen([TRAINRUN, QS, *args, "--run-dir", str(rd)], env=e, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)



def steps_logged(rd):
    path = rd / "metrics.jsonl"
    return path.exists() and '"kind":"train"' in path.read_text()


def checkpoints(rd):
    d = rd / "checkpoints"
    return sorted(p.name for p in d.glob("step-*.h5")) if d.exists() else []


# direct: one process, no launcher; supervised: the supervisor and one child rank; mpirun: the
# supervisor, mpirun and 2 ranks.
LAUNCH = {"direct": ["distributed.nproc=1"],
          "supervised": ["distributed.nproc=1", "fault_tolerance.max_restarts=2"],
          "mpirun": ["distributed.nproc=2"]}


STOPS = [(signal.SIGTERM, 75), (signal.SIGINT, 130), (signal.SIGHUP, 75), (signal.SIGUSR1, 75)]


# A lone process is not a launcher: SIGHUP keeps its default meaning there, so that one pair is
# not a case.
@pytest.mark.parametrize("launch,sig,code", [(launch, sig, code) for launch in LAUNCH
                                             for sig, code in STOPS
                                             if not (launch == "direct" and sig == signal.SIGHUP)])
def test_a_stop_to_the_launcher_checkpoints_and_ends_with_its_code(tmp_path, launch, sig, code):
    rd = tmp_path / "r"
    proc = start([*sets(*TINY, "train.steps=100000", "checkpoint.every=0", *LAUNCH[launch])], rd)
    assert wait_for(lambda: steps_logged(rd))
    t0 = time.time()
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err[-3000:]
    assert time.time() - t0 < 15
    [ckpt] = checkpoints(rd)  # the stop's own checkpoint
    assert not re.search(r"^error:|did not name it", err, re.M), err[-3000:]
    stopped = int(ckpt[5:12])
    run(["--resume", str(rd), *sets(f"train.steps={stopped + 2}")], check=0)
    assert max(losses(rd)) == stopped + 2


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_after_done_leaves_a_finished_run_finished(tmp_path, sig):
    rd = tmp_path / "r"
    proc = start([*sets(*TINY, "train.steps=30", "distributed.nproc=2")], rd)
    err = ""
    # Read stderr until the run says it is done, then signal the launcher at once.
    for line in proc.stderr:
        err += line
        if "done:" in line:
            proc.send_signal(sig)
            break
    rest, tail = proc.communicate(timeout=60)
    assert proc.returncode == 0, (err + tail)[-3000:]


@pytest.mark.parametrize("nproc", [1, 2])
def test_a_second_interrupt_stops_at_once_without_a_checkpoint(tmp_path, nproc):
    rd = tmp_path / "r"
    # Step 2 starts an evaluation of 200000 batches (minutes): the first SIGINT waits for it,
    # the second does not.
    proc = start([*sets(*TINY, "train.steps=100000", "checkpoint.every=0", "train.eval_every=2",
                        "train.eval_steps=200000", f"distributed.nproc={nproc}")], rd)
    assert wait_for(lambda: steps_logged(rd))
    time.sleep(1.0)  # well inside the evaluation after step 2
    proc.send_signal(signal.SIGINT)
    time.sleep(1.0)
    assert proc.poll() is None  # still evaluating: the first interrupt waits for a step boundary
    t0 = time.time()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    elapsed = time.time() - t0
    assert proc.returncode == 130, err[-3000:]
    assert elapsed < 10, elapsed
    assert "stopping at once, without a checkpoint" in err
    assert checkpoints(rd) == []


def test_a_stop_during_the_restart_backoff_ends_the_supervisor(tmp_path):
    rd = tmp_path / "r"
    proc = start([*sets(*TINY, "train.steps=100", "checkpoint.every=2",
                        "fault_tolerance.max_restarts=3", "fault_tolerance.restart_backoff=50")],
                 rd, TRAINRUN_FAULTS="kill:step=5")
    err = ""
    for line in proc.stderr:
        err += line
        if "restart 1/3 in 50 s" in line:
            break
    t0 = time.time()
    proc.send_signal(signal.SIGTERM)
    _, tail = proc.communicate(timeout=60)
    assert proc.returncode == 75, (err + tail)[-3000:]
    assert time.time() - t0 < 5
    assert "between attempts" in tail


def test_a_killed_rank_is_128_plus_n_and_named(tmp_path):
    rd = tmp_path / "r"
    p = run([QS, *sets(*TINY, "train.steps=100000", "distributed.nproc=2"), "--run-dir",
             str(rd)], env={"TRAINRUN_FAULTS": "kill:rank=1:step=5"}, timeout=120)
    assert p.returncode == 128 + signal.SIGKILL, p.stderr[-3000:]
    assert re.search(rf"rank 1 on {re.escape(socket.gethostname())} killed by signal 9", p.stderr)
    # The same under the supervisor with one rank: rank 0, on this host.
    p = run([QS, *sets(*TINY, "train.steps=100000", "fault_tolerance.max_restarts=1",
                       "fault_tolerance.restart_backoff=0"), "--run-dir", str(tmp_path / "s")],
            env={"TRAINRUN_FAULTS": "kill:step=5:attempts=all"}, timeout=120)
    assert p.returncode == 7, p.stderr[-3000:]  # gave up: the same step twice
    assert f"rank 0 on {socket.gethostname()} killed by signal 9" in p.stderr


def test_a_rank_exit_code_outside_the_table_is_a_launch_failure(tmp_path):
    p = run([QS, *sets(*TINY, "train.steps=100", "distributed.nproc=2"), "--run-dir",
             str(tmp_path / "r")], env={"TRAINRUN_FAULTS": "exit:rank=1:step=3:code=42"},
            timeout=120)
    assert p.returncode == 6, p.stderr[-3000:]
    assert re.search(r"rank 1\b.*code 42", p.stderr)
