"""`trainrun data inspect`: each figure it prints is recomputed here from the shard files (token
counts, ids used, most frequent id, documents between end-of-text ids), a mixture's realised
shares match its weights, and the decoded samples are the shard's bytes."""
import json
import struct

import pytest

from conftest import REPO, run, sets


def shard_tokens(path):
    data = path.read_bytes()
    magic, version, dtype, count, vocab = struct.unpack_from("<8sIIQI", data)
    assert magic == b"TRNTOKEN" and dtype == 1
    return data[64:64 + count]


def runs_between(tokens, eot):
    """Maximal runs of tokens other than eot: the documents."""
    return sum(1 for i, t in enumerate(tokens) if t != eot and (i == 0 or tokens[i - 1] == eot))


@pytest.fixture(scope="module")
def docs(tmp_path_factory):
    """Byte-level shards of three documents separated by NUL bytes (end-of-text id 0)."""
    d = tmp_path_factory.mktemp("docs")
    text = b"\0".join((REPO / name).read_bytes() for name in
                      ("README.md", "man/trainrun.1", "docs/data-format.md"))
    (d / "docs.txt").write_bytes(text)
    # Half held out: read as one stream with data.val_fraction's 10% tail held out, 40% of the
    # text (val.bin's first 4/5) would be trained on. A prepared directory splits by file.
    run(["data", "prepare", str(d / "docs.txt"), "--out", str(d / "shards"), "--val-fraction",
         "0.5"], check=0)
    return d / "shards"


def test_a_shard_directory_is_counted_as_the_files_say(docs):
    train = shard_tokens(docs / "train.bin")
    out = json.loads(run(["data", "inspect", str(docs), "--eot", "0", "--samples", "3",
                          "--seq-len", "32", "--json"], check=0).stdout)
    src, = out["sources"]
    assert src["tokens"] == len(train)
    assert src["ids_used"] == len(set(train)) and src["largest_id"] == max(train)
    top = max(set(train), key=lambda b: (train.count(b), -b))
    assert src["top"][0]["id"] == top
    assert src["top"][0]["share"] == pytest.approx(train.count(top) / len(train))
    assert src["documents"] == runs_between(train, 0) and src["documents"] >= 2
    assert src["samples_per_epoch"] == (len(train) - 1) // 32
    assert len(out["samples"]) == 3
    for s in out["samples"]:
        assert bytes(s["ids"]) == train[s["start"]:s["start"] + 33]
    # Without an end-of-text id (byte-level data has no tokenizer to name one) it says so.
    text = run(["data", "inspect", str(docs / "train.bin")], check=0).stdout
    assert "documents: not marked" in text and f"{len(train)} tokens" in text


def test_a_mixture_config_reports_its_shares(docs, shakespeare, tmp_path):
    run(["data", "prepare", shakespeare, "--out", str(tmp_path / "s")], check=0)
    mix = (f"data.mix=[{{path: {tmp_path / 's'}, weight: 3, name: plays}}, "
           f"{{path: {docs}, weight: 1, name: docs}}]")
    args = [str(REPO / "configs" / "mixture.yaml"), *sets(mix, "train.steps=100")]
    out = json.loads(run(["data", "inspect", *args, "--json"], check=0).stdout)
    assert [s["name"] for s in out["sources"]] == ["plays", "docs"]
    assert [s["weight"] for s in out["sources"]] == [0.75, 0.25]
    m = out["mixture"]
    assert m["samples"] == 100 * 12  # train.steps x train.batch_size
    shares = {s["name"]: s["share"] for s in m["sources"]}
    assert shares["plays"] == pytest.approx(0.75, abs=0.01)
    assert sum(s["samples"] for s in m["sources"]) == m["samples"]
    # The first sample is what the run reads first: the same window of the named source.
    first = out["samples"][0]
    files = {"plays": tmp_path / "s" / "train.bin", "docs": docs / "train.bin"}
    toks = shard_tokens(files[first["source"]])
    assert bytes(first["ids"]) == toks[first["start"]:first["start"] + 65]
    text = run(["data", "inspect", *args], check=0).stdout
    assert "mixture over the run's 1200 samples" in text


def test_bad_input_is_refused_with_the_fix(docs, tmp_path):
    p = run(["data", "inspect", str(tmp_path / "none.bin")], check=3)
    assert "none.bin" in p.stderr
    p = run(["data", "inspect", str(docs), "--set", "seed=1"], check=2)
    assert "--set applies to a config" in p.stderr
    # A shard path, directory or glob is named as the user gave it, not as the config key
    # data.mix[0].path that inspect used internally (issue 43 item 6).
    for given in (tmp_path / "none.bin", tmp_path / "none-*.bin", tmp_path):
        p = run(["data", "inspect", str(given)], check=3)
        assert "data.mix" not in p.stderr and f"path='{given}'" in p.stderr, p.stderr


def read_ids(path):
    data = path.read_bytes()
    magic, version, dtype, count, vocab = struct.unpack_from("<8sIIQI", data)
    fmt = {1: "B", 2: "H", 4: "I"}[dtype]
    return list(struct.unpack_from(f"<{count}{fmt}", data, 64))


def test_prepare_puts_the_tokenizers_end_of_text_between_documents(tmp_path):
    """A directory of three files through a tokenizer with <|endoftext|>: the shards hold each
    file's ids with that id between them, and inspect counts three documents by it unasked."""
    corpus = tmp_path / "corpus"
    (corpus / "more").mkdir(parents=True)
    texts = {"a.txt": (REPO / "README.md").read_text()[:3000],
             "b.txt": (REPO / "docs" / "data-format.md").read_text()[:3000],
             "more/c.txt": (REPO / "man" / "trainrun.1").read_text()[:3000]}
    for name, text in texts.items():
        (corpus / name).write_text(text)
    tok = tmp_path / "tok.json"
    run(["data", "tokenizer", "train", str(corpus / "a.txt"), "--vocab-size", "300", "--out",
         str(tok)], check=0)
    j = json.loads(tok.read_text())
    j["added_tokens"] = [{"id": 300, "content": "<|endoftext|>", "special": True,
                          "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False}]
    tok.write_text(json.dumps(j))
    out = tmp_path / "shards"
    p = run(["data", "prepare", str(corpus), "--tokenizer", str(tok), "--out", str(out)], check=0)
    assert "3 documents, end-of-text id 300 between them" in p.stdout
    want = []
    for name in sorted(texts):
        if want:
            want.append(300)
        ids = run(["data", "tokenizer", "encode", str(tok), str(corpus / name)], check=0).stdout
        want += [int(i) for i in ids.split()]
    assert read_ids(out / "train.bin") + read_ids(out / "val.bin") == want
    # The val split (the last 10% of the bytes) starts inside c.txt: train holds both separators.
    assert read_ids(out / "train.bin").count(300) == 2
    got = json.loads(run(["data", "inspect", str(out / "train.bin"), "--json"], check=0).stdout)
    assert got["eot"] == 300 and got["sources"][0]["documents"] == 3
    # --eot none: the files back to back; an id outside the vocabulary: refused (exit 2).
    p = run(["data", "prepare", str(corpus), "--tokenizer", str(tok), "--out", str(out),
             "--force", "--eot", "none"], check=0)
    assert 300 not in read_ids(out / "train.bin") + read_ids(out / "val.bin")
    p = run(["data", "prepare", str(corpus), "--tokenizer", str(tok), "--out", str(out),
             "--force", "--eot", "301"], check=2)
    assert "--eot 301" in p.stderr
