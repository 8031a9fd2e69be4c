"""train.activation_checkpointing=full|selective: the blocks' activations (all but their input,
or their pointwise outputs alone) are recomputed in backward, so a run trains bit for bit as
without it (CPU, fp32, with dropout; gpt and llama), plans and allocates less activation memory
(selective between none and full, and cheaper in time than full), resumes either way, and the
mlp family (no blocks) refuses it with the fix."""
import json

import pytest

from conftest import REPO, TINY, checksums, losses, run, sets

QS = str(REPO / "configs/quickstart.yaml")
BASE = [*TINY, "train.steps=12", "model.n_layer=3", "model.dropout=0.1", "checkpoint.every=6"]
LLAMA = ["model.type=llama", "model.n_head=4", "model.n_kv_head=2", "model.ffn_hidden=0"]


@pytest.mark.parametrize("family", [[], LLAMA], ids=["gpt", "llama"])
def test_checkpointing_trains_bit_for_bit_as_none(tmp_path, family):
    none = tmp_path / "none"
    run([QS, *sets(*BASE, *family), "--run-dir", str(none)], check=0)
    assert len(losses(none)) == 12
    for mode in ("full", "selective"):
        rd = tmp_path / mode
        run([QS, *sets(*BASE, *family, f"train.activation_checkpointing={mode}"), "--run-dir",
             str(rd)], check=0)
        assert losses(rd) == losses(none), mode
        assert checksums(rd) == checksums(none), mode


def test_it_may_be_switched_on_a_resume(tmp_path):
    ref, rd = tmp_path / "ref", tmp_path / "r"
    run([QS, *sets(*BASE), "--run-dir", str(ref)], check=0)
    p = run([QS, *sets(*BASE), "--run-dir", str(rd)], env={"TRAINRUN_FAULTS": "exit:step=8:code=9"})
    assert p.returncode != 0
    run(["--resume", str(rd), *sets("train.activation_checkpointing=selective")], check=0)
    assert losses(rd) == losses(ref)
    assert "activation_checkpointing: selective" in (rd / "config.yaml").read_text()


def test_the_plan_counts_less_activation_memory():
    # For a GPU from the plan's table: a CPU plan's peak is this machine's sgemm, measured anew
    # by each call, and the two predictions would differ by its noise.
    big = [*BASE, "model.n_layer=8", "model.d_model=64", "model.seq_len=64"]
    none = json.loads(run(["plan", QS, *sets(*big), "--gpu", "H100", "--json"], check=0).stdout)
    full, selective = (json.loads(run(["plan", QS, *sets(*big, f"train.activation_checkpointing={m}"),
                                       "--gpu", "H100", "--json"], check=0).stdout)
                       for m in ("full", "selective"))
    assert full["bytes"]["activations"] < 0.5 * none["bytes"]["activations"]
    assert full["bytes"]["activations"] < selective["bytes"]["activations"]
    assert selective["bytes"]["activations"] < 0.8 * none["bytes"]["activations"]
    # The recomputed forwards are in the predicted step time, not in the model's FLOPs; selective
    # recomputes no GEMM, so it costs less time than full.
    assert full["flops_per_step"] == selective["flops_per_step"] == none["flops_per_step"]
    assert full["predicted_step_seconds"] > selective["predicted_step_seconds"]
    assert selective["predicted_step_seconds"] > none["predicted_step_seconds"]


def test_the_mlp_family_refuses_it_with_the_fix(tmp_path):
    p = run([QS, *sets(*BASE, "model.type=mlp", "train.activation_checkpointing=full"),
             "--run-dir", str(tmp_path / "r")], check=2)
    assert "model.type=mlp has none" in p.stderr
    assert "use train.activation_checkpointing=none" in p.stderr
