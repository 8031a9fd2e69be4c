"""The run directory belongs to one run and one process: a second start is refused (73) and
changes nothing, --new archives the earlier run, a lock names its holder, a user's directory is
left alone, a checkpoint from elsewhere starts a new directory, a failed start writes nothing;
and the small ones: user errors with their own codes, CONFIG with --resume, train.steps below
the checkpoint, the same data checks in validate and --dry-run, escaped control characters."""
import os
import shutil
import signal
import socket
import subprocess

from conftest import REPO, TINY, TRAINRUN, ckpt, losses, metrics, run, sets, wait_for

QS = str(REPO / "configs/quickstart.yaml")
BASE = [*TINY, "train.steps=8", "checkpoint.every=4", "checkpoint.keep_last=5"]


def snapshot(rd):
    """Every file under rd (the lock file aside) with its bytes."""
    return {str(p.relative_to(rd)): p.read_bytes() for p in sorted(rd.rglob("*"))
            if p.is_file() and p.name != ".trainrun.lock"}


def archives(rd):
    return sorted(p for p in rd.iterdir() if p.name.startswith("archive-"))


def test_a_second_start_into_a_run_is_refused_and_changes_nothing(tmp_path):
    rd = tmp_path / "r"
    run([QS, *sets(*BASE), "--run-dir", str(rd)], check=0)
    before = snapshot(rd)
    for extra in ([], ["train.steps=20"], ["model.d_model=64"]):
        p = run([QS, *sets(*BASE, *extra), "--run-dir", str(rd)], check=73)
        assert "already holds a run (checkpoints up to step 8)" in p.stderr
        assert "--resume" in p.stderr and "--new" in p.stderr
        assert "internal error" not in p.stderr
    assert snapshot(rd) == before  # the first run's checkpoints, metrics and config stay


def test_new_archives_the_earlier_run_and_resume_uses_the_new_one(tmp_path):
    rd = tmp_path / "r"
    run([QS, *sets(*BASE), "--run-dir", str(rd)], check=0)
    old = snapshot(rd)
    (rd / "notes.txt").write_text("mine")
    p = run([QS, *sets(*BASE, "train.steps=4", "seed=7"), "--run-dir", str(rd), "--new"],
            check=0)
    [archive] = archives(rd)
    assert str(archive) in p.stderr
    # Everything the first run wrote moved, byte for byte; nothing was deleted.
    assert snapshot(archive) == {k: v for k, v in old.items()}
    assert (rd / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in (rd / "checkpoints").iterdir()) == ["step-0000004"]
    assert max(losses(rd)) == 4 and min(losses(rd)) == 1
    # --resume continues the new run, not the archived one's higher steps.
    p = run(["--resume", str(rd), *sets("train.steps=6")], check=0)
    assert f"resumed from {ckpt(rd, 4)} at step 4" in p.stderr
    assert max(losses(rd)) == 6
    p = run([QS, *sets(*BASE), "--run-dir", str(rd), "--new", "--resume"], check=2)
    assert "excludes" in p.stderr



def start(args, **env):
    e = dict(os.environ, OMP_NUM_THREADS="1", **env)
    return subprocess.Popen([TRAINRUN, *args], env=e, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


def test_a_second_process_is_refused_with_the_holders_pid_and_host(tmp_path):
    rd = tmp_path / "r"
    proc = start([QS, *sets(*TINY, "train.steps=100000", "checkpoint.every=2"), "--run-dir",
                  str(rd)])
    try:
        assert wait_for(lambda: (rd / "checkpoints").is_dir() and
                        any((rd / "checkpoints").glob("step-*/MANIFEST")))
        holder = f"pid {proc.pid} on {socket.gethostname()}"
        # The plain second start said "already holds a run: --resume it" (issue 27 item 6).
        for args in (["--resume", str(rd)], [QS, *sets(*TINY), "--run-dir", str(rd)],
                     [QS, *sets(*TINY), "--run-dir", str(rd), "--new"],
                     ["--resume", str(rd), "--dry-run"]):
            p = run(args, check=73)
            assert "in use by another trainrun" in p.stderr and holder in p.stderr, p.stderr
        assert not archives(rd)  # the refused --new moved nothing
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 75, err
    # The kernel released the lock with the process: the run goes on from its checkpoint.
    p = run(["--resume", str(rd), *sets("train.steps=1")], check=0)
    assert "nothing to train" in p.stderr


def test_the_launcher_holds_the_lock_for_its_ranks(tmp_path):
    rd = tmp_path / "r"
    proc = start([QS, *sets(*TINY, "train.steps=100000", "checkpoint.every=2",
                            "distributed.nproc=2"), "--run-dir", str(rd)])
    try:
        assert wait_for(lambda: (rd / "metrics.jsonl").exists())
        p = run([QS, *sets(*TINY), "--run-dir", str(rd), "--new"], check=73)
        assert f"pid {proc.pid} on " in p.stderr  # the launcher, not a rank
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    assert proc.returncode == 75


def test_a_users_directory_is_refused_and_new_leaves_their_files(tmp_path):
    rd = tmp_path / "mine"
    rd.mkdir()
    (rd / "config.yaml").write_text("my own config\n")
    (rd / "paper.tex").write_text("\\begin{document}")
    before = snapshot(rd)
    p = run([QS, *sets(*BASE), "--run-dir", str(rd)], check=73)
    assert "trainrun did not make it" in p.stderr and "paper.tex" in p.stderr
    assert snapshot(rd) == before and not (rd / ".trainrun.lock").exists()
    run([QS, *sets(*BASE), "--run-dir", str(rd), "--new"], check=0)
    assert (rd / "paper.tex").read_text() == "\\begin{document}"
    [archive] = archives(rd)
    assert (archive / "config.yaml").read_text() == "my own config\n"  # moved, not overwritten


def test_a_checkpoint_from_elsewhere_starts_a_new_run_directory(tmp_path):
    rd = tmp_path / "runs" / "r"
    run([QS, *sets(*BASE), "--run-dir", str(rd)], check=0)
    # A folder of the user's with a copied checkpoint: its parent must not become a run.
    home = tmp_path / "home"
    (home / "stuff").mkdir(parents=True)
    (home / "config.yaml").write_text("not trainrun's\n")
    shutil.copytree(ckpt(rd, 8), home / "stuff" / "ckpt")
    before = snapshot(home)
    p = run(["--resume", "stuff/ckpt", *sets("train.steps=10")], cwd=home, check=0)
    assert "outside a run directory" in p.stderr and "internal error" not in p.stderr
    new = rd.parent / "r-from-step-8"
    assert str(new) in p.stderr
    assert sorted(losses(new)) == [9, 10]
    assert snapshot(home) == before
    assert "step-0000010" in os.listdir(new / "checkpoints")
    # The original run is untouched, and a second start from the file meets the new run.
    assert max(losses(rd)) == 8
    p = run(["--resume", "stuff/ckpt", *sets("train.steps=10")], cwd=home, check=73)
    assert "already holds a run" in p.stderr
    # Inside a run directory, a relative path continues that run.
    p = run(["--resume", "r/checkpoints/step-0000008", *sets("train.steps=9")],
            cwd=rd.parent, check=0)
    assert max(losses(rd)) == 9


def test_a_failed_start_writes_nothing(tmp_path):
    rd = tmp_path / "r"
    run([QS, *sets(*BASE), "--run-dir", str(rd)], check=0)
    before = snapshot(rd)
    bad = [*BASE, "data.synthetic=''", f"data.train={tmp_path}/none.bin"]
    for extra in ([], ["--new"]):
        p = run([QS, *sets(*bad), "--run-dir", str(rd), *extra], check=3)
        assert "none.bin" in p.stderr
    assert snapshot(rd) == before and not archives(rd)
    fresh = tmp_path / "fresh"
    run([QS, *sets(*bad), "--run-dir", str(fresh)], check=3)
    assert not fresh.exists()


def test_user_errors_have_their_own_message_and_code(tmp_path):
    (tmp_path / "afile").write_text("x")
    p = run([QS, *sets(*BASE), "--run-dir", str(tmp_path / "afile")], check=73)
    assert "is a file" in p.stderr
    p = run([QS, *sets(*BASE), "--run-dir", str(tmp_path / "afile" / "r")], check=73)
    assert "is a file" in p.stderr
    p = run([QS, *sets(*BASE, "name=" + "x" * 300)], cwd=tmp_path, check=73)
    assert "longer than the file system allows" in p.stderr and "name" in p.stderr
    (tmp_path / "textdir").mkdir()
    p = run([QS, *sets(*BASE, "data.synthetic=''", f"data.text={tmp_path}/textdir",
                       "model.vocab_size=256"), "--run-dir", str(tmp_path / "t")], check=3)
    assert "not a regular file" in p.stderr
    for p in (run(["sample", str(tmp_path), "--temperature", "nan"]),
              run(["sample", str(tmp_path), "--temperature", "-1"])):
        assert p.returncode == 2 and "--temperature" in p.stderr, p.stderr
    for p in (run([QS, *sets("name=x\x1b[31mred")], cwd=tmp_path, check=2),
              run(["validate", QS, "--set", "data.train=a\x1b]0;pwned\x07b",
                   "--set", "data.synthetic=''"])):
        assert "\x1b" not in p.stderr and "\x07" not in p.stderr and "\\x1b" in p.stderr
    assert "internal error" not in p.stderr


def test_config_given_with_resume_must_describe_the_run(tmp_path):
    rd = tmp_path / "r"
    run([QS, *sets(*BASE), "--run-dir", str(rd)], check=0)
    # OTHER.yaml: the quick-start config, with one key changed in the file itself.
    text = open(QS).read()
    other = tmp_path / "other.yaml"
    other.write_text(text.replace("seed: 1337", "seed: 7"))
    p = run([str(other), *sets(*BASE), "--resume", "--run-dir", str(rd)], check=2)
    assert f"seed is 1337 there, 7 in {other}" in p.stderr
    other.write_text(text.replace("steps: 400", "steps: 10"))
    p = run([str(other), *sets(*TINY, "checkpoint.every=4", "checkpoint.keep_last=5"), "--resume",
             "--run-dir", str(rd)], check=0)
    assert f"taking train.steps=10 from {other}" in p.stderr
    assert max(losses(rd)) == 10


def test_train_steps_at_or_below_the_checkpoint_is_explained(tmp_path):
    rd = tmp_path / "r"
    run([QS, *sets(*BASE), "--run-dir", str(rd)], check=0)
    rows = len(metrics(rd))
    for steps in (3, 8):
        p = run(["--resume", str(rd), *sets(f"train.steps={steps}")], check=0)
        assert "nothing to train" in p.stderr and "nan" not in p.stderr
    assert len(metrics(rd)) == rows


def test_validate_and_dry_run_check_what_run_checks(tmp_path):
    missing = [*BASE, "data.synthetic=''", f"data.train={tmp_path}/none.bin"]
    p = run(["validate", QS, *sets(*missing)], check=3)
    assert "none.bin" in p.stderr
    run([QS, *sets(*missing), "--dry-run", "--run-dir", str(tmp_path / "d")], check=3)
    p = run(["validate", QS, *sets(*BASE)], check=0)
    assert "data opened" in p.stderr and "not checked: the device" in p.stderr
    run([QS, *sets(*BASE), "--dry-run", "--run-dir", str(tmp_path / "n")], check=0)
    assert not (tmp_path / "n").exists()


def test_a_dry_run_where_a_run_is_says_what_a_real_run_would_meet_and_exits_0(tmp_path):
    # The README's two commands in one clone: the quick start fills runs/quickstart, then a
    # dry run there (it writes nothing) must still show what would run, and say what a real
    # run would meet instead of refusing with it.
    rd = tmp_path / "r"
    run([QS, *sets(*BASE), "--run-dir", str(rd)], check=0)
    before = snapshot(rd)
    for nproc in (1, 2):
        p = run([QS, *sets(*BASE, f"distributed.nproc={nproc}"), "--dry-run", "--run-dir",
                 str(rd)], check=0)
        assert "a real run would be refused here (exit 73)" in p.stderr, p.stderr
        assert "already holds a run (checkpoints up to step 8)" in p.stderr
        shown = "mpirun" if nproc == 2 else "# dry run: 1 rank(s)"
        assert shown in p.stdout, p.stdout
    assert snapshot(rd) == before
    run([QS, *sets(*BASE), "--run-dir", str(rd)], check=73)  # the real run is still refused
    p = run([QS, *sets(*BASE), "--dry-run", "--run-dir", str(rd), "--new"], check=0)
    assert "refused" not in p.stderr  # --new would go ahead
    (tmp_path / "f").write_text("a file")  # a path no run could use is still an error
    p = run([QS, *sets(*BASE), "--dry-run", "--run-dir", str(tmp_path / "f")], check=73)
    assert "is a file, not a directory" in p.stderr


def test_slurm_submit_without_sbatch_writes_nothing(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    rd = tmp_path / "r"
    p = run(["slurm", QS, "--set", f"run_dir={rd}", "--submit"], env={"PATH": str(bindir)})
    assert p.returncode == 6 and "sbatch" in p.stderr
    assert not rd.exists()
