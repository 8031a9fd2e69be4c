"""The data commands on a full disk (issue 43 item 5): a write that fails for lack of space is
exit 74 (the man page's code for a write failure, as a checkpoint's), named, never exit 3 (bad
data); no output is left half-written under its final name, and an interrupted `data prepare`
continues to the same shards once there is room. A real full file system: the small tmpfs of
test_disk_full.py (root; CI runs as root)."""
import random

from conftest import run
from test_disk_full import disk, fill  # noqa: F401 (disk is a fixture)

WORDS = "the quick brown fox jumps over a lazy dog while seven wizards hex banjos".split()


def corpus(path, size):
    r = random.Random(7)
    words = []
    n = 0
    while n < size:
        w = r.choice(WORDS) + ("\n" if r.random() < 0.1 else " ")
        words.append(w)
        n += len(w)
    path.write_text("".join(words))
    return path


def shard_files(d):
    return {n: (d / n).read_bytes() for n in ("train.bin", "val.bin", "train.idx", "val.idx")}


def test_prepare_on_a_full_disk_exits_74_and_continues_once_there_is_room(disk, tmp_path):
    text = corpus(tmp_path / "in.txt", 3 << 20)
    ref = tmp_path / "ref"
    run(["data", "prepare", str(text), "--out", str(ref)], check=0)
    out = disk / "shards"
    fill(disk, leave=1 << 20)  # room for a third of the shards
    p = run(["data", "prepare", str(text), "--out", str(out)], timeout=120)
    assert p.returncode == 74, p.stderr
    assert "No space left on device" in p.stderr and str(out) in p.stderr, p.stderr
    assert "the disk is full" in p.stderr, p.stderr
    # Nothing under a final name; the partial shards are its journal's, to continue.
    assert not (out / "train.bin").exists() and not (out / "val.bin").exists()
    assert not list(out.glob("*.tmp*"))
    for f in disk.glob("filler*"):
        f.unlink()
    p = run(["data", "prepare", str(text), "--out", str(out)], check=0, timeout=120)
    assert "resuming" in p.stderr
    assert shard_files(out) == shard_files(ref)


def test_tokenizer_train_on_a_full_disk_exits_74(disk, tmp_path):
    text = corpus(tmp_path / "in.txt", 64 << 10)
    fill(disk)
    tok = disk / "tok.json"
    p = run(["data", "tokenizer", "train", str(text), "--vocab-size", "300", "--out", str(tok)],
            timeout=120)
    assert p.returncode == 74 and "No space left on device" in p.stderr, p.stderr
    assert not tok.exists() and not list(disk.glob("tok.json.tmp*"))
