"""The OpenMP wait policy (include/trainrun/runtime/omp_wait.h): every process that trains runs with
libgomp's spin bounded by train.omp_spincount unless the environment says otherwise, whether it
was started alone (it re-executes itself), supervised, or as a rank of mpirun. The run header
reports what the training process's libgomp was loaded with."""
import pathlib
import re
import subprocess

from conftest import REPO, TINY, TRAINRUN, run, sets, wait_for

QS = str(REPO / "configs/quickstart.yaml")
BASE = [*TINY, "train.steps=3"]


def wait_in_header(text):
    m = re.findall(r"OpenMP threads, ([^)]+)\)", text)
    assert m, text[-2000:]
    return m


def test_a_lone_run_trains_with_the_bounded_spin(tmp_path):
    p = run([QS, *sets(*BASE), "--run-dir", str(tmp_path / "r")], check=0)
    assert wait_in_header(p.stderr + p.stdout) == ["spin 3000"]
    # Re-executing did not run anything twice: one header, one "done".
    assert (p.stderr + p.stdout).count("done: 3 steps") == 1


def test_the_config_key_and_the_environment_choose(tmp_path):
    p = run([QS, *sets(*BASE, "train.omp_spincount=250"), "--run-dir", str(tmp_path / "a")],
            check=0)
    assert wait_in_header(p.stderr + p.stdout) == ["spin 250"]
    p = run([QS, *sets(*BASE, "train.omp_spincount=-1"), "--run-dir", str(tmp_path / "b")],
            check=0)
    assert wait_in_header(p.stderr + p.stdout) == ["libgomp's default spin"]
    p = run([QS, *sets(*BASE), "--run-dir", str(tmp_path / "c")],
            env={"OMP_WAIT_POLICY": "passive"}, check=0)
    assert wait_in_header(p.stderr + p.stdout) == ["wait policy passive"]
    p = run([QS, *sets(*BASE), "--run-dir", str(tmp_path / "d")],
            env={"GOMP_SPINCOUNT": "77"}, check=0)
    assert wait_in_header(p.stderr + p.stdout) == ["spin 77"]


def test_ranks_and_supervised_runs_get_it_from_the_launcher(tmp_path):
    rd = tmp_path / "r"
    run([QS, *sets(*BASE, "distributed.nproc=2"), "--run-dir", str(rd)], check=0)
    logs = "".join(p.read_text() for p in sorted((rd / "logs").glob("rank-*.log")))
    assert wait_in_header(logs) == ["spin 3000", "spin 3000"]
    p = run([QS, *sets(*BASE, "distributed.nproc=2", "train.omp_spincount=-1"), "--dry-run",
             "--run-dir", str(tmp_path / "d")], check=0)
    assert "GOMP_SPINCOUNT" not in p.stdout
    p = run([QS, *sets(*BASE, "distributed.nproc=2"), "--dry-run", "--run-dir",
             str(tmp_path / "e")], env={"GOMP_SPINCOUNT": "9"}, check=0)
    assert "-x GOMP_SPINCOUNT " in p.stdout + " " and "GOMP_SPINCOUNT=" not in p.stdout
    sup = tmp_path / "s"
    p = run([QS, *sets(*BASE, "fault_tolerance.max_restarts=1"), "--run-dir", str(sup)], check=0)
    assert wait_in_header(p.stderr + p.stdout) == ["spin 3000"]


def test_a_re_executed_run_keeps_its_name(tmp_path):
    # A lone run re-executes itself through /proc/self/exe, after which the kernel names the
    # process "exe": ps, top and `pkill trainrun` would not find it. It names itself again.
    rd = tmp_path / "r"
    with open(tmp_path / "stderr", "w") as err:
        p = subprocess.Popen([TRAINRUN, QS, *sets(*BASE, "train.steps=100000"), "--run-dir",
                              str(rd)], stdout=subprocess.DEVNULL, stderr=err)
    try:
        # Training has begun, so the process is the re-executed one (same pid).
        assert wait_for(lambda: (rd / "metrics.jsonl").is_file(), timeout=120), \
            (tmp_path / "stderr").read_text()[-2000:]
        assert "spin 3000" in (tmp_path / "stderr").read_text()
        assert pathlib.Path(f"/proc/{p.pid}/comm").read_text().strip() == \
            pathlib.Path(TRAINRUN).name[:15]
    finally:
        p.kill()
        p.wait()
