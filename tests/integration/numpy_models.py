"""trainrun's model families written again in numpy alone, in float64, from their published
math (GPT-2; Llama with Hugging Face's RoPE convention) and the parameter names trainrun's
checkpoints use, to recompute a checkpoint's loss without sharing a line of trainrun's kernels.
Nothing here is fast: a few sequences of a tiny model.

A checkpoint (docs/checkpoint-format.md) holds /model/<name> float32 datasets and /config, the
resolved YAML; `load` returns both, the weights as float64."""
import h5py
import numpy as np
import yaml

MASK64 = (1 << 64) - 1


def splitmix64(x):
    """One splitmix64 step (Steele et al.): docs/data-format.md's sampling hash."""
    z = (x + 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def window_start(seed, j, n_tokens, seq_len):
    """Where sample j starts in a split of n_tokens (docs/data-format.md, "Sampling")."""
    return splitmix64(splitmix64(seed) ^ splitmix64(j)) % (n_tokens - seq_len)


def batch(tokens, seed, first, count, seq_len):
    """Inputs and targets of samples first .. first+count-1, each [count, seq_len]."""
    rows = []
    for j in range(first, first + count):
        s = window_start(seed, j, len(tokens), seq_len)
        rows.append(tokens[s:s + seq_len + 1])
    w = np.array(rows, dtype=np.int64)
    return w[:, :-1], w[:, 1:]


def load(path):
    """(weights by parameter name as float64, the resolved config as a dict)."""
    with h5py.File(path, "r") as f:
        weights = {name: np.asarray(ds[()], dtype=np.float64) for name, ds in f["model"].items()}
        config = yaml.safe_load(bytes(f["config"][()]).decode())
    return weights, config


def layernorm(x, w, b, eps=1e-5):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / np.sqrt(v + eps) * w + b


def rmsnorm(x, w, eps=1e-5):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def gelu_tanh(x):
    """GPT-2's GELU, the tanh approximation."""
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def silu(x):
    return x / (1 + np.exp(-x))


def causal_attention(q, k, v):
    """q [B,NH,T,hd], k and v [B,NH,T,hd] (kv heads already repeated): softmax(qk^T/sqrt(hd))v
    over the keys at or before each query."""
    T, hd = q.shape[-2], q.shape[-1]
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(hd)
    s = np.where(np.tril(np.ones((T, T), dtype=bool)), s, -np.inf)
    s = s - s.max(-1, keepdims=True)
    p = np.exp(s)
    p /= p.sum(-1, keepdims=True)
    return p @ v


def heads(x, n):
    """[B,T,n*hd] -> [B,n,T,hd]."""
    B, T, C = x.shape
    return x.reshape(B, T, n, C // n).transpose(0, 2, 1, 3)


def merge_heads(x):
    B, n, T, hd = x.shape
    return x.transpose(0, 2, 1, 3).reshape(B, T, n * hd)


def cross_entropy(logits, targets):
    """Mean over every position of -log softmax(logits)[target]."""
    m = logits.max(-1, keepdims=True)
    lse = m[..., 0] + np.log(np.exp(logits - m).sum(-1))
    picked = np.take_along_axis(logits, targets[..., None], -1)[..., 0]
    return float((lse - picked).mean())


def gpt_loss(w, cfg, x, y):
    """GPT-2: token + position embeddings, pre-LayerNorm blocks (attention, then a 4x GELU MLP,
    each added to the residual stream), a final LayerNorm and the head tied to wte."""
    m = cfg["model"]
    T = x.shape[1]
    h = w["wte.weight"][x] + w["wpe.weight"][np.arange(T)]
    for l in range(m["n_layer"]):
        p = f"blocks.{l}."
        u = layernorm(h, w[p + "ln1.weight"], w[p + "ln1.bias"])
        qkv = u @ w[p + "attn.qkv.weight"].T + w[p + "attn.qkv.bias"]
        q, k, v = np.split(qkv, 3, axis=-1)
        nh = m["n_head"]
        a = merge_heads(causal_attention(heads(q, nh), heads(k, nh), heads(v, nh)))
        h = h + a @ w[p + "attn.proj.weight"].T + w[p + "attn.proj.bias"]
        u = layernorm(h, w[p + "ln2.weight"], w[p + "ln2.bias"])
        f = gelu_tanh(u @ w[p + "mlp.fc.weight"].T + w[p + "mlp.fc.bias"])
        h = h + f @ w[p + "mlp.proj.weight"].T + w[p + "mlp.proj.bias"]
    h = layernorm(h, w["ln_f.weight"], w["ln_f.bias"])
    return cross_entropy(h @ w["wte.weight"].T, y)


def rope(x, theta):
    """Rotary embedding on [B,n,T,hd], "rotate_half" convention (GPT-NeoX, Hugging Face Llama):
    the pair (x[i], x[i + hd/2]) at position t turns by the angle t * theta^(-2i/hd)."""
    T, hd = x.shape[-2], x.shape[-1]
    inv = theta ** (-np.arange(0, hd // 2) * 2.0 / hd)
    ang = np.arange(T)[:, None] * inv[None, :]  # [T, hd/2]
    cos = np.concatenate([np.cos(ang)] * 2, -1)
    sin = np.concatenate([np.sin(ang)] * 2, -1)
    x1, x2 = x[..., :hd // 2], x[..., hd // 2:]
    return x * cos + np.concatenate([-x2, x1], -1) * sin


def llama_loss(w, cfg, x, y):
    """Llama: no biases, no position table; RMSNorm before attention (RoPE on q and k,
    grouped-query: n_head / n_kv_head query heads share each key/value head) and before a
    SwiGLU MLP; a final RMSNorm and a head tied to wte or its own lm_head."""
    m = cfg["model"]
    nh = m["n_head"]
    nkv = m.get("n_kv_head") or nh
    theta = float(m.get("rope_theta", 10000.0))
    hd = m["d_model"] // nh
    h = w["wte.weight"][x]
    for l in range(m["n_layer"]):
        p = f"blocks.{l}."
        u = rmsnorm(h, w[p + "attn_norm.weight"])
        qkv = u @ w[p + "attn.qkv.weight"].T
        q = heads(qkv[..., :nh * hd], nh)
        k = heads(qkv[..., nh * hd:(nh + nkv) * hd], nkv)
        v = heads(qkv[..., (nh + nkv) * hd:], nkv)
        q, k = rope(q, theta), rope(k, theta)
        rep = nh // nkv
        a = causal_attention(q, np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1))
        h = h + merge_heads(a) @ w[p + "attn.proj.weight"].T
        u = rmsnorm(h, w[p + "mlp_norm.weight"])
        gate, up = np.split(u @ w[p + "mlp.gate_up.weight"].T, 2, axis=-1)
        h = h + (silu(gate) * up) @ w[p + "mlp.down.weight"].T
    h = rmsnorm(h, w["norm_f.weight"])
    head = w["lm_head.weight"] if "lm_head.weight" in w else w["wte.weight"]
    return cross_entropy(h @ head.T, y)


LOSS = {"gpt": gpt_loss, "llama": llama_loss}


def loss(weights, config, x, y):
    """The mean cross-entropy of inputs x [B,T] against targets y [B,T]."""
    return LOSS[config["model"]["type"]](weights, config, x, y)
