"""`trainrun export --format hf`: a trained gpt or llama in transformers' layout. transformers
and torch are not installed here, so the reference is a numpy forward written from
transformers' modeling code (modeling_gpt2.py's Conv1D [in, out] weights, fused c_attn and
gelu_new; modeling_llama.py's q/k/v/o, gate/up/down, rotate_half RoPE with repeat_kv) over the
exported names and a small safetensors reader of its own: its loss must equal, in float64,
numpy_models' over trainrun's own checkpoint, on the same tokens. Also: config.json's fields,
bf16 weights as bf16 rounds them, a model sharded by --max-shard-size, and the refusals."""
import json
import struct

import numpy as np
import pytest

import numpy_models as nm
from conftest import REPO, TINY, losses, run, sets

QS = str(REPO / "configs/quickstart.yaml")
BASE = [*TINY, "train.steps=6", "model.n_layer=2"]
LLAMA = ["model.type=llama", "model.n_head=4", "model.n_kv_head=2", "model.d_model=32",
         "model.ffn_hidden=48", "model.tie_embeddings=false", "model.rope_theta=5000"]


def read_safetensors(path):
    """{name: float64 array} of one file, read from the format's definition."""
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        buf = data[b:e]
        if t["dtype"] == "F32":
            a = np.frombuffer(buf, dtype="<f4")
        else:
            assert t["dtype"] == "BF16"
            a = (np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        out[name] = a.reshape(t["shape"]).astype(np.float64)
    return out


def read_model(d):
    index = d / "model.safetensors.index.json"
    if not index.exists():
        return read_safetensors(d / "model.safetensors")
    out = {}
    for f in sorted(set(json.loads(index.read_text())["weight_map"].values())):
        out.update(read_safetensors(d / f))
    return out


def hf_gpt2_loss(w, c, x, y):
    return nm.cross_entropy(hf_gpt2_logits(w, c, x), y)


def hf_gpt2_logits(w, c, x):
    """GPT2LMHeadModel's forward (modeling_gpt2.py), eval mode: [B, T, V]."""
    T = x.shape[1]
    nh, eps = c["n_head"], c["layer_norm_epsilon"]
    h = w["transformer.wte.weight"][x] + w["transformer.wpe.weight"][np.arange(T)]
    for i in range(c["n_layer"]):
        p = f"transformer.h.{i}."
        a = nm.layernorm(h, w[p + "ln_1.weight"], w[p + "ln_1.bias"], eps)
        qkv = a @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]  # Conv1D: x W + b
        q, k, v = np.split(qkv, 3, axis=-1)
        o = nm.merge_heads(nm.causal_attention(nm.heads(q, nh), nm.heads(k, nh), nm.heads(v, nh)))
        h = h + o @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        m = nm.layernorm(h, w[p + "ln_2.weight"], w[p + "ln_2.bias"], eps)
        assert c["activation_function"] == "gelu_new"
        f = nm.gelu_tanh(m @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"])
        h = h + f @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    h = nm.layernorm(h, w["transformer.ln_f.weight"], w["transformer.ln_f.bias"], eps)
    assert c["tie_word_embeddings"]
    return h @ w["transformer.wte.weight"].T


def hf_llama_loss(w, c, x, y):
    return nm.cross_entropy(hf_llama_logits(w, c, x), y)


def hf_llama_logits(w, c, x):
    """LlamaForCausalLM's forward (modeling_llama.py), eval mode: [B, T, V]."""
    B, T = x.shape
    H, K, d = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    inv_freq = 1.0 / (c["rope_theta"] ** (np.arange(0, d, 2) / d))
    freqs = np.arange(T)[:, None] * inv_freq[None, :]
    emb = np.concatenate([freqs, freqs], -1)
    cos, sin = np.cos(emb), np.sin(emb)

    def rotate_half(t):
        return np.concatenate([-t[..., d // 2:], t[..., :d // 2]], -1)

    def rms(t, weight):
        return t / np.sqrt((t * t).mean(-1, keepdims=True) + c["rms_norm_eps"]) * weight

    def proj(t, name, n):  # nn.Linear: x W^T, then [B, n, T, d]
        return (t @ w[name].T).reshape(B, T, n, d).transpose(0, 2, 1, 3)

    h = w["model.embed_tokens.weight"][x]
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        a = rms(h, w[p + "input_layernorm.weight"])
        q = proj(a, p + "self_attn.q_proj.weight", H)
        k = proj(a, p + "self_attn.k_proj.weight", K)
        v = proj(a, p + "self_attn.v_proj.weight", K)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = np.repeat(k, H // K, axis=1), np.repeat(v, H // K, axis=1)  # repeat_kv
        o = nm.merge_heads(nm.causal_attention(q, k, v))
        h = h + o @ w[p + "self_attn.o_proj.weight"].T
        m = rms(h, w[p + "post_attention_layernorm.weight"])
        g, u = m @ w[p + "mlp.gate_proj.weight"].T, m @ w[p + "mlp.up_proj.weight"].T
        h = h + (nm.silu(g) * u) @ w[p + "mlp.down_proj.weight"].T
    h = rms(h, w["model.norm.weight"])
    head = w["model.embed_tokens.weight"] if c["tie_word_embeddings"] else w["lm_head.weight"]
    return h @ head.T


def trained(tmp_path, extra):
    rd = tmp_path / "run"
    run([QS, *sets(*BASE, *extra), "--run-dir", str(rd)], check=0)
    single = tmp_path / "single.h5"
    run(["export", str(rd), "--out", str(single)], check=0)
    return rd, single


def tokens(cfg, seed=3):
    rng = np.random.default_rng(seed)
    V, T = cfg["model"]["vocab_size"], cfg["model"]["seq_len"]
    return rng.integers(0, V, (2, T)), rng.integers(0, V, (2, T))


@pytest.mark.parametrize("family", ["gpt", "llama"])
def test_the_exported_model_computes_trainruns_loss(tmp_path, family):
    rd, single = trained(tmp_path, LLAMA if family == "llama" else [])
    ours, cfg = nm.load(single)
    out = tmp_path / "hf"
    p = run(["export", str(rd), "--format", "hf", "--out", str(out)], check=0)
    assert "for transformers" in p.stdout
    c = json.loads((out / "config.json").read_text())
    w = read_model(out)
    x, y = tokens(cfg)
    want = nm.loss(ours, cfg, x, y)
    got = (hf_gpt2_loss if family == "gpt" else hf_llama_loss)(w, c, x, y)
    assert got == pytest.approx(want, rel=1e-12, abs=1e-12)
    assert abs(nm.loss(ours, cfg, x, np.roll(y, 1, axis=1)) - want) > 1e-3  # it can fail
    m = cfg["model"]
    if family == "gpt":
        assert c["architectures"] == ["GPT2LMHeadModel"]
        assert (c["n_embd"], c["n_layer"], c["n_head"], c["n_positions"], c["vocab_size"]) == (
            m["d_model"], m["n_layer"], m["n_head"], m["seq_len"], m["vocab_size"])
    else:
        assert c["architectures"] == ["LlamaForCausalLM"]
        assert (c["hidden_size"], c["num_key_value_heads"], c["intermediate_size"],
                c["rope_theta"], c["tie_word_embeddings"]) == (32, 2, 48, 5000.0, False)
        assert "lm_head.weight" in w
    assert c["torch_dtype"] == "float32"
    assert json.loads((out / "generation_config.json").read_text())["do_sample"] is False


def test_bf16_and_sharded_exports(tmp_path):
    rd, single = trained(tmp_path, LLAMA)
    ours, cfg = nm.load(single)
    x, y = tokens(cfg)
    out = tmp_path / "hf"
    run(["export", str(rd), "--format", "hf", "--out", str(out), "--dtype", "bf16",
         "--max-shard-size", "10kB"], check=0)
    index = json.loads((out / "model.safetensors.index.json").read_text())
    files = set(index["weight_map"].values())
    assert len(files) > 2 and not (out / "model.safetensors").exists()
    c = json.loads((out / "config.json").read_text())
    assert c["torch_dtype"] == "bfloat16"
    w = read_model(out)
    # Each weight is trainrun's rounded to bf16 (nearest even): the q rows of the fused qkv.
    q = w["model.layers.0.self_attn.q_proj.weight"]
    fused = ours["blocks.0.attn.qkv.weight"][:q.shape[0]].astype(np.float32)
    bits = fused.view(np.uint32)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).view(np.float32)
    assert np.array_equal(q, rounded.astype(np.float64))
    assert hf_llama_loss(w, c, x, y) == pytest.approx(nm.loss(ours, cfg, x, y), rel=2e-2)


def test_refusals(tmp_path):
    rd = tmp_path / "mlp"
    run([QS, *sets(*BASE, "model.type=mlp"), "--run-dir", str(rd)], check=0)
    p = run(["export", str(rd), "--format", "hf", "--out", str(tmp_path / "o")], check=2)
    assert "model.type=mlp has no Hugging Face architecture" in p.stderr
    gpt, _ = trained(tmp_path, [])
    full = tmp_path / "full"
    full.mkdir()
    (full / "mine.txt").write_text("keep")
    p = run(["export", str(gpt), "--format", "hf", "--out", str(full)], check=2)
    assert "is not empty; pass --force" in p.stderr
    assert (full / "mine.txt").read_text() == "keep"


# --- model.init_from: starting from a Hugging Face model -------------------------------------

# A step that changes no weight (lr 1e-30 is far below float32's resolution of any weight).
FROZEN = ["train.steps=1", "optimizer.lr=1e-30", "optimizer.min_lr=0",
          "optimizer.weight_decay=0", "optimizer.warmup_steps=0"]


def write_safetensors(path, tensors):
    """{name: float32 array} as one F32 file, by the format's definition."""
    header, data = {}, b""
    for name, a in tensors.items():
        b = np.ascontiguousarray(a, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape),
                        "data_offsets": [len(data), len(data) + len(b)]}
        data += b
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)


@pytest.mark.parametrize("family,tp", [("gpt", 1), ("llama", 1), ("gpt", 2), ("llama", 2)])
def test_a_run_starts_from_an_exported_model_exactly(tmp_path, family, tp):
    # At tp 2 each rank reads the folder whole and keeps its part of every split tensor.
    extra = LLAMA if family == "llama" else []
    if tp > 1:
        extra = [*extra, "model.n_head=4", f"distributed.nproc={tp}", f"distributed.tp={tp}",
                 "distributed.oversubscribe=true"]
    rd, _ = trained(tmp_path, extra)
    hf = tmp_path / "hf"
    run(["export", str(rd), "--format", "hf", "--out", str(hf)], check=0)
    b = tmp_path / "b"
    p = run([QS, *sets(*BASE, *extra, *FROZEN, f"model.init_from={hf}"), "--run-dir", str(b)],
            check=0)
    assert f"weights from {hf}" in (b / "logs" / "rank-0.log").read_text(), p.stderr
    again = tmp_path / "again"
    run(["export", str(b), "--format", "hf", "--out", str(again)], check=0)
    first, second = read_model(hf), read_model(again)
    assert first.keys() == second.keys()
    for name in first:
        assert np.array_equal(first[name], second[name]), name
    # A resume reads the checkpoint, never the folder again.
    import shutil
    shutil.rmtree(hf)
    run(["--resume", str(b), *sets("train.steps=3")], check=0)


def test_a_config_that_names_only_init_from_takes_the_model_from_the_folder(tmp_path):
    rd, _ = trained(tmp_path, LLAMA)
    hf = tmp_path / "hf"
    run(["export", str(rd), "--format", "hf", "--out", str(hf)], check=0)
    import yaml
    cfg = yaml.safe_load(open(QS))
    cfg["model"] = {"init_from": str(hf), "seq_len": 16}  # no family, no size
    path = tmp_path / "from_hf.yaml"
    path.write_text(yaml.safe_dump(cfg))
    not_model = [s for s in [*BASE, *FROZEN] if not s.startswith("model.")]
    b = tmp_path / "b"
    run([str(path), *sets(*not_model), "--run-dir", str(b)], check=0)
    model = yaml.safe_load((b / "config.yaml").read_text())["model"]
    want = {"type": "llama", "vocab_size": 32, "d_model": 32, "n_layer": 2, "n_head": 4,
            "n_kv_head": 2, "ffn_hidden": 48, "rope_theta": 5000.0, "tie_embeddings": False,
            "seq_len": 16}
    assert {k: model[k] for k in want} == want
    again = tmp_path / "again"
    run(["export", str(b), "--format", "hf", "--out", str(again)], check=0)
    first, second = read_model(hf), read_model(again)
    assert first.keys() == second.keys()
    assert all(np.array_equal(first[n], second[n]) for n in first)
    # A key that is given must agree; a rule a filled key breaks names the folder's config.json.
    p = run([str(path), *sets(*not_model, "model.n_head=8"), "--run-dir", str(tmp_path / "c")],
            check=2)
    assert "num_attention_heads is 4, the experiment's model.n_head 8" in p.stderr
    p = run([str(path), *sets(*not_model, "distributed.tp=3", "distributed.nproc=3",
                               "distributed.oversubscribe=true"),
             "--run-dir", str(tmp_path / "d")], check=2)
    assert f"{hf}/config.json" in p.stderr and "model.n_head=4 is not divisible" in p.stderr


def test_a_model_that_does_not_fit_the_experiment_is_refused(tmp_path):
    rd, _ = trained(tmp_path, LLAMA)
    hf = tmp_path / "hf"
    run(["export", str(rd), "--format", "hf", "--out", str(hf)], check=0)

    def start(name, *extra):
        return run([QS, *sets(*BASE, *LLAMA, *FROZEN, f"model.init_from={hf}", *extra),
                    "--run-dir", str(tmp_path / name)], check=2)

    p = start("d", "model.d_model=64")
    assert "hidden_size is 32, the experiment's model.d_model 64" in p.stderr
    cfg = json.loads((hf / "config.json").read_text())
    (hf / "config.json").write_text(json.dumps({**cfg, "rms_norm_eps": 1e-6}))
    assert "trainrun's RMSNorm uses 1e-5" in start("eps").stderr
    (hf / "config.json").write_text(json.dumps(cfg))
    w = {k: v.astype(np.float32) for k, v in read_model(hf).items()}
    missing = dict(w)
    del missing["model.layers.1.mlp.up_proj.weight"]
    write_safetensors(hf / "model.safetensors", missing)
    assert "it has no tensor model.layers.1.mlp.up_proj.weight" in start("missing").stderr
    write_safetensors(hf / "model.safetensors", {**w, "model.layers.9.extra": np.zeros(2)})
    assert "model.layers.9.extra, which this model has no place for" in start("extra").stderr
    bad = dict(w)
    bad["model.norm.weight"] = np.zeros(31)
    write_safetensors(hf / "model.safetensors", bad)
    assert "tensor model.norm.weight is [31], norm_f.weight needs [32]" in start("shape").stderr


def test_fine_tuning_an_imported_model_on_two_ranks_resumes_exactly(tmp_path):
    rd, _ = trained(tmp_path, LLAMA)
    hf = tmp_path / "hf"
    run(["export", str(rd), "--format", "hf", "--out", str(hf)], check=0)
    tune = [*BASE, *LLAMA, "train.steps=10", "checkpoint.every=4", f"model.init_from={hf}",
            "distributed.nproc=2", "distributed.oversubscribe=true"]
    ref, cut = tmp_path / "ref", tmp_path / "cut"
    run([QS, *sets(*tune), "--run-dir", str(ref)], check=0)
    p = run([QS, *sets(*tune), "--run-dir", str(cut)], env={"TRAINRUN_FAULTS": "exit:step=7:code=9"})
    assert p.returncode != 0
    run(["--resume", str(cut)], check=0)
    assert losses(cut) == losses(ref) and len(losses(ref)) == 10
    # Fine-tuning starts where the exported model was: its first loss is the trained run's level,
    # below a fresh model's.
    fresh = tmp_path / "fresh"
    run([QS, *sets(*BASE, *LLAMA, "train.steps=1"), "--run-dir", str(fresh)], check=0)
    assert losses(ref)[1] < losses(fresh)[1]


def test_a_config_json_that_is_a_fifo_is_refused_not_waited_on(tmp_path):
    import os
    hf = tmp_path / "hf"
    hf.mkdir()
    os.mkfifo(hf / "config.json")
    p = run([QS, *sets(*BASE, f"model.init_from={hf}"), "--run-dir", str(tmp_path / "r")],
            check=2, timeout=60)
    assert "config.json is a FIFO, not a regular file" in p.stderr


@pytest.mark.parametrize("family", ["gpt", "llama"])
def test_plan_validate_and_sample_take_a_hugging_face_folder(tmp_path, family):
    """`plan DIR` and `validate DIR` read the folder's model; `sample DIR` generates from its
    weights exactly as from the run that exported them (greedy: the same tokens), bytes for a
    vocabulary of 256."""
    extra = [*(LLAMA if family == "llama" else []), "model.vocab_size=256"]
    rd, _ = trained(tmp_path, extra)
    hf = tmp_path / "hf"
    run(["export", str(rd), "--format", "hf", "--out", str(hf)], check=0)
    want = json.loads(run(["plan", QS, *sets(*BASE, *extra), "--gpu", "H100", "--json"],
                          check=0).stdout)
    got = json.loads(run(["plan", str(hf), "--gpu", "H100", "--json"], check=0).stdout)
    assert got["params"] == want["params"] and got["params_by_module"] == want["params_by_module"]
    resolved = run(["validate", str(hf)], check=0).stdout
    assert f"init_from: {hf}" in resolved and f"type: {family}" in resolved
    greedy = ["--prompt", "the ", "--tokens", "24", "--temperature", "0"]
    assert run(["sample", str(hf), *greedy], check=0).stdout == \
        run(["sample", str(rd), *greedy], check=0).stdout


def test_sample_of_a_hugging_face_folder_uses_its_tokenizer_or_asks_for_one(tmp_path):
    from conftest import english_text
    tok = tmp_path / "tok.json"
    run(["data", "tokenizer", "train", english_text(tmp_path), "--vocab-size", "300", "--out",
         str(tok)], check=0)
    rd, _ = trained(tmp_path, ["model.vocab_size=300"])
    hf = tmp_path / "hf"
    run(["export", str(rd), "--format", "hf", "--out", str(hf)], check=0)
    greedy = ["--prompt", "the king ", "--tokens", "12", "--temperature", "0"]
    p = run(["sample", str(hf), *greedy], check=2)
    assert "--tokenizer FILE" in p.stderr and "vocabulary of 300" in p.stderr
    with_flag = run(["sample", str(hf), *greedy, "--tokenizer", str(tok)], check=0).stdout
    import shutil
    shutil.copy(tok, hf / "tokenizer.json")
    assert run(["sample", str(hf), *greedy], check=0).stdout == with_flag
    assert with_flag == run(["sample", str(rd), *greedy, "--tokenizer", str(tok)], check=0).stdout
    # Another architecture is named.
    other = tmp_path / "bert"
    other.mkdir()
    (other / "config.json").write_text('{"model_type": "bert"}')
    p = run(["plan", str(other)], check=2)
    assert 'model_type "bert" is not a family trainrun has' in p.stderr


def outside_model(d, family, rng):
    """A small model made here, not by trainrun (random weights, transformers' names and
    config fields), as `save_pretrained` would leave it: config.json and model.safetensors."""
    V, C, L, H, T = 256, 32, 2, 4, 64
    n = lambda *shape, std=0.2: rng.normal(0, std, shape)  # noqa: E731
    w = {}
    if family == "gpt":
        c = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": V,
             "n_embd": C, "n_layer": L, "n_head": H, "n_positions": T, "n_inner": None,
             "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
             "tie_word_embeddings": True}
        w["transformer.wte.weight"], w["transformer.wpe.weight"] = n(V, C, std=0.5), n(T, C)
        for i in range(L):
            p = f"transformer.h.{i}."
            for ln in ("ln_1", "ln_2"):
                w[p + ln + ".weight"], w[p + ln + ".bias"] = 1 + n(C, std=0.1), n(C, std=0.1)
            w[p + "attn.c_attn.weight"], w[p + "attn.c_attn.bias"] = n(C, 3 * C), n(3 * C)
            w[p + "attn.c_proj.weight"], w[p + "attn.c_proj.bias"] = n(C, C), n(C)
            w[p + "mlp.c_fc.weight"], w[p + "mlp.c_fc.bias"] = n(C, 4 * C), n(4 * C)
            w[p + "mlp.c_proj.weight"], w[p + "mlp.c_proj.bias"] = n(4 * C, C), n(C)
        w["transformer.ln_f.weight"], w["transformer.ln_f.bias"] = 1 + n(C, std=0.1), n(C)
    else:
        K, F, d_head = 2, 48, C // H
        c = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": V,
             "hidden_size": C, "num_hidden_layers": L, "num_attention_heads": H,
             "num_key_value_heads": K, "intermediate_size": F, "rope_theta": 5000.0,
             "rms_norm_eps": 1e-5, "max_position_embeddings": T, "head_dim": d_head,
             "hidden_act": "silu", "tie_word_embeddings": False}
        w["model.embed_tokens.weight"], w["lm_head.weight"] = n(V, C, std=0.5), n(V, C, std=0.5)
        for i in range(L):
            p = f"model.layers.{i}."
            w[p + "input_layernorm.weight"] = 1 + n(C, std=0.1)
            w[p + "post_attention_layernorm.weight"] = 1 + n(C, std=0.1)
            w[p + "self_attn.q_proj.weight"] = n(H * d_head, C)
            w[p + "self_attn.k_proj.weight"] = n(K * d_head, C)
            w[p + "self_attn.v_proj.weight"] = n(K * d_head, C)
            w[p + "self_attn.o_proj.weight"] = n(C, C)
            w[p + "mlp.gate_proj.weight"], w[p + "mlp.up_proj.weight"] = n(F, C), n(F, C)
            w[p + "mlp.down_proj.weight"] = n(C, F)
        w["model.norm.weight"] = 1 + n(C, std=0.1)
    d.mkdir()
    (d / "config.json").write_text(json.dumps(c))
    write_safetensors(d / "model.safetensors", w)
    return {k: v.astype(np.float32).astype(np.float64) for k, v in w.items()}, c


@pytest.mark.parametrize("family", ["gpt", "llama"])
def test_a_model_made_outside_trainrun_decodes_greedily_as_its_reference_does(tmp_path, family):
    """50 greedy tokens of `trainrun sample` on a model trainrun never saw, each the argmax of
    the reference forward (numpy, transformers' modeling code) over the same context: the logit
    trainrun chose is the reference's largest to 1e-4 (a near tie may go either way)."""
    w, c = outside_model(tmp_path / "m", family, np.random.default_rng(11))
    prompt = "Hello"
    got = [int(t) for t in run(["sample", str(tmp_path / "m"), "--prompt", prompt, "--tokens",
                                "50", "--temperature", "0", "--ids"], check=0).stdout.split()]
    assert len(got) == 50
    logits_of = hf_gpt2_logits if family == "gpt" else hf_llama_logits
    ctx, exact = list(prompt.encode()), 0
    for t in got:
        logits = logits_of(w, c, np.array([ctx]))[0, -1]
        assert logits[t] >= logits.max() - 1e-4, (len(ctx), t, int(logits.argmax()))
        exact += t == int(logits.argmax())
        ctx.append(t)
    assert exact >= 48
    assert len(set(got)) > 3  # the weights say something: not one token over and over


def test_the_readme_round_trip_runs_as_written(tmp_path):
    """The README's Hugging Face lines, each run as written in a scratch directory, after a short
    quick-start run (runs/quickstart is the quick start's); the training line is shortened."""
    import re
    import shlex
    import shutil
    text = (REPO / "README.md").read_text()
    block = re.search(r"### Hugging Face\n\n```sh\n(.*?)```", text, re.S).group(1)
    cmds = [shlex.split(c, comments=True) for c in block.splitlines()]
    assert [c[1] for c in cmds] == ["export", "configs/quickstart.yaml", "export"]
    shutil.copytree(REPO / "configs", tmp_path / "configs")
    short = sets("train.steps=20", "train.eval_every=0", "checkpoint.every=0")
    run(["configs/quickstart.yaml", *short, "--run-dir", "runs/quickstart"], cwd=tmp_path, check=0)
    for c in cmds:
        run([*c[1:], *(short if c[1].endswith(".yaml") else [])], cwd=tmp_path, check=0)
    log = (tmp_path / "runs" / "tuned" / "logs" / "rank-0.log").read_text()
    assert f"weights from {tmp_path / 'quickstart-hf'} (model.init_from)" in log
    before, after = read_model(tmp_path / "quickstart-hf"), read_model(tmp_path / "tuned-hf")
    assert before.keys() == after.keys()
    assert json.loads((tmp_path / "tuned-hf" / "config.json").read_text())["model_type"] == "gpt2"
    # Fine-tuned: the weights moved from where they started.
    assert any(not np.array_equal(before[k], after[k]) for k in before)
