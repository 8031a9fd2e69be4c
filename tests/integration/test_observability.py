"""Observability through the binary: `trainrun plan` agrees with the model a run builds,
`--profile A:B` writes Chrome traces for exactly that window, a rank made slow is named as a
straggler (and none is named without a fault), `trainrun report` summarises and plots a run, and
metrics.h5 holds the same train rows as metrics.jsonl."""
import json
import math
import re

import h5py

from conftest import REPO, TINY, metrics, run, sets

QS = str(REPO / "configs/quickstart.yaml")
GPT2 = str(REPO / "configs/gpt2-124m.yaml")


def plan_json(*args):
    return json.loads(run(["plan", *args, "--json"], check=0).stdout)


def test_plan_matches_the_model_a_run_builds(tmp_path):
    p = plan_json(QS, *sets(*TINY))
    assert p["params"] == sum(p["params_by_module"].values())
    assert list(p["params_by_module"])[:2] == ["wte", "wpe"] and "ln_f" in p["params_by_module"]
    b = p["bytes"]
    assert b["total"] == b["params"] + b["grads"] + b["optimizer"] + b["activations"] + \
        b["workspace"]
    assert p["fits"] is True and p["device"]["name"].startswith("cpu")
    assert p["predicted_step_seconds"] > 0
    rd = tmp_path / "r"
    log = run([QS, *sets(*TINY, "train.steps=2"), "--run-dir", str(rd)], check=0).stderr
    m = re.search(r"model gpt: (\d+) parameters, activations ([\d.]+) MiB", log)
    assert m, log
    assert int(m.group(1)) == p["params"]
    assert abs(float(m.group(2)) - b["activations"] / 1048576) <= 0.05 + 1e-9


def test_plan_text_gpu_table_and_warnings():
    text = run(["plan", GPT2, "--gpu", "H200"], check=0).stdout
    assert "blocks.11" in text and "H200" in text and "table" in text
    p = plan_json(GPT2, "--gpu", "A100", *sets("model.vocab_size=50257"))
    assert p["device"]["name"].startswith("A100")
    assert any("pad to 50304" in w for w in p["warnings"])
    assert not any("vocab" in w for w in plan_json(GPT2, "--gpu", "H100")["warnings"])
    huge = plan_json(GPT2, "--gpu", "H100",
                     *sets("model.n_layer=96", "model.d_model=12288", "model.n_head=96"))
    assert huge["fits"] is False
    assert "V100" in run(["plan", GPT2, "--gpu", "V100"], check=2).stderr


def trace_events(path):
    doc = json.loads(path.read_text())
    assert doc["displayTimeUnit"] == "ms"
    return doc["traceEvents"]


def test_profile_writes_chrome_traces_for_the_window(tmp_path):
    rd = tmp_path / "r"
    p = run([QS, *sets(*TINY, "train.steps=8", "distributed.nproc=2"), "--profile", "3:6",
             "--run-dir", str(rd)], check=0)
    assert f"profile: steps 3:6 traced into {rd / 'trace'}/" in p.stderr + p.stdout
    for rank in (0, 1):
        ev = trace_events(rd / "trace" / f"rank-{rank}.json")
        names = [e for e in ev if e["ph"] == "M" and e["name"] == "process_name"]
        assert names and names[0]["args"]["name"] == f"rank {rank}"
        spans = [e for e in ev if e["ph"] == "X"]
        assert all(e["pid"] == rank and e["dur"] >= 0 for e in spans)
        # Steps 3, 4 and 5, numbered as the logs number them; every span says its step.
        assert [e["args"]["step"] for e in spans if e["name"] == "step"] == [3, 4, 5]
        assert {e["args"]["step"] for e in spans} == {3, 4, 5}
        assert {"data", "forward", "backward", "optimizer"} <= {e["name"] for e in spans}
        assert any(e["cat"] == "comm" for e in spans)
        # Every backend op of a traced step is a span inside one of the steps, and the op table
        # beside the trace sums them per op and per step.
        steps = [e for e in spans if e["name"] == "step"]
        ops = [e for e in spans if e["cat"] == "op"]
        assert {"matmul", "matmul_backward", "attention", "adamw"} <= {e["name"] for e in ops}
        assert all(any(s["ts"] <= o["ts"] <= s["ts"] + s["dur"] for s in steps) for o in ops)
        table = (rd / "trace" / f"ops-rank-{rank}.txt").read_text().splitlines()
        rows = {l.split()[0]: l.split()[1:] for l in table if not l.startswith("#")}
        step_ms = sum(s["dur"] for s in steps) / 3 / 1e3
        assert math.isclose(float(rows["step"][0]), step_ms, rel_tol=1e-3, abs_tol=0.01)
        mm = [o["dur"] for o in ops if o["name"] == "matmul"]
        assert math.isclose(float(rows["matmul"][0]), len(mm) / 3)
        assert math.isclose(float(rows["matmul"][1]), sum(mm) / 3 / 1e3, rel_tol=1e-2, abs_tol=0.01)
        op_ms = sum(float(v[1]) for k, v in rows.items() if k not in ("op", "step", "(outside"))
        assert op_ms <= step_ms * 1.001
    assert not list((rd / "trace").glob("*.tmp"))
    # One file with both ranks, each its own process, for Perfetto.
    merged = trace_events(rd / "trace" / "all-ranks.json")
    assert {e["pid"] for e in merged} == {0, 1}
    assert sorted(e["args"]["name"] for e in merged
                  if e["ph"] == "M" and e["name"] == "process_name") == ["rank 0", "rank 1"]
    assert len(merged) == sum(len(trace_events(rd / "trace" / f"rank-{r}.json")) for r in (0, 1))


def test_profile_window_is_checked(tmp_path):
    for bad in ["20-25", "5:2", "x:3"]:
        p = run([QS, *sets(*TINY), "--profile", bad, "--run-dir", str(tmp_path / bad)], check=2)
        assert "--profile" in p.stderr


def test_a_profile_window_past_the_run_warns_and_writes_no_trace(tmp_path):
    # It wrote an empty trace with rc 0 and no word (issue 27 item 5).
    rd = tmp_path / "r"
    p = run([QS, *sets(*TINY, "train.steps=5"), "--profile", "20:25", "--run-dir", str(rd)],
            check=0)
    assert "--profile 20:25: this run trains steps 1..5, none of them in the window" in p.stderr
    assert not (rd / "trace").exists()


STRAGGLER_RUN = [*TINY, "train.steps=20", "logging.every=5", "distributed.nproc=2"]
# One thread per rank: 2 ranks fill 2 cores without oversubscribing them, so timings are steady.
ONE_THREAD = {"OMP_NUM_THREADS": "1"}


def test_slow_rank_is_named_as_a_straggler(tmp_path):
    rd = tmp_path / "slow"
    p = run([QS, *sets(*STRAGGLER_RUN), "--run-dir", str(rd)],
            env={**ONE_THREAD, "TRAINRUN_FAULTS": "slow:rank=1:ms=60"}, check=0)
    rows = [r for r in metrics(rd, "event") if r.get("event") == "straggler"]
    assert rows, p.stderr
    assert all(r["rank"] == 1 for r in rows)
    assert all(r.get("host") and r.get("phase") for r in rows)
    warned = [line for line in p.stderr.splitlines() if "straggler" in line.lower()]
    assert any("rank 1" in line for line in warned), p.stderr


def test_no_straggler_without_a_fault(tmp_path):
    # Every rank sleeps 20 ms a step, the same on both: the steps of this tiny model are ~0.5 ms,
    # so unpaced a 5-step window lasts a few ms and one burst of another process on a 2-core
    # machine could slow 3 of one rank's 5 steps by 10 ms (it did, once in CI). Paced, the cores
    # are idle most of each step and a window spans ~100 ms, as a real job's steps would.
    rd = tmp_path / "even"
    run([QS, *sets(*STRAGGLER_RUN), "--run-dir", str(rd)],
        env={**ONE_THREAD, "TRAINRUN_FAULTS": "slow:ms=20"}, check=0)
    assert not [r for r in metrics(rd, "event") if r.get("event") == "straggler"]


def test_report_text_and_plot(tmp_path):
    rd = tmp_path / "r"
    run([QS, *sets(*TINY, "train.steps=12", "train.eval_every=6", "train.eval_steps=2"),
         "--run-dir", str(rd)], check=0)
    out = tmp_path / "plot.png"
    p = run(["report", str(rd), "--out", str(out)], check=0)
    assert "12 / 12" in p.stdout
    assert "val loss" in p.stdout and "(step 12)" in p.stdout
    assert "tokens/s" in p.stdout and "backward" in p.stdout
    assert str(out) in p.stdout
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    p = run(["report", str(tmp_path / "missing")], check=2)
    assert "missing" in p.stderr


def test_report_figures_are_recomputed_from_the_jsonl(tmp_path):
    """Every figure of the step-time table follows from metrics.jsonl by the formula
    docs/observability.md states; the parts of a step add up to its time; checkpoints, saved on
    steps that are not logged too (every 5, logged every 2), are counted in full."""
    import re
    rd = tmp_path / "r"
    run([QS, *sets(*TINY, "train.steps=20", "logging.every=2", "checkpoint.every=5"),
         "--run-dir", str(rd)], check=0)
    rows = metrics(rd)
    out = run(["report", str(rd), "--out", str(tmp_path / "p.png")], check=0).stdout

    def mean(key):
        return sum(r[key] for r in rows) / len(rows)

    step = mean("step_time")
    assert f"time per step {step * 1e3:.2f} ms (mean of {len(rows)} logged steps)" in out, out
    shares = 0.0
    parts = {"data": "t_data", "forward": "t_forward", "backward": "t_backward",
             "comm exposed": "t_comm_exposed", "optimizer": "t_optimizer"}
    for label, key in parts.items():
        ms, pct = mean(key) * 1e3, 100 * mean(key) / step
        assert re.search(rf"{label}\s+{ms:.2f} ms\s+{pct:.1f}%", out), (label, out)
        shares += pct
    other = step - sum(mean(k) for k in parts.values())
    assert re.search(rf"other\s+{other * 1e3:.2f} ms\s+{100 * other / step:.1f}%", out), out
    assert abs(shares + 100 * other / step - 100) < 1e-6  # the parts are the whole step
    saved = sum(r["t_checkpoint"] for r in rows)
    assert saved > 0
    assert (f"checkpoint {saved / 20 * 1e3:.2f} ms a step outside it ({saved:.2f} s in all over "
            f"20 steps, +{100 * saved / 20 / step:.1f}%)") in re.sub(r"\s+", " ", out), out
    # Saves on steps 5 and 15 (not logged) land in the next row: none is lost.
    assert rows[[r["step"] for r in rows].index(6)]["t_checkpoint"] > 0


def same(a, b):
    return (math.isnan(a) and math.isnan(b)) or a == b


def test_metrics_h5_matches_jsonl(tmp_path):
    rd = tmp_path / "r"
    run([QS, *sets(*TINY, "train.steps=7", "logging.every=2"), "--run-dir", str(rd)], check=0)
    rows = metrics(rd)
    assert [r["step"] for r in rows] == [1, 2, 4, 6, 7]
    with h5py.File(rd / "metrics.h5", "r") as f:
        g = f["train"]
        for key in rows[0]:
            if key == "kind":
                continue
            col = g[key][:]
            assert len(col) == len(rows), key
            for i, r in enumerate(rows):
                want = r[key] if r[key] is not None else float("nan")
                assert same(float(col[i]), float(want)), (key, i)
            # Every column says what it measures, in which unit.
            assert g[key].attrs["units"] and g[key].attrs["description"], key
        assert g["loss"].attrs["units"] == b"nats per token"
        assert g["step_time"].attrs["units"] == b"s"


def test_metrics_h5_keeps_the_kind_of_each_event(tmp_path):
    """metrics.h5 keeps numbers; an event's kind is its index in the column's "names"
    attribute, so h5py alone tells a bad step from a rollback (it kept only the step before)."""
    rd = tmp_path / "r"
    run([QS, *sets(*TINY, "train.steps=10", "checkpoint.every=2", "fault_tolerance.max_bad_steps=2"),
         "--run-dir", str(rd)], env={"TRAINRUN_FAULTS": "inf:step=5,nan:step=8"}, check=0)
    want = [(r["step"], r["event"]) for r in metrics(rd, "event")]
    assert ("bad_step" in {e for _, e in want}) and ("rollback" in {e for _, e in want}), want
    with h5py.File(rd / "metrics.h5", "r") as f:
        col = f["event"]["event"]
        names = col.attrs["names"]
        names = (names.decode() if isinstance(names, bytes) else str(names)).split()
        got = [(float(s), names[int(k)]) for s, k in zip(f["event"]["step"][:], col[:])]
    assert got == [(float(s), e) for s, e in want]
