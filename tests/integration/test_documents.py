"""data.document_masking (issue 30 part 2): packed documents do not attend to each other and their
positions restart. Byte-level shards of many short documents (end-of-text byte 0 between them)
train with masking on the CPU and on the CPU-executed CUDA device alike, differently from the
unmasked run; the id between documents must be known, and masking needs shards and attention."""
import pathlib
import shutil

import pytest

from conftest import REPO, TINY, TRAINRUN, losses, run, sets

SIM = pathlib.Path(TRAINRUN).parent / "kernels" / "sim" / "libtrainrun_cudasim.so"
BASE = [*[s for s in TINY if not s.startswith("data.")], "model.vocab_size=256",
        "data.synthetic=", "train.steps=8", "model.seq_len=32"]
QS = str(REPO / "configs" / "quickstart.yaml")
LLAMA = ["model.type=llama", "model.n_head=4", "model.n_kv_head=2", "model.ffn_hidden=0"]


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    """40 documents of 12-55 bytes (pieces of the README), so a 32-token sample holds several."""
    d = tmp_path_factory.mktemp("docs")
    text, at = (REPO / "README.md").read_bytes(), 0
    (d / "in").mkdir()
    for i in range(40):
        n = (12, 25, 40, 55)[i % 4]
        (d / "in" / f"{i:02d}.txt").write_bytes(text[at:at + n])
        at += n
    p = run(["data", "prepare", str(d / "in"), "--out", str(d / "shards"), "--val-fraction",
             "0.2"], check=0)
    assert "40 documents, end-of-text byte 0 between them" in p.stderr + p.stdout
    return [*BASE, f"data.train={d / 'shards' / 'train.bin'}",
            f"data.val={d / 'shards' / 'val.bin'}"]


@pytest.mark.parametrize("family", ["gpt", "llama"])
def test_masking_trains_and_changes_what_the_model_sees(shards, tmp_path, family):
    extra = [*shards, *(LLAMA if family == "llama" else [])]
    masked = tmp_path / "masked"
    run([QS, *sets(*extra, "data.document_masking=true", "data.eot=0"), "--run-dir", str(masked)],
        check=0)
    plain = tmp_path / "plain"
    run([QS, *sets(*extra), "--run-dir", str(plain)], check=0)
    a, b = losses(masked), losses(plain)
    assert len(a) == len(b) == 8
    # The first step's loss is the same model on the same tokens: masking changes it.
    assert a[1] != b[1]
    assert a[8] < a[1]


def test_the_cuda_kernels_mask_as_the_cpu_does(shards, tmp_path):
    # llama: both the attention kernels and RoPE's positions see the document starts.
    assert SIM.exists(), f"{SIM} was not built"
    env = {"TRAINRUN_CUDA_PLUGIN": str(SIM), "OMP_NUM_THREADS": "1"}
    extra = [*shards, *LLAMA, "data.document_masking=true", "data.eot=0"]
    got = {}
    for device in ("cpu", "cuda"):
        rd = tmp_path / device
        run([QS, *sets(*extra, f"device={device}"), "--run-dir", str(rd)], env=env, check=0,
            timeout=600)
        got[device] = losses(rd)
    assert got["cpu"].keys() == got["cuda"].keys() and len(got["cpu"]) == 8
    for step, loss in got["cpu"].items():
        assert abs(got["cuda"][step] - loss) <= 1e-4 * abs(loss), (step, got)


def without_indexes(shards, where):
    """The shards copied to `where` without their document indexes (as older or llm.c shards)."""
    where.mkdir()
    out = []
    for s in shards:
        if s.startswith(("data.train=", "data.val=")):
            key, path = s.split("=", 1)
            shutil.copy(path, where / pathlib.Path(path).name)
            s = f"{key}={where / pathlib.Path(path).name}"
        out.append(s)
    return out


def test_the_document_index_and_the_id_give_the_same_masks(shards, tmp_path):
    # data prepare wrote train.idx and val.idx; masking reads them. Without them it finds the
    # documents from data.eot: the same starts, so bit-identical losses.
    indexed = tmp_path / "indexed"
    run([QS, *sets(*shards, "data.document_masking=true"), "--run-dir", str(indexed)], check=0)
    bare = without_indexes(shards, tmp_path / "bare")
    scanned = tmp_path / "scanned"
    run([QS, *sets(*bare, "data.document_masking=true", "data.eot=0"), "--run-dir",
         str(scanned)], check=0)
    a, b = losses(indexed), losses(scanned)
    assert len(a) == 8 and a == b


def test_without_an_index_the_id_between_documents_must_be_known(shards, tmp_path):
    # Byte-level shards have no tokenizer to name <|endoftext|>: without their indexes,
    # data.eot is required.
    bare = without_indexes(shards, tmp_path / "bare")
    p = run([QS, *sets(*bare, "data.document_masking=true"), "--run-dir", str(tmp_path / "r")],
            check=3)
    assert "the shards have no document index" in p.stderr
    assert "set data.eot" in p.stderr


def test_documents_without_an_id_between_them_are_masked_from_the_index(tmp_path):
    # --eot none: nothing marks the documents in the tokens; the index still knows each input.
    d = tmp_path / "in"
    d.mkdir()
    text = (REPO / "README.md").read_bytes()
    for i in range(30):
        (d / f"{i:02d}.txt").write_bytes(text[i * 20:i * 20 + 20])
    run(["data", "prepare", str(d), "--out", str(tmp_path / "s"), "--eot", "none"], check=0)
    extra = [*BASE, f"data.train={tmp_path / 's' / 'train.bin'}",
             f"data.val={tmp_path / 's' / 'val.bin'}"]
    run([QS, *sets(*extra, "data.document_masking=true"), "--run-dir", str(tmp_path / "m")],
        check=0)
    run([QS, *sets(*extra), "--run-dir", str(tmp_path / "p")], check=0)
    assert losses(tmp_path / "m")[1] != losses(tmp_path / "p")[1]


def test_an_index_that_disagrees_with_its_shard_is_refused(shards, tmp_path):
    # Another prepare's index beside these shards: refused before training, with the fix.
    bare = without_indexes(shards, tmp_path / "bare")
    train = next(s.split("=", 1)[1] for s in bare if s.startswith("data.train="))
    other = next(s.split("=", 1)[1] for s in bare if s.startswith("data.val="))
    run(["data", "prepare", other, "--out", str(tmp_path / "other")], check=0)
    shutil.copy(tmp_path / "other" / "train.idx", pathlib.Path(train).with_suffix(".idx"))
    p = run([QS, *sets(*bare, "data.document_masking=true"), "--run-dir", str(tmp_path / "r")],
            check=3)
    assert "the document index does not match" in p.stderr
    assert "run `trainrun data prepare` again" in p.stderr
    assert not (tmp_path / "r" / "metrics.jsonl").exists()


@pytest.mark.parametrize("extra,message", [
    (["data.document_masking=true"], "data.document_masking needs token shards"),
    (["data.eot=0"], "data.eot is set without data.document_masking"),
])
def test_masking_without_shards_or_eot_without_masking_is_refused(tmp_path, extra, message):
    p = run(["validate", QS, *sets(*TINY, *extra)], check=2)
    assert message in p.stderr


def test_an_mlp_has_nothing_to_mask(shards, tmp_path):
    p = run(["validate", QS, *sets(*shards, "model.type=mlp", "data.document_masking=true",
                              "data.eot=0")], check=2)
    assert "data.document_masking needs attention" in p.stderr
