"""A memory-mapped input that changes under a run (issue 43 item 5): a shard truncated, or
overwritten in place (`cp new.bin train.bin` truncates it first), while a run reads it killed
every rank with SIGBUS (exit 135) and printed nothing. Now the run ends with exit 3 (bad data)
and names the file (src/data/mapped_file.h); the unit suite covers the document index."""
import os
import random
import subprocess

from conftest import REPO, TINY, TRAINRUN, run, sets, wait_for


def test_a_shard_truncated_mid_run_is_exit_3_naming_it(tmp_path):
    r = random.Random(3)
    text = tmp_path / "t.txt"
    text.write_text("".join(r.choice("abcdefgh ") for _ in range(1 << 20)))
    run(["data", "prepare", str(text), "--out", str(tmp_path / "s")], check=0)
    shard = tmp_path / "s" / "train.bin"
    rd = tmp_path / "r"
    args = [*[s for s in TINY if not s.startswith("data.")], "model.vocab_size=256",
            "data.synthetic=", f"data.train={shard}", f"data.val={tmp_path / 's' / 'val.bin'}",
            "train.steps=1000000"]
    env = {k: v for k, v in os.environ.items()
           if k not in ("OMP_NUM_THREADS", "GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    proc = subprocess.Popen([TRAINRUN, str(REPO / "configs/quickstart.yaml"), *sets(*args),
                             "--run-dir", str(rd)], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        metrics = rd / "metrics.jsonl"
        assert wait_for(lambda: metrics.exists() and metrics.read_text().count("\n") >= 3,
                        timeout=120)
        os.truncate(shard, 4096)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 3, err[-2000:]
    assert f"error: {shard}: the file changed while trainrun read it" in err, err[-2000:]
