"""Checkpoints are trusted only with proof (issue 43, item 3): a data set without its checksum is
"unverified" and refused; external storage, external links and virtual data sets (which would
hand a reader another file's bytes, or a FIFO that never answers) are refused; a count read from
a file (flat_size) is bounded by what the file really holds before anything is allocated; and a
checkpoint of another run dropped into checkpoints/ is not adopted. Every hostile file is made
from one small run (a module fixture) copied per test, in both layouts that resume: the folder
training writes (rank files and MANIFEST), and one file per checkpoint (format 3, which older
releases trained into and `trainrun export` still writes)."""
import os
import shutil
import subprocess

import h5py
import numpy as np
import pytest

from checkpoint_layout import manifest, rewrite_index, write_manifest
from conftest import REPO, TINY, ckpt, ckpt_data, run, sets

CONFIG = str(REPO / "configs/quickstart.yaml")
BASE = [*TINY, "train.steps=4", "checkpoint.every=2", "checkpoint.keep_last=5"]
# A hang is a failure, not a wait: every command that could block on a FIFO gets this bound.
BOUND = 60


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """A run of 4 steps with checkpoints at 2 and 4 (folders), and the same run with each
    checkpoint exported to a single file in the folder's place."""
    root = tmp_path_factory.mktemp("trust")
    run([CONFIG, *sets(*BASE), "--run-dir", str(root / "folder")], check=0)
    shutil.copytree(root / "folder", root / "single")
    for step in (2, 4):
        single = root / "single" / "checkpoints" / f"step-{step:07d}.h5"
        run(["export", str(ckpt(root / "single", step)), "--out", str(single)], check=0)
        shutil.rmtree(ckpt(root / "single", step))
    return root


@pytest.fixture
def single(made, tmp_path):
    rd = tmp_path / "single"
    shutil.copytree(made / "single", rd)
    return rd


@pytest.fixture
def folder(made, tmp_path):
    rd = tmp_path / "folder"
    shutil.copytree(made / "folder", rd)
    return rd


def newest(rd, folder=False):
    return ckpt(rd, 4) if folder else rd / "checkpoints" / "step-0000004.h5"


def assert_refused_everywhere(rd, ckpt, why, tmp_path, listed=None):
    """inspect says why (and `listed`, when given) and exits 4; export and sample exit 4 (not 1,
    "a bug"); --resume RUN_DIR skips the file for the older good checkpoint. All within BOUND
    seconds (no hang)."""
    p = run(["inspect", str(ckpt)], check=4, timeout=BOUND)
    assert why in p.stdout, p.stdout
    assert "verdict: OK" not in p.stdout, p.stdout
    assert listed is None or listed in p.stdout, p.stdout
    p = run(["export", str(ckpt), "--out", str(tmp_path / "out.h5")], check=4, timeout=BOUND)
    assert why in p.stderr, p.stderr
    assert not (tmp_path / "out.h5").exists()
    p = run(["sample", str(ckpt), "--tokens", "4"], check=4, timeout=BOUND)
    assert why in p.stderr, p.stderr
    p = run(["--resume", str(rd), *sets("train.steps=5")], check=0, timeout=BOUND * 2)
    assert why in p.stderr and "step-0000002" in p.stderr, p.stderr
    assert "resumed from" in p.stderr


# --- a data set without its checksum --------------------------------------------------------

def test_checkpoint_rewritten_without_checksums_is_unverified(single, tmp_path):
    ckpt = newest(single)
    stripped = tmp_path / "stripped.h5"
    subprocess.run(["h5repack", "-f", "NONE", str(ckpt), str(stripped)], check=True)
    with h5py.File(stripped, "r+") as f:
        assert not f["model/wte.weight"].fletcher32
        f["model/wte.weight"][0, 0] = 3.9e36  # a flipped bit no checksum can catch now
    shutil.copyfile(stripped, ckpt)
    assert_refused_everywhere(single, ckpt, "unverified", tmp_path,
                              listed="/model/wte.weight REFUSED: ")


def test_missing_chunks_are_refused_not_read_as_zeros(single, tmp_path):
    """A chunked data set whose chunks were never written reads as zeros no checksum covers."""
    ckpt = newest(single)
    with h5py.File(ckpt, "r+") as f:
        old = f["optimizer/v/wte.weight"]
        shape, offset = old.shape, old.attrs["offset"]
        del f["optimizer/v/wte.weight"]
        new = f.create_dataset("optimizer/v/wte.weight", shape=shape, dtype="<f4",
                               chunks=shape, fletcher32=True)
        new.attrs["offset"] = offset
    assert_refused_everywhere(single, ckpt, "chunks are missing", tmp_path)


# --- data that lies outside the checkpoint --------------------------------------------------

def replace_with_external(ckpt, name, target, nbytes):
    with h5py.File(ckpt, "r+") as f:
        old = f[name]
        shape, offset = old.shape, old.attrs["offset"]
        del f[name]
        new = f.create_dataset(name, shape=shape, dtype="<f4",
                               external=[(str(target), 0, nbytes)])
        new.attrs["offset"] = offset


@pytest.mark.parametrize("target", ["file", "fifo"])
def test_external_storage_is_refused(single, tmp_path, target):
    ckpt = newest(single)
    outside = tmp_path / "outside"
    if target == "fifo":
        os.mkfifo(outside)
    else:
        outside.write_bytes(np.full(32 * 32, 0.5, "<f4").tobytes())
    replace_with_external(ckpt, "model/wte.weight", outside, 32 * 32 * 4)
    assert_refused_everywhere(single, ckpt, "external file", tmp_path)


@pytest.mark.parametrize("target", ["file", "fifo"])
def test_external_link_is_refused(single, tmp_path, target):
    ckpt = newest(single)
    outside = tmp_path / "outside.h5"
    if target == "fifo":
        os.mkfifo(outside)
    else:
        shutil.copyfile(single / "checkpoints" / "step-0000002.h5", outside)
    with h5py.File(ckpt, "r+") as f:
        del f["model"]
        f["model"] = h5py.ExternalLink(str(outside), "/model")
    assert_refused_everywhere(single, ckpt, "is an external link", tmp_path)


def test_virtual_dataset_is_refused(single, tmp_path):
    ckpt = newest(single)
    source = tmp_path / "source.h5"
    with h5py.File(source, "w") as s:
        s["x"] = np.full((32, 32), 0.25, "<f4")
    with h5py.File(ckpt, "r+") as f:
        offset = f["model/wte.weight"].attrs["offset"]
        del f["model/wte.weight"]
        layout = h5py.VirtualLayout(shape=(32, 32), dtype="<f4")
        layout[:] = h5py.VirtualSource(str(source), "x", shape=(32, 32))
        f.create_virtual_dataset("model/wte.weight", layout).attrs["offset"] = offset
    assert_refused_everywhere(single, ckpt, "a virtual data set", tmp_path)


@pytest.mark.parametrize("target", ["file", "fifo"])
def test_folder_external_storage_is_refused(folder, tmp_path, target):
    path = newest(folder, folder=True)
    rank_file = ckpt_data(folder, 4)
    outside = tmp_path / "outside"
    with h5py.File(rank_file, "r") as f:
        n = f["slices"].shape[0]
        outside.write_bytes(f["slices"][()].tobytes())  # the right bytes: the CRCs would pass
    if target == "fifo":
        outside.unlink()
        os.mkfifo(outside)
    with h5py.File(rank_file, "r+") as f:
        del f["slices"]
        f.create_dataset("slices", shape=(n,), dtype="<f4", external=[(str(outside), 0, n * 4)])
    assert_refused_everywhere(folder, path, "external file", tmp_path)


# --- counts that are not the file's -----------------------------------------------------------

def set_flat_size(ckpt, value):
    """flat_size changed in the root attribute and in its checksummed copy alike, the copy kept
    compact as trainrun writes it: only the bound on the count can catch it."""
    with h5py.File(ckpt, "r+") as f:
        text = f["metadata"][()]
        old = f.attrs["flat_size"]
        text = text.replace(b"flat_size=%d\n" % old, b"flat_size=%d\n" % value)
        f.attrs.modify("flat_size", value)
        del f["metadata"]
        tid = h5py.h5t.C_S1.copy()
        tid.set_size(len(text))
        tid.set_strpad(h5py.h5t.STR_NULLPAD)
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_layout(h5py.h5d.COMPACT)
        ds = h5py.h5d.create(f.id, b"metadata", tid, h5py.h5s.create(h5py.h5s.SCALAR), dcpl=dcpl)
        ds.write(h5py.h5s.ALL, h5py.h5s.ALL, np.array(text, dtype=f"S{len(text)}"))


def set_elements(path, value):
    """The count of elements in the rank file rewritten in the MANIFEST (with a correct CRC-32C)
    and in the file's /index alike: only the bound on the count can catch it."""
    table = manifest(path)
    old = table["files"][0]["elements"]
    table["files"][0]["elements"] = value
    write_manifest(path, table)
    rewrite_index(path / table["files"][0]["name"], f'"elements":{old},', f'"elements":{value},')


def test_absurd_flat_size_is_bounded_by_the_file(single, tmp_path):
    ckpt = newest(single)
    set_flat_size(ckpt, 2**61)
    assert_refused_everywhere(single, ckpt, "flat_size 2305843009213693952 exceeds", tmp_path)


def test_absurd_folder_element_count_is_bounded_by_the_files(folder, tmp_path):
    path = newest(folder, folder=True)
    set_elements(path, 2**61)
    assert_refused_everywhere(folder, path,
                              "MANIFEST says it holds 2305843009213693952 elements", tmp_path)
