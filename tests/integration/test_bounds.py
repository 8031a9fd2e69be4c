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


def test_thread_counts_from_the_environment_are_bounded_as_threads_is(tmp_path):
    # OMP_NUM_THREADS=100000 crashed training and `tokenizer train` with SIGSEGV, silently; 20000
    # ran for minutes (issue 43 item 5). Refused (exit 2) before any thread starts, as --threads.
    from conftest import TINY
    text = tmp_path / "t.txt"
    text.write_text("hello world\n" * 2000)
    for value in ("100000", "4,100000", "lots"):
        for args in ([QS, *sets(*TINY, "train.steps=2"), "--run-dir", str(tmp_path / "r")],
                     ["data", "tokenizer", "train", str(text), "--vocab-size", "300", "--out",
                      str(tmp_path / "t.json")]):
            p = run(args, env={"OMP_NUM_THREADS": value}, check=2, timeout=60)
            assert f"OMP_NUM_THREADS={value}" in p.stderr and "1 to 1024" in p.stderr, p.stderr
    assert not (tmp_path / "r").exists() and not (tmp_path / "t.json").exists()
    run(["data", "tokenizer", "train", str(text), "--vocab-size", "300", "--out",
         str(tmp_path / "t.json")], env={"OMP_NUM_THREADS": "2,1"}, check=0)


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


def test_tokenizer_ids_are_bounded_and_unique(tmp_path):
    import json
    text = tmp_path / "t.txt"
    text.write_text("the quick brown fox jumps over the lazy dog\n" * 200)
    tok = tmp_path / "tok.json"
    run(["data", "tokenizer", "train", str(text), "--vocab-size", "280", "--out", str(tok)],
        check=0)
    doc = json.loads(tok.read_text())
    name = next(t for t, i in doc["model"]["vocab"].items() if i == 270)
    for bad_id, says in [(2**31 - 1, "outside [0, 16777216)"), (4_000_000_000, "outside"),
                         (60_000_000, "outside"), (5000, "without large gaps"),
                         (1.5, "not an integer"), (3, "share the id 3")]:
        d = json.loads(tok.read_text())
        d["model"]["vocab"][name] = bad_id
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps(d))
        p = run(["data", "tokenizer", "encode", str(bad), str(text)], check=3, timeout=60)
        assert says in p.stderr, (bad_id, p.stderr)


def test_a_prompt_outside_the_vocabulary_is_a_data_error(tmp_path):
    # The man page gives exit 3 (data) for a prompt token the model does not have; it was 2.
    from conftest import TINY
    rd = tmp_path / "r"
    run([QS, *sets(*TINY, "train.steps=2"), "--run-dir", str(rd)], check=0)
    p = run(["sample", str(rd), "--prompt", "zzz", "--tokens", "2"], check=3)  # 'z' = 122 >= 32
    assert "prompt byte 122 is outside the model's vocabulary of 32" in p.stderr


def test_val_fraction_zero_is_refused_with_the_range_help_gives(tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("hello\n" * 100)
    p = run(["data", "prepare", str(text), "--out", str(tmp_path / "o"), "--val-fraction", "0"],
            check=2)
    assert "(0, 0.9]" in p.stderr and "(0, 1)" not in p.stderr


def test_decode_of_something_that_is_not_ids_stops_at_once(tmp_path):
    # /dev/zero was read whole into memory (gigabytes) before the first id was parsed.
    text = tmp_path / "t.txt"
    text.write_text("abc def\n" * 200)
    tok = tmp_path / "tok.json"
    run(["data", "tokenizer", "train", str(text), "--vocab-size", "270", "--out", str(tok)],
        check=0)
    p = run(["data", "tokenizer", "decode", str(tok), "/dev/zero"], check=3, timeout=20)
    assert "'\\x00' is not a token id" in p.stderr


def test_sample_honours_tokenizer_on_a_run_without_shards(tmp_path):
    # --tokenizer was silently ignored (even a missing file) for runs on text or synthetic data.
    from conftest import TINY
    rd = tmp_path / "r"
    run([QS, *sets(*TINY, "train.steps=2"), "--run-dir", str(rd)], check=0)
    p = run(["sample", str(rd), "--tokenizer", str(tmp_path / "missing.json")], check=3)
    assert "missing.json" in p.stderr
    text = tmp_path / "t.txt"
    text.write_text("the quick brown fox\n" * 300)
    tok = tmp_path / "tok.json"
    run(["data", "tokenizer", "train", str(text), "--vocab-size", "300", "--out", str(tok)],
        check=0)
    p = run(["sample", str(rd), "--tokenizer", str(tok), "--tokens", "2"], check=3)
    assert "tokens, but this run's model has a vocabulary of 32" in p.stderr


def test_the_largest_seq_len_is_reported_without_overflow():
    # "seq_len + 1 = -2147483648": an int overflow in the message (undefined behaviour).
    p = run(["validate", QS, *sets("model.seq_len=2147483647")], check=2)
    assert "-2147483648" not in p.stderr and "model.seq_len" in p.stderr, p.stderr


def test_a_fifo_as_a_tokenizer_is_refused_not_waited_on(tmp_path):
    import os
    fifo = tmp_path / "tok.json"
    os.mkfifo(fifo)
    text = tmp_path / "t.txt"
    text.write_text("hello\n")
    p = run(["data", "tokenizer", "encode", str(fifo), str(text)], check=3, timeout=20)
    assert "not a regular file" in p.stderr
    # The same for the tokenizer `data prepare` encodes with (one reader for every data input).
    p = run(["data", "prepare", str(text), "--tokenizer", str(fifo), "--out",
             str(tmp_path / "shards")], check=3, timeout=20)
    assert "not a regular file" in p.stderr, p.stderr


def test_a_config_from_a_fifo_a_pipe_or_a_device_is_bounded(tmp_path):
    import os
    import subprocess
    from conftest import TRAINRUN
    # A FIFO nobody writes to: refused after the stated wait (10 s), not waited on forever.
    fifo = tmp_path / "c.yaml"
    os.mkfifo(fifo)
    p = run(["validate", str(fifo)], check=2, timeout=60)
    assert "did not arrive within 10 s" in p.stderr, p.stderr
    # /dev/zero never ends: refused at the size bound, not grown into memory.
    p = run(["validate", "/dev/zero"], check=2, timeout=60)
    assert "more than 16 MiB" in p.stderr, p.stderr
    # Process substitution (a pipe with a writer) still reads: trainrun validate <(cat qs.yaml).
    r, w = os.pipe()
    q = subprocess.Popen([TRAINRUN, "validate", f"/dev/fd/{r}"], pass_fds=(r,),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    os.close(r)
    with os.fdopen(w, "w") as f:
        f.write((REPO / "configs" / "quickstart.yaml").read_text())
    out, err = q.communicate(timeout=60)
    assert q.returncode == 0, err


def test_a_synthetic_stream_larger_than_memory_is_refused_before_it_is_made():
    # It was generated whole: bad_alloc ("internal error"), or minutes of swapping.
    p = run(["validate", QS, *sets("data.synthetic_tokens=999999999999")], check=3, timeout=60)
    assert "data.synthetic_tokens" in p.stderr and "GiB" in p.stderr, p.stderr
