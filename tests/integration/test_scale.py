"""Scale rehearsal on one machine: 32 oversubscribed ranks through the normal launcher train,
write a checkpoint of 32 rank files, resume on 8 and on 1 rank with the uninterrupted run's
losses, come back from a rank killed with SIGKILL to the same parameters, and a rank frozen with
SIGSTOP is named by the watchdog (rank and host). 64 ranks, and the straggler detector under a
SIGSTOP/SIGCONT duty cycle, are in bench/scale.sh (2 cores cannot time 64 ranks fairly)."""
import re
import shutil

import pytest

from conftest import REPO, TINY, losses, run, sets

QS = str(REPO / "configs/quickstart.yaml")
RANKS = 32
STEPS = 8
BASE = [*TINY, f"train.steps={STEPS}", f"train.batch_size={RANKS}", "optimizer.warmup_steps=2",
        "checkpoint.every=4", "checkpoint.keep_last=10",
        f"distributed.nproc={RANKS}", "distributed.oversubscribe=true",
        "fault_tolerance.restart_backoff=0"]


def final_checksums(rd, step=STEPS):
    text = "".join(p.read_text() for p in sorted((rd / "logs").glob("rank-*.log")))
    return {int(r): c for r, c, s in
            re.findall(r"rank (\d+) parameter checksum ([0-9a-f]{16}) at step (\d+)", text)
            if int(s) == step}


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    rd = tmp_path_factory.mktemp("scale") / "run"
    run([QS, *sets(*BASE), "--run-dir", str(rd)], check=0, timeout=600)
    return rd


def test_32_ranks_train_and_write_32_shards(clean):
    shards = sorted(p.name for p in (clean / "checkpoints" / f"step-{STEPS:07d}").iterdir())
    assert shards == ["MANIFEST"] + [f"rank-{r:05d}-of-{RANKS:05d}.h5" for r in range(RANKS)]
    sums = final_checksums(clean)
    assert sorted(sums) == list(range(RANKS)) and len(set(sums.values())) == 1
    assert sorted(losses(clean)) == list(range(1, STEPS + 1))


@pytest.fixture(scope="module")
def interrupted(clean, tmp_path_factory):
    """The same run, every rank stopped at step 6 (after its step-4 checkpoint)."""
    rd = tmp_path_factory.mktemp("scale-cut") / "run"
    p = run([QS, *sets(*BASE), "--run-dir", str(rd)],
            env={"TRAINRUN_FAULTS": "exit:step=6:code=9"}, timeout=600)
    assert p.returncode != 0
    assert (rd / "checkpoints" / "step-0000004" / "MANIFEST").exists()
    return rd


@pytest.mark.parametrize("then", [8, 1])
def test_resume_32_shards_on_fewer_ranks(clean, interrupted, tmp_path, then):
    rd = tmp_path / "r"
    shutil.copytree(interrupted, rd)
    run(["--resume", str(rd), *sets(f"distributed.nproc={then}")], check=0, timeout=600)
    got, want = losses(rd), losses(clean)
    assert sorted(got) == sorted(want)
    for step, loss in want.items():
        assert got[step] == pytest.approx(loss, rel=1e-5), f"step {step}"


def test_a_killed_rank_of_32_restarts_to_the_same_parameters(clean, tmp_path):
    rd = tmp_path / "r"
    p = run([QS, *sets(*BASE, "fault_tolerance.max_restarts=1"), "--run-dir", str(rd)],
            env={"TRAINRUN_FAULTS": "kill:rank=17:step=6"}, check=0, timeout=600)
    assert "restart 1/1" in p.stderr, p.stderr[-3000:]
    assert losses(rd) == losses(clean)
    assert set(final_checksums(rd).values()) == set(final_checksums(clean).values())


def test_a_frozen_rank_of_32_is_named_by_the_watchdog(clean, tmp_path):
    rd = tmp_path / "r"
    p = run([QS, *sets(*BASE, "fault_tolerance.max_restarts=1", "fault_tolerance.step_timeout=12",
                       "fault_tolerance.teardown_timeout=5"), "--run-dir", str(rd)],
            env={"TRAINRUN_FAULTS": "freeze:rank=21:step=6"}, check=0, timeout=600)
    assert re.search(r"ranks that did not arrive: 21 on \S+ \(silent: last heartbeat \d+ s ago\)",
                     p.stderr), p.stderr[-3000:]
    assert losses(rd) == losses(clean)


@pytest.mark.parametrize("soft,hard", [(64, 4096), (64, 64)])
def test_an_open_file_limit_is_raised_or_refused_before_the_launch(tmp_path, soft, hard):
    """16 ranks on one node need mpirun to hold about 4 descriptors each: under `ulimit -n 64`
    mpirun hung until the launch bound. trainrun raises the soft limit to the hard one, or, when
    the hard limit is too low as well, refuses before anything starts and says how to raise it."""
    n = 16
    cmd = [QS, *sets(*TINY, "train.steps=3", f"train.batch_size={n}", f"distributed.nproc={n}",
                     "distributed.oversubscribe=true", "checkpoint.every=0",
                     "fault_tolerance.launch_timeout=60"), "--run-dir", str(tmp_path / "r")]
    p = run(cmd, check=None, timeout=300, wrap=["prlimit", f"--nofile={soft}:{hard}", "--"])
    if hard >= 4096:
        assert p.returncode == 0, p.stderr
        assert len(losses(tmp_path / "r")) == 3
    else:
        assert p.returncode == 6, p.stderr
        assert f"mpirun with {n} rank(s) on this node needs about 96 open files" in p.stderr
        assert "hard limit (`ulimit -Hn`) is 64" in p.stderr
        assert not (tmp_path / "r" / "metrics.jsonl").exists()
