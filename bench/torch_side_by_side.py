#!/usr/bin/env python3
"""trainrun against PyTorch on the CPU, side by side (issue 19): configs A-D, fp32, 2 threads,
random-initialised GPT on byte-level tiny Shakespeare, median ms/step of the same model and
optimizer (bench/torch_gpt.py: nanoGPT's model with biases, dropout 0; AdamW, clip 1.0). PyTorch runs eager and, where it works, torch.compile. Prints the issue's
table with the load average beside each figure. Not a CI dependency: needs `torch`.

    python3 bench/torch_side_by_side.py [--configs A,B,C,D] [--rounds 2] [--no-compile]

BUILD (default build) picks the trainrun binary; SHAKESPEARE the text (default: data/ or the
shared copy beside the repository)."""
import argparse
import json
import math
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import time

import torch_gpt

ROOT = pathlib.Path(__file__).resolve().parents[1]
THREADS = 2

# name: (n_layer, d_model, n_head, seq_len, batch, steps timed by trainrun, steps by torch)
CONFIGS = {
    "A": (4, 256, 4, 128, 8, 20, 20),
    "B": (6, 384, 6, 256, 4, 12, 12),
    "C": (12, 768, 12, 64, 4, 10, 10),
    "D": (4, 128, 4, 64, 12, 50, 50),
}
WARMUP = 3  # steps left out of the median on both sides (first touches, compilation)


def load():
    return os.getloadavg()[0]


def params(n_layer, d, seq_len, vocab=256):
    per_block = 12 * d * d + 13 * d
    return vocab * d + seq_len * d + n_layer * per_block + 2 * d


def trainrun_ms(name, cfg, text):
    n_layer, d, n_head, T, B, steps, _ = cfg
    run_dir = pathlib.Path(os.environ.get("RUNS", "/tmp/trainrun-bench-runs")) / f"side-{name}"
    shutil.rmtree(run_dir, ignore_errors=True)
    binary = ROOT / os.environ.get("BUILD", "build") / "trainrun"
    sets = {"model.n_layer": n_layer, "model.d_model": d, "model.n_head": n_head,
            "model.seq_len": T, "train.batch_size": B, "train.steps": steps,
            "data.text": text, "run_dir": run_dir, "logging.every": 1,
            "optimizer.warmup_steps": 2}
    args = [str(binary), str(ROOT / "bench/configs/llmc-cpu.yaml")]
    for k, v in sets.items():
        args += ["--set", f"{k}={v}"]
    env = dict(os.environ, OMP_NUM_THREADS=str(THREADS))
    p = subprocess.run(args, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"trainrun failed ({p.returncode}):\n{p.stderr[-2000:]}")
    rows = [json.loads(l) for l in (run_dir / "metrics.jsonl").read_text().splitlines() if l]
    times = [r["step_time"] for r in rows if r.get("kind") == "train" and WARMUP < r["step"] < steps]
    return 1000 * statistics.median(times)


def torch_ms(torch, cfg, data, compiled, profile=False):
    n_layer, d, n_head, T, B, _, steps = cfg
    torch.manual_seed(1337)
    model = torch_gpt.build(torch, n_layer, d, n_head, T)
    opt = torch_gpt.adamw(torch, model, lr=1e-3)
    fwd = torch.compile(model) if compiled else model
    g = torch.Generator().manual_seed(1)
    times = []
    # With profile: the self time of each op over the steps after warm-up, to set beside perf's.
    prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) if profile else None
    for step in range(steps):
        if prof and step == WARMUP:
            prof.start()
        ix = torch.randint(len(data) - T - 1, (B,), generator=g)
        x = torch.stack([data[i:i + T] for i in ix]).long()
        y = torch.stack([data[i + 1:i + T + 1] for i in ix]).long()
        t0 = time.perf_counter()
        loss = fwd(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        times.append(time.perf_counter() - t0)
    if prof:
        prof.stop()
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=20))
    return 1000 * statistics.median(times[WARMUP:])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", default="A,B,C,D")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--profile", metavar="CONFIG",
                    help="print PyTorch eager's per-op profile of one config and stop")
    a = ap.parse_args()
    try:
        import torch
    except ImportError:
        sys.exit("PyTorch is not installed (pip install torch): this comparison needs it")
    torch.set_num_threads(THREADS)
    text = torch_gpt.shakespeare()
    data = torch.frombuffer(bytearray(text.read_bytes()), dtype=torch.uint8)
    if a.profile:
        print(f"{a.profile}: {torch_ms(torch, CONFIGS[a.profile], data, False, True):.1f} ms/step")
        return
    print(f"## trainrun vs PyTorch {torch.__version__} on the CPU, {THREADS} threads, fp32, "
          f"median ms/step (load average after each figure)")
    print(f"machine: {os.cpu_count()} cores; {a.rounds} round(s), trainrun first in each")
    print("| config (parameters) | trainrun | PyTorch eager | torch.compile | trainrun speed-up "
          "vs eager / compile |")
    print("|---|---:|---:|---:|---:|")
    for name in a.configs.split(","):
        cfg = CONFIGS[name]
        tr, ea, co = [], [], []
        for _ in range(a.rounds):
            tr.append((trainrun_ms(name, cfg, text), load()))
            ea.append((torch_ms(torch, cfg, data, False), load()))
            if not a.no_compile:
                try:
                    co.append((torch_ms(torch, cfg, data, True), load()))
                except Exception as e:  # no C++ compiler for inductor, say
                    print(f"torch.compile failed on {name}: {type(e).__name__}: {e}"[:300])
                    a.no_compile = True
        fmt = lambda xs: " / ".join(f"{m:.1f} ({l:.1f})" for m, l in xs) if xs else "-"
        best = lambda xs: min(m for m, _ in xs) if xs else math.nan
        sp = f"{best(ea) / best(tr):.2f}x / " + (f"{best(co) / best(tr):.2f}x" if co else "-")
        n_layer, d, _, T, _, _, _ = cfg
        print(f"| {name}: {n_layer} layers, d {d}, T {T} ({params(n_layer, d, T) / 1e6:.2f}M) "
              f"| {fmt(tr)} | {fmt(ea)} | {fmt(co)} | {sp} |", flush=True)


if __name__ == "__main__":
    main()
