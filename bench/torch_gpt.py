"""nanoGPT's model in PyTorch for the bench/ comparisons (not a CI dependency): pre-LN GPT with
tanh GELU, learned positions, a tied head, GPT-2's initialisation (0.02; residual projections
0.02/sqrt(2 n_layer)) and AdamW decaying only matrices and embeddings. With bias=True and
vocab 256 it is trainrun's `gpt` model; bias=False is nanoGPT's default. Also where the
comparisons find their text."""
import math
import os
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def shakespeare():
    """tiny Shakespeare for the comparisons: $SHAKESPEARE, data/, or the shared copy beside the
    repository (as bench/lib.sh looks)."""
    env = os.environ.get("SHAKESPEARE")
    for p in ([pathlib.Path(env)] if env else []) + [ROOT / "data/tinyshakespeare.txt",
                                                     ROOT.parent / "shared/data/tinyshakespeare.txt"]:
        if p.is_file():
            return p
    sys.exit("tiny Shakespeare not found: run scripts/get-data.sh tinyshakespeare or set SHAKESPEARE")


def build(torch, n_layer, d, n_head, seq_len, vocab=256, bias=True):
    nn, F = torch.nn, torch.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(d, bias=bias)
            self.ln2 = nn.LayerNorm(d, bias=bias)
            self.qkv, self.proj = nn.Linear(d, 3 * d, bias=bias), nn.Linear(d, d, bias=bias)
            self.fc, self.fc_proj = nn.Linear(d, 4 * d, bias=bias), nn.Linear(4 * d, d, bias=bias)

        def forward(self, x):
            B, T, C = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(C, 2)
            q, k, v = (t.view(B, T, n_head, C // n_head).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
            return x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(seq_len, d)
            self.blocks = nn.ModuleList(Block() for _ in range(n_layer))
            self.ln_f = nn.LayerNorm(d, bias=bias)
            for name, p in self.named_parameters():
                if p.dim() == 2:
                    std = 0.02 / math.sqrt(2 * n_layer) if name.endswith("proj.weight") else 0.02
                    nn.init.normal_(p, std=std)
                elif name.endswith(".bias"):
                    nn.init.zeros_(p)

        def forward(self, idx, targets):
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
            for b in self.blocks:
                x = b(x)
            logits = self.ln_f(x) @ self.wte.weight.t()
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    return GPT()


def adamw(torch, model, lr, betas=(0.9, 0.99), weight_decay=0.1):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                              {"params": rest, "weight_decay": 0.0}], lr=lr, betas=betas)
