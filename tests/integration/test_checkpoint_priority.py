"""The async checkpoint writer on a node whose cores other processes keep busy (issue 27): it
yields to training (SCHED_IDLE) but is raised to the normal policy once training waits for it,
so a save is bounded instead of starved; where the process may not raise a thread out of
SCHED_IDLE (no CAP_SYS_NICE, RLIMIT_NICE 0: an ordinary user), it is SCHED_BATCH, never starved.

The policies are read from /proc/PID/task/TID/sched of the thread named ckpt-writer while the
run trains; the cores are saturated by busy-loop processes the test starts and ends."""
import os
import pathlib
import shutil
import subprocess
import tempfile
import time

import pytest

from conftest import REPO, TRAINRUN, ckpt, sets

SCHED_OTHER, SCHED_BATCH, SCHED_IDLE = 0, 3, 5
# A few MB of checkpoint, every step, written asynchronously.
ARGS = ["model.n_layer=2", "model.d_model=128", "model.n_head=2", "model.seq_len=64",
        "model.vocab_size=256", "train.batch_size=4", "train.eval_every=0", "train.steps=8",
        "checkpoint.every=1", "checkpoint.async=true", "checkpoint.keep_last=2",
        "data.synthetic_tokens=65536", "logging.every=1"]


@pytest.fixture
def busy_cores():
    loops = [subprocess.Popen(["sh", "-c", "while :; do :; done"])
             for _ in range(2 * (os.cpu_count() or 1))]
    yield
    for p in loops:
        p.kill()
        p.wait()


def writer_policies(pid):
    """The scheduling policy of the process's ckpt-writer thread now; None while it has none."""
    try:
        for task in pathlib.Path(f"/proc/{pid}/task").iterdir():
            if (task / "comm").read_text().strip() == "ckpt-writer":
                for line in (task / "sched").read_text().splitlines():
                    if line.startswith("policy"):
                        return int(line.split(":")[1])
    except (FileNotFoundError, ProcessLookupError, ValueError):
        pass
    return None


def train_watching_the_writer(cmd, cwd):
    """Runs cmd; returns (exit code, output, the writer policies seen while it ran)."""
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env={k: v for k, v in os.environ.items()
                                            if k != "OMP_NUM_THREADS"})
    seen = set()
    deadline = time.time() + 600  # a bound for a hang only: 8 steps take seconds to a minute
    while proc.poll() is None and time.time() < deadline:
        policy = writer_policies(proc.pid)
        if policy is not None:
            seen.add(policy)
        time.sleep(0.01)
    if proc.poll() is None:
        proc.kill()
    out, _ = proc.communicate()
    return proc.returncode, out, seen


def test_a_starved_writer_is_raised_when_training_waits_for_it(tmp_path, busy_cores):
    code, out, seen = train_watching_the_writer(
        [TRAINRUN, str(REPO / "configs" / "quickstart.yaml"), *sets(*ARGS), "--run-dir",
         str(tmp_path / "r")], tmp_path)
    assert code == 0, out
    assert SCHED_IDLE in seen, (seen, out)  # as root: it yields between writes
    assert "checkpoint writer raised to normal priority: training waits" in out, out
    assert (ckpt(tmp_path / "r", 8) / "MANIFEST").exists()


def test_without_the_right_to_raise_it_the_writer_is_batch(busy_cores):
    """As `nobody` (no CAP_SYS_NICE, RLIMIT_NICE 0 unless this machine says otherwise): never
    SCHED_IDLE, which nothing could undo."""
    if os.geteuid() != 0:
        pytest.fail("this test drops root to nobody with setpriv: run the suite as root, as CI does")
    work = pathlib.Path(tempfile.mkdtemp(prefix="trainrun-nobody-"))
    try:
        os.chmod(work, 0o777)
        binary = work / "trainrun"  # the build tree may not be readable by nobody
        shutil.copy(TRAINRUN, binary)
        config = work / "quickstart.yaml"
        shutil.copy(REPO / "configs" / "quickstart.yaml", config)
        code, out, seen = train_watching_the_writer(
            ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
             "--inh-caps=-all", str(binary), str(config), *sets(*ARGS), "--run-dir",
             str(work / "r")], work)
        assert code == 0, out
        assert seen and SCHED_IDLE not in seen, (seen, out)
        assert SCHED_BATCH in seen, (seen, out)
        assert (ckpt(work / "r", 8) / "MANIFEST").exists()
    finally:
        shutil.rmtree(work, ignore_errors=True)
