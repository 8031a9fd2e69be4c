"""A disk that fills up: a checkpoint that cannot be written ends the run with exit 74 and a
message saying how much space it needed, the older checkpoints stay intact and resumable, and
the process exits normally (HDF5 1.10 used to crash in its atexit shutdown after a failed
write: exit 139). A real full file system: a small tmpfs mounted for the test, which needs
root (CI runs as root); without it the test fails rather than pass unchecked."""
import json
import os
import signal
import subprocess
import time

import pytest

from conftest import REPO, TINY, TRAINRUN, run, sets, wait_for

CONFIG = str(REPO / "configs/quickstart.yaml")
# Logging rarely: the checkpoint, not a metrics line, must be the first write to meet a full
# disk.
BASE = [*TINY, "train.steps=1000000", "checkpoint.every=10", "checkpoint.keep_last=2",
        "logging.every=100000"]


@pytest.fixture
def disk(tmp_path):
    assert os.geteuid() == 0, "mounting a small tmpfs needs root (CI runs the tests as root)"
    mnt = tmp_path / "disk"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(mnt, leave=0, name="filler"):
    """Fills the file system but for about `leave` bytes (into the file `name`)."""
    st = os.statvfs(mnt)
    size = max(0, st.f_bavail * st.f_frsize - leave)
    with open(mnt / name, "wb") as f:
        try:
            f.write(b"\0" * size)
            if not leave:
                f.write(b"\0" * (1 << 20))  # whatever rounding left
        except OSError:
            pass


def checkpoints(rd):
    """The committed checkpoints: folders whose MANIFEST was written."""
    return sorted(m.parent for m in (rd / "checkpoints").glob("step-*/MANIFEST"))


def assert_clean_failure(p, rd):
    assert p.returncode == 74, p.stderr
    # A rank's file reserves its space first ("not enough space"); the MANIFEST, rank 0's commit,
    # is small and may be what meets the full disk instead (with async, whichever came last).
    assert ("cannot write checkpoint" in p.stderr and "not enough space" in p.stderr) or \
        "cannot commit checkpoint" in p.stderr, p.stderr
    assert "No space left on device" in p.stderr, p.stderr
    assert not list((rd / "checkpoints").rglob("*.tmp-*")), "a temporary file was left behind"


@pytest.mark.parametrize("async_write", [False, True])
def test_disk_full_mid_run_keeps_older_checkpoints(disk, async_write):
    rd = disk / "run"
    proc = subprocess.Popen(
        [TRAINRUN, CONFIG, *sets(*BASE, f"checkpoint.async={str(async_write).lower()}"),
         "--run-dir", str(rd)], text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert wait_for(lambda: len(checkpoints(rd)) >= 1, timeout=120)
        # Paused while the disk fills, so no checkpoint can slip in between.
        proc.send_signal(signal.SIGSTOP)
        time.sleep(0.2)  # let an async write in flight finish (or fail) under the pause
        older = checkpoints(rd)
        fill(disk)
        proc.send_signal(signal.SIGCONT)
        # A write whose space was reserved before the pause completes, and its pruning frees an
        # older checkpoint's space, enough for the next save, and so on: another job on the disk
        # would take that space, so the test does too, until the run fails for lack of it.
        deadline = time.monotonic() + 120
        refills = 0
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
            refills += 1
            fill(disk, name=f"filler-{refills}")
        out, err = proc.communicate(timeout=10)
    finally:
        proc.kill()
    p = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    assert_clean_failure(p, rd)
    survivors = checkpoints(rd)
    # The newest older checkpoint survives, or a newer one replaced it: a write whose space
    # was reserved before the disk filled completes.
    assert survivors and survivors[-1] >= older[-1]
    for f in disk.glob("filler*"):
        f.unlink()
    for ck in survivors:
        run(["inspect", str(ck)], check=0)
    # The run resumes from the newest survivor once there is room again.
    step = int(survivors[-1].name.split("-")[1])
    run(["--resume", str(rd), *sets(f"train.steps={step + 2}")], check=0)


def test_disk_full_at_start(disk):
    """Room for the run directory's first files and metrics, not for a checkpoint."""
    rd = disk / "run"
    fill(disk, leave=256 * 1024)
    p = run([CONFIG, *sets(*BASE), "--run-dir", str(rd)], timeout=120)
    assert_clean_failure(p, rd)
    assert not checkpoints(rd)
    assert "step-0000010" in p.stderr


def test_metrics_file_on_a_full_disk_does_not_crash(disk):
    """metrics.h5 meets the full disk first: its error is reported, and HDF5's shutdown no longer
    turns that into SIGSEGV (src/main.cpp)."""
    rd = disk / "run"
    fill(disk, leave=96 * 1024)
    p = run([CONFIG, *sets(*BASE), "--run-dir", str(rd)], timeout=120)
    assert p.returncode > 0 and p.returncode < 128, p.stderr
    assert "No space left on device" in p.stderr, p.stderr


def test_metrics_lines_on_a_full_disk_exit_74_and_leave_whole_lines(disk):
    """The disk fills while metrics.jsonl is appended to every step: the run ends with 74 (a
    write failure, not restarted), names the file, and every line left parses (the line cut
    short is cut off again)."""
    rd = disk / "run"
    proc = subprocess.Popen(
        [TRAINRUN, CONFIG, *sets(*TINY, "train.steps=1000000", "checkpoint.every=1000000",
                                 "logging.every=1", "logging.tensorboard=false"),
         "--run-dir", str(rd)], text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        jsonl = rd / "metrics.jsonl"
        assert wait_for(lambda: jsonl.exists() and jsonl.stat().st_size > 2000, timeout=120)
        proc.send_signal(signal.SIGSTOP)
        fill(disk)
        proc.send_signal(signal.SIGCONT)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 74, err
    assert "No space left on device" in err, err
    assert "metrics file" in err and "internal error" not in err, err
    lines = jsonl.read_text().splitlines()
    assert lines
    for line in lines:
        json.loads(line)
