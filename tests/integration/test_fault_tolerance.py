"""Fault tolerance: a killed rank is relaunched from the newest checkpoint and the run ends
exactly as if nothing happened; a stalled rank is caught by the watchdog and named; NaN steps
are skipped, and endless NaNs roll back and finally give up; max_restarts is honoured. No
checkpoint is written with non-finite weights or during a streak of bad steps, so a rollback
lands on a finite one, and a run that ends non-finite exits 7."""
import os
import random
import re
import signal
import subprocess
import time

import pytest

from conftest import REPO, TINY, TRAINRUN, ckpt, losses, metrics, run, sets

QS = str(REPO / "configs/quickstart.yaml")
BASE = [*TINY, "train.steps=24", "optimizer.warmup_steps=3", "checkpoint.every=4",
        "checkpoint.keep_last=10", "distributed.nproc=2", "fault_tolerance.restart_backoff=0"]


def checksums(rd):
    text = "".join(p.read_text() for p in sorted((rd / "logs").glob("rank-*.log")))
    return re.findall(r"rank (\d+) parameter checksum ([0-9a-f]{16}) at step (\d+)", text)


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    rd = tmp_path_factory.mktemp("clean") / "run"
    run([QS, *sets(*BASE), "--run-dir", str(rd)], check=0)
    return rd


def events(rd, name):
    return [r for r in metrics(rd, "event") if r.get("event") == name]


def test_killed_rank_restarts_and_ends_bitwise_identical(tmp_path, clean):
    rng = random.Random()
    rank, step = rng.randrange(2), rng.randrange(6, 23)
    rd = tmp_path / "r"
    p = run([QS, *sets(*BASE, "fault_tolerance.max_restarts=2"), "--run-dir", str(rd)],
            env={"TRAINRUN_FAULTS": f"kill:rank={rank}:step={step}"}, check=0, timeout=300)
    restarts = events(rd, "restart")
    assert len(restarts) == 1, p.stderr[-3000:]
    # Killed as step `step` starts: resumed from the newest checkpoint of the steps done before.
    assert restarts[0]["step"] == ((step - 1) // 4) * 4
    assert "restart 1/2" in p.stderr
    assert losses(rd) == losses(clean), f"killed rank {rank} at step {step}"
    # Both ranks end with the very parameters of the uninterrupted run.
    want = {c[1] for c in checksums(clean)}
    got = [c[1] for c in checksums(rd) if c[2] == "24"]
    assert len(want) == 1 and len(got) == 2 and set(got) == want


# Stall bound: the watchdog fires step_timeout (3 s) after the last progress, checking every
# 0.2 s, then MPI_Abort tears the job down (a few seconds): the failed attempt must end within
# step_timeout + 15 s of the stall.
def test_stalled_rank_is_caught_named_and_restarted(tmp_path, clean):
    rd = tmp_path / "r"
    t0 = time.time()
    p = run([QS, *sets(*BASE, "fault_tolerance.max_restarts=1",
                       "fault_tolerance.step_timeout=3"), "--run-dir", str(rd)],
            env={"TRAINRUN_FAULTS": "stall:rank=1:step=10"}, check=0, timeout=300)
    elapsed = time.time() - t0
    assert "ranks that did not arrive: 1 on" in p.stderr, p.stderr[-3000:]
    dumps = list((rd / "logs").glob("watchdog-rank-*.txt"))
    assert dumps and "last known phase of every rank" in dumps[0].read_text()
    restarts = events(rd, "restart")
    assert len(restarts) == 1 and restarts[0]["step"] == 8
    assert losses(rd) == losses(clean)
    assert elapsed < 3 + 15 + 20  # stall bound + the rest of the run


# A rank that stops whole (SIGSTOP: no heartbeat, no answer) is what a host that went silent
# looks like from the others. The watchdog (step_timeout 12 s, beyond the 10 s after which a
# heartbeat counts as silent) names it and its host as silent; the job is torn down (by Open
# MPI, or by the launcher's teardown_timeout) and the restart ends as the clean run did.
def test_frozen_rank_is_named_silent_and_the_job_still_ends_and_restarts(tmp_path, clean):
    rd = tmp_path / "r"
    t0 = time.time()
    p = run([QS, *sets(*BASE, "fault_tolerance.max_restarts=1", "fault_tolerance.step_timeout=12",
                       "fault_tolerance.teardown_timeout=5"), "--run-dir", str(rd)],
            env={"TRAINRUN_FAULTS": "freeze:rank=1:step=10"}, check=0, timeout=300)
    elapsed = time.time() - t0
    assert re.search(r"ranks that did not arrive: 1 on \S+ \(silent: last heartbeat \d+ s ago\)",
                     p.stderr), p.stderr[-3000:]
    assert re.search(r"hosts silent \(unreachable\?\): \S+ \(ranks 1\)", p.stderr)
    restarts = events(rd, "restart")
    assert len(restarts) == 1 and restarts[0]["step"] == 8
    assert losses(rd) == losses(clean)
    assert elapsed < 12 + 5 + 15 + 20  # step_timeout + teardown_timeout + slack + the run


def test_one_nan_step_is_skipped_and_counted(tmp_path):
    rd = tmp_path / "r"
    run([QS, *sets(*TINY, "train.steps=12"), "--run-dir", str(rd)],
        env={"TRAINRUN_FAULTS": "nan:step=6"}, check=0)
    bad = events(rd, "bad_step")
    assert [b["step"] for b in bad] == [6]  # the step the fault names, as its metrics row
    rows = metrics(rd)
    # The event and the row of the bad step (its grad norm NaN) carry the same number.
    assert [r["step"] for r in rows if r["grad_norm"] is None] == [6], rows  # NaN: null
    assert rows[-1]["step"] == 12
    assert all(r["loss"] == r["loss"] for r in rows)  # no NaN loss: the update was skipped


def test_nan_every_step_rolls_back_then_gives_up(tmp_path):
    rd = tmp_path / "r"
    p = run([QS, *sets(*TINY, "train.steps=40", "checkpoint.every=5",
                       "fault_tolerance.max_bad_steps=2", "fault_tolerance.max_rollbacks=2"),
             "--run-dir", str(rd)], env={"TRAINRUN_FAULTS": "nan:from=8"}, check=7)
    rollbacks = events(rd, "rollback")
    assert len(rollbacks) == 2 and all(r["step"] == 5 for r in rollbacks)
    assert rollbacks[1]["lr_scale"] == pytest.approx(0.25)
    assert "giving up" in p.stderr


def test_max_restarts_is_honoured(tmp_path):
    rd = tmp_path / "r"
    faults = "kill:rank=0:step=4:attempt=0,kill:rank=1:step=8:attempt=1,kill:rank=0:step=12:attempt=2"
    p = run([QS, *sets(*BASE, "fault_tolerance.max_restarts=2"), "--run-dir", str(rd)],
            env={"TRAINRUN_FAULTS": faults}, check=7, timeout=300)
    assert "gave up after 2 restart(s)" in p.stderr
    causes = [r["cause"] for r in events(rd, "restart")]
    assert len(causes) == 2 and all("rank" in c or "code" in c for c in causes)


def test_failing_at_the_same_step_stops_restarting(tmp_path):
    rd = tmp_path / "r"
    p = run([QS, *sets(*BASE, "fault_tolerance.max_restarts=5"), "--run-dir", str(rd)],
            env={"TRAINRUN_FAULTS": "exit:rank=1:step=7:code=9:attempts=all"}, check=7,
            timeout=300)
    assert "without getting past step 4" in p.stderr
    assert len(events(rd, "restart")) == 1


def test_single_rank_supervised_restart(tmp_path):
    rd = tmp_path / "r"
    base = [*TINY, "train.steps=12", "checkpoint.every=4", "fault_tolerance.max_restarts=1",
            "fault_tolerance.restart_backoff=0"]
    clean = tmp_path / "c"
    run([QS, *sets(*base), "--run-dir", str(clean)], check=0)
    run([QS, *sets(*base), "--run-dir", str(rd)], env={"TRAINRUN_FAULTS": "kill:step=7"}, check=0)
    assert losses(rd) == losses(clean)
    assert len(events(rd, "restart")) == 1


# --- no poisoned checkpoints: none written in a bad state, a diverged run never exits 0 -------

def checkpoint_steps(rd):
    """The steps of the committed checkpoints (folders whose MANIFEST was written)."""
    return sorted(int(p.parent.name.split("-")[1])
                  for p in (rd / "checkpoints").glob("step-*/MANIFEST"))


@pytest.mark.parametrize("every,nproc,zero,lands", [(1, 1, 0, 7), (5, 1, 0, 5), (5, 2, 1, 5)])
def test_inf_weights_are_never_checkpointed_and_rollback_lands_on_finite(tmp_path, every, nproc,
                                                                         zero, lands):
    # After step 8's update every weight is +inf (once): the checkpoint right after it (bad
    # counter still 0) is refused for its non-finite weights, the ones during the NaN streak
    # for the streak; the rollback lands on the last finite checkpoint and the run finishes.
    rd = tmp_path / "r"
    p = run([QS, *sets(*TINY, "train.steps=20", f"checkpoint.every={every}",
                       "checkpoint.keep_last=30", "fault_tolerance.max_bad_steps=3",
                       f"distributed.nproc={nproc}", f"distributed.zero={zero}"),
             "--run-dir", str(rd)], env={"TRAINRUN_FAULTS": "inf:step=8"}, check=0, timeout=300)
    rollbacks = events(rd, "rollback")
    assert [r["step"] for r in rollbacks] == [lands], p.stderr[-3000:]
    # (The rollback drops the metrics rows after step `lands`, checkpoint_skipped events too.)
    skipped = re.findall(r"step (\d+): not writing checkpoint \S+step-(\d+): (.*?); the "
                         r"newest checkpoint stays \S+step-(\d+)\b", p.stderr)
    want = [8, 9, 10] if every == 1 else [10]
    assert [int(s[0]) for s in skipped] == want, p.stderr[-3000:]
    assert all(int(s[1]) == int(s[0]) and int(s[3]) == lands for s in skipped)
    if every == 1:  # weights inf after a step that was itself fine: the finiteness rule
        assert "model/wte.weight [0:32, 0:32] holds 1024 non-finite values" in skipped[0][2]
    assert "non-finite loss or gradient norm" in skipped[-1][2]  # the streak rule
    for step in checkpoint_steps(rd):  # every checkpoint written is finite and verifies
        run(["inspect", str(ckpt(rd, step))], check=0)
    assert metrics(rd)[-1]["step"] == 20
    assert all(r["loss"] == r["loss"] for r in metrics(rd) if r["step"] > 11)


@pytest.mark.parametrize("fault,why", [
    ("nan:from=12", "no final checkpoint"),       # last step bad: the streak rule
    ("inf:step=12", "no final checkpoint"),       # last update diverged: the finiteness rule
    ("inf:step=11", "a non-finite loss"),         # last loss NaN
])
def test_a_run_ending_non_finite_exits_7(tmp_path, fault, why):
    rd = tmp_path / "r"
    p = run([QS, *sets(*TINY, "train.steps=12", "checkpoint.every=5"), "--run-dir", str(rd)],
            env={"TRAINRUN_FAULTS": fault}, check=7)
    assert why in p.stderr and "gave up" in p.stderr
    assert f"the newest good checkpoint is {ckpt(rd, 10)}" in p.stderr, p.stderr
    assert checkpoint_steps(rd) == [5, 10]  # the previous good checkpoint stays the newest
    assert events(rd, "gave_up")


def test_a_supervised_run_ending_non_finite_exits_7(tmp_path):
    # Through the supervisor and mpirun, 2 ranks: every rank ends 7, and 7 is never restarted.
    rd = tmp_path / "r"
    p = run([QS, *sets(*BASE, "fault_tolerance.max_restarts=2"), "--run-dir", str(rd)],
            env={"TRAINRUN_FAULTS": "nan:from=24:attempts=all"}, check=7, timeout=300)
    assert not events(rd, "restart"), p.stderr[-3000:]
    assert checkpoint_steps(rd)[-1] == 20


def test_stop_during_a_bad_streak_keeps_the_good_checkpoint(tmp_path):
    rd = tmp_path / "r"
    env = dict(os.environ, OMP_NUM_THREADS="2", TRAINRUN_FAULTS="nan:from=4")
    proc = subprocess.Popen(
        [TRAINRUN, QS, *sets(*TINY, "train.steps=100000", "checkpoint.every=2",
                             "fault_tolerance.max_bad_steps=1000000"), "--run-dir", str(rd)],
        env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 60
    while time.time() < deadline and len(events(rd, "bad_step") if (rd / "metrics.jsonl").exists()
                                         else []) < 3:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 75, err[-3000:]
    assert "not fit for a checkpoint" in err and str(ckpt(rd, 2)) in err
    assert checkpoint_steps(rd) == [2]
    p = run(["--resume", str(rd), *sets("train.steps=6")], check=0)
    assert f"resumed from {ckpt(rd, 2)} at step 2" in p.stderr
