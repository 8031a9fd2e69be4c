"""Data parallel across MPI ranks launched by trainrun itself: 2 ranks train like 1 rank with
the same global batch, ZeRO-1 like plain data parallel, every rank ends with identical weights,
oversubscription works when asked, and a dead rank ends the job quickly with the rank named."""
import os
import re
import shutil
import time

import pytest

from conftest import REPO, TINY, checksums, losses, run, sets

QS = str(REPO / "configs/quickstart.yaml")
BASE = [*TINY, "train.steps=24", "optimizer.warmup_steps=3", "train.batch_size=8"]


@pytest.fixture(scope="module")
def one_rank(tmp_path_factory):
    rd = tmp_path_factory.mktemp("one") / "run"
    run([QS, *sets(*BASE), "--run-dir", str(rd)], check=0)
    return losses(rd)


@pytest.mark.parametrize("zero", [0, 1])
def test_two_ranks_match_one_rank(tmp_path, one_rank, zero):
    rd = tmp_path / "r"
    p = run([QS, *sets(*BASE, "distributed.nproc=2", f"distributed.zero={zero}"), "--run-dir",
             str(rd)], check=0)
    got = losses(rd)
    assert sorted(got) == sorted(one_rank) and len(got) >= 20
    for step, want in one_rank.items():
        assert got[step] == pytest.approx(want, rel=1e-5), f"step {step}"
    sums = checksums(rd)
    assert set(sums) == {0, 1} and sums[0] == sums[1]  # bit-identical parameters
    # Only rank 0 prints; both ranks log.
    assert "rank 1/2" not in p.stderr and "rank 0/2" in p.stderr
    assert "rank 1/2" in (rd / "logs" / "rank-1.log").read_text()


def test_zero1_matches_zero0_with_uneven_shards(tmp_path):
    # d_model 33 x 3 heads... parameter counts that do not divide by 3 ranks.
    cfg = [*BASE, "model.d_model=30", "model.n_head=3", "train.batch_size=6",
           "distributed.nproc=3", "distributed.oversubscribe=true"]
    a, b = tmp_path / "z0", tmp_path / "z1"
    run([QS, *sets(*cfg, "distributed.zero=0"), "--run-dir", str(a)], check=0)
    run([QS, *sets(*cfg, "distributed.zero=1"), "--run-dir", str(b)], check=0)
    la, lb = losses(a), losses(b)
    for step in la:
        assert lb[step] == pytest.approx(la[step], rel=1e-5)
    sums = checksums(b)
    assert len(set(sums.values())) == 1 and len(sums) == 3


def test_four_ranks_oversubscribed(tmp_path):
    rd = tmp_path / "r"
    run([QS, *sets(*BASE, "train.steps=6", "distributed.nproc=4", "distributed.oversubscribe=true"),
         "--run-dir", str(rd)], check=0, timeout=300)
    assert max(losses(rd)) == 6
    assert len(set(checksums(rd).values())) == 1


def test_more_ranks_than_cores_needs_permission(tmp_path):
    cores = os.cpu_count() or 2
    p = run([QS, *sets(*BASE, f"distributed.nproc={cores * 2}"), "--run-dir",
             str(tmp_path / "r")], check=6)
    assert "oversubscribe" in p.stderr
    assert not (tmp_path / "r").exists()


def test_dry_run_prints_the_mpirun_command(tmp_path):
    p = run([QS, *sets(*BASE, "distributed.nproc=2", "launcher.mpirun_args=['--tag-output']"),
             "--dry-run", "--run-dir", str(tmp_path / "r")], check=0)
    line = p.stdout.strip()
    assert "mpirun" in line and "-np 2" in line and "--bind-to none" in line
    assert "--tag-output" in line.split("trainrun run")[0]  # an mpirun flag, before the program
    assert "-x OMP_NUM_THREADS=1" in line  # 2 cores / 2 ranks
    assert not (tmp_path / "r").exists()


def test_missing_mpirun_is_a_clear_error(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    p = run([QS, *sets(*BASE, "distributed.nproc=2"), "--run-dir", str(tmp_path / "r")],
            env={"PATH": str(bindir)}, check=6)
    assert "mpirun" in p.stderr and "openmpi-bin" in p.stderr


# A rank that dies must end the whole job within seconds, never hang. Bound: 30 s from start
# (a 2-rank start takes ~1 s here; Open MPI tears the job down within a few seconds).
def test_killed_rank_ends_the_job_and_is_named(tmp_path):
    rd = tmp_path / "r"
    t0 = time.time()
    p = run([QS, *sets(*TINY, "train.steps=100000", "distributed.nproc=2"), "--run-dir", str(rd)],
            env={"TRAINRUN_FAULTS": "kill:rank=1:step=6"}, timeout=120)
    assert time.time() - t0 < 30
    assert p.returncode != 0
    assert re.search(r"rank 1\b", p.stderr), p.stderr[-2000:]


FAKE_UNREACHABLE_MPIRUN = """#!/bin/bash
# The first FAIL launches fail as Open MPI 4.1 does when a host cannot be reached; then the
# real mpirun runs the job.
n=$(( $(cat "$COUNT" 2>/dev/null || echo 0) + 1 ))
echo "$n" > "$COUNT"
echo "launch $n: TRAINRUN_RESTART_COUNT=$TRAINRUN_RESTART_COUNT args: $*" >> "$LOG"
if (( n <= FAIL )); then
  echo "ssh: connect to host node2 port 22: No route to host" >&2
  echo "--------------------------------------------------------------------------" >&2
  echo "ORTE was unable to reliably start one or more daemons." >&2
  echo "This usually is caused by:" >&2
  echo "--------------------------------------------------------------------------" >&2
  exit 1
fi
exec "$REAL" "$@"
"""


def fake_mpirun(tmp_path, fail):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "mpirun").write_text(FAKE_UNREACHABLE_MPIRUN)
    (bindir / "mpirun").chmod(0o755)
    log = tmp_path / "launches.log"
    env = {"PATH": f"{bindir}:{os.environ['PATH']}", "COUNT": str(tmp_path / "count"),
           "LOG": str(log), "FAIL": str(fail), "REAL": shutil.which("mpirun")}
    return env, log


def test_a_launch_failure_is_restarted_not_taken_for_a_repeated_crash(tmp_path):
    """Two launches that cannot reach a host, then one that can: the job finishes (exit 0).
    Two failures without getting past step 0 would otherwise be "failed again at the same
    checkpoint" (exit 7) with restarts left. The restart count reaches the ranks by -x."""
    rd = tmp_path / "r"
    env, log = fake_mpirun(tmp_path, fail=2)
    p = run([QS, *sets(*BASE, "distributed.nproc=2", "fault_tolerance.max_restarts=3",
                       "fault_tolerance.restart_backoff=0.1"), "--run-dir", str(rd)],
            env=env, check=0)
    assert p.stderr.count("error: mpirun could not start its daemon on node2 (unreachable?)") == 2, \
        p.stderr
    assert "restart 2/3" in p.stderr
    launches = log.read_text().splitlines()
    assert len(launches) == 3
    assert all("-x TRAINRUN_RESTART_COUNT" in l for l in launches)
    assert launches[2].startswith("launch 3: TRAINRUN_RESTART_COUNT=2 ")
    assert max(losses(rd)) == 24


def test_launch_failures_still_count_against_max_restarts(tmp_path):
    rd = tmp_path / "r"
    env, log = fake_mpirun(tmp_path, fail=10)
    p = run([QS, *sets(*BASE, "distributed.nproc=2", "fault_tolerance.max_restarts=2",
                       "fault_tolerance.restart_backoff=0.1"), "--run-dir", str(rd)], env=env)
    assert p.returncode == 7, p.stderr
    assert "gave up after 2 restart(s)" in p.stderr
    assert len(log.read_text().splitlines()) == 3


def test_nodes_that_do_not_match_the_hostfile_are_refused_up_front(tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("localhost slots=2\n")
    p = run([QS, *sets(*BASE, "distributed.nproc=1", "distributed.nodes=2",
                       f"distributed.hostfile={hosts}"), "--dry-run", "--run-dir",
             str(tmp_path / "r")], check=2)
    assert "distributed.nodes=2" in p.stderr and "lists 1 host(s) (localhost)" in p.stderr
    assert str(hosts) in p.stderr
    assert not (tmp_path / "r").exists()
