"""The device mesh (distributed.dp_replicate): hybrid sharding, ZeRO-1 split over the ranks of a
replica group and copied across groups, trains like one rank; its checkpoint (each replica writes
its share of its shard) resumes on another layout; the mesh is logged, printed by --dry-run and
`plan`, and a dp_replicate that does not divide the ranks is a config error naming the divisors."""
import json

import pytest

from checkpoint_layout import manifest
from conftest import REPO, TINY, checksums, ckpt, losses, run, sets

QS = str(REPO / "configs/quickstart.yaml")
STEPS = 12
BASE = [*TINY, f"train.steps={STEPS}", "train.batch_size=8", "checkpoint.every=6",
        "checkpoint.keep_last=5", "optimizer.warmup_steps=3", "distributed.oversubscribe=true"]
HSDP = ["distributed.nproc=4", "distributed.zero=1", "distributed.dp_replicate=2"]


@pytest.fixture(scope="module")
def one_rank(tmp_path_factory):
    rd = tmp_path_factory.mktemp("one") / "run"
    run([QS, *sets(*BASE), "--run-dir", str(rd)], check=0)
    return losses(rd)


def test_hybrid_sharding_trains_like_one_rank(tmp_path, one_rank):
    rd = tmp_path / "r"
    run([QS, *sets(*BASE, *HSDP), "--run-dir", str(rd)], check=0, timeout=300)
    got = losses(rd)
    assert sorted(got) == sorted(one_rank)
    for step, want in one_rank.items():
        assert got[step] == pytest.approx(want, rel=1e-5), f"step {step}"
    sums = checksums(rd)
    assert len(sums) == 4 and len(set(sums.values())) == 1
    log = (rd / "logs" / "rank-3.log").read_text()
    assert "mesh dp_replicate 2 x dp_shard 2: this rank at replica 1, shard 1" in log
    assert "dp_replicate: 2" in (rd / "config.yaml").read_text()
    # Each of the 4 files holds a quarter of the moments: a shard's replicas split it, so the
    # world writes every element once.
    table = manifest(ckpt(rd, STEPS))
    sizes = [f["elements"] for f in table["files"]]
    assert len(sizes) == 4 and max(sizes) - min(sizes) <= 6
    p = run(["inspect", str(ckpt(rd, STEPS))], check=0)
    assert "verdict: OK" in p.stdout


@pytest.mark.parametrize("then", [["distributed.nproc=1", "distributed.zero=0",
                                   "distributed.dp_replicate=1"],
                                  ["distributed.nproc=2", "distributed.zero=1",
                                   "distributed.dp_replicate=1"]])
def test_a_hybrid_checkpoint_resumes_on_another_layout(tmp_path, one_rank, then):
    rd = tmp_path / "r"
    p = run([QS, *sets(*BASE, *HSDP), "--run-dir", str(rd)],
            env={"TRAINRUN_FAULTS": "exit:step=8:code=9"}, timeout=300)
    assert p.returncode != 0
    p = run(["--resume", str(rd), *sets(*then)], check=0, timeout=300)
    assert "resumed from" in p.stderr
    got = losses(rd)
    for step, want in one_rank.items():
        assert got[step] == pytest.approx(want, rel=1e-5), f"step {step}"


def test_dry_run_and_plan_show_the_mesh(tmp_path):
    p = run([QS, *sets(*BASE, *HSDP), "--dry-run", "--run-dir", str(tmp_path / "r")], check=0)
    assert "# device mesh: dp_replicate 2 x dp_shard 2 (4 ranks), distributed.zero=1" in p.stdout
    p = run(["plan", QS, *sets(*BASE, *HSDP)], check=0)
    assert "dp_replicate 2 x dp_shard 2" in p.stdout
    p = run(["plan", QS, *sets(*BASE, *HSDP), "--json"], check=0)
    assert json.loads(p.stdout)["mesh"] == {"dp_replicate": 2, "dp_shard": 2, "tp": 1}


def test_a_dp_replicate_that_does_not_divide_the_ranks_is_refused(tmp_path):
    p = run([QS, *sets(*BASE, "distributed.nproc=4", "distributed.dp_replicate=3"),
             "--run-dir", str(tmp_path / "r")], check=2)
    assert "distributed.dp_replicate=3 does not divide the 4 ranks" in p.stderr
    assert "use one of 1, 2, 4" in p.stderr
    assert not (tmp_path / "r").exists()
