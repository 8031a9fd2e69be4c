"""Counts and sizes that come from input are bounded before any work (issue 27 item 3)."""
import time

from conftest import REPO, run, sets

QS = str(REPO / "configs" / "quickstart.yaml")


def test_thread_counts_are_bounded(tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("hello world\n" * 2000)
    for args in (["data", "prepare", str(text), "--out", str(tmp_path / "o"), "--threads",
                  "100000"],
                 ["data", "tokenizer", "train", str(text), "--vocab-size", "300", "--out",
                  str(tmp_path / "t.json"), "--threads", "1000000"]):
        p = run(args, check=2, timeout=60)
        assert "--threads" in p.stderr and "1024" in p.stderr, p.stderr


def test_a_huge_layer_count_is_refused_at_once():
    t0 = time.monotonic()
    for n in ("20000", "2147483647"):
        p = run(["validate", QS, *sets(f"model.n_layer={n}")], check=2, timeout=60)
        assert "model.n_layer" in p.stderr and "4096" in p.stderr, p.stderr
    assert time.monotonic() - t0 < 30  # it used to spin for minutes in ParamStore::declare


def test_many_layers_declare_in_linear_time(tmp_path):
    # 4096 blocks of a tiny GPT: about 50,000 parameters to declare; a scan per declare made
    # plan take tens of seconds, a set makes it instant.
    p = run(["plan", QS, *sets("model.n_layer=4096", "model.d_model=16", "model.n_head=2")],
            check=0, timeout=120)
    assert "blocks.4095" in p.stdout or "4096" in p.stdout
