"""Checkpoints of several ranks (the folder every run writes): every rank writes its own file
of the slices it holds, rank 0 commits a manifest. They resume bit for bit on the same world
size and within 1e-5 on another (with and without ZeRO-1), old single-file checkpoints resume
into a 2-rank run, a damaged or missing rank file is named and the previous complete checkpoint
used, a folder without a manifest is no checkpoint, `export` writes the consolidated single
file, and checkpoint.sharded (which chose this layout before it was the only one) is accepted
and changes nothing."""
import shutil

import h5py
import numpy as np
import pytest

from checkpoint_layout import flip_data, manifest
from conftest import REPO, TINY, checksums, ckpt, losses, run, sets

QS = str(REPO / "configs/quickstart.yaml")
STEPS = 20
# A batch of 12 divides over 1, 2 and 3 ranks.
BASE = [*TINY, f"train.steps={STEPS}", "train.batch_size=12", "checkpoint.every=5",
        "checkpoint.keep_last=10", "optimizer.warmup_steps=3", "distributed.oversubscribe=true"]
folder = ckpt


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    """One rank: the reference every run of several ranks is held to."""
    rd = tmp_path_factory.mktemp("full") / "run"
    run([QS, *sets(*BASE), "--run-dir", str(rd)], check=0)
    return losses(rd)


def interrupted(rd, extra=(), fault="exit:step=13:code=9"):
    """A run that dies at step 12, after committing step 10."""
    p = run([QS, *sets(*BASE, *extra), "--run-dir", str(rd)], env={"TRAINRUN_FAULTS": fault})
    assert p.returncode != 0


def test_every_rank_writes_its_shard_and_rank_0_commits(tmp_path, full_run):
    rd = tmp_path / "r"
    run([QS, *sets(*BASE, "distributed.nproc=2"), "--run-dir", str(rd)], check=0)
    d = folder(rd, STEPS)
    assert sorted(p.name for p in d.iterdir()) == [
        "MANIFEST", "rank-00000-of-00002.h5", "rank-00001-of-00002.h5"]
    table = manifest(d)
    names = [t["name"] for t in table["tensors"]]
    params = sum(int(np.prod(t["shape"])) for t in table["tensors"]
                 if t["name"].startswith("model/"))
    files = [f["name"] for f in table["files"]]
    assert files == ["rank-00000-of-00002.h5", "rank-00001-of-00002.h5"]
    # Each file holds its half of the weights and both moments, nothing gathered: the same
    # boxes of a tensor's weights, m and v, each slice in one file only.
    assert [f["elements"] for f in table["files"]] == [3 * params // 2] * 2
    held = [{}, {}]
    for s in table["slices"]:
        kind, _, tensor = names[s["tensor"]].partition("/")
        if kind == "optimizer":
            kind, _, tensor = tensor.partition("/")
        box = (tensor, tuple(s["offsets"]), tuple(s["sizes"]))
        held[s["file"]].setdefault(kind, set()).add(box)
    for h in held:
        assert h["model"] and h["model"] == h["m"] == h["v"]
    assert not held[0]["model"] & held[1]["model"]
    for i, name in enumerate(files):
        with h5py.File(d / name, "r") as f:
            assert f["slices"].shape == (table["files"][i]["elements"],)
    p = run(["inspect", str(d)], check=0)
    assert "layout: a folder" in p.stdout and "verdict: OK" in p.stdout
    for step, want in full_run.items():
        assert losses(rd)[step] == pytest.approx(want, rel=1e-5)


@pytest.mark.parametrize("async_write", [False, True])
def test_resume_on_the_same_world_is_bitwise(tmp_path, async_write):
    extra = ["distributed.nproc=2", f"checkpoint.async={str(async_write).lower()}"]
    ref = tmp_path / "ref"
    run([QS, *sets(*BASE, *extra), "--run-dir", str(ref)], check=0)
    rd = tmp_path / "r"
    interrupted(rd, extra)
    p = run(["--resume", str(rd)], check=0)
    assert "resumed from" in p.stderr and "step-00000" in p.stderr
    assert losses(rd) == losses(ref)
    assert checksums(rd) == checksums(ref)


@pytest.mark.parametrize("first,then,zero", [(1, 2, 0), (2, 3, 0), (3, 1, 0), (2, 3, 1),
                                             (3, 2, 1)])
def test_resume_on_another_world_size(tmp_path, full_run, first, then, zero):
    rd = tmp_path / "r"
    interrupted(rd, [f"distributed.nproc={first}", f"distributed.zero={zero}"])
    assert (folder(rd, 10) / "MANIFEST").exists()
    p = run(["--resume", str(rd), *sets(f"distributed.nproc={then}")], check=0)
    assert "step-0000010" in p.stderr
    got = losses(rd)
    assert sorted(got) == sorted(full_run)
    for step, want in full_run.items():
        assert got[step] == pytest.approx(want, rel=1e-5), f"step {step}"
    # The new world size writes its own shards; the manifest lists only them.
    assert len(list(folder(rd, STEPS).glob("rank-*.h5"))) == then


def test_single_file_checkpoint_resumes_into_a_two_rank_run(tmp_path, full_run):
    rd = tmp_path / "r"
    interrupted(rd)
    # The single file of format 3 (what 1-rank runs wrote before the folder; export still
    # writes it) in the folder's place.
    single = rd / "checkpoints" / "step-0000010.h5"
    run(["export", str(folder(rd, 10)), "--out", str(single)], check=0)
    shutil.rmtree(folder(rd, 10))
    p = run(["--resume", str(rd), *sets("distributed.nproc=2")], check=0)
    assert f"resumed from {single} at step 10" in p.stderr, p.stderr
    assert (folder(rd, 15) / "MANIFEST").exists()
    for step, want in full_run.items():
        assert losses(rd)[step] == pytest.approx(want, rel=1e-5)


@pytest.mark.parametrize("damage", ["flip", "delete", "stale"])
def test_damaged_shard_falls_back_to_the_previous_checkpoint(tmp_path, full_run, damage):
    rd = tmp_path / "r"
    interrupted(rd, ["distributed.nproc=2"], fault="exit:step=18:code=9")
    newest, older = folder(rd, 15), folder(rd, 10)
    shard = newest / "rank-00001-of-00002.h5"
    if damage == "flip":  # a byte of a slice rank 1 holds
        table = manifest(newest)
        held = [s for s in table["slices"] if s["file"] == 1]
        flip_data(newest, table["tensors"][held[len(held) // 2]["tensor"]]["name"])
    elif damage == "delete":
        shard.unlink()
    else:  # an intact file from another save in its place: only the manifest's CRC tells
        shard.write_bytes((older / "rank-00001-of-00002.h5").read_bytes())
    p = run(["inspect", str(newest)], check=4)
    assert "DAMAGED" in p.stdout and "rank-00001-of-00002.h5" in p.stdout, p.stdout
    p = run(["--resume", str(rd)], check=0)
    assert "rank-00001-of-00002.h5" in p.stderr and "step-0000010" in p.stderr, p.stderr
    for step, want in full_run.items():
        assert losses(rd)[step] == pytest.approx(want, rel=1e-5)


def test_a_folder_without_manifest_is_not_a_checkpoint(tmp_path, full_run):
    rd = tmp_path / "r"
    interrupted(rd, ["distributed.nproc=2"], fault="exit:step=18:code=9")
    (folder(rd, 15) / "MANIFEST").unlink()  # as if rank 0 died before it committed
    p = run(["inspect", str(folder(rd, 15))], check=4)
    assert "no MANIFEST" in p.stdout
    p = run(["--resume", str(rd)], check=0)
    assert "resumed from" in p.stderr and "step-0000010" in p.stderr
    for step, want in full_run.items():
        assert losses(rd)[step] == pytest.approx(want, rel=1e-5)


def test_export_writes_one_file_that_resumes_and_samples(tmp_path, full_run):
    rd = tmp_path / "r"
    run([QS, *sets(*BASE, "distributed.nproc=2"), "--run-dir", str(rd)], check=0)
    out = tmp_path / "model.h5"
    p = run(["export", str(rd), "--out", str(out)], check=0)
    assert f"step-{STEPS:07d}" in p.stdout
    assert "verdict: OK" in run(["inspect", str(out)], check=0).stdout
    with h5py.File(out, "r") as f:
        assert f.attrs["step"] == STEPS and f.attrs["world_size"] == 2
        assert "model" in f and "optimizer" in f
    # The same bytes as exporting the folder itself; never over an existing file unasked.
    p = run(["export", str(folder(rd, STEPS)), "--out", str(out)], check=2)
    assert "--force" in p.stderr
    run(["export", str(folder(rd, STEPS)), "--out", str(out), "--force"], check=0)
    run(["sample", str(out), "--tokens", "5"], check=0)
    p = run(["export", str(tmp_path / "nothing"), "--out", str(tmp_path / "x.h5")], check=4)
    assert not (tmp_path / "x.h5").exists()


def test_pruning_removes_whole_folders(tmp_path):
    rd = tmp_path / "r"
    run([QS, *sets(*BASE, "distributed.nproc=2", "checkpoint.keep_last=2"), "--run-dir",
         str(rd)], check=0)
    assert sorted(p.name for p in (rd / "checkpoints").iterdir()) == [
        "step-0000015", "step-0000020"]


@pytest.mark.parametrize("sharded", ["true", "false"])
def test_checkpoint_sharded_is_accepted_and_changes_nothing(tmp_path, sharded):
    """Config files that set checkpoint.sharded keep working: the run writes what a run without
    the setting writes (the same files, slices and CRCs) and trains alike."""
    ref, rd = tmp_path / "ref", tmp_path / "r"
    run([QS, *sets(*BASE, "train.steps=5", "distributed.nproc=2"), "--run-dir", str(ref)],
        check=0)
    run([QS, *sets(*BASE, "train.steps=5", "distributed.nproc=2",
                   f"checkpoint.sharded={sharded}"), "--run-dir", str(rd)], check=0)
    want, got = manifest(folder(ref, 5)), manifest(folder(rd, 5))
    for key in ("format_version", "state", "tensors", "files", "slices"):
        assert got[key] == want[key], key
    assert sorted(p.name for p in folder(rd, 5).iterdir()) == sorted(
        p.name for p in folder(ref, 5).iterdir())
    assert losses(rd) == losses(ref) and checksums(rd) == checksums(ref)
