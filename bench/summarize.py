#!/usr/bin/env python3
"""Steady-state figures of a trainrun run directory, as shell assignments S_<name>=<value>.

    summarize.py RUN_DIR [SKIP]

Reads RUN_DIR/metrics.jsonl (train rows with step > SKIP; the final step is dropped too, since
trainrun always checkpoints there) and the measured sgemm peak from RUN_DIR/logs/rank-0.log.
Medians for step_time and tokens_per_sec (robust to a noisy, shared machine); means for the
per-step costs that only some steps pay (checkpoints, comm) so they add up over a run.
after_ckpt: the extra step time of the 15 steps after each checkpoint against the median of the
steps around them (20 before, 20 from 20 after), i.e. what a background write costs the steps
it overlaps, measured within the run: this machine's step time drifts by more than the effect
between runs.
"""
import json
import re
import statistics
import sys
from pathlib import Path


def main() -> None:
    run = Path(sys.argv[1])
    skip = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line]
    train = [r for r in rows if r.get("kind") == "train"]
    last = max(r["step"] for r in train)
    steady = [r for r in train if skip < r["step"] < last] or train[-1:]
    out = {"steps": len(steady)}
    for key in ("step_time", "tokens_per_sec", "mfu"):
        out[key] = statistics.median(r[key] for r in steady)
        out[key + "_min"] = min(r[key] for r in steady)
        out[key + "_max"] = max(r[key] for r in steady)
    for key in ("step_time", "t_data", "t_forward", "t_backward", "t_comm", "t_comm_exposed",
                "comm_hidden", "t_optimizer", "t_checkpoint"):
        out["mean_" + key] = statistics.fmean(r[key] for r in steady)
    paid = [r["t_checkpoint"] for r in steady if r["t_checkpoint"] > 0]
    out["checkpoints"] = len(paid)
    out["ckpt_blocked"] = statistics.fmean(paid) if paid else 0.0
    out["mean_wall"] = out["mean_step_time"] + out["mean_t_checkpoint"]
    times = [r["step_time"] for r in train]
    extra = []
    for i, r in enumerate(train):
        if r["t_checkpoint"] <= 0 or r["step"] == last or i < 20 or i + 40 > len(train):
            continue
        around = times[i - 20:i] + times[i + 20:i + 40]
        extra.append(sum(times[i + 1:i + 16]) - 15 * statistics.median(around))
    out["after_ckpt"] = statistics.fmean(extra) if extra else 0.0
    out["peak"] = float("nan")
    out["world"] = 1
    log = run / "logs" / "rank-0.log"
    if log.exists():
        m = re.search(r"peak ([0-9.]+) GFLOP/s", log.read_text())
        if m:
            out["peak"] = float(m.group(1))
        m = re.search(r"model \w+: (\d+) parameters", log.read_text())
        if m:
            out["params"] = int(m.group(1))
        m = re.search(r"rank 0/(\d+)", log.read_text())
        if m:
            out["world"] = int(m.group(1))
    # trainrun's mfu = flops / step_time / (peak x ranks): achieved GFLOP/s of the whole job
    out["gflops"] = out["mfu"] * out["peak"] * out["world"]
    for k, v in out.items():
        print(f"S_{k}={v:.6g}" if isinstance(v, float) else f"S_{k}={v}")


if __name__ == "__main__":
    main()
