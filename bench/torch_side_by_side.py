#!/usr/bin/env python3
"""trainrun against PyTorch on the CPU, side by side (issue 19): configs A-D, fp32, 2 threads,
random-initialised GPT on byte-level tiny Shakespeare, median ms/step of the same model and
optimizer (bench/torch_gpt.py: nanoGPT's model with biases, dropout 0; AdamW, clip 1.0). PyTorch runs eager and, where it works, torch.compile. Prints the issue's
table with the load average beside each figure. Not a CI dependency: needs `torch`.

    python3 bench/torch_side_by_side.py [--configs A,B,C,D] [--rounds 2] [--no-compile]
    python3 bench/torch_side_by_side.py --profile A,B,C    # where each step's time goes, op by op

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


def trainrun_ms(name, cfg, text, profile=False):
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
    if profile:  # per-op times of the steps after warm-up (trainrun --profile)
        args += ["--profile", f"{WARMUP + 1}:{steps}"]
    env = dict(os.environ, OMP_NUM_THREADS=str(THREADS))
    p = subprocess.run(args, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"trainrun failed ({p.returncode}):\n{p.stderr[-2000:]}")
    rows = [json.loads(l) for l in (run_dir / "metrics.jsonl").read_text().splitlines() if l]
    times = [r["step_time"] for r in rows if r.get("kind") == "train" and WARMUP < r["step"] < steps]
    if profile:
        table = {}
        for line in (run_dir / "trace" / "ops-rank-0.txt").read_text().splitlines():
            f = line.split()
            if line.startswith("#") or f[0] in ("op", "step"):
                continue
            table["(outside ops)" if f[0] == "(outside" else f[0]] = float(f[-2])
        return 1000 * statistics.median(times), table
    return 1000 * statistics.median(times)


# Op groups for the per-op comparison: (group, trainrun op pattern, PyTorch op pattern). An op
# matching no group counts as "everything else".
GROUPS = [
    # aten::sum: the bias gradients (trainrun's are inside matmul_backward)
    ("linear GEMMs (forward, backward, bias)", r"^matmul", r"^aten::(mm|addmm|bmm|sum)$"),
    ("attention (with its GEMMs)", r"^attention", r"scaled_dot_product|flash_attention"),
    ("GELU forward + backward", r"^gelu", r"^aten::gelu"),
    ("layernorm forward + backward", r"^layernorm", r"layer_norm"),
    # PyTorch's in-place elementwise ops are mostly AdamW's and clipping's (add_ also sums
    # gradients in autograd): an approximate split, the step totals are exact.
    ("AdamW and clipping (grad norm, scale)", r"^(adamw|sum_squares|scale)$",
     r"^(aten::(lerp_|addcdiv_|addcmul_|sqrt|div|mul_|add_|_foreach_\w+|linalg_vector_norm|"
     r"clamp|stack|reciprocal)$|Optimizer)"),
    ("loss (cross-entropy)", r"^cross_entropy", r"(cross_entropy|log_softmax|nll_loss)"),
    ("embedding", r"^embedding", r"embedding"),
]


def group_of(name, side):
    import re
    for g, tr, pt in GROUPS:
        if re.search(tr if side == 0 else pt, name):
            return g
    return "everything else (zeroing, copies, adds, framework)"


def profile_side_by_side(torch, names, text, data):
    """trainrun's op table (--profile) beside PyTorch eager's profiler self times, per step,
    grouped by what the ops do; then both step times."""
    for name in names:
        cfg = CONFIGS[name]
        tr_ms, tr_ops = trainrun_ms(name, cfg, text, profile=True)
        pt_ms, pt_ops = torch_ms(torch, cfg, data, False, profile=True)
        groups = {}
        for side, ops in ((0, tr_ops), (1, pt_ops)):
            for op, ms in ops.items():
                g = group_of(op, side)
                groups.setdefault(g, [0.0, 0.0])[side] += ms
        n_layer, d, _, T, B, _, _ = cfg
        print(f"\n### {name}: {n_layer} layers, d {d}, T {T}, B {B}: ms per step "
              f"(trainrun {tr_ms:.1f}, PyTorch eager {pt_ms:.1f}; load {load():.1f})\n")
        print("| ops | trainrun | PyTorch eager | PyTorch - trainrun |")
        print("|---|---:|---:|---:|")
        order = [g for g, _, _ in GROUPS] + ["everything else (zeroing, copies, adds, framework)"]
        for g in order:
            if g in groups:
                t, p = groups[g]
                print(f"| {g} | {t:.1f} | {p:.1f} | {p - t:+.1f} |")
        t_sum = sum(v[0] for v in groups.values())
        p_sum = sum(v[1] for v in groups.values())
        print(f"| sum of the rows (profiled steps) | {t_sum:.1f} | {p_sum:.1f} | {p_sum - t_sum:+.1f} |")
        print("\ntrainrun's ops: " + ", ".join(f"{k} {v:.1f}" for k, v in
                                                 sorted(tr_ops.items(), key=lambda kv: -kv[1])))
        print("PyTorch's ops: " + ", ".join(f"{k} {v:.1f}" for k, v in
                                             sorted(pt_ops.items(), key=lambda kv: -kv[1])[:25]),
              flush=True)


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
        n = steps - WARMUP
        ops = {e.key: e.self_cpu_time_total / 1e3 / n for e in prof.key_averages()
               if e.self_cpu_time_total > 0}
        return 1000 * statistics.median(times[WARMUP:]), ops
    return 1000 * statistics.median(times[WARMUP:])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", default="A,B,C,D")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--profile", metavar="CONFIGS",
                    help="print trainrun's and PyTorch eager's time per op of these configs "
                         "side by side (ms per step, grouped) and stop")
    a = ap.parse_args()
    try:
        import torch
    except ImportError:
        sys.exit("PyTorch is not installed (pip install torch): this comparison needs it")
    torch.set_num_threads(THREADS)
    text = torch_gpt.shakespeare()
    data = torch.frombuffer(bytearray(text.read_bytes()), dtype=torch.uint8)
    if a.profile:
        profile_side_by_side(torch, a.profile.split(","), text, data)
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
