"""Checkpoints are trusted only with proof (issue 43, item 3): a data set without its checksum is
"unverified" and refused; external storage, external links and virtual data sets (which would
hand a reader another file's bytes, or a FIFO that never answers) are refused; a count read from
a file (flat_size) is bounded by what the file really holds before anything is allocated; and a
checkpoint of another run dropped into checkpoints/ is not adopted. Every hostile file is made
from one small run (a module fixture) copied per test, in both layouts: one file per checkpoint,
and the sharded folder with its MANIFEST."""
import os
import shutil
import subprocess

import h5py
import numpy as np
import pytest

from conftest import REPO, TINY, run, sets

CONFIG = str(REPO / "configs/quickstart.yaml")
BASE = [*TINY, "train.steps=4", "checkpoint.every=2", "checkpoint.keep_last=5"]
# A hang is a failure, not a wait: every command that could block on a FIFO gets this bound.
BOUND = 60


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """Two runs of 4 steps with checkpoints at 2 and 4: one single-file, one sharded."""
    root = tmp_path_factory.mktemp("trust")
    run([CONFIG, *sets(*BASE), "--run-dir", str(root / "single")], check=0)
    run([CONFIG, *sets(*BASE, "checkpoint.sharded=true"), "--run-dir", str(root / "sharded")],
        check=0)
    return root


@pytest.fixture
def single(made, tmp_path):
    rd = tmp_path / "single"
    shutil.copytree(made / "single", rd)
    return rd


@pytest.fixture
def sharded(made, tmp_path):
    rd = tmp_path / "sharded"
    shutil.copytree(made / "sharded", rd)
    return rd


def newest(rd, sharded=False):
    return rd / "checkpoints" / ("step-0000004" if sharded else "step-0000004.h5")


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
def test_sharded_external_storage_is_refused(sharded, tmp_path, target):
    ckpt = newest(sharded, sharded=True)
    shard = ckpt / "rank-00000-of-00001.h5"
    outside = tmp_path / "outside"
    with h5py.File(shard, "r") as f:
        n = f["weights"].shape[0]
        outside.write_bytes(f["weights"][()].tobytes())  # the right bytes: the CRC would pass
    if target == "fifo":
        outside.unlink()
        os.mkfifo(outside)
    with h5py.File(shard, "r+") as f:
        crc = f.attrs["crc32c_weights"]
        del f["weights"]
        f.create_dataset("weights", shape=(n,), dtype="<f4", external=[(str(outside), 0, n * 4)])
        f.attrs["crc32c_weights"] = crc
    assert_refused_everywhere(sharded, ckpt, "external file", tmp_path)


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


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def set_manifest_flat_size(folder, value):
    """The MANIFEST's flat_size and its shard's range rewritten, with a correct CRC-32C."""
    path = folder / "MANIFEST"
    lines = path.read_text().splitlines(keepends=True)
    body = "".join(lines[:-1])
    old = next(int(line.split("=")[1]) for line in lines if line.startswith("flat_size="))
    body = body.replace(f"flat_size={old}\n", f"flat_size={value}\n")
    body = body.replace(f"begin=0 end={old} ", f"begin=0 end={value} ")
    path.write_text(body + "manifest_crc32c=%08x\n" % crc32c(body.encode()))


def test_absurd_flat_size_is_bounded_by_the_file(single, tmp_path):
    ckpt = newest(single)
    set_flat_size(ckpt, 2**61)
    assert_refused_everywhere(single, ckpt, "flat_size 2305843009213693952 exceeds", tmp_path)


def test_absurd_sharded_flat_size_is_bounded_by_the_files(sharded, tmp_path):
    ckpt = newest(sharded, sharded=True)
    set_manifest_flat_size(ckpt, 2**61)
    assert_refused_everywhere(sharded, ckpt, "flat_size 2305843009213693952 needs", tmp_path)
