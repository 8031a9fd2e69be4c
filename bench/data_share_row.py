#!/usr/bin/env python3
"""One markdown row of the data wait's share of the step, from a run's metrics.jsonl:

    data_share_row.py METRICS_JSONL SKIP LABEL...

Train rows with SKIP < step < the last step (the last checkpoints); prints
`| LABEL... | step ms (median) | t_data ms (mean) | t_data ms (max) | data share |`, the share
being mean t_data over mean step_time. Used by bench/data_share.sh and bench/data_corpus.sh."""
import json
import statistics
import sys

rows = [r for r in map(json.loads, open(sys.argv[1])) if r.get("kind") == "train"]
last = max(r["step"] for r in rows)
rows = [r for r in rows if int(sys.argv[2]) < r["step"] < last]
step = statistics.median(r["step_time"] for r in rows)
data = statistics.fmean(r["t_data"] for r in rows)
share = data / statistics.fmean(r["step_time"] for r in rows)
labels = " | ".join(sys.argv[3:])
print(f"| {labels} | {step * 1e3:.1f} | {data * 1e3:.4f} | "
      f"{max(r['t_data'] for r in rows) * 1e3:.4f} | {100 * share:.3f}% |")
