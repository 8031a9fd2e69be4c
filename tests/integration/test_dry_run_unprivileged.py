"""`--dry-run` promises to say what a real run would be refused for in the run directory: for an
ordinary user in a directory they cannot write, "a real run would be refused here (exit 73)",
and the real run must then exit 73. Root may write anywhere, so under root the user is `nobody`
(setpriv); any other user runs as itself in a folder of its own made read-only."""
import os
import pathlib
import shutil
import stat
import subprocess
import tempfile

import pytest

from conftest import REPO, TINY, TRAINRUN, sets

AS_ROOT = os.geteuid() == 0
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if AS_ROOT else []
QS = str(REPO / "configs" / "quickstart.yaml")


def reachable_by_others(path):
    """The first part of `path` that `nobody` cannot reach (search every folder above it, read
    and, for the binary, execute it), or None."""
    p = pathlib.Path(path).resolve()
    for folder in reversed(p.parents):
        if not os.stat(folder).st_mode & stat.S_IXOTH:
            return f"{folder} (no search permission for others)"
    mode = os.stat(p).st_mode
    if not mode & stat.S_IROTH:
        return f"{p} (not readable by others)"
    if os.access(p, os.X_OK) and not mode & stat.S_IXOTH:
        return f"{p} (not executable by others)"
    return None


@pytest.fixture
def locked_place():
    """A folder the user can search but not write (not under tmp_path, whose parents are mode
    700: nobody could not reach it)."""
    for path in (TRAINRUN, QS):
        blocked = reachable_by_others(path) if AS_ROOT else None
        assert blocked is None, (
            f"{path} must be readable by the user nobody for this test, but {blocked} is not: "
            f"build in a world-readable checkout (chmod o+rx on that path)")
    d = pathlib.Path(tempfile.mkdtemp(prefix="trainrun-nobody-", dir="/tmp"))
    d.chmod(0o755 if AS_ROOT else 0o555)
    yield d
    d.chmod(0o755)
    for sub in d.iterdir():
        sub.chmod(0o755)
    shutil.rmtree(d)


def as_nobody(args, cwd):
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "GOMP_SPINCOUNT",
                                                              "OMP_WAIT_POLICY")}
    env["HOME"] = str(cwd)
    return subprocess.run([*NOBODY, TRAINRUN, *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("existing", [False, True], ids=["missing-run-dir", "empty-run-dir"])
def test_dry_run_as_a_user_who_cannot_write_the_run_dir_says_a_run_would_be_refused(
        locked_place, existing):
    rd = locked_place / "run"
    if existing:
        locked_place.chmod(0o755)
        rd.mkdir()
        rd.chmod(0o755 if AS_ROOT else 0o555)  # the user may look in, not write
        locked_place.chmod(0o755 if AS_ROOT else 0o555)
    args = [QS, *sets(*TINY, "train.steps=2"), "--run-dir", str(rd)]
    dry = as_nobody([*args, "--dry-run"], locked_place)
    assert dry.returncode == 0, dry.stderr
    assert "--dry-run: a real run would be refused here (exit 73)" in dry.stderr, dry.stderr
    assert "not writable" in dry.stderr and str(rd) in dry.stderr, dry.stderr
    assert sorted(p.name for p in locked_place.iterdir()) == (["run"] if existing else [])
    # The promise holds: the real run is refused with that code, and writes nothing.
    real = as_nobody(args, locked_place)
    assert real.returncode == 73, real.stderr
    assert "not writable" in real.stderr
    assert not rd.exists() or not any(rd.iterdir())


def test_dry_run_where_a_lock_file_the_user_cannot_write_would_stop_a_run_says_so(locked_place):
    # A folder the user may write, holding a lock file they may not (another user's run there,
    # under root; a read-only one otherwise): the real run cannot open it for writing.
    locked_place.chmod(0o755)
    rd = locked_place / "run"
    rd.mkdir()
    rd.chmod(0o777)
    (rd / ".trainrun.lock").write_text("")
    (rd / ".trainrun.lock").chmod(0o444)
    args = [QS, *sets(*TINY, "train.steps=2"), "--run-dir", str(rd)]
    dry = as_nobody([*args, "--dry-run"], locked_place)
    assert dry.returncode == 0, dry.stderr
    assert "--dry-run: a real run would be refused here (exit 73)" in dry.stderr, dry.stderr
    real = as_nobody(args, locked_place)
    assert real.returncode == 73, real.stderr
    assert sorted(p.name for p in rd.iterdir()) == [".trainrun.lock"]
