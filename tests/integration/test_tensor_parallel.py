"""Tensor parallelism (distributed.tp, issue 46): each transformer layer split over the tp ranks
(attention by heads, grouped-query kv heads with their query heads; the MLP by its hidden
width), composed with every data-parallel layout. A tp run trains as 1 rank does (fp32 losses to
1e-5, GPT and Llama, dropout, document masking, ZeRO 0-3, hybrid sharding; bf16 within its
tolerance), its checkpoints hold global tensors that resume on any other layout and export
whole, and a split the model cannot take is a config error naming the key and values that work.
"""
import json

import pytest

from checkpoint_layout import manifest
from conftest import REPO, TINY, ckpt, losses, run, sets
from test_documents import shards  # noqa: F401  (a fixture: packed documents)
from test_hf_export import read_safetensors

QS = str(REPO / "configs/quickstart.yaml")
STEPS = 30
BASE = [*TINY, "model.n_layer=2", "model.n_head=4", f"train.steps={STEPS}",
        "optimizer.warmup_steps=5", "distributed.oversubscribe=true", "checkpoint.every=0"]
LLAMA = ["model.type=llama", "model.ffn_hidden=0"]
MODELS = {
    "gpt": [],
    "gpt-dropout": ["model.dropout=0.1"],
    "llama-kv=tp": [*LLAMA, "model.n_kv_head=2"],
    "llama-kv=2tp": [*LLAMA, "model.n_kv_head=4", "model.dropout=0.1"],
}


def train(rd, *extra, env=None, check=0):
    run([QS, *sets(*BASE, *extra), "--run-dir", str(rd)], env=env, check=check, timeout=300)
    return losses(rd)


def assert_close(got, want, rel):
    assert sorted(got) == sorted(want) and len(want) == STEPS
    for step, w in want.items():
        assert got[step] == pytest.approx(w, rel=rel), f"step {step}"


@pytest.mark.parametrize("model", MODELS)
def test_tp_2_on_2_ranks_trains_as_one_rank(tmp_path, model):
    want = train(tmp_path / "one", *MODELS[model])
    rd = tmp_path / "tp"
    assert_close(train(rd, *MODELS[model], "distributed.nproc=2", "distributed.tp=2"), want, 1e-5)
    log = (rd / "logs" / "rank-1.log").read_text()
    assert "mesh dp_replicate 1 x dp_shard 1 x tp 2: this rank at replica 0, shard 0, tp 1" in log
    # The rank holds half of every split layer: fewer parameters than the model's.
    one = (tmp_path / "one" / "logs" / "rank-0.log").read_text()
    count = lambda text: int(text.split(" parameters,")[0].rsplit(" ", 1)[1])
    assert count(log) < count(one)


def test_the_overlap_of_the_tp_allreduces_changes_no_bit(tmp_path):
    # A column-parallel layer's input-gradient all-reduce runs during its weight-gradient GEMM
    # (true; auto chooses it over NCCL) or after it. The same GEMMs and sums either way: the
    # same losses, bit for bit.
    model = [*MODELS["llama-kv=2tp"], "distributed.nproc=2", "distributed.tp=2"]
    on = train(tmp_path / "on", *model, "distributed.tp_overlap=true")
    off = train(tmp_path / "off", *model, "distributed.tp_overlap=false")
    assert len(on) == STEPS and on == off


@pytest.mark.parametrize("layout", [
    ["distributed.zero=3"],
    ["distributed.zero=1", "distributed.dp_replicate=2"],
    ["distributed.zero=2", "train.micro_batch_size=1"],
])
def test_tp_2_composes_with_data_parallel_sharding_on_4_ranks(tmp_path, layout):
    model = MODELS["llama-kv=tp"]
    want = train(tmp_path / "one", *model)
    got = train(tmp_path / "tp", *model, "distributed.nproc=4", "distributed.tp=2", *layout)
    assert_close(got, want, 1e-5)


def test_tp_4_on_4_ranks_trains_as_one_rank(tmp_path):
    want = train(tmp_path / "one", *MODELS["llama-kv=2tp"])
    got = train(tmp_path / "tp", *MODELS["llama-kv=2tp"], "distributed.nproc=4",
                "distributed.tp=4")
    assert_close(got, want, 1e-5)


@pytest.mark.parametrize("family", ["gpt", "llama"])
def test_document_masking_splits_with_the_heads(shards, tmp_path, family):  # noqa: F811
    extra = [*shards, "data.document_masking=true", "data.eot=0", f"train.steps={STEPS}",
             "distributed.oversubscribe=true", "model.n_head=4"]
    if family == "llama":
        extra += [*LLAMA, "model.n_kv_head=2"]
    one, tp = tmp_path / "one", tmp_path / "tp"
    run([QS, *sets(*extra), "--run-dir", str(one)], check=0)
    run([QS, *sets(*extra, "distributed.nproc=2", "distributed.tp=2"), "--run-dir", str(tp)],
        check=0)
    want = losses(one)
    assert len(want) == STEPS
    for step, w in want.items():
        assert losses(tp)[step] == pytest.approx(w, rel=1e-5), step


def test_bf16_within_the_bf16_tolerance(tmp_path):
    # bf16 partial outputs are summed in bf16 (as NCCL does): close to, not equal to, one rank.
    want = train(tmp_path / "one", "train.precision=bf16")
    got = train(tmp_path / "tp", "train.precision=bf16", "distributed.nproc=2", "distributed.tp=2")
    assert_close(got, want, 2e-3)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    rd = tmp_path_factory.mktemp("tp") / "full"
    return train(rd, "checkpoint.every=10")


@pytest.mark.parametrize("then", [
    ["distributed.nproc=1", "distributed.tp=1"],
    ["distributed.nproc=4", "distributed.tp=4"],
    ["distributed.nproc=4", "distributed.tp=2", "distributed.zero=3"],
    ["distributed.nproc=2", "distributed.tp=1", "distributed.zero=1"],
])
def test_a_tp_2_dp_2_checkpoint_resumes_on_any_layout(tmp_path, uninterrupted, then):
    rd = tmp_path / "r"
    p = run([QS, *sets(*BASE, "distributed.nproc=4", "distributed.tp=2", "checkpoint.every=10"),
             "--run-dir", str(rd)], env={"TRAINRUN_FAULTS": "exit:step=25:code=9"}, timeout=300)
    assert p.returncode != 0
    p = run(["--resume", str(rd), *sets(*then)], check=0, timeout=300)
    assert "resumed from" in p.stderr and "at step 20" in p.stderr
    assert_close(losses(rd), uninterrupted, 1e-5)


def test_a_tp_checkpoint_stores_global_tensors_and_exports_them_whole(tmp_path):
    one, tp = tmp_path / "one", tmp_path / "tp"
    train(one, "train.steps=1", "checkpoint.every=1")
    train(tp, "train.steps=1", "checkpoint.every=1", "distributed.nproc=2", "distributed.tp=2")
    table = manifest(ckpt(tp, 1))
    assert len(table["files"]) == 2
    p = run(["inspect", str(ckpt(tp, 1))], check=0)
    assert "verdict: OK" in p.stdout and "parallel/tp: 2" in p.stdout
    # The fused q|k|v weight: its q, k and v rows, half of each per rank, whole in the checkpoint.
    assert "model/blocks.0.attn.qkv.weight [96, 32] in 6 slices" in p.stdout, p.stdout
    assert "model/wte.weight [32, 32] in 2 slices" in p.stdout  # by vocabulary
    assert "model/wpe.weight [16, 32] in 1 slice" in p.stdout  # whole, written by tp rank 0
    for rd in (one, tp):
        run(["export", str(rd), "--format", "hf", "--out", str(rd / "hf")], check=0)
    a = read_safetensors(one / "hf" / "model.safetensors")
    b = read_safetensors(tp / "hf" / "model.safetensors")
    assert a.keys() == b.keys()
    for name in a:
        assert a[name].shape == b[name].shape, name
        # The same initial weights (each rank draws its slice at its global positions) after
        # one identical step.
        assert abs(a[name] - b[name]).max() <= 1e-5 * max(1.0, abs(a[name]).max()), name


@pytest.mark.parametrize("extra,keys,message", [
    (["model.n_head=2", "distributed.tp=4", "distributed.nproc=4"], "model.n_head",
     "model.n_head=2 is not divisible by distributed.tp=4: each rank computes n_head / tp "
     "whole heads; use n_head 4 (with d_model divisible by it), or tp one of 1, 2"),
    ([*LLAMA, "model.n_kv_head=1", "distributed.tp=2", "distributed.nproc=2"], "model.n_kv_head",
     "model.n_kv_head=1 is not divisible by distributed.tp=2"),
    ([*LLAMA, "model.ffn_hidden=33", "distributed.tp=2", "distributed.nproc=2"],
     "model.ffn_hidden", "the MLP's hidden width 33 is not divisible by distributed.tp=2"),
    (["distributed.tp=4", "distributed.nproc=2", "distributed.nodes=2"], "distributed.nproc",
     "distributed.tp=4 does not divide the 2 ranks of a node (distributed.nproc)"),
    (["distributed.tp=3", "distributed.nproc=4"], "distributed.tp",
     "distributed.tp=3 does not divide the 4 ranks: use one of 1, 2, 4"),
    (["model.type=mlp", "distributed.tp=2", "distributed.nproc=2"], "model.type",
     "model.type=mlp has none"),
])
def test_a_split_the_model_cannot_take_is_a_config_error(tmp_path, extra, keys, message):
    rd = tmp_path / "r"
    p = run([QS, *sets(*BASE, *extra), "--run-dir", str(rd)], check=2)
    assert message in p.stderr, p.stderr
    assert keys in p.stderr
    assert not rd.exists()


def test_tp_across_nodes_is_allowed_when_asked_and_the_dry_run_names_the_mesh(tmp_path):
    p = run([QS, *sets(*BASE, "distributed.tp=4", "distributed.nproc=2", "distributed.nodes=2",
                       "distributed.tp_across_nodes=true"), "--dry-run",
             "--run-dir", str(tmp_path / "r")], check=0)
    assert "# device mesh: dp_replicate 1 x dp_shard 1 x tp 4 (4 ranks)" in p.stdout
    p = run([QS, *sets(*BASE, "distributed.nproc=4", "distributed.tp=2", "distributed.zero=3"),
             "--dry-run", "--run-dir", str(tmp_path / "r")], check=0)
    assert "# device mesh: dp_replicate 1 x dp_shard 2 x tp 2 (4 ranks), distributed.zero=3" \
        in p.stdout


def test_the_plan_counts_a_ranks_share_and_the_tp_allreduces(tmp_path):
    cfg = sets(*BASE, "distributed.nproc=2")
    one = json.loads(run(["plan", QS, *cfg, "--json"], check=0).stdout)
    tp = json.loads(run(["plan", QS, *cfg, *sets("distributed.tp=2"), "--json"], check=0).stdout)
    assert tp["mesh"] == {"dp_replicate": 1, "dp_shard": 1, "tp": 2}
    assert tp["params"] == one["params"]  # the model's
    # A rank holds half of every block: less than the whole model, more than half of it.
    assert one["bytes"]["params"] / 2 < tp["bytes"]["params"] < one["bytes"]["params"]
    # 2 layers x 4 all-reduces (forward and backward, attention and MLP) per micro-batch and the
    # vocabulary-parallel embedding's and head's 2, each of the micro-batch's rows x d_model fp32
    # activations; the batch of 8 is one micro-batch. Besides, the loss's (tp + 1) x rows floats.
    c = tp["tp_collectives"]
    assert c["per_micro_batch"] == 10 and tp["micro_batch"] == 8 and tp["accum"] == 1
    assert c["bytes_each"] == 8 * 16 * 32 * 4
    assert c["loss_bytes"] == 3 * 8 * 16 * 4
    assert c["bytes_per_step"] == (10 * c["bytes_each"] + c["loss_bytes"]) * 2 * (2 - 1) / 2
    assert c["seconds_per_step"] > 0
    # On a GPU the column-parallel layers' backward all-reduces (2 per layer, and the head's) run
    # during their weight-gradient GEMMs (distributed.tp_overlap auto or true): each hides at most
    # its own time. Without the overlap all of them are exposed, and the step is longer by what
    # was hidden. Over MPI the overlap hides nothing: the CPU plan exposes all.
    def h100(*extra):
        return json.loads(run(["plan", QS, *cfg, *sets("distributed.tp=2", *extra), "--gpu",
                               "H100", "--json"], check=0).stdout)
    overlap, serial = h100(), h100("distributed.tp_overlap=false")
    o, s = overlap["tp_collectives"], serial["tp_collectives"]
    assert s["exposed_seconds_per_step"] == s["seconds_per_step"] == o["seconds_per_step"]
    hidden = o["seconds_per_step"] - o["exposed_seconds_per_step"]
    assert 0 < hidden <= (2 * 2 + 1) * o["each"]["seconds"] * (1 + 1e-9)
    assert serial["predicted_step_seconds"] - overlap["predicted_step_seconds"] == \
        pytest.approx(hidden, rel=1e-6)
    assert c["exposed_seconds_per_step"] == c["seconds_per_step"]
    assert one["tp_collectives"]["per_micro_batch"] == 0
    text = run(["plan", QS, *cfg, *sets("distributed.tp=2")], check=0).stdout
    assert "device mesh              dp_replicate 1 x dp_shard 1 x tp 2" in text
    assert ("tp allreduces            10 per micro-batch of 16.0 KiB each (activations) and the "
            "loss's of 1.5 KiB") in text


def test_the_layout_search_lists_what_fits_fastest_first_as_plan_plans_each(tmp_path):
    # An 8 B-parameter GPT on 8 H100s: ZeRO-0 (the config as given) needs 160 GiB per rank.
    big = ["device=cuda", "train.precision=bf16", "distributed.nproc=8", "model.d_model=4096",
           "model.n_layer=40", "model.n_head=32", "model.vocab_size=50304",
           "model.seq_len=2048", "train.batch_size=16"]
    plan = lambda *extra: json.loads(run(["plan", QS, *sets(*big, *extra), "--gpu", "H100",
                                          "--json"], check=0).stdout)
    assert not plan()["fits"]
    s = json.loads(run(["plan", QS, *sets(*big), "--gpu", "H100", "--search", "--top", "0",
                        "--json"], check=0).stdout)
    assert s["world"] == 8 and 0 < s["fit"] < s["tried"] and len(s["layouts"]) == s["fit"]
    steps = [x["step_seconds"] for x in s["layouts"]]
    assert steps == sorted(steps)
    assert {x["tp"] for x in s["layouts"]} == {1, 2, 4, 8}
    assert not any(x["zero"] == 0 and x["tp"] == 1 for x in s["layouts"])
    for x in s["layouts"][:3] + [next(x for x in s["layouts"] if x["tp"] == 8)]:
        p = plan(f"distributed.tp={x['tp']}", f"distributed.zero={x['zero']}",
                 f"distributed.dp_replicate={x['dp_replicate']}",
                 f"train.activation_checkpointing={x['activation_checkpointing']}",
                 f"train.micro_batch_size={x['micro_batch']}")
        assert p["fits"] and p["predicted_step_seconds"] == pytest.approx(x["step_seconds"])
        assert p["bytes"]["total"] == pytest.approx(x["bytes_per_rank"])
    text = run(["plan", QS, *sets(*big), "--gpu", "H100", "--search", "--top", "2"],
               check=0).stdout
    assert text.startswith("layout search: 8 ranks on H100 SXM: ")
    assert len([line for line in text.splitlines() if line.startswith("    ")]) == 3  # head + 2
    assert "the fastest: --set distributed.tp=" in text
