"""The model math checked against an implementation that shares none of trainrun's code: a tiny
model trains a few steps with the real binary, its checkpoint (exported to one file) is read
with h5py, and numpy alone (numpy_models.py, float64) recomputes the loss trainrun itself
reported on a known batch; the two agree to 1e-5 nats. Where PyTorch is importable it
recomputes the same losses as well.

Which batch: everything is documented, nothing is reproduced from trainrun's internals.
- The train loss of step s+1 (metrics.jsonl) is the forward loss of the weights after s updates,
  which checkpoint step-s holds, on samples s*batch_size .. (s+1)*batch_size-1 of the train
  split, each window at docs/data-format.md's start(j) for the run's seed.
- The val split is exactly seq_len + 1 tokens, so every evaluation window is all of it (start(j)
  is taken mod N - seq_len = 1, whatever the evaluation's own seed) and the val loss at step s is
  that one sequence's loss under the same weights."""
import math
import struct

import numpy as np
import pytest

import numpy_models
from conftest import REPO, ckpt, metrics, run, sets

SEED = 1234
BATCH = 4
SEQ_LEN = 16
VOCAB = 64
SAVED = 2  # the checkpoint step compared against; steps run: SAVED + 1
TOL = 1e-5

# Small enough to train in a second, big enough that every part of a block matters: two blocks,
# several heads, a vocabulary that is not the width.
FAMILIES = {
    "gpt": ["model.type=gpt", "model.n_layer=2", "model.n_head=4", "model.d_model=32"],
    # Grouped-query (2 key/value heads for 4), an untied head, a RoPE base of its own and a
    # SwiGLU width that is not the automatic one.
    "llama": ["model.type=llama", "model.n_layer=2", "model.n_head=4", "model.n_kv_head=2",
              "model.d_model=32", "model.ffn_hidden=48", "model.rope_theta=500",
              "model.tie_embeddings=false"],
    # The other corners: multi-query (one key/value head), the head tied to wte, automatic
    # widths and RoPE base.
    "llama-mqa-tied": ["model.type=llama", "model.n_layer=2", "model.n_head=4",
                       "model.n_kv_head=1", "model.d_model=32"],
}


def write_shard(path, tokens, vocab):
    """A trainrun token shard (docs/data-format.md): 64-byte header, then u8 tokens."""
    assert vocab <= 256
    header = struct.pack("<8sIIQI", b"TRNTOKEN", 1, 1, len(tokens), vocab)
    path.write_bytes(header.ljust(64, b"\0") + bytes(int(t) for t in tokens))


def text_like_tokens(n, rng):
    """Tokens with structure a model can start to learn (a noisy walk over the vocabulary), so
    a few steps move the weights well away from their initialisation."""
    steps = rng.choice([1, 1, 1, 2, 5, VOCAB - 3], size=n)
    return np.cumsum(steps) % VOCAB


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    d = tmp_path_factory.mktemp("equivalence-data")
    rng = np.random.default_rng(17)
    train = text_like_tokens(8192, rng)
    val = text_like_tokens(SEQ_LEN + 1, rng)
    write_shard(d / "train.bin", train, VOCAB)
    write_shard(d / "val.bin", val, VOCAB)
    return d, train, val


def train_tiny(family_sets, shards, run_dir):
    d, _, _ = shards
    run([str(REPO / "configs" / "quickstart.yaml"),
         *sets(*family_sets, f"seed={SEED}", "device=cpu", f"model.vocab_size={VOCAB}",
               f"model.seq_len={SEQ_LEN}", "model.dropout=0", "data.synthetic=",
               f"data.train={d / 'train.bin'}", f"data.val={d / 'val.bin'}",
               f"train.steps={SAVED + 1}", f"train.batch_size={BATCH}", "train.micro_batch_size=0",
               f"train.eval_every={SAVED}", "train.eval_steps=2", "train.precision=fp32",
               f"checkpoint.every={SAVED}", "checkpoint.keep_last=10", "logging.every=1",
               "optimizer.lr=1e-2", "optimizer.warmup_steps=0"),
         "--run-dir", str(run_dir)], check=0)
    # The checkpoint folder as one HDF5 file of named tensors, which h5py reads.
    single = run_dir / "exported.h5"
    run(["export", str(ckpt(run_dir, SAVED)), "--out", str(single)], check=0)
    weights, config = numpy_models.load(single)
    train_loss = {r["step"]: r["loss"] for r in metrics(run_dir)}[SAVED + 1]
    val_loss = {r["step"]: r["val_loss"] for r in metrics(run_dir, "eval")}[SAVED]
    return weights, config, train_loss, val_loss


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def trained(request, shards, tmp_path_factory):
    rd = tmp_path_factory.mktemp(f"equivalence-{request.param}") / "run"
    return request.param, train_tiny(FAMILIES[request.param], shards, rd)


def known_batches(shards):
    """(inputs, targets) of the train batch trainrun's step SAVED+1 read, and of the val split."""
    _, train, val = shards
    x, y = numpy_models.batch(train, SEED, SAVED * BATCH, BATCH, SEQ_LEN)
    return (x, y), (val[None, :-1].astype(np.int64), val[None, 1:].astype(np.int64))


def test_numpy_recomputes_trainruns_loss(trained, shards):
    family, (weights, config, train_loss, val_loss) = trained
    assert config["model"]["type"] == family.split("-")[0]
    (x, y), (vx, vy) = known_batches(shards)
    ours = numpy_models.loss(weights, config, x, y)
    assert abs(ours - train_loss) < TOL, f"{family}: numpy {ours!r}, trainrun {train_loss!r}"
    ours_val = numpy_models.loss(weights, config, vx, vy)
    assert abs(ours_val - val_loss) < TOL, f"{family}: numpy {ours_val!r}, trainrun {val_loss!r}"
    # The weights moved away from the start and the model is not trivially uniform, so the
    # agreement is about the trained model's math.
    assert abs(train_loss - math.log(VOCAB)) > 0.05


def test_numpy_notices_a_wrong_model(trained, shards):
    """The comparison can fail: the same numpy model on shifted targets, or with one weight
    matrix 1% off, is well outside the tolerance."""
    family, (weights, config, train_loss, _) = trained
    (x, y), _ = known_batches(shards)
    assert abs(numpy_models.loss(weights, config, x, np.roll(y, 1, axis=1)) - train_loss) > TOL
    bumped = dict(weights)
    name = next(n for n in sorted(weights) if n.endswith("attn.proj.weight"))
    bumped[name] = weights[name] * 1.01
    assert abs(numpy_models.loss(bumped, config, x, y) - train_loss) > TOL


def test_torch_recomputes_trainruns_loss(trained, shards):
    torch = pytest.importorskip(
        "torch", reason="PyTorch is not installed: the optional cross-check with it is skipped "
        "(numpy's, above, always runs)")
    import torch_models  # only where torch is
    family, (weights, config, train_loss, val_loss) = trained
    (x, y), (vx, vy) = known_batches(shards)
    for (bx, by), want in [((x, y), train_loss), ((vx, vy), val_loss)]:
        got = torch_models.loss(torch, weights, config, bx, by)
        assert abs(got - want) < TOL, f"{family}: torch {got!r}, trainrun {want!r}"

