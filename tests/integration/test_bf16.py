"""bf16 mixed precision on the CPU reference (docs/cuda.md, "bf16 mixed precision"): a bf16 run
of the shakespeare-char config reaches the fp32 run's val loss within 2% at the same step count;
its checkpoints hold the f32 master weights (not rounded to bf16), a bf16 run resumes from them
bit for bit, and a bf16 checkpoint continues in fp32; two ranks with ZeRO-1 train as one."""
import re

import numpy as np
import pytest

from checkpoint_layout import tensor
from conftest import REPO, TINY, ckpt, losses, metrics, run, sets

# shakespeare-char shortened: 300 steps with two evaluations, about 20 s per run on 2 cores.
SHORT = ["device=cpu", "train.steps=300", "train.eval_every=150", "checkpoint.every=300",
         "logging.every=50"]
BASE = [*TINY, "device=cpu", "train.steps=20", "checkpoint.every=10", "checkpoint.keep_last=5",
        "train.precision=bf16"]


def final_val_loss(rd):
    rows = metrics(rd, "eval")
    assert rows, "no evaluation was logged"
    last = max(rows, key=lambda r: r["step"])
    assert last["step"] == 300
    return last["val_loss"]


def checksum(p):
    m = re.findall(r"rank 0 parameter checksum ([0-9a-f]{16})", p.stderr + p.stdout)
    assert m, "no parameter checksum in the log"
    return m[-1]


def test_bf16_val_loss_within_2_percent_of_fp32(tmp_path, shakespeare):
    got = {}
    for precision in ("fp32", "bf16"):
        rd = tmp_path / precision
        run([str(REPO / "configs/shakespeare-char.yaml"),
             *sets(f"data.text={shakespeare}", *SHORT, f"train.precision={precision}"),
             "--run-dir", str(rd)], check=0)
        got[precision] = final_val_loss(rd)
    print(f"val loss at step 300: fp32 {got['fp32']:.4f} bf16 {got['bf16']:.4f}")
    assert got["bf16"] == pytest.approx(got["fp32"], rel=0.02)
    assert got["bf16"] != got["fp32"]  # the run did round: a bf16 run is not the fp32 run


@pytest.fixture(scope="module")
def bf16_run(tmp_path_factory):
    rd = tmp_path_factory.mktemp("bf16") / "run"
    p = run([str(REPO / "configs/quickstart.yaml"), *sets(*BASE), "--run-dir", str(rd)], check=0)
    return rd, losses(rd), checksum(p)


def test_checkpoint_holds_f32_masters(bf16_run):
    rd, _, _ = bf16_run
    w = tensor(ckpt(rd, 10), "model/blocks.0.attn.qkv.weight")
    assert w.dtype == np.float32 and w.shape == (96, 32)
    # Masters keep the bits below bf16's 8-bit mantissa: most are not bf16 values.
    low_bits = (w.view(np.uint32) & 0xFFFF) != 0
    assert low_bits.mean() > 0.5


def test_bf16_resume_is_bitwise_identical(tmp_path, bf16_run):
    rd, full, full_sum = bf16_run
    r = tmp_path / "r"
    p = run([str(REPO / "configs/quickstart.yaml"), *sets(*BASE), "--run-dir", str(r)],
            env={"TRAINRUN_FAULTS": "exit:step=13:code=9"})
    assert p.returncode != 0
    p = run(["--resume", str(r)], check=0)
    assert f"resumed from {ckpt(r, 10)} at step 10" in p.stderr
    assert losses(r) == full  # every step, exact
    assert checksum(p) == full_sum


def test_bf16_checkpoint_continues_in_fp32(tmp_path, bf16_run):
    rd, full, _ = bf16_run
    # Continued from the older checkpoint into a run directory of its own (the bf16 run's own
    # directory holds newer checkpoints, which a resume there would never discard).
    b = tmp_path / "b"
    p = run(["--resume", str(ckpt(rd, 10)), "--run-dir", str(b),
             *sets("train.precision=fp32")], check=0)
    assert "resumed from" in p.stderr
    got = losses(b)
    assert sorted(got) == list(range(11, 21))
    # The fp32 continuation starts from the bf16 run's masters: its first loss is the bf16
    # run's within what bf16 activations explain, not a restart, and it trains on.
    assert got[11] == pytest.approx(full[11], rel=2e-2)
    assert got[11] != full[11]
    assert got[20] == pytest.approx(full[20], rel=5e-2)


def test_bf16_on_two_ranks_with_zero_matches_one_rank(tmp_path, bf16_run):
    """ZeRO-1 updates each rank's shard of the f32 masters and all-gathers them; every rank then
    rounds the same compute copy, so both ranks end alike and train as one rank does."""
    _, full, _ = bf16_run
    rd = tmp_path / "two"
    run([str(REPO / "configs/quickstart.yaml"),
         *sets(*BASE, "distributed.nproc=2", "distributed.zero=1"), "--run-dir", str(rd)],
        check=0)
    sums = set()
    for log in sorted((rd / "logs").glob("rank-*.log")):
        sums.update(re.findall(r"parameter checksum ([0-9a-f]{16})", log.read_text()))
    assert len(sums) == 1, f"the ranks ended with different weights: {sums}"
    # Half the rows per rank change the GEMMs' blocking, so a few f32 sums differ in their last
    # bit and round to a neighbouring bf16 value: within bf16's resolution (2^-9), not bitwise.
    got = losses(rd)
    assert sorted(got) == sorted(full)
    for step, want in full.items():
        assert got[step] == pytest.approx(want, rel=2e-3), f"step {step}"
