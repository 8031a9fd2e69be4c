"""data.mix: a weighted mixture of shard sources trains; a run interrupted on 2 ranks and resumed
on 1 reads what the uninterrupted run read (its losses); a source that runs out wraps and the
log says so; `trainrun report` shows the realised proportions beside the weights."""
import re

import pytest

from conftest import REPO, TINY, ckpt, losses, run, sets

STEPS = 12
BASE = [*[s for s in TINY if not s.startswith("data.")], "model.vocab_size=256",
        "data.synthetic=", f"train.steps={STEPS}", "checkpoint.every=6", "train.batch_size=8"]


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    """Two byte-level sources: 'web' (the README, ~40 KB) and 'tiny' (300 bytes: 16 windows of
    16 tokens, so it wraps within the run)."""
    d = tmp_path_factory.mktemp("mix")
    (d / "web.txt").write_bytes((REPO / "README.md").read_bytes())
    (d / "tiny.txt").write_bytes((REPO / "docs" / "data-format.md").read_bytes()[:300])
    for name in ("web", "tiny"):
        run(["data", "prepare", str(d / f"{name}.txt"), "--out", str(d / name)], check=0)
    mix = (f"data.mix=[{{path: {d / 'web'}, weight: 0.75}}, "
           f"{{path: {d / 'tiny' / 'train.bin'}, weight: 0.25, name: tiny, "
           f"val: {d / 'tiny' / 'val.bin'}}}]")
    return [*BASE, mix]


@pytest.fixture(scope="module")
def full_run(shards, tmp_path_factory):
    rd = tmp_path_factory.mktemp("full") / "run"
    p = run([str(REPO / "configs/quickstart.yaml"), *sets(*shards), "--run-dir", str(rd)],
            check=0)
    return rd, p


def test_a_mixture_trains_and_says_when_a_source_wraps(full_run):
    rd, p = full_run
    assert "mixture of 2 sources, order epochs" in p.stderr
    # tiny: 270 training tokens = 16 windows, a quarter of 8 samples a step: epoch 2 at step 9.
    wraps = re.findall(r"step (\d+): source 'tiny' begins epoch (\d+): all 16 samples read",
                       p.stderr)
    assert wraps == [("9", "2")], p.stderr
    assert "source 'web' begins" not in p.stderr
    assert len(losses(rd)) == STEPS


def test_the_report_shows_the_realised_proportions(full_run):
    rd, _ = full_run
    out = run(["report", str(rd), "--out", str(rd / "r.png")], check=0).stdout
    assert f"{STEPS * 8} samples read from 2 sources" in out
    got = dict(re.findall(r"(web|tiny): \d+ samples, ([\d.]+)% \(weight", out))
    assert float(got["web"]) == pytest.approx(75, abs=1)
    assert float(got["tiny"]) == pytest.approx(25, abs=1)


@pytest.mark.parametrize("first,then", [(1, 1), (2, 1)])
def test_resume_reads_what_the_uninterrupted_run_read(shards, full_run, tmp_path, first, then):
    want = losses(full_run[0])
    rd = tmp_path / "r"
    p = run([str(REPO / "configs/quickstart.yaml"), *sets(*shards, f"distributed.nproc={first}"),
             "--run-dir", str(rd)], env={"TRAINRUN_FAULTS": "exit:step=9:code=9"})
    assert p.returncode != 0
    assert (ckpt(rd, 6) / "MANIFEST").exists()
    run(["--resume", str(rd), *sets(f"distributed.nproc={then}")], check=0)
    got = losses(rd)
    assert sorted(got) == sorted(want)
    for step, loss in want.items():
        if first == then:
            assert got[step] == loss, f"step {step}"  # the same world size: bitwise
        else:
            assert got[step] == pytest.approx(loss, rel=1e-5), f"step {step}"


def test_the_mixture_config_runs_as_its_comment_says(shakespeare, tmp_path):
    """configs/mixture.yaml, shortened, with its sources prepared by the commands its comment
    gives, from the directory its relative paths are written for."""
    cfg = REPO / "configs" / "mixture.yaml"
    cmds = [line.split("#", 1)[1].split() for line in cfg.read_text().splitlines()
            if line.startswith("#   trainrun data prepare")]
    assert len(cmds) == 2, cmds
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "tinyshakespeare.txt").write_bytes(open(shakespeare, "rb").read())
    (tmp_path / "man").mkdir()
    (tmp_path / "man" / "trainrun.1").write_bytes((REPO / "man" / "trainrun.1").read_bytes())
    for cmd in cmds:
        run(cmd[1:], check=0, cwd=tmp_path)
    rd = tmp_path / "run"
    p = run([str(cfg), *sets("train.steps=40", "train.eval_every=20", "train.eval_steps=2",
                             "logging.every=10", "checkpoint.every=20", "model.n_layer=1",
                             "model.d_model=32", "model.n_head=2"),
             "--run-dir", str(rd)], check=0, cwd=tmp_path, timeout=300)
    assert "mixture of 2 sources, order epochs" in p.stderr
    rows = losses(rd)
    assert max(rows) == 40 and rows[40] < rows[1]
    out = run(["report", str(rd), "--out", str(rd / "r.png")], check=0).stdout
    got = dict(re.findall(r"(shakespeare|manual): \d+ samples, ([\d.]+)% \(weight", out))
    assert float(got["shakespeare"]) == pytest.approx(80, abs=1)
    assert float(got["manual"]) == pytest.approx(20, abs=1)



def test_weights_whose_sum_overflows_are_refused(tmp_path):
    # 1.5e308 + 0.5e308 is inf: every share became 0, a 50/50 blend shown as "-nan%" (issue 43
    # item 5). Weights are relative, so their sum must be a finite number.
    (tmp_path / "t.txt").write_bytes((REPO / "README.md").read_bytes())
    run(["data", "prepare", str(tmp_path / "t.txt"), "--out", str(tmp_path / "s")], check=0)
    a, b = tmp_path / "s" / "train.bin", tmp_path / "s" / "val.bin"

    def validate(wa, wb, check):
        mix = f"data.mix=[{{path: {a}, weight: {wa}}}, {{path: {b}, weight: {wb}}}]"
        return run(["validate", str(REPO / "configs/quickstart.yaml"), *sets(*BASE, mix)],
                   check=check)

    p = validate("1.5e308", "0.5e308", 2)
    assert "data.mix" in p.stderr and "sum to inf" in p.stderr, p.stderr
    assert "-nan" not in p.stderr + p.stdout
    validate("1.5e307", "0.5e307", 0)  # large, but their sum is finite
