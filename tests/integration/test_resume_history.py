"""A run's history is never lost to a resume, and every refusal's advice works when followed
(issue 43, items 3, 4 and 6): resuming from an older checkpoint in its own run directory is
refused (the branch option `--resume FILE --run-dir NEW` and --new named, each of which works),
a checkpoint copied in from another run is not adopted, `--resume RUN_DIR/checkpoints` means the
run, and a run killed before its first checkpoint can be started again as its refusal says,
keeping the earlier attempt's metrics."""
import shutil

import pytest

from conftest import REPO, TINY, ckpt, metrics, run, sets

CONFIG = str(REPO / "configs/quickstart.yaml")
BASE = [*TINY, "train.steps=6", "checkpoint.every=2", "checkpoint.keep_last=5"]


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """A run with checkpoints at 2, 4 and 6, and another run (another seed) up to step 8."""
    root = tmp_path_factory.mktemp("history")
    run([CONFIG, *sets(*BASE), "--run-dir", str(root / "run")], check=0)
    run([CONFIG, *sets(*BASE, "seed=7", "train.steps=8"), "--run-dir", str(root / "other")],
        check=0)
    return root


@pytest.fixture
def rd(made, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(made / "run", out)
    return out


def snapshot(rd):
    """Every file of the run (name -> bytes), lock file aside."""
    return {str(p.relative_to(rd)): p.read_bytes() for p in sorted(rd.rglob("*"))
            if p.is_file() and p.name != ".trainrun.lock"}


def test_resuming_an_older_checkpoint_is_refused_and_each_advice_works(rd, tmp_path):
    before = snapshot(rd)
    p = run(["--resume", str(ckpt(rd, 2)), *sets("train.steps=8", "optimizer.lr=0.002")],
            check=73)
    assert "older than the run's newest checkpoint" in p.stderr, p.stderr
    assert f"trainrun --resume {ckpt(rd, 2)} --run-dir NEW_DIR" in p.stderr
    assert f"trainrun --resume {rd}`" in p.stderr
    assert f"`trainrun {rd}/config.yaml --run-dir {rd} --new`" in p.stderr
    assert snapshot(rd) == before  # nothing written, nothing deleted
    # The branch: a new run directory from step 2; the run it came from stays as it was.
    branch = tmp_path / "branch"
    p = run(["--resume", str(ckpt(rd, 2)), "--run-dir", str(branch), *sets("train.steps=8")],
            check=0)
    assert "resumed from" in p.stderr and "at step 2" in p.stderr, p.stderr
    assert [r["step"] for r in metrics(branch)] == list(range(3, 9))
    assert snapshot(rd) == before
    # Continuing the run from its newest checkpoint.
    p = run(["--resume", str(rd), *sets("train.steps=8")], check=0)
    assert f"resumed from {ckpt(rd, 6)} at step 6" in p.stderr, p.stderr
    assert [r["step"] for r in metrics(rd)] == list(range(1, 9))
    # Starting over: the earlier run's files go into an archive, none deleted.
    run([str(rd / "config.yaml"), "--run-dir", str(rd), "--new"], check=0)
    archived = list(rd.glob("archive-*/checkpoints/step-0000008/MANIFEST"))
    assert archived and ckpt(rd, 6).exists(), sorted(rd.rglob("*"))


def test_resuming_the_newest_checkpoint_continues_the_run(rd):
    p = run(["--resume", str(ckpt(rd, 6)), *sets("train.steps=7")], check=0)
    assert "resumed from" in p.stderr and "at step 6" in p.stderr
    assert [r["step"] for r in metrics(rd)] == list(range(1, 8))


@pytest.mark.parametrize("slash", ["", "/"])
def test_resume_of_the_checkpoints_folder_resumes_its_run(rd, slash):
    p = run(["--resume", str(rd / "checkpoints") + slash, *sets("train.steps=7")], check=0)
    assert f"resumed from {ckpt(rd, 6)} at step 6" in p.stderr, p.stderr


def test_a_checkpoint_of_another_run_is_not_adopted(rd, made, tmp_path):
    stray = ckpt(rd, 8)
    shutil.copytree(ckpt(made / "other", 8), stray)
    before = snapshot(rd)
    p = run(["--resume", str(rd), *sets("train.steps=9")], check=4)
    assert f"checkpoint {stray} is not one of the run in {rd}" in p.stderr, p.stderr
    assert "seed is 1337 there, 7 in" in p.stderr, p.stderr
    assert snapshot(rd) == before
    # Asked for explicitly, it starts a new run of its own.
    branch = tmp_path / "branch"
    p = run(["--resume", str(stray), "--run-dir", str(branch), *sets("train.steps=9")], check=0)
    assert "at step 8" in p.stderr
    # Moved out, the run resumes from its own newest checkpoint.
    stray.rename(tmp_path / "stray")
    p = run(["--resume", str(rd), *sets("train.steps=7")], check=0)
    assert f"resumed from {ckpt(rd, 6)} at step 6" in p.stderr, p.stderr


@pytest.mark.parametrize("advice", ["same command", "recorded config"])
def test_a_run_killed_before_its_first_checkpoint_starts_again_as_advised(tmp_path, advice):
    rd = tmp_path / "killed"
    args = [CONFIG, *sets(*TINY, "train.steps=6", "checkpoint.every=100"), "--run-dir", str(rd)]
    p = run(args, env={"TRAINRUN_FAULTS": "exit:step=4:code=9"})
    assert p.returncode != 0 and not list(rd.glob("checkpoints/step-*"))
    attempt = [r["step"] for r in metrics(rd)]
    assert attempt, "the killed attempt logged no step"
    p = run(args, check=73)
    assert "start it again from step 0 by adding --resume to this command" in p.stderr, p.stderr
    # `--resume RUN_DIR` alone has nothing to resume, and says how to start it again.
    p = run(["--resume", str(rd)], check=4)
    recorded = [str(rd / "config.yaml"), "--run-dir", str(rd), "--resume"]
    assert f"`trainrun {' '.join(recorded)}`" in p.stderr, p.stderr
    # The advice, followed: the run starts again from step 0, and the killed attempt's metrics
    # are kept in an archive, not dropped.
    p = run([*args, "--resume"] if advice == "same command" else recorded, check=0)
    assert "no checkpoint in" in p.stderr and "starting the run" in p.stderr, p.stderr
    assert [r["step"] for r in metrics(rd)] == list(range(1, 7))
    kept = list(rd.glob("archive-*/metrics.jsonl"))
    assert kept and [r["step"] for r in metrics(kept[0].parent)] == attempt

def test_when_no_checkpoint_verifies_the_advice_to_start_over_works(rd, tmp_path):
    for f in (rd / "checkpoints").glob("step-*/rank-*.h5"):
        f.write_bytes(b"garbage")
    p = run(["--resume", str(rd)], check=4)
    # config.yaml names the directory the run was made in (the fixture's): the advice names the
    # run directory as well, so it holds for a run directory moved or copied since.
    advice = f"`trainrun {rd}/config.yaml --run-dir {rd} --new`"
    assert f"start the run over with {advice}" in p.stderr, p.stderr
    run([str(rd / "config.yaml"), "--run-dir", str(rd), "--new"], check=0)
    assert len(list(rd.glob("archive-*/checkpoints/step-*/MANIFEST"))) == 3  # kept, not deleted


def test_resume_of_an_empty_directory_names_a_start_that_works(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    p = run(["--resume", str(empty)], check=4)
    assert f"`trainrun CONFIG --run-dir {empty}`" in p.stderr, p.stderr
    run([CONFIG, *sets(*TINY, "train.steps=2"), "--run-dir", str(empty)], check=0)
