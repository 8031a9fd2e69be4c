"""train.activation_checkpointing=full: the blocks' activations are recomputed in backward, so a
run trains bit for bit as without it (CPU, fp32, with dropout; gpt and llama), plans and
allocates less activation memory, resumes either way, and the mlp family (no blocks) refuses it
with the fix."""
import json

import pytest

from conftest import REPO, TINY, checksums, losses, run, sets

QS = str(REPO / "configs/quickstart.yaml")
BASE = [*TINY, "train.steps=12", "model.n_layer=3", "model.dropout=0.1", "checkpoint.every=6"]
LLAMA = ["model.type=llama", "model.n_head=4", "model.n_kv_head=2", "model.ffn_hidden=0"]


@pytest.mark.parametrize("family", [[], LLAMA], ids=["gpt", "llama"])
def test_full_checkpointing_trains_bit_for_bit_as_none(tmp_path, family):
    none, full = tmp_path / "none", tmp_path / "full"
    run([QS, *sets(*BASE, *family), "--run-dir", str(none)], check=0)
    run([QS, *sets(*BASE, *family, "train.activation_checkpointing=full"), "--run-dir",
         str(full)], check=0)
    assert losses(full) == losses(none) and len(losses(none)) == 12
    assert checksums(full) == checksums(none)


def test_it_may_be_switched_on_a_resume(tmp_path):
    ref, rd = tmp_path / "ref", tmp_path / "r"
    run([QS, *sets(*BASE), "--run-dir", str(ref)], check=0)
    p = run([QS, *sets(*BASE), "--run-dir", str(rd)], env={"TRAINRUN_FAULTS": "exit:step=8:code=9"})
    assert p.returncode != 0
    run(["--resume", str(rd), *sets("train.activation_checkpointing=full")], check=0)
    assert losses(rd) == losses(ref)
    assert "activation_checkpointing: full" in (rd / "config.yaml").read_text()


def test_the_plan_counts_less_activation_memory():
    # For a GPU from the plan's table: a CPU plan's peak is this machine's sgemm, measured anew
    # by each call, and the two predictions would differ by its noise.
    big = [*BASE, "model.n_layer=8", "model.d_model=64", "model.seq_len=64"]
    none = json.loads(run(["plan", QS, *sets(*big), "--gpu", "H100", "--json"], check=0).stdout)
    full = json.loads(run(["plan", QS, *sets(*big, "train.activation_checkpointing=full"),
                           "--gpu", "H100", "--json"], check=0).stdout)
    assert full["bytes"]["activations"] < 0.5 * none["bytes"]["activations"]
    # The recomputed forwards are in the predicted step time, not in the model's FLOPs.
    assert full["flops_per_step"] == none["flops_per_step"]
    assert full["predicted_step_seconds"] > none["predicted_step_seconds"]


def test_the_mlp_family_refuses_it_with_the_fix(tmp_path):
    p = run([QS, *sets(*BASE, "model.type=mlp", "train.activation_checkpointing=full"),
             "--run-dir", str(tmp_path / "r")], check=2)
    assert "model.type=mlp has none" in p.stderr
    assert "use train.activation_checkpointing=none" in p.stderr
