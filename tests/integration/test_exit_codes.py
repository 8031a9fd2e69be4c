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
    return sorted(p.parent.name for p in d.glob("step-*/MANIFEST")) if d.exists() else []


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
    # Every step sleeps 20 s (a slow step): the first SIGINT waits for the step boundary, the
    # second does not. (An evaluation no longer makes the first one wait: see below.)
    proc = start([*sets(*TINY, "train.steps=100000", "checkpoint.every=0",
                        f"distributed.nproc={nproc}")], rd, TRAINRUN_FAULTS="slow:ms=20000")
    assert wait_for(lambda: (rd / "metrics.jsonl").exists())
    time.sleep(1.0)  # well inside the first step
    proc.send_signal(signal.SIGINT)
    time.sleep(1.0)
    assert proc.poll() is None  # still in the step: the first interrupt waits for a step boundary
    t0 = time.time()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    elapsed = time.time() - t0
    assert proc.returncode == 130, err[-3000:]
    assert elapsed < 10, elapsed
    assert "stopping at once, without a checkpoint" in err
    assert checkpoints(rd) == []


# A stop during a long evaluation abandons it between two batches and checkpoints the step the
# evaluation was for (its weights are unchanged): 75 or 130 within seconds, not minutes.
@pytest.mark.parametrize("nproc,sig,code", [(1, signal.SIGTERM, 75), (1, signal.SIGINT, 130),
                                            (2, signal.SIGTERM, 75), (2, signal.SIGINT, 130)])
def test_a_stop_during_a_long_evaluation_ends_promptly_with_a_checkpoint(tmp_path, nproc, sig,
                                                                         code):
    rd = tmp_path / "r"
    # Step 2 starts an evaluation of 200000 batches (minutes).
    proc = start([*sets(*TINY, "train.steps=100000", "checkpoint.every=0", "train.eval_every=2",
                        "train.eval_steps=200000", f"distributed.nproc={nproc}")], rd)
    assert wait_for(lambda: steps_logged(rd))
    time.sleep(1.0)  # well inside the evaluation after step 2
    t0 = time.time()
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    elapsed = time.time() - t0
    assert proc.returncode == code, err[-3000:]
    assert elapsed < 10, elapsed
    assert "stop requested during the evaluation" in err, err[-3000:]
    assert checkpoints(rd) == ["step-0000002"]
    run(["inspect", str(rd / "checkpoints" / "step-0000002")], check=0)


# Setup (here generating 10^8 synthetic tokens, several seconds) has no step boundary and
# nothing new to save: a stop ends it at once, saying so, with the stop's code.
@pytest.mark.parametrize("launch,sig,code", [("direct", signal.SIGTERM, 75),
                                             ("direct", signal.SIGINT, 130),
                                             ("supervised", signal.SIGTERM, 75),
                                             ("mpirun", signal.SIGINT, 130)])
def test_a_stop_during_setup_ends_at_once(tmp_path, launch, sig, code):
    rd = tmp_path / "r"
    proc = start([*sets(*TINY, "data.synthetic_tokens=100000000", "train.steps=5",
                        *LAUNCH[launch])], rd)
    time.sleep(1.5)
    assert proc.poll() is None
    t0 = time.time()
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    elapsed = time.time() - t0
    assert proc.returncode == code, err[-3000:]
    assert elapsed < 5, elapsed
    # A rank (or the lone process) says "during setup, before the first step: stopping at
    # once"; a launcher still checking the data, "during setup, before the job started".
    assert re.search(r"during setup, before the (first step|job started)", err), err[-3000:]
    assert "training steps" not in err  # it really was in setup
    assert checkpoints(rd) == []


# The same stop reaching ranks still in their setup (the launcher has checked the data and
# started them; their watchdogs beat; they scan the data themselves): relayed, it ends them at
# once, and the job with the stop's code.
@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 75), (signal.SIGINT, 130)])
def test_a_stop_to_ranks_in_setup_ends_the_job_at_once(tmp_path, sig, code):
    rd = tmp_path / "r"
    proc = start([*sets(*TINY, "data.synthetic_tokens=100000000", "train.steps=5",
                        *LAUNCH["mpirun"])], rd)
    assert wait_for(lambda: (rd / "logs" / "heartbeat-rank-1").exists(), timeout=120)
    assert proc.poll() is None
    t0 = time.time()
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    elapsed = time.time() - t0
    assert proc.returncode == code, err[-3000:]
    assert elapsed < 5, elapsed
    assert "during setup, before the first step: stopping at once" in err, err[-3000:]
    assert "training steps" not in err
    assert checkpoints(rd) == []


def test_a_stop_during_the_restart_backoff_ends_the_supervisor(tmp_path):
    rd = tmp_path / "r"
    proc = start([*sets(*TINY, "train.steps=100", "checkpoint.every=2",
                        "fault_tolerance.max_restarts=3", "fault_tolerance.restart_backoff=50")],
                 rd, TRAINRUN_FAULTS="kill:step=6")
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
             str(rd)], env={"TRAINRUN_FAULTS": "kill:rank=1:step=6"}, timeout=120)
    assert p.returncode == 128 + signal.SIGKILL, p.stderr[-3000:]
    assert re.search(rf"rank 1 on {re.escape(socket.gethostname())} killed by signal 9", p.stderr)
    # The same under the supervisor with one rank: rank 0, on this host.
    p = run([QS, *sets(*TINY, "train.steps=100000", "fault_tolerance.max_restarts=1",
                       "fault_tolerance.restart_backoff=0"), "--run-dir", str(tmp_path / "s")],
            env={"TRAINRUN_FAULTS": "kill:step=6:attempts=all"}, timeout=120)
    assert p.returncode == 7, p.stderr[-3000:]  # gave up: the same step twice
    assert f"rank 0 on {socket.gethostname()} killed by signal 9" in p.stderr


def test_a_rank_exit_code_outside_the_table_is_a_launch_failure(tmp_path):
    p = run([QS, *sets(*TINY, "train.steps=100", "distributed.nproc=2"), "--run-dir",
             str(tmp_path / "r")], env={"TRAINRUN_FAULTS": "exit:rank=1:step=4:code=42"},
            timeout=120)
    assert p.returncode == 6, p.stderr[-3000:]
    assert re.search(r"rank 1\b.*code 42", p.stderr)
