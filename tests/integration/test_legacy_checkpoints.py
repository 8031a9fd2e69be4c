"""Checkpoints made by the release before the one-layout rewrite (issue 44 part 4) resume exactly
as that release resumes them: a single file (format 3, 1 rank) and a sharded folder (format 4,
2 ranks, ZeRO-1), committed in tests/data/legacy-checkpoints/ with make.sh, which made them and
records there how. expected.json holds what that release did with each: resumed to step 8 on 1
rank, 2 ranks with ZeRO-1 and 2 ranks without, every step's loss, the parameter checksums, and
`inspect` of the fixture, of the resumed run's last checkpoint and of `export`.

`python3 tests/integration/test_legacy_checkpoints.py --write-expected` rewrites expected.json
with TRAINRUN_BIN (make.sh does, with the old release): the test and the record run the same
code below."""
import json
import os
import pathlib
import re
import shutil
import sys
import tempfile

import pytest

from conftest import REPO, TRAINRUN, checksums, losses, run, sets

HERE = REPO / "tests" / "data" / "legacy-checkpoints"
EXPECTED = HERE / "expected.json"
FIXTURES = {"format3": "format3/step-0000004.h5", "format4": "format4/step-0000004"}
ONE_RANK = ["distributed.nproc=1", "distributed.zero=0"]
# name: (fixture, --set for the resume). The fixtures' own configs run 8 steps.
RESUMES = {
    "format3-1rank": ("format3", ONE_RANK),
    "format4-1rank": ("format4", ONE_RANK),
    "format4-2ranks-zero1": ("format4", ["distributed.nproc=2", "distributed.zero=1"]),
    "format4-2ranks": ("format4", ["distributed.nproc=2", "distributed.zero=0"]),
}
# The same kernels give identical bits on one machine, but oneDNN picks its sgemm kernels by the
# CPU at run time: AVX-512 and AVX2 sum in another order (about 1e-8 relative in these losses,
# measured with ONEDNN_MAX_CPU_ISA=AVX2), so losses are held to 1e-6 and the checksum, which any
# last bit changes, is compared with the one recorded for this CPU's kernels.
REL = 1e-6


def cpu_kernels():
    """Which of oneDNN's f32 kernel families this machine (or ONEDNN_MAX_CPU_ISA) gets."""
    if os.environ.get("ONEDNN_MAX_CPU_ISA", "").upper().startswith("AVX2"):
        return "avx2"
    flags = set()
    cpuinfo = pathlib.Path("/proc/cpuinfo")
    for line in cpuinfo.read_text().splitlines() if cpuinfo.exists() else []:
        if line.startswith("flags"):
            flags.update(line.split(":", 1)[1].split())
    return "avx512_core" if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags else "avx2"


def inspect(path, keys=("step", "world_size", "verdict")):
    """The named fields of `trainrun inspect PATH`, which must call it OK (exit 0)."""
    out = run(["inspect", str(path)], check=0).stdout
    got = dict(re.findall(r"^(\w+)\s*[:=]\s*(\S+)", out, re.M))
    missing = [k for k in keys if k not in got]
    assert not missing, f"inspect {path} printed no {missing}:\n{out}"
    return {k: int(got[k]) if got[k].isdigit() else got[k] for k in keys}


def copy_fixture(name, dest):
    """A copy of fixture NAME under dest: nothing the test runs can touch the committed one."""
    src = HERE / FIXTURES[name]
    out = pathlib.Path(dest) / src.name
    if src.is_dir():
        shutil.copytree(src, out)
    else:
        shutil.copy2(src, out)
    return out


def tree_bytes(path):
    path = pathlib.Path(path)
    if path.is_file():
        return {path.name: path.read_bytes()}
    return {p.name: p.read_bytes() for p in sorted(path.iterdir())}


def newest_checkpoint(run_dir):
    found = [(int(m.group(1)), p) for p in (pathlib.Path(run_dir) / "checkpoints").iterdir()
             if (m := re.fullmatch(r"step-(\d+)(\.h5)?", p.name))]
    assert found, f"{run_dir} wrote no checkpoint"
    return max(found)[1]


def resume(name, tmp, env=None):
    """Branches a new run from a copy of NAME's fixture (--resume FILE --run-dir NEW_DIR) and
    returns what it did: losses by step, checksums by rank, inspect of its last checkpoint."""
    fixture, extra = RESUMES[name]
    tmp = pathlib.Path(tmp)
    (tmp / "fixture").mkdir()
    src = copy_fixture(fixture, tmp / "fixture")
    before = tree_bytes(src)
    rd = tmp / "run"
    run(["--resume", str(src), "--run-dir", str(rd), *sets(*extra)], env=env, check=0)
    assert tree_bytes(src) == before, f"resuming {src} wrote to it"
    return {
        "losses": {str(step): loss for step, loss in sorted(losses(rd).items())},
        "checksums": {str(rank): value for rank, value in checksums(rd).items()},
        "final_checkpoint": inspect(newest_checkpoint(rd)),
    }


def export(fixture, tmp):
    """inspect of `trainrun export` of a copy of the fixture (one file, whatever the layout)."""
    tmp = pathlib.Path(tmp) / f"export-{fixture}"
    tmp.mkdir()
    src = copy_fixture(fixture, tmp)
    out = tmp / "export.h5"
    run(["export", str(src), "--out", str(out)], check=0)
    return inspect(out, ("step", "verdict"))


@pytest.fixture(scope="module")
def expected():
    return json.loads(EXPECTED.read_text())


@pytest.mark.parametrize("fixture", sorted(FIXTURES))
def test_inspect_and_export_of_the_fixture(tmp_path, expected, fixture):
    want = expected["fixtures"][fixture]
    (tmp_path / "fixture").mkdir()
    src = copy_fixture(fixture, tmp_path / "fixture")
    assert inspect(src, tuple(want["inspect"])) == want["inspect"]
    assert export(fixture, tmp_path) == want["export"]


@pytest.mark.parametrize("name", sorted(RESUMES))
def test_resume_as_the_old_release_did(tmp_path, expected, name):
    want = expected["resumes"][name]
    got = resume(name, tmp_path)
    assert sorted(got["losses"], key=int) == sorted(want["losses"], key=int), (
        "the resumed run logged other steps (did it start from step 4?)")
    for step, loss in want["losses"].items():
        assert got["losses"][step] == pytest.approx(loss, rel=REL), f"step {step}"
    kernels = cpu_kernels()
    assert kernels in want["checksums"], f"expected.json has no checksum for {kernels} kernels"
    assert got["checksums"] == want["checksums"][kernels]
    assert got["final_checkpoint"] == want["final_checkpoint"]


def write_expected():
    """expected.json from TRAINRUN_BIN (make.sh runs this with the old release). On an AVX-512
    machine each resume runs a second time with oneDNN held to AVX2, for the checksums machines
    without AVX-512 get; its losses must agree within REL, which is what the tolerance is for."""
    version = run(["--version"], check=0).stdout.strip()
    out = {"made_by": f"{version} ({pathlib.Path(TRAINRUN).name})", "fixtures": {}, "resumes": {}}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        for fixture in sorted(FIXTURES):
            d = tmp / f"inspect-{fixture}"
            d.mkdir()
            keys = ("format_version", "step", "world_size", "verdict")
            out["fixtures"][fixture] = {
                "inspect": inspect(copy_fixture(fixture, d), keys),
                "export": export(fixture, tmp),
            }
        for name in sorted(RESUMES):
            d = tmp / name
            d.mkdir()
            got = resume(name, d)
            kernels = cpu_kernels()
            got["checksums"] = {kernels: got["checksums"]}
            if kernels == "avx512_core":
                d2 = tmp / f"{name}-avx2"
                d2.mkdir()
                avx2 = resume(name, d2, env={"ONEDNN_MAX_CPU_ISA": "AVX2"})
                for step, loss in got["losses"].items():
                    assert avx2["losses"][step] == pytest.approx(loss, rel=REL), (name, step)
                got["checksums"]["avx2"] = avx2["checksums"]
            out["resumes"][name] = got
    EXPECTED.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    print(f"wrote {EXPECTED}")


if __name__ == "__main__":
    if sys.argv[1:] != ["--write-expected"]:
        sys.exit(f"usage: TRAINRUN_BIN=BIN {sys.argv[0]} --write-expected")
    write_expected()
