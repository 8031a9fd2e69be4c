"""A resumable `data prepare` (issue 30 part 5): a prepare killed part-way leaves its journal
(DIR/.prepare.json) and partial shards, and the same command run again continues where it
stopped, to the same bytes as a prepare that was never interrupted; run with other arguments
(an input changed, another --val-fraction) it is refused, naming what changed; --force starts
over. The kill comes from TRAINRUN_PREPARE_STOP_AFTER=N (test only): SIGKILL at the first
boundary after N inputs are journaled, so the partial shards hold data past the journal."""
import json
import os
import random
import signal

from conftest import run

WORDS = ("the quick brown fox jumps over a lazy dog while seven wizards quietly hex "
         "banjos naïve café résumé 42 1999 don't it's").split()
N_FILES = 40


def write_corpus(d, seed=1):
    """N_FILES documents of 20-60 kB of words, one of them empty."""
    d.mkdir()
    r = random.Random(seed)
    for i in range(N_FILES):
        n = 0 if i == 17 else r.randrange(20_000, 60_000)
        words = []
        while n > 0:
            w = r.choice(WORDS) + ("\n" if r.random() < 0.1 else " ")
            words.append(w)
            n -= len(w.encode())
        (d / f"doc{i:02}.txt").write_text("".join(words))
    return d


def files(d):
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


def prepare(args, out, **kw):
    return run(["data", "prepare", *map(str, args), "--out", str(out)], **kw)


def killed_after(args, out, n):
    p = prepare(args, out, env={"TRAINRUN_PREPARE_STOP_AFTER": str(n)})
    assert p.returncode == -signal.SIGKILL, p.stderr
    journal = json.loads((out / ".prepare.json").read_text())
    assert journal["position"]["inputs_done"] == n
    # val.bin is renamed last: never there before the prepare is complete.
    assert not (out / "val.bin").exists() and (out / "val.bin.partial").exists()
    return journal


def test_a_killed_byte_level_prepare_continues_to_the_same_shards(tmp_path):
    corpus = write_corpus(tmp_path / "docs")
    ref = tmp_path / "ref"
    want = prepare([corpus], ref, check=0)
    out = tmp_path / "out"
    killed_after([corpus], out, 12)
    assert not (out / "train.bin").exists()
    # The partial shard holds more than the journal records (written after its last entry).
    journal = json.loads((out / ".prepare.json").read_text())
    counted = journal["position"]["train_tokens"] + journal["position"]["val_tokens"]
    assert (out / "train.bin.partial").stat().st_size > 64 + counted
    p = prepare([corpus], out, check=0)
    assert "resuming: 12 of 40 inputs done (" in p.stderr
    assert f"continuing with {corpus / 'doc12.txt'}" in p.stderr
    assert p.stdout.replace(str(out), "DIR") == want.stdout.replace(str(ref), "DIR")
    assert files(out) == files(ref)  # train.bin and val.bin, and no journal or partial left

    # Killed between the two renames (all inputs done): it finishes.
    out = tmp_path / "out2"
    killed_after([corpus], out, N_FILES)
    assert (out / "train.bin").exists() and not (out / "train.bin.partial").exists()
    p = prepare([corpus], out, check=0)
    assert f"resuming: {N_FILES} of {N_FILES} inputs done" in p.stderr and "finishing" in p.stderr
    assert files(out) == files(ref)


def test_a_killed_tokenizer_prepare_continues_to_the_same_shards_and_manifest(tmp_path):
    corpus = write_corpus(tmp_path / "docs", seed=2)
    tok = tmp_path / "tok.json"
    run(["data", "tokenizer", "train", corpus / "doc00.txt", corpus / "doc01.txt",
         "--vocab-size", "400", "--out", tok], check=0)
    args = [corpus, "--tokenizer", tok, "--val-fraction", "0.25", "--threads", "2"]
    ref = tmp_path / "ref"
    prepare(args, ref, check=0)
    for n in (0, 5, 33):
        out = tmp_path / f"out{n}"
        killed_after(args, out, n)
        p = prepare(args, out, check=0)
        assert f"resuming: {n} of 40 inputs done (" in p.stderr
        assert files(out) == files(ref)  # train.bin, val.bin, manifest.json, tokenizer.json


def test_an_interrupted_prepare_with_changed_inputs_or_arguments_is_refused(tmp_path):
    corpus = write_corpus(tmp_path / "docs", seed=3)
    ref = tmp_path / "ref"
    prepare([corpus], ref, check=0)
    out = tmp_path / "out"
    killed_after([corpus], out, 10)
    partial = (out / "train.bin.partial").read_bytes()

    p = prepare([corpus, "--val-fraction", "0.2"], out, check=2)
    assert "--val-fraction was 0.1, now 0.2" in p.stderr
    assert "Run it with the original arguments to resume, or pass --force" in p.stderr

    # An input already prepared changes (one byte more), then is put back as it was.
    doc = corpus / "doc03.txt"
    st = doc.stat()
    original = doc.read_bytes()
    doc.write_bytes(original + b"!")
    p = prepare([corpus], out, check=2)
    assert f"{doc} changed size ({st.st_size} bytes, now {st.st_size + 1})" in p.stderr
    assert (out / "train.bin.partial").read_bytes() == partial  # nothing touched
    doc.write_bytes(original)
    p = prepare([corpus], out, check=2)
    assert f"{doc} was modified (its mtime changed)" in p.stderr
    os.utime(doc, ns=(st.st_atime_ns, st.st_mtime_ns))
    p = prepare([corpus], out, check=0)
    assert "resuming: 10 of 40 inputs done" in p.stderr
    assert files(out) == files(ref)


def test_force_starts_an_interrupted_prepare_over(tmp_path):
    corpus = write_corpus(tmp_path / "docs", seed=4)
    ref = tmp_path / "ref"
    prepare([corpus], ref, check=0)
    out = tmp_path / "out"
    killed_after([corpus], out, 7)
    # A changed input no longer matches the journal: --force starts over from the inputs.
    with open(corpus / "doc02.txt", "a") as f:
        f.write("more text\n")
    prepare([corpus], out, check=2)
    p = prepare([corpus, "--force"], out, check=0)
    assert "resuming" not in p.stderr
    prepare([corpus, "--force"], ref, check=0)
    assert files(out) == files(ref)
    # Partial shards without their journal are not continued or replaced without --force.
    out = tmp_path / "out2"
    killed_after([corpus], out, 3)
    (out / ".prepare.json").unlink()
    p = prepare([corpus], out, check=2)
    assert "train.bin.partial exists; pass --force" in p.stderr
    prepare([corpus, "--force"], out, check=0)
    assert files(out) == files(ref)


def test_a_prepare_into_a_folder_inside_its_input_folder_continues(tmp_path):
    # Its own partial shards were listed as inputs of the rerun: "the output .../train.bin.partial
    # is also an input", with or without --force, so it could never be continued (issue 43
    # item 6). The folder's listing leaves out what the prepare writes.
    corpus = write_corpus(tmp_path / "docs", seed=5)
    ref = tmp_path / "ref"
    want = prepare([corpus], ref, check=0)
    out = corpus / "shards"
    killed_after([corpus], out, 5)
    p = prepare([corpus], out, check=0)
    assert "resuming: 5 of 40 inputs done" in p.stderr, p.stderr
    assert files(out) == files(ref)
    # Finished, then again with --force: its shards and indexes are not inputs either.
    p = prepare([corpus, "--force"], out, check=0)
    assert p.stdout.replace(str(out), "DIR") == want.stdout.replace(str(ref), "DIR")
    assert files(out) == files(ref)
    # --out the input folder itself.
    import shutil
    shutil.rmtree(out)
    killed_after([corpus], corpus, 9)
    prepare([corpus], corpus, check=0)
    prepare([corpus, "--force"], corpus, check=0)
    for name in ("train.bin", "val.bin", "train.idx", "val.idx"):
        assert (corpus / name).read_bytes() == (ref / name).read_bytes(), name
