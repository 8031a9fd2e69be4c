#!/usr/bin/env python3
"""nanoGPT's CPU recipe, trainrun against PyTorch on the same text (issue 19 part 3).

nanoGPT's README reports val loss 1.88 for its CPU run of shakespeare_char (4 layers, 4 heads,
d_model 128, context 64, batch 12, 2000 iterations, lr 1e-3 -> 1e-4 cosine, warmup 100, beta2
0.99, weight decay 0.1, clip 1.0, dropout 0). Three runs of that recipe, each evaluated every
250 steps on the same validation windows (every non-overlapping 64-character window of the
last 10% of the text, the whole split, so the figure has no sampling noise):

  trainrun                configs/shakespeare-char.yaml (256 byte symbols, biases); its
                          checkpoints are evaluated with PyTorch (tests/integration/torch_models.py)
  PyTorch, trainrun model bench/torch_gpt.py with biases and 256 byte symbols
  PyTorch, nanoGPT model  no biases, nanoGPT's 65-character vocabulary

trainrun's own val loss (20 sampled batches) is printed beside. Needs torch and h5py; not a
CI dependency. About 6-8 minutes on 2 cores.

    python3 bench/nanogpt_recipe.py [--seeds 1]
"""
import argparse
import json
import math
import os
import pathlib
import shutil
import subprocess
import sys

import numpy as np

import torch_gpt

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests/integration"))
import numpy_models  # noqa: E402
import torch_models  # noqa: E402

L, D, H, T, B, STEPS, EVERY = 4, 128, 4, 64, 12, 2000, 250
LR, MIN_LR, WARMUP = 1e-3, 1e-4, 100


def val_windows(ids):
    """Every non-overlapping window of the last 10% (inputs, targets), [N, T] each."""
    val = ids[int(0.9 * len(ids)):]
    n = (len(val) - 1) // T
    x = np.stack([val[i * T:i * T + T] for i in range(n)]).astype(np.int64)
    y = np.stack([val[i * T + 1:i * T + T + 1] for i in range(n)]).astype(np.int64)
    return x, y


def evaluate(torch, loss_of_batch, x, y, chunk=256):
    total = 0.0
    with torch.no_grad():
        for i in range(0, len(x), chunk):
            bx, by = x[i:i + chunk], y[i:i + chunk]
            total += loss_of_batch(bx, by) * len(bx)
    return total / len(x)


def lr_at(step):  # nanoGPT's get_lr, with lr_decay_iters = max_iters
    if step < WARMUP:
        return LR * (step + 1) / (WARMUP + 1)
    ratio = (step - WARMUP) / (STEPS - WARMUP)
    return MIN_LR + 0.5 * (1 + math.cos(math.pi * ratio)) * (LR - MIN_LR)


def torch_run(torch, ids, vocab, bias, seed):
    """Val loss at every EVERY steps of the recipe in PyTorch."""
    torch.manual_seed(seed)
    model = torch_gpt.build(torch, L, D, H, T, vocab=vocab, bias=bias)
    opt = torch_gpt.adamw(torch, model, lr=LR)
    train = torch.from_numpy(ids[:int(0.9 * len(ids))].astype(np.int64))
    vx, vy = val_windows(ids)
    g = torch.Generator().manual_seed(seed)
    curve = {}
    for step in range(STEPS + 1):
        if step % EVERY == 0:
            model.eval()
            curve[step] = evaluate(
                torch, lambda bx, by: float(model(torch.from_numpy(bx), torch.from_numpy(by))),
                vx, vy)
            model.train()
        if step == STEPS:
            break
        for group in opt.param_groups:
            group["lr"] = lr_at(step)
        ix = torch.randint(len(train) - T - 1, (B,), generator=g)
        x = torch.stack([train[i:i + T] for i in ix])
        y = torch.stack([train[i + 1:i + T + 1] for i in ix])
        loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    return curve


def trainrun_run(torch, text, ids, seed):
    """trainrun's checkpoints at every EVERY steps, evaluated on the same windows; and its own
    val loss."""
    run_dir = pathlib.Path(os.environ.get("RUNS", "/tmp/trainrun-bench-runs")) / f"nanogpt-{seed}"
    shutil.rmtree(run_dir, ignore_errors=True)
    binary = ROOT / os.environ.get("BUILD", "build") / "trainrun"
    args = [str(binary), str(ROOT / "configs/shakespeare-char.yaml"), "--run-dir", str(run_dir)]
    for kv in (f"data.text={text}", "device=cpu", f"seed={seed}", f"checkpoint.every={EVERY}",
               "checkpoint.keep_last=100", f"train.eval_every={EVERY}"):
        args += ["--set", kv]
    p = subprocess.run(args, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"trainrun failed ({p.returncode}):\n{p.stderr[-2000:]}")
    own = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r.get("kind") == "eval":
            own[r["step"]] = r["val_loss"]
    vx, vy = val_windows(ids)
    curve = {}
    for ck in sorted((run_dir / "checkpoints").glob("step-*.h5")):
        step = int(ck.stem.split("-")[1])
        weights, config = numpy_models.load(ck)
        w32 = {k: v.astype(np.float32) for k, v in weights.items()}
        curve[step] = evaluate(torch, lambda bx, by: torch_models.loss(torch, w32, config, bx, by),
                               vx, vy)
    return curve, own


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=1)
    a = ap.parse_args()
    try:
        import torch
    except ImportError:
        sys.exit("PyTorch is not installed (pip install torch): this comparison needs it")
    torch.set_num_threads(2)
    text = torch_gpt.shakespeare()
    raw = np.frombuffer(text.read_bytes(), dtype=np.uint8)
    chars = sorted(set(raw.tolist()))
    lut = np.zeros(256, dtype=np.int64)
    lut[chars] = np.arange(len(chars))
    print(f"## nanoGPT's CPU recipe, val loss on all {len(val_windows(raw)[0])} windows of the "
          f"val split (torch {torch.__version__}, {len(chars)} distinct characters)")
    for seed in range(1337, 1337 + a.seeds):
        tr, own = trainrun_run(torch, text, raw, seed)
        pt = torch_run(torch, raw, 256, True, seed)
        ng = torch_run(torch, lut[raw], len(chars), False, seed)
        print(f"\nseed {seed}\n| step | trainrun | PyTorch, trainrun's model | PyTorch, nanoGPT's "
              f"model (65 chars, no bias) | trainrun's own val loss (20 batches) |")
        print("|---:|---:|---:|---:|---:|")
        for step in sorted(pt):
            cell = lambda c: f"{c[step]:.4f}" if step in c else "-"
            print(f"| {step} | {cell(tr)} | {cell(pt)} | {cell(ng)} | {cell(own)} |", flush=True)


if __name__ == "__main__":
    main()
