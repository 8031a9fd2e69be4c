"""The optional second opinion for test_equivalence.py: the same families built from PyTorch's
own layers (layer_norm, the tanh GELU, softmax, silu, cross_entropy; float64 on the CPU), for
machines where torch is installed. Imported only after torch is; works with torch 1.13
(Debian 12's python3-torch) and later."""


def _attention(torch, q, k, v):
    T = q.shape[-2]
    s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    return torch.softmax(s.masked_fill(~mask, float("-inf")), -1) @ v


def _heads(x, n):
    B, T, C = x.shape
    return x.view(B, T, n, C // n).transpose(1, 2)


def _merge(x):
    B, n, T, hd = x.shape
    return x.transpose(1, 2).reshape(B, T, n * hd)


def _gpt(torch, w, m, x):
    F = torch.nn.functional
    C = m["d_model"]
    h = F.embedding(x, w["wte.weight"]) + w["wpe.weight"][: x.shape[1]]
    for l in range(m["n_layer"]):
        p = f"blocks.{l}."
        u = F.layer_norm(h, (C,), w[p + "ln1.weight"], w[p + "ln1.bias"], 1e-5)
        q, k, v = F.linear(u, w[p + "attn.qkv.weight"], w[p + "attn.qkv.bias"]).split(C, -1)
        n = m["n_head"]
        a = _merge(_attention(torch, _heads(q, n), _heads(k, n), _heads(v, n)))
        h = h + F.linear(a, w[p + "attn.proj.weight"], w[p + "attn.proj.bias"])
        u = F.layer_norm(h, (C,), w[p + "ln2.weight"], w[p + "ln2.bias"], 1e-5)
        f = F.gelu(F.linear(u, w[p + "mlp.fc.weight"], w[p + "mlp.fc.bias"]), approximate="tanh")
        h = h + F.linear(f, w[p + "mlp.proj.weight"], w[p + "mlp.proj.bias"])
    h = F.layer_norm(h, (C,), w["ln_f.weight"], w["ln_f.bias"], 1e-5)
    return F.linear(h, w["wte.weight"])


def _rms(torch, x, weight):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * weight


def _rope(torch, x, theta):
    T, hd = x.shape[-2], x.shape[-1]
    inv = theta ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    ang = torch.outer(torch.arange(T, dtype=torch.float64), inv)
    cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
    x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


def _llama(torch, w, m, x):
    F = torch.nn.functional
    nh = m["n_head"]
    nkv = m.get("n_kv_head") or nh
    hd = m["d_model"] // nh
    theta = float(m.get("rope_theta", 10000.0))
    h = F.embedding(x, w["wte.weight"])
    for l in range(m["n_layer"]):
        p = f"blocks.{l}."
        q, k, v = F.linear(_rms(torch, h, w[p + "attn_norm.weight"]),
                           w[p + "attn.qkv.weight"]).split([nh * hd, nkv * hd, nkv * hd], -1)
        q, k, v = _heads(q, nh), _heads(k, nkv), _heads(v, nkv)
        q, k = _rope(torch, q, theta), _rope(torch, k, theta)
        k, v = k.repeat_interleave(nh // nkv, 1), v.repeat_interleave(nh // nkv, 1)
        h = h + F.linear(_merge(_attention(torch, q, k, v)), w[p + "attn.proj.weight"])
        gate, up = F.linear(_rms(torch, h, w[p + "mlp_norm.weight"]),
                            w[p + "mlp.gate_up.weight"]).chunk(2, -1)
        h = h + F.linear(F.silu(gate) * up, w[p + "mlp.down.weight"])
    head = w.get("lm_head.weight", w["wte.weight"])
    return F.linear(_rms(torch, h, w["norm_f.weight"]), head)


def loss(torch, weights, config, x, y):
    """Mean cross-entropy of inputs x [B,T] (numpy ints) against targets y, as a float."""
    w = {k: torch.from_numpy(v) for k, v in weights.items()}
    m = config["model"]
    logits = {"gpt": _gpt, "llama": _llama}[m["type"]](torch, w, m, torch.from_numpy(x))
    V = logits.shape[-1]
    return float(torch.nn.functional.cross_entropy(logits.reshape(-1, V),
                                                   torch.from_numpy(y).reshape(-1)))
