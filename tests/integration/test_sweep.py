"""`trainrun sweep` and `trainrun compare`: a grid x seeds of the quick start, each point its own
run with exactly the config asked for; compare's figures against each run's metrics.jsonl and
its seed groups against numpy; a failing point marked and rerun alone by --resume (continuing
from its checkpoint to the uninterrupted run's losses); a signal passed to the running point;
and every bad input refused before anything runs."""
import json
import os
import signal
import subprocess
import time

import numpy as np
import pytest

from conftest import REPO, TINY, TRAINRUN, losses, metrics, run, sets, stop_server

QS = str(REPO / "configs/quickstart.yaml")
BASE = [*TINY, "train.steps=4", "train.eval_every=2", "checkpoint.every=2"]


def sweep(tmp_path, *args, check=0, env=None, name="sw"):
    d = tmp_path / name
    p = run(["sweep", QS, *sets(*BASE), *args, "--sweep-dir", str(d)], check=check, env=env)
    return d, p


def manifest(d):
    return json.loads((d / "sweep.json").read_text())


def resolved(run_dir):
    """The run's config.yaml, as a run wrote it: {"optimizer.lr": "0.001", ...} for the keys the
    tests read."""
    import yaml
    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    return {"optimizer.lr": cfg["optimizer"]["lr"], "model.d_model": cfg["model"]["d_model"],
            "seed": cfg["seed"], "train.steps": cfg["train"]["steps"]}


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("grid")
    d, p = sweep(tmp, "--grid", "optimizer.lr=1e-3,3e-3", "--grid", "model.d_model=32,64",
                 "--seeds", "2")
    return d, p


def test_a_grid_times_seeds_gives_one_run_per_point_with_its_config(grid):
    d, p = grid
    points = manifest(d)["points"]
    assert len(points) == 8 and {pt["status"] for pt in points} == {"done"}
    want = {(lr, dm, seed) for lr in (1e-3, 3e-3) for dm in (32, 64) for seed in (1337, 1338)}
    got = set()
    for pt in points:
        cfg = resolved(d / pt["name"])
        got.add((cfg["optimizer.lr"], cfg["model.d_model"], cfg["seed"]))
        assert cfg["train.steps"] == 4  # the --set every point shares
        assert len(losses(d / pt["name"])) == 4
    assert got == want
    # Names: readable, from the overrides, the grid's first axis outermost and seeds innermost.
    assert [pt["name"] for pt in points][:2] == ["lr-1e-3_d_model-32_seed-1337",
                                                 "lr-1e-3_d_model-32_seed-1338"]
    assert "8 done, 0 failed" in p.stdout


def test_compare_json_is_what_each_runs_metrics_say(grid):
    d, _ = grid
    out = json.loads(run(["compare", str(d), "--json"], check=0).stdout)
    assert out["keys"] == ["model.d_model", "optimizer.lr", "seed"]
    assert len(out["runs"]) == 8
    for r in out["runs"]:
        train, evals = metrics(r["run"]), metrics(r["run"], "eval")
        assert r["status"] == "done"
        assert r["steps"] == train[-1]["step"] == 4
        assert r["train_loss"] == train[-1]["loss"]
        assert r["best_val_loss"] == min(e["val_loss"] for e in evals)
        assert r["last_val_loss"] == evals[-1]["val_loss"]
        assert r["tokens_per_sec"] == pytest.approx(np.mean([t["tokens_per_sec"] for t in train[1:]]))
        assert r["seconds"] == pytest.approx(sum(t["step_time"] for t in train))
    # Sorted best first by a figure.
    by = json.loads(run(["compare", str(d), "--json", "--sort", "best_val_loss"], check=0).stdout)
    vals = [r["best_val_loss"] for r in by["runs"]]
    assert vals == sorted(vals)


def test_group_seeds_gives_the_mean_and_standard_error(grid):
    d, _ = grid
    out = json.loads(run(["compare", str(d), "--json", "--group-seeds"], check=0).stdout)
    assert out["keys"] == ["model.d_model", "optimizer.lr"]
    assert len(out["groups"]) == 4
    for g in out["groups"]:
        assert g["n"] == 2 and len(g["runs"]) == 2
        for figure in ("train_loss", "best_val_loss"):
            vals = np.array([(metrics(r)[-1]["loss"] if figure == "train_loss"
                              else min(e["val_loss"] for e in metrics(r, "eval")))
                             for r in g["runs"]])
            assert g["mean"][figure] == pytest.approx(vals.mean(), rel=1e-12)
            assert g["stderr"][figure] == pytest.approx(vals.std(ddof=1) / np.sqrt(len(vals)),
                                                        rel=1e-9)
    table = run(["compare", str(d), "--group-seeds"], check=0).stdout
    assert "±" in table and "n" in table.splitlines()[0].split()


def test_compare_csv_and_a_directory_of_runs(grid, tmp_path):
    d, _ = grid
    rows = run(["compare", str(d), "--csv"], check=0).stdout.splitlines()
    assert rows[0].startswith("run,model.d_model,optimizer.lr,seed,status,steps,train_loss")
    assert len(rows) == 9
    # A plain directory whose subdirectories are runs (here the sweep's, without its manifest
    # the statuses come from the runs themselves).
    plain = tmp_path / "plain"
    plain.mkdir()
    for pt in manifest(d)["points"][:2]:
        os.symlink(d / pt["name"], plain / pt["name"])
    out = json.loads(run(["compare", str(plain), "--json"], check=0).stdout)
    assert [r["status"] for r in out["runs"]] == ["done", "done"]
    assert out["keys"] == ["seed"]


def test_a_failed_point_is_marked_and_resume_reruns_only_it(tmp_path):
    # train.steps 2 and 6 with a fault at step 4: only the longer point fails, after its
    # checkpoint at step 4... (every=2), and the shorter finishes.
    d, p = sweep(tmp_path, "--grid", "train.steps=2,6", check=9,
                 env={"TRAINRUN_FAULTS": "exit:step=5:code=9"})
    pts = {pt["name"]: pt for pt in manifest(d)["points"]}
    assert pts["steps-2"]["status"] == "done"
    assert pts["steps-6"]["status"] == "failed" and pts["steps-6"]["exit_code"] == 9
    assert "1 done, 1 failed" in p.stdout
    table = run(["compare", str(d)], check=0).stdout
    assert "failed (9)" in table
    done_before = (d / "steps-2" / "metrics.jsonl").read_text()
    p = run(["sweep", "--resume", str(d)], check=0)
    assert "1 of 2 points to run" in p.stdout
    pts = {pt["name"]: pt for pt in manifest(d)["points"]}
    assert pts["steps-6"]["status"] == "done" and pts["steps-6"]["attempts"] == 2
    assert pts["steps-2"]["attempts"] == 1
    assert (d / "steps-2" / "metrics.jsonl").read_text() == done_before
    # It continued from its checkpoint: the losses of a run never interrupted.
    ref = tmp_path / "ref"
    run([QS, *sets(*BASE, "train.steps=6"), "--run-dir", str(ref)], check=0)
    assert losses(d / "steps-6") == losses(ref)
    assert "resumed from" in (d / "logs" / "steps-6.log").read_text()


def test_a_signal_reaches_the_running_point_which_resume_continues(tmp_path):
    d = tmp_path / "sig"
    long = [*BASE, "train.steps=40", "checkpoint.every=20", "train.eval_every=0"]
    e = dict(os.environ)
    e.pop("OMP_NUM_THREADS", None)
    e["TRAINRUN_FAULTS"] = "slow:ms=100"  # 4 s a point: the signal comes while the first trains
    proc = subprocess.Popen([TRAINRUN, "sweep", QS, *sets(*long), "--grid", "seed=1,2",
                             "--sweep-dir", str(d)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=e)
    try:
        first = d / "seed-1" / "metrics.jsonl"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (first.exists() and first.read_text().count("\n") > 2):
            time.sleep(0.05)
        # While it trains, compare marks it live.
        live = json.loads(run(["compare", str(d), "--json"], check=0).stdout)["runs"]
        assert [r["status"] for r in live] == ["live", "pending"]
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 75, (out, err)
    pts = manifest(d)["points"]
    assert [pt["status"] for pt in pts] == ["preempted", "pending"]
    p = run(["sweep", "--resume", str(d)], check=0, timeout=600)
    assert "2 of 2 points to run" in p.stdout
    assert [pt["status"] for pt in manifest(d)["points"]] == ["done", "done"]
    assert "resumed from" in (d / "logs" / "seed-1.log").read_text()


def test_parallel_points_run_side_by_side(tmp_path):
    d, p = sweep(tmp_path, "--list", "--grid", "optimizer.lr=1e-3,2e-3",
                 "--grid", "model.d_model=32,48", "--parallel", "2")
    names = [pt["name"] for pt in manifest(d)["points"]]
    assert names == ["lr-1e-3_d_model-32", "lr-2e-3_d_model-48"]  # zipped, not the product
    assert "1 at a time" not in p.stdout and "2 at a time" in p.stdout
    # Both started before either ended.
    lines = p.stdout.splitlines()
    assert [l.split(":")[0] for l in lines[1:3]] == ["[1/2] lr-1e-3_d_model-32",
                                                     "[2/2] lr-2e-3_d_model-48"]


def test_random_axes_are_drawn_the_same_for_one_sweep_seed(tmp_path):
    args = ["--random", "optimizer.lr=loguniform(1e-3,1e-2)", "--random",
            "model.d_model=choice(32,64)", "--trials", "3", "--dry-run"]
    a = sweep(tmp_path, *args, "--sweep-seed", "7")[1].stdout
    b = sweep(tmp_path, *args, "--sweep-seed", "7")[1].stdout
    c = sweep(tmp_path, *args, "--sweep-seed", "8")[1].stdout
    assert a == b and a != c
    assert a.count("[pending] optimizer.lr=") == 3
    for line in a.splitlines()[1:]:
        lr = float(line.split("optimizer.lr=")[1].split()[0])
        assert 1e-3 <= lr <= 1e-2
    assert not (tmp_path / "sw").exists()  # a dry run writes nothing


@pytest.mark.parametrize("args,says", [
    (["--grid", "optimizer.lrr=1,2"], "sweep point lrr-1 (optimizer.lrr=1)"),
    (["--grid", "optimizer.lr=-1,1e-3"], "sweep point lr--1 (optimizer.lr=-1)"),
    (["--grid", "optimizer.lr="], "an empty grid"),
    (["--grid", "optimizer.lr=1e-3,0.001"], "two identical points"),
    (["--list", "--grid", "seed=1,2", "--grid", "optimizer.lr=1e-3"], "zip value by value"),
    (["--random", "optimizer.lr=normal(0,1)"], "unknown distribution"),
    (["--random", "optimizer.lr=loguniform(0,1)"], "want A < B, both > 0"),
    ([], "nothing to sweep"),
    (["--grid", "model.d_model=32,65536"], "sweep point d_model-65536 (model.d_model=65536): this run needs"),
])
def test_bad_axes_are_refused_before_anything_runs(tmp_path, args, says):
    d, p = sweep(tmp_path, *args, check=2)
    assert says in p.stderr, p.stderr
    assert not d.exists()


def test_a_sweep_directory_holding_another_sweep_is_refused(tmp_path):
    d, _ = sweep(tmp_path, "--grid", "seed=1,2", "--set", "train.steps=1")
    p = sweep(tmp_path, "--grid", "seed=3,4", check=73)[1]
    assert "holds a sweep of 2 points" in p.stderr and f"sweep --resume {d}" in p.stderr
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    p = run(["sweep", QS, "--grid", "seed=1,2", "--sweep-dir", str(other)], check=73)
    assert "holds other files" in p.stderr
    assert (other / "notes.txt").read_text() == "mine"


def test_compare_of_a_directory_without_runs_is_an_error(tmp_path):
    p = run(["compare", str(tmp_path)], check=2)
    assert "holds no run" in p.stderr
    p = run(["compare", str(tmp_path), "--sort", "speed"], check=2)
    assert "no such figure" in p.stderr


def test_the_readme_sweep_block_runs_as_written(tmp_path):
    """The README's sweep, compare and resume lines, each run as written from a scratch copy of
    configs/ (so runs/quickstart-sweep is the test's own)."""
    import re
    import shlex
    import shutil
    text = (REPO / "README.md").read_text()
    block = re.search(r"### Sweeps and comparing runs\n\n```sh\n(.*?)```", text, re.S).group(1)
    cmds = [shlex.split(c, comments=True) for c in block.replace("\\\n", " ").splitlines()]
    assert [c[1] for c in cmds] == ["sweep", "compare", "sweep"]
    shutil.copytree(REPO / "configs", tmp_path / "configs")
    outs = [run(c[1:], cwd=tmp_path, check=0, timeout=600).stdout for c in cmds]
    d = tmp_path / "runs" / "quickstart-sweep"
    assert [pt["status"] for pt in manifest(d)["points"]] == ["done"] * 12
    # compare --group-seeds: four settings of three seeds, best first by val loss.
    rows = outs[1].splitlines()[2:]
    assert len(rows) == 4 and all(r.split()[2] == "3" for r in rows), outs[1]
    assert "0 of 12 points to run" in outs[2]


def test_tensorboard_shows_every_point_in_its_hparams_tab(grid):
    """The real TensorBoard server (build/test-venv) on the sweep directory: its HParams plugin
    lists the sweep's axes, and one session group per setting (its two seeds), each session
    done with the final loss of its run's metrics.jsonl."""
    import socket
    import urllib.request
    d, _ = grid
    venv = REPO / "build" / "test-venv" / "bin"
    assert (venv / "tensorboard").exists(), "scripts/setup.sh --test installs tensorboard"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base = f"http://127.0.0.1:{port}/data/plugin/hparams"
    server = subprocess.Popen([str(venv / "tensorboard"), "--logdir", str(d), "--host",
                               "127.0.0.1", "--port", str(port)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def post(what, body):
        req = urllib.request.Request(f"{base}/{what}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())

    try:
        groups, deadline = [], time.time() + 90
        query = {"experimentName": "", "startIndex": 0, "sliceSize": 100,
                 "allowedStatuses": ["STATUS_UNKNOWN", "STATUS_SUCCESS", "STATUS_FAILURE",
                                     "STATUS_RUNNING"], "colParams": [],
                 "aggregationType": "AGGREGATION_AVG"}
        while time.time() < deadline and sum(len(g["sessions"]) for g in groups) < 8:
            assert server.poll() is None, server.communicate()[0]
            try:
                groups = post("session_groups", query).get("sessionGroups", [])
            except OSError:
                pass
            time.sleep(0.5)
        exp = post("experiment", {"experimentName": ""})
    finally:
        stop_server(server)
    assert sorted(h["name"] for h in exp["hparamInfos"]) == ["model.d_model", "optimizer.lr", "seed"]
    assert sorted(m["name"]["tag"] for m in exp["metricInfos"]) == [
        "eval/val_loss", "train/loss", "train/tokens_per_sec"]
    assert len(groups) == 4 and all(len(g["sessions"]) == 2 for g in groups), groups
    for g in groups:
        for s in g["sessions"]:
            assert s["status"] == "STATUS_SUCCESS"
            loss = {m["name"]["tag"]: m["value"] for m in s["metricValues"]}["train/loss"]
            assert loss == pytest.approx(metrics(d / s["name"])[-1]["loss"], rel=1e-6)


def test_compare_html_overlays_every_runs_curves_with_escaped_names(grid, tmp_path):
    import html
    import re
    d, _ = grid
    # A run whose directory name is markup: shown as text, never as a tag.
    odd = tmp_path / 'odd <b>&"name'
    odd.mkdir()
    first = manifest(d)["points"][0]["name"]
    os.symlink(d / first, odd / "r")
    page = tmp_path / "cmp.html"
    run(["compare", str(d), str(odd), "--html", str(page)], check=0)
    text = page.read_text()
    assert "<script" not in text and "http://" not in text.replace(
        'xmlns="http://www.w3.org/2000/svg"', "")
    charts = re.findall(r"<svg.*?</svg>", text, re.S)
    assert [re.search(r'aria-label="([^"]*)"', c).group(1) for c in charts] == [
        "train loss", "val loss", "learning rate", "throughput"]
    names = [pt["name"] for pt in manifest(d)["points"]]
    for chart in charts:
        strokes = re.findall(r'<polyline [^>]*stroke="([^"]+)"', chart)
        assert len(strokes) == 9 and len(set(strokes)) == 9, strokes  # one colour per run
        legend = [html.unescape(re.sub(r"<[^>]+>", "", t)).strip()
                  for t in re.findall(r"<text [^>]*><tspan .*?</text>", chart)]
        assert len(legend) == 9
        for n in names:
            assert any(l.startswith(f"■ {n} model.d_model=") for l in legend), (n, legend)
    assert "<b>" not in text and "&lt;b&gt;" in text
    # The table: a row per run, as --csv has them.
    assert text.count("<tr>") == 10
    # An existing page is replaced only with --force.
    p = run(["compare", str(d), "--html", str(page)], check=2)
    assert "--force" in p.stderr
    run(["compare", str(d), "--html", str(page), "--force"], check=0)


def test_axes_from_a_sweep_file_with_the_command_lines_added(tmp_path):
    f = tmp_path / "sweep.yaml"
    f.write_text("sweep:\n  grid:\n    optimizer.lr: [1.0e-3, 3.0e-3]\n  seeds: 2\n"
                 "  set:\n    train.steps: 2\n")
    d, p = sweep(tmp_path, "--sweep-file", str(f), "--grid", "model.d_model=32,48")
    points = manifest(d)["points"]
    assert [pt["overrides"] for pt in points][:3] == [
        ["optimizer.lr=1.0e-3", "model.d_model=32", "seed=1337"],
        ["optimizer.lr=1.0e-3", "model.d_model=32", "seed=1338"],
        ["optimizer.lr=1.0e-3", "model.d_model=48", "seed=1337"]]
    assert len(points) == 8
    assert manifest(d)["sets"][-1] != "train.steps=2"  # the file's --set comes first ...
    assert "train.steps=2" in manifest(d)["sets"]
    for pt in points:
        assert len(losses(d / pt["name"])) == 4  # ... so the command line's train.steps=4 wins
    # Bad files: named with the line, before anything runs.
    for text, says in [("sweep:\n  gird:\n    seed: [1, 2]\n", ":2:3: sweep.gird: unknown key"),
                       ("sweep:\n  grid:\n    seed: 1\n", "sweep.grid.seed: want a list"),
                       ("sweep:\n  seeds: two\n", "sweep.seeds: want a whole number"),
                       ("grid: {}\n", "want a mapping `sweep:`")]:
        f.write_text(text)
        p = run(["sweep", QS, "--sweep-file", str(f), "--sweep-dir", str(tmp_path / "bad")],
                check=2)
        assert says in p.stderr, (text, p.stderr)
        assert not (tmp_path / "bad").exists()


def test_slurm_writes_one_job_array_whose_tasks_train_their_points(tmp_path):
    """--slurm writes SWEEP_DIR/sweep.sbatch, one array task per point; each task is run here by
    bash as Slurm would (SLURM_ARRAY_TASK_ID set, srun a stand-in that starts its command), and
    the sweep then knows every point is done from the runs' own records. (A real two-node Slurm
    runs the array in tests/multihost.)"""
    d, p = sweep(tmp_path, "--grid", "seed=1,2", "--slurm", "--parallel", "2")
    script = (d / "sweep.sbatch").read_text()
    assert "#SBATCH --array=0-1%2" in script
    assert f"#SBATCH --output={d}/logs/slurm-%A_%a.out" in script
    assert [pt["status"] for pt in manifest(d)["points"]] == ["pending", "pending"]
    assert not (d / "seed-1").exists()  # nothing ran here
    stubs = tmp_path / "bin"
    stubs.mkdir()
    (stubs / "srun").write_text('#!/bin/sh\nwhile [ "${1#-}" != "$1" ]; do shift; done\n'
                                'exec "$@"\n')
    (stubs / "srun").chmod(0o755)
    for task in (0, 1):
        e = dict(os.environ, SLURM_ARRAY_TASK_ID=str(task), SLURM_JOB_ID=str(100 + task),
                 PATH=f"{stubs}:{os.environ['PATH']}")
        e.pop("OMP_NUM_THREADS", None)
        t = subprocess.run(["bash", str(d / "sweep.sbatch")], env=e, capture_output=True,
                           text=True, timeout=120)
        assert t.returncode == 0 and "trainrun: finished" in t.stdout, t.stdout + t.stderr
    assert [r["status"] for r in json.loads(
        run(["compare", str(d), "--json"], check=0).stdout)["runs"]] == ["done", "done"]
    assert "0 of 2 points to run" in run(["sweep", "--resume", str(d)], check=0).stdout
    assert [pt["status"] for pt in manifest(d)["points"]] == ["done", "done"]
    # A task beyond the array, and points of two shapes, are refused.
    e = dict(os.environ, SLURM_ARRAY_TASK_ID="2", SLURM_JOB_ID="102",
             PATH=f"{stubs}:{os.environ['PATH']}")
    t = subprocess.run(["bash", str(d / "sweep.sbatch")], env=e, capture_output=True, text=True)
    assert t.returncode == 2 and "no point of this sweep" in t.stderr
    p = sweep(tmp_path, "--grid", "distributed.nproc=1,2", "--set", "train.batch_size=8",
              "--slurm", check=2, name="shapes")[1]
    assert "one job array has one shape" in p.stderr
    p = sweep(tmp_path, "--grid", "seed=1,2", "--submit", check=2, name="nosl")[1]
    assert "with --slurm" in p.stderr
