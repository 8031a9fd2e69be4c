"""trainrun's byte-level BPE checked against the real thing: PyPI's `tokenizers` (in
build/test-venv, which scripts/setup.sh --test makes) gives the same ids for the same
tokenizer.json, in both directions (a tokenizer trainrun trained, one tokenizers trained), on
tiny Shakespeare and on awkward text (scripts, emoji, long runs of spaces, contractions, control
characters, invalid UTF-8); decode(encode(x)) == x; the Unicode classes trainrun splits by are
tokenizers' own; `data prepare --tokenizer` writes the same ids into shards with a manifest,
training refuses shards whose vocabulary does not fit, and `sample` decodes with the tokenizer."""
import hashlib
import json
import pathlib
import random
import re
import struct
import subprocess

import pytest

from conftest import REPO, TINY, TRAINRUN, run, sets

VENV_PY = REPO / "build" / "test-venv" / "bin" / "python"

# Encodes a file with tokenizers: ids as JSON. Text that is not UTF-8 is split the way trainrun
# documents (each invalid byte one "other" character): the bytes are decoded with
# surrogateescape, each escaped byte stands in as U+E000 (also "other") for tokenizers' own
# split, and each piece's real bytes go through tokenizers' own BPE model.
ENCODE = r"""
import json, sys
from tokenizers import Tokenizer, pre_tokenizers
tok = Tokenizer.from_file(sys.argv[1])
data = open(sys.argv[2], "rb").read()
try:
    print(json.dumps(tok.encode(data.decode("utf-8"), add_special_tokens=False).ids))
    sys.exit(0)
except UnicodeDecodeError:
    pass
text = data.decode("utf-8", "surrogateescape")
raw = [bytes([ord(c) - 0xDC00]) if 0xDC80 <= ord(c) <= 0xDCFF else c.encode() for c in text]
stand_in = "".join("\ue000" if 0xDC80 <= ord(c) <= 0xDCFF else c for c in text)
# GPT-2's bytes_to_unicode: printable Latin-1 stands for itself, the other bytes for U+0100...
KEEP = [b for b in range(256) if 0x21 <= b <= 0x7E or 0xA1 <= b <= 0xAC or b >= 0xAE]
OTHER = [b for b in range(256) if b not in KEEP]
CHAR = {**{b: chr(b) for b in KEEP}, **{b: chr(256 + i) for i, b in enumerate(OTHER)}}
def byte_level(bs):
    return "".join(CHAR[b] for b in bs)
ids = []
for _, (s, e) in tok.pre_tokenizer.pre_tokenize_str(stand_in):
    ids += [t.id for t in tok.model.tokenize(byte_level(b"".join(raw[s:e])))]
print(json.dumps(ids))
"""

DECODE = r"""
import json, sys
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[1])
sys.stdout.buffer.write(tok.decode(json.load(open(sys.argv[2])), skip_special_tokens=False).encode())
"""

TRAIN = r"""
import sys
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(vocab_size=int(sys.argv[2]), special_tokens=["<|endoftext|>"],
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
tok.train([sys.argv[1]], trainer)
tok.save(sys.argv[3])
"""


@pytest.fixture(scope="module")
def venv_py():
    if not VENV_PY.exists():
        pytest.fail(f"{VENV_PY} is missing: scripts/setup.sh --test installs tokenizers there")
    p = subprocess.run([str(VENV_PY), "-c", "import tokenizers"], capture_output=True, text=True)
    if p.returncode != 0:
        pytest.fail(f"tokenizers is not in {VENV_PY}: run scripts/setup.sh --test ({p.stderr})")
    return str(VENV_PY)


def py(venv_py, script, *args, text=True):
    p = subprocess.run([venv_py, "-c", script, *map(str, args)], capture_output=True, text=text,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    return p.stdout


def hf_ids(venv_py, tokenizer, path):
    return json.loads(py(venv_py, ENCODE, tokenizer, path))


def trainrun_ids(tokenizer, path):
    p = run(["data", "tokenizer", "encode", str(tokenizer), str(path)], check=0)
    return [int(x) for x in p.stdout.split()]


def trainrun_decode(tokenizer, ids, tmp_path):
    f = tmp_path / "ids.txt"
    f.write_text(" ".join(map(str, ids)))
    p = subprocess.run([TRAINRUN, "data", "tokenizer", "decode", str(tokenizer), str(f)],
                       capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout


def awkward_texts(tmp_path):
    """Files of text that tends to break tokenizers, the last ones not valid UTF-8."""
    rnd = random.Random(17)
    pool = (list("abcXYZ019 ,.;:!?'\"()-_/\\\n\t") + ["'s", "'ll", "'re", "'ve", "'d", "'m",
            "'S", "\r\n", " " * 7, "\u00a0", "\u3000", "\u2003", "\u200b", "\x1c", "\x00",
            "\x85", "é", "ß", "Ж", "中文", "日本語", "한국어", "العربية", "हिन्दी", "٣", "½", "Ⅻ",
            "３", "e\u0301", "😀", "👩‍👩‍👧‍👦", "🇫🇷", "✌🏽", "❤️", "\U0010FFFD"])
    texts = {
        "prose.txt": ("Hello, world! It's can't we'll they're I'M 'tis o'er\n"
                      "  leading\tspaces   and\t\ttabs\r\n\r\n\n\n   \n" + " " * 1000 + "x" +
                      " " * 37 + "\n\n\n").encode(),
        "scripts.txt": ("naïve café Ünïcödé Œuvre ß ﬁ Ελληνικά Русский العربية עברית हिन्दी "
                        "中文字符 日本語のテキスト 한국어 emoji 😀😃🎉 👩‍👩‍👧‍👦 🇫🇷 ❤️ 123 ١٢٣ ⅫⅣ ½ ²"
                        " ３４５ 1,000.50 ©®™ … — “q” «g» \u00a0nbsp\u2003em\u3000zw\u200b"
                        "\x00\x01\x1c\x1f\x7f\x85 end").encode(),
        "random.txt": "".join(rnd.choice(pool) for _ in range(60000)).encode(),
        "spaces.txt": (" " * 5000 + "\n" * 300 + "\t " * 200).encode(),
        "invalid.bin": b"ab\xff\xfe cd \xc3( \xe2\x82 x\xed\xa0\x80y \xf0\x9f\x98 ok \xc0\x80"
                       b"'s\x80\x80\x80 z" + "é😀".encode() + b"\xf8\x88\x80\x80\x80 end",
        "invalid_random.bin": bytes(rnd.choice([*range(32, 127), 0x80, 0xC3, 0xE2, 0xF0, 0xFF,
                                                0x20, 0x20, 0x0A]) for _ in range(30000)),
    }
    paths = []
    for name, data in texts.items():
        p = tmp_path / name
        p.write_bytes(data)
        paths.append(p)
    return paths


def check_same_ids(venv_py, tokenizer, paths, tmp_path):
    for p in paths:
        mine = trainrun_ids(tokenizer, p)
        assert mine, p
        assert mine == hf_ids(venv_py, tokenizer, p), f"{p.name}: trainrun and tokenizers differ"
        # decode(encode(x)) == x, bytes exactly (invalid UTF-8 included).
        assert trainrun_decode(tokenizer, mine, tmp_path) == p.read_bytes(), p.name
        if p.suffix == ".txt":  # tokenizers' decoder returns text: only for valid UTF-8
            (tmp_path / "ids.json").write_text(json.dumps(mine))
            back = py(venv_py, DECODE, tokenizer, tmp_path / "ids.json", text=False)
            assert back == p.read_bytes(), p.name


def test_unicode_classes_are_tokenizers_own(venv_py):
    """The table trainrun splits by equals what tokenizers does, code point by code point."""
    p = subprocess.run([venv_py, str(REPO / "scripts" / "gen-unicode-classes.py"), "--check"],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr


def test_trainrun_tokenizer_in_tokenizers(venv_py, shakespeare, tmp_path):
    tok = tmp_path / "tokenizer.json"
    p = run(["data", "tokenizer", "train", shakespeare, "--vocab-size", "2000", "--out", str(tok)],
            check=0)
    assert "2000 tokens" in p.stdout
    check_same_ids(venv_py, tok, [pathlib.Path(shakespeare), *awkward_texts(tmp_path)], tmp_path)
    ids = trainrun_ids(tok, shakespeare)
    assert len(ids) < 0.4 * pathlib.Path(shakespeare).stat().st_size  # it compresses


def test_tokenizers_tokenizer_in_trainrun(venv_py, shakespeare, tmp_path):
    tok = tmp_path / "hf.json"
    py(venv_py, TRAIN, shakespeare, 3000, tok)
    special = tmp_path / "special.txt"
    special.write_text("First<|endoftext|>Second <|endoftext|><|endoftext|> third<|endoftext")
    check_same_ids(venv_py, tok, [pathlib.Path(shakespeare), special, *awkward_texts(tmp_path)],
                   tmp_path)
    assert trainrun_ids(tok, special).count(0) == 3  # <|endoftext|> is id 0, found whole


def test_added_tokens_get_the_ids_tokenizers_assigns(venv_py, shakespeare, tmp_path):
    """A hand-edited added_tokens list: "e" and " the" already in the vocabulary, the others
    written with ids tokenizers does not use. Both tools must give the same ids, and decode must
    give the text back."""
    tok = tmp_path / "tokenizer.json"
    run(["data", "tokenizer", "train", shakespeare, "--vocab-size", "600", "--out", str(tok)])
    j = json.loads(tok.read_text())
    vocab = j["model"]["vocab"]
    j["added_tokens"] = [
        {"id": 5, "content": "e", "special": False},
        {"id": 9000, "content": "<x>", "special": True},
        {"id": 7, "content": "<y>", "special": True},
        {"id": 1, "content": "Ġthe", "special": False},  # a vocabulary key, not its text
        {"id": 3, "content": "ROMEO", "special": False},
    ]
    for t in j["added_tokens"]:
        t.update(single_word=False, lstrip=False, rstrip=False, normalized=False)
    tok.write_text(json.dumps(j))
    text = tmp_path / "t.txt"
    text.write_text("ROMEO: the<x> thee<y>Ġthe e\n" + pathlib.Path(shakespeare).read_text()[:9000])
    mine = trainrun_ids(tok, text)
    assert mine == hf_ids(venv_py, tok, text)
    assert vocab["e"] in mine and 5 not in mine and 600 in mine  # "e" keeps its id; <x> is 600
    back = trainrun_decode(tok, mine, tmp_path)
    (tmp_path / "ids.json").write_text(json.dumps(mine))
    assert back == py(venv_py, DECODE, tok, tmp_path / "ids.json", text=False)
    # The text back, but for the added "Ġthe": it is the vocabulary's " the", in both tools.
    assert back == text.read_bytes().replace("Ġthe".encode(), b" the")


def test_unsupported_tokenizer_is_refused(tmp_path):
    tok = tmp_path / "nfc.json"
    tok.write_text(json.dumps({"normalizer": {"type": "NFC"}, "model": {"type": "BPE"}}))
    text = tmp_path / "t.txt"
    text.write_text("x")
    p = run(["data", "tokenizer", "encode", str(tok), str(text)], check=3)
    assert "normalizer 'NFC' is not supported" in p.stderr


def read_shard(path):
    data = pathlib.Path(path).read_bytes()
    magic, version, dtype, count, vocab = struct.unpack_from("<8sIIQI", data)
    assert magic == b"TRNTOKEN" and version == 1
    fmt = {1: "B", 2: "H", 4: "I"}[dtype]
    return list(struct.unpack_from(f"<{count}{fmt}", data, 64)), dtype, vocab


def test_prepare_train_and_sample(venv_py, shakespeare, tmp_path):
    tok = tmp_path / "tok.json"
    run(["data", "tokenizer", "train", shakespeare, "--vocab-size", "512", "--out", str(tok)],
        check=0)
    out = tmp_path / "shards"
    p = run(["data", "prepare", shakespeare, shakespeare, "--tokenizer", str(tok), "--out",
             str(out), "--threads", "2"], check=0)
    assert "vocab 512" in p.stdout
    train, dtype, vocab = read_shard(out / "train.bin")
    val, _, _ = read_shard(out / "val.bin")
    assert (dtype, vocab) == (2, 512)
    once = hf_ids(venv_py, tok, shakespeare)
    assert train + val == once + once  # each file encoded whole, in order
    assert 0.05 < len(val) / (len(train) + len(val)) < 0.15
    man = json.loads((out / "manifest.json").read_text())
    assert man["tokenizer"]["sha256"] == hashlib.sha256(tok.read_bytes()).hexdigest()
    assert man["tokenizer"]["vocab_size"] == 512
    assert [i["tokens"] for i in man["inputs"]] == [len(once), len(once)]
    assert man["splits"]["train"]["tokens"] == len(train)
    assert (out / "tokenizer.json").read_bytes() == tok.read_bytes()

    # Paths relative to where training starts; `sample` runs from elsewhere and must still find
    # the shards' manifest and tokenizer (the run records its paths absolute).
    rd = tmp_path / "run"
    data = sets("data.synthetic=", "data.train=shards/train.bin", "data.val=shards/val.bin",
                "run_dir=run", "train.steps=3")
    qs = str(REPO / "configs" / "quickstart.yaml")
    p = run([qs, *sets(*TINY), *data, "--set", "model.vocab_size=500"], check=3, cwd=tmp_path)
    assert "model.vocab_size >= 512" in p.stderr and "manifest.json" in p.stderr
    run([qs, *sets(*TINY), *data, "--set", "model.vocab_size=512"], check=0, cwd=tmp_path)
    # Bytes: 3 steps of training leave tokens whose bytes alone are not UTF-8.
    p = subprocess.run([TRAINRUN, "sample", str(rd), "--tokens", "20", "--prompt", "ROMEO:"],
                       capture_output=True, timeout=120, cwd="/")
    assert p.returncode == 0, p.stderr
    assert b"warning" not in p.stderr, p.stderr
    assert p.stdout.startswith(b"ROMEO:")
    # 20 BPE tokens are more than 20 bytes of text (a byte model prints exactly 20).
    assert len(p.stdout) > len("ROMEO:") + 20 + 1


def test_data_tokenizer_names_the_shards_tokenizer(shakespeare, tmp_path):
    """data.tokenizer: shards whose manifest records another tokenizer are refused before
    training; the same tokenizer (any copy of it) trains, and `sample` decodes with it, also
    when the shards carry no manifest (made by another tool)."""
    tok, other = tmp_path / "tok.json", tmp_path / "other.json"
    for path, vocab in [(tok, "512"), (other, "384")]:
        run(["data", "tokenizer", "train", shakespeare, "--vocab-size", vocab, "--out", str(path)],
            check=0)
    out = tmp_path / "shards"
    run(["data", "prepare", shakespeare, "--tokenizer", str(tok), "--out", str(out)], check=0)
    qs = str(REPO / "configs" / "quickstart.yaml")
    base = [qs, *sets(*TINY, "data.synthetic=", f"data.train={out}/train.bin",
                      f"data.val={out}/val.bin", "model.vocab_size=512")]
    # other's 384 ids fit the model: the refusal is about which tokenizer, not its size.
    p = run([*base, *sets(f"data.tokenizer={other}", f"run_dir={tmp_path / 'no'}")], check=3)
    assert "made with another tokenizer than data.tokenizer" in p.stderr, p.stderr
    assert str(tok) in p.stderr  # the manifest's source: the fix names the right file
    p = run(["validate", qs, *sets(f"data.tokenizer={tok}")], check=2)
    assert "data.tokenizer is set without data.train" in p.stderr, p.stderr

    copy = tmp_path / "copy.json"
    copy.write_bytes(tok.read_bytes())
    rd = tmp_path / "run"
    run([*base, *sets(f"data.tokenizer={copy}", f"run_dir={rd}", "train.steps=200",
                      "logging.every=50")], check=0)
    (out / "manifest.json").unlink()  # now only data.tokenizer knows how the ids read

    def sample():
        return subprocess.run([TRAINRUN, "sample", str(rd), "--tokens", "40", "--prompt", "KING"],
                              capture_output=True, timeout=120)
    p = sample()
    assert p.returncode == 0, p.stderr
    text = p.stdout.decode("utf-8")  # whole BPE tokens of English: valid UTF-8
    assert text.startswith("KING")
    # Readable text, not ids or raw bytes: printable characters, more letters than the 40 tokens
    # (a byte-level reading prints at most 40 characters), and words between spaces.
    assert all(c.isprintable() or c.isspace() for c in text), repr(text)
    assert sum(c.isalpha() for c in text) > len("KING") + 40, repr(text)
    assert len(text.split()) >= 5, repr(text)
    copy.unlink()
    p = sample()
    assert p.returncode == 3 and b"data.tokenizer" in p.stderr, p.stderr

    # `sample --tokenizer` decodes with the file given (here the same tokenizer, elsewhere)...
    p = subprocess.run([TRAINRUN, "sample", str(rd), "--tokens", "40", "--prompt", "KING",
                        "--tokenizer", str(tok)], capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert sum(c.isalpha() for c in p.stdout.decode("utf-8")) > len("KING") + 40, p.stdout
    # ... and without any tokenizer the ids past 255 print as <id>, with a warning that says how
    # to decode them, never as truncated bytes.
    rd2 = tmp_path / "run2"
    run([*base, *sets(f"run_dir={rd2}", "train.steps=30")], check=0)  # no manifest, no tokenizer
    p = subprocess.run([TRAINRUN, "sample", str(rd2), "--tokens", "200", "--temperature", "2"],
                       capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert b"--tokenizer" in p.stderr and b"no tokenizer on record" in p.stderr, p.stderr
    assert re.search(rb"<(25[6-9]|2[6-9][0-9]|[34][0-9][0-9]|50[0-9]|51[01])>", p.stdout), p.stdout
