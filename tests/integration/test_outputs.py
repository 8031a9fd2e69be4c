"""Files trainrun writes outside a run directory (`data prepare`, `data tokenizer train`,
`export`): an output that is an input is always refused, an existing output needs --force, and
nothing is deleted that trainrun did not write (issue 27 item 2)."""
import hashlib

from conftest import run

TEXT = "To be, or not to be, that is the question.\n" * 400


def digest(p):
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_tokenizer_train_refuses_to_overwrite_its_corpus(tmp_path):
    corpus = tmp_path / "in.txt"
    corpus.write_text(TEXT)
    before = digest(corpus)
    p = run(["data", "tokenizer", "train", str(corpus), "--vocab-size", "300", "--out",
             str(corpus)], check=2)
    assert "is also an input" in p.stderr and digest(corpus) == before
    # --force does not make an input an output.
    run(["data", "tokenizer", "train", str(corpus), "--vocab-size", "300", "--out", str(corpus),
         "--force"], check=2)
    assert digest(corpus) == before


def test_an_existing_output_needs_force(tmp_path):
    corpus = tmp_path / "in.txt"
    corpus.write_text(TEXT)
    mine = tmp_path / "mine.json"
    mine.write_text('{"my": "notes"}')
    p = run(["data", "tokenizer", "train", str(corpus), "--vocab-size", "300", "--out",
             str(mine)], check=2)
    assert "mine.json exists; pass --force" in p.stderr
    assert mine.read_text() == '{"my": "notes"}'
    run(["data", "tokenizer", "train", str(corpus), "--vocab-size", "300", "--out", str(mine),
         "--force"], check=0)
    assert '"model"' in mine.read_text()


def test_prepare_refuses_its_own_input_and_a_second_run_without_force(tmp_path):
    corpus = tmp_path / "in.txt"
    corpus.write_text(TEXT)
    out = tmp_path / "shards"
    run(["data", "prepare", str(corpus), "--out", str(out)], check=0)
    train = out / "train.bin"
    before = digest(train)
    p = run(["data", "prepare", str(train), "--out", str(out)], check=2)
    assert "is also an input" in p.stderr and digest(train) == before
    p = run(["data", "prepare", str(corpus), "--out", str(out)], check=2)
    assert "train.bin exists; pass --force" in p.stderr
    run(["data", "prepare", str(corpus), "--out", str(out), "--force"], check=0)


def test_byte_level_prepare_keeps_a_manifest_it_did_not_write(tmp_path):
    corpus = tmp_path / "in.txt"
    corpus.write_text(TEXT)
    out = tmp_path / "shards"
    out.mkdir()
    theirs = out / "manifest.json"
    theirs.write_text('{"dataset": "someone else\'s"}')
    run(["data", "prepare", str(corpus), "--out", str(out)], check=0)
    assert theirs.read_text() == '{"dataset": "someone else\'s"}'
    # ... and as an input it is read, not deleted.
    other = tmp_path / "other"
    run(["data", "prepare", str(theirs), "--out", str(other)], check=0)
    assert theirs.exists()


def test_byte_level_prepare_replaces_trainrun_s_own_manifest_only_with_force(tmp_path):
    corpus = tmp_path / "in.txt"
    corpus.write_text(TEXT)
    tok = tmp_path / "tok.json"
    run(["data", "tokenizer", "train", str(corpus), "--vocab-size", "300", "--out", str(tok)],
        check=0)
    out = tmp_path / "shards"
    run(["data", "prepare", str(corpus), "--tokenizer", str(tok), "--out", str(out)], check=0)
    manifest = out / "manifest.json"
    assert manifest.exists()
    # Its own manifest as the input of a byte-level prepare into the same folder: refused.
    p = run(["data", "prepare", str(manifest), "--out", str(out), "--force"], check=2)
    assert "is also an input" in p.stderr and manifest.exists()
    run(["data", "prepare", str(corpus), "--out", str(out), "--force"], check=0)
    assert not manifest.exists()  # it described the tokenized shards the byte ones replaced


def test_report_out_follows_the_rule(tmp_path):
    from conftest import REPO, TINY, sets
    rd = tmp_path / "r"
    run([str(REPO / "configs" / "quickstart.yaml"), *sets(*TINY, "train.steps=3"), "--run-dir",
         str(rd)], check=0)
    mine = tmp_path / "mine.png"
    mine.write_bytes(b"my picture")
    p = run(["report", str(rd), "--out", str(mine)], check=2)
    assert "mine.png exists; pass --force" in p.stderr and mine.read_bytes() == b"my picture"
    metrics = rd / "metrics.jsonl"
    before = digest(metrics)
    run(["report", str(rd), "--out", str(metrics), "--force"], check=2)
    assert digest(metrics) == before
    run(["report", str(rd), "--out", str(mine), "--force"], check=0)
    assert mine.read_bytes()[:4] == b"\x89PNG"


# Outputs that exist and are not regular files (issue 43 item 2): `--force` replaced a device
# node with a regular file (as root, `--out /dev/null --force` turned the machine's /dev/null
# into one). Device nodes and FIFOs are made inside tmp_path, never the real /dev/null.

def device(path):
    import os
    import stat
    os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # what /dev/null is (we run as root)
    return path


def fifo(path):
    import os
    os.mkfifo(path)
    return path


def is_device(path):
    import os
    import stat
    return stat.S_ISCHR(os.lstat(path).st_mode)


def is_fifo(path):
    import os
    import stat
    return stat.S_ISFIFO(os.lstat(path).st_mode)


def test_tokenizer_train_refuses_a_device_a_fifo_and_a_link_as_out(tmp_path):
    corpus = tmp_path / "in.txt"
    corpus.write_text(TEXT)
    train = ["data", "tokenizer", "train", str(corpus), "--vocab-size", "300", "--force", "--out"]
    dev = device(tmp_path / "null")
    p = run([*train, str(dev)], check=2, timeout=60)
    assert f"{dev} is a character device, not a regular file" in p.stderr, p.stderr
    assert is_device(dev)
    pipe = fifo(tmp_path / "pipe")
    p = run([*train, str(pipe)], check=2, timeout=60)
    assert f"{pipe} is a FIFO" in p.stderr and is_fifo(pipe)
    # A link is refused, not written through and not replaced: its target keeps its bytes.
    mine = tmp_path / "mine.json"
    mine.write_text("my notes")
    link = tmp_path / "link.json"
    link.symlink_to(mine)
    p = run([*train, str(link)], check=2, timeout=60)
    assert f"{link} is a symbolic link (to {mine})" in p.stderr, p.stderr
    assert link.is_symlink() and mine.read_text() == "my notes"


def test_prepare_refuses_outputs_that_are_not_regular_files(tmp_path):
    corpus = tmp_path / "in.txt"
    corpus.write_text(TEXT)
    out = tmp_path / "shards"
    out.mkdir()
    # train.bin a device: --force used to rename a regular file over it.
    dev = device(out / "train.bin")
    p = run(["data", "prepare", str(corpus), "--out", str(out), "--force"], check=2, timeout=60)
    assert f"{dev} is a character device" in p.stderr and is_device(dev)
    dev.unlink()
    # Every output of a prepare, the document indexes and the partial shards included.
    for name in ("val.bin", "train.idx", "val.idx", "train.bin.partial", "val.bin.partial"):
        pipe = fifo(out / name)
        p = run(["data", "prepare", str(corpus), "--out", str(out), "--force"], check=2,
                timeout=60)
        assert f"{pipe} is a FIFO" in p.stderr and is_fifo(pipe), (name, p.stderr)
        pipe.unlink()
    # The tokenizer's copy and the manifest of a tokenized prepare: links are not followed.
    tok = tmp_path / "tok.json"
    run(["data", "tokenizer", "train", str(corpus), "--vocab-size", "300", "--out", str(tok)],
        check=0)
    mine = tmp_path / "mine.txt"
    mine.write_text("mine")
    for name in ("manifest.json", "tokenizer.json"):
        link = out / name
        link.symlink_to(mine)
        p = run(["data", "prepare", str(corpus), "--tokenizer", str(tok), "--out", str(out),
                 "--force"], check=2, timeout=60)
        assert f"{link} is a symbolic link" in p.stderr, (name, p.stderr)
        assert mine.read_text() == "mine"
        link.unlink()
    run(["data", "prepare", str(corpus), "--tokenizer", str(tok), "--out", str(out), "--force"],
        check=0)


def test_export_and_report_refuse_devices_and_fifos(tmp_path):
    from conftest import REPO, TINY, sets
    rd = tmp_path / "r"
    run([str(REPO / "configs" / "quickstart.yaml"), *sets(*TINY, "train.steps=3"), "--run-dir",
         str(rd)], check=0)
    dev = device(tmp_path / "null")
    p = run(["export", str(rd), "--out", str(dev), "--force"], check=2, timeout=60)
    assert f"{dev} is a character device" in p.stderr and is_device(dev)
    pipe = fifo(tmp_path / "pipe.png")
    # gnuplot would have waited on the FIFO for a reader: refused at once instead.
    p = run(["report", str(rd), "--out", str(pipe), "--force"], check=2, timeout=60)
    assert f"{pipe} is a FIFO" in p.stderr and is_fifo(pipe)
    p = run(["report", str(rd), "--out", str(dev), "--force"], check=2, timeout=60)
    assert is_device(dev)
    mine = tmp_path / "mine.h5"
    mine.write_bytes(b"mine")
    link = tmp_path / "link.h5"
    link.symlink_to(mine)
    p = run(["export", str(rd), "--out", str(link), "--force"], check=2, timeout=60)
    assert "is a symbolic link" in p.stderr and mine.read_bytes() == b"mine"
