"""A run directory whose files were replaced by symbolic links (a copy, an archive, another
user): trainrun never writes through a link it did not create. Files it replaces whole
(config.yaml) replace the link; files it opens in place (the lock, rank logs, metrics.jsonl)
are refused with exit 73 naming the link. Either way the link's target, a file of the user's,
keeps its bytes."""
import os

import pytest

from conftest import REPO, TINY, run, sets

QS = str(REPO / "configs/quickstart.yaml")
BASE = [*TINY, "train.steps=4", "checkpoint.every=2"]


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    rd = tmp_path_factory.mktemp("links") / "run"
    run([QS, *sets(*BASE), "--run-dir", str(rd)], check=0)
    return rd


def copy_run(src, dst):
    os.system(f"cp -a '{src}' '{dst}'")
    return dst


@pytest.mark.parametrize("name", [".trainrun.lock", "logs/rank-0.log", "metrics.jsonl"])
def test_a_link_to_a_users_file_is_refused_and_the_file_kept(finished, tmp_path, name):
    rd = copy_run(finished, tmp_path / "run")
    user = tmp_path / "precious.txt"
    user.write_text("the user's own words\n")
    (rd / name).unlink()
    (rd / name).symlink_to(user)
    p = run(["--resume", str(rd), *sets("train.steps=6")])
    assert p.returncode == 73, p.stderr
    assert f"{rd / name} is a symbolic link" in p.stderr, p.stderr
    assert user.read_text() == "the user's own words\n"
    assert "internal error" not in p.stderr


def test_config_yaml_as_a_link_is_replaced_not_written_through(finished, tmp_path):
    rd = copy_run(finished, tmp_path / "run")
    user = tmp_path / "my-config.yaml"
    # The user's copy of the same config, with a comment trainrun's own writer never emits.
    user.write_text("# my notes\n" + (rd / "config.yaml").read_text())
    before = user.read_bytes()
    (rd / "config.yaml").unlink()
    (rd / "config.yaml").symlink_to(user)
    run(["--resume", str(rd), *sets("train.steps=6")], check=0)
    assert user.read_bytes() == before
    assert not (rd / "config.yaml").is_symlink() and (rd / "config.yaml").is_file()


def test_a_link_in_place_of_the_logs_folder_is_refused(finished, tmp_path):
    rd = copy_run(finished, tmp_path / "run")
    elsewhere = tmp_path / "elsewhere"
    os.rename(rd / "logs", elsewhere)
    (rd / "logs").symlink_to(elsewhere)
    listing = sorted(os.listdir(elsewhere))
    p = run(["--resume", str(rd), *sets("train.steps=6")])
    assert p.returncode == 73, p.stderr
    assert f"{rd / 'logs'} is a symbolic link" in p.stderr, p.stderr
    assert sorted(os.listdir(elsewhere)) == listing


def test_slurm_submit_replaces_a_link_in_the_run_directory(tmp_path):
    """`trainrun slurm --submit` writes the script and config into the run directory: a link
    there is replaced, its target kept. A stand-in sbatch on PATH takes the job."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    sbatch = bin_dir / "sbatch"
    sbatch.write_text("#!/bin/sh\n[ \"$1\" = --version ] && { echo slurm 22.05; exit 0; }\n"
                      "echo 42\n")
    sbatch.chmod(0o755)
    rd = tmp_path / "run"
    rd.mkdir()
    user = tmp_path / "precious.txt"
    user.write_text("mine\n")
    (rd / "job.sbatch").symlink_to(user)
    run(["slurm", QS, "--nodes", "1", "--set", f"run_dir={rd}", "--submit"],
        env={"PATH": f"{bin_dir}:{os.environ['PATH']}"}, check=0)
    assert user.read_text() == "mine\n"
    assert not (rd / "job.sbatch").is_symlink()
    assert "#SBATCH" in (rd / "job.sbatch").read_text()


def test_a_fifo_among_the_tensorboard_files_is_refused_not_waited_on(finished, tmp_path):
    """On resume the earlier attempts' event files are read back to cut them to the
    checkpoint's step: a FIFO there blocked the resume for ever."""
    rd = copy_run(finished, tmp_path / "run")
    events = sorted((rd / "tb").glob("events.out.tfevents.*"))
    assert events, "the run wrote no TensorBoard file: nothing to test"
    fifo = events[0].with_name(events[0].name + "9")
    os.mkfifo(fifo)
    p = run(["--resume", str(rd), *sets("train.steps=6")], timeout=60)
    assert p.returncode == 73, p.stderr
    assert str(fifo) in p.stderr and "not a regular file" in p.stderr, p.stderr
