"""A run's provenance (RUN_DIR/provenance.json): the version and source commit it was built from
(as `--version` and every checkpoint's metadata say), the resolved config's hash, the command
line, the hosts, and each attempt's start, end and exit status; `trainrun runs` lists runs done,
failed, preempted and running, and a sweep's points; `trainrun reproduce` trains the recorded
config again to the same losses, and says when its binary differs."""
import json
import os
import signal
import subprocess
import time

from conftest import REPO, TINY, TRAINRUN, losses, run, sets, wait_for

QS = str(REPO / "configs/quickstart.yaml")
BASE = [*TINY, "train.steps=6", "checkpoint.every=2", "train.eval_every=3"]


def provenance(rd):
    return json.loads((rd / "provenance.json").read_text())["attempts"]


def built_from():
    """What the build embedded: `git describe` of the checkout, or "unknown" outside one."""
    p = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True,
                       text=True)
    return p.stdout.strip() if p.returncode == 0 else None


def test_a_run_records_what_made_it_and_how_each_attempt_ended(tmp_path):
    rd = tmp_path / "r"
    args = [QS, *sets(*BASE), "--run-dir", str(rd)]
    p = run(args, env={"TRAINRUN_FAULTS": "nan:from=3"})  # gives up: exit 7
    assert p.returncode == 7
    run(["--resume", str(rd)], check=0)
    first, second = provenance(rd)
    version = run(["--version"], check=0).stdout.split()[1]
    assert first["trainrun_version"] == second["trainrun_version"] == version
    release, commit = version.split("+")
    assert first["source_commit"] == commit
    head = built_from()
    if head:
        assert head.startswith(commit.removesuffix("-dirty")), (head, commit)
    else:
        assert commit == "unknown"
    assert first["command"] == [TRAINRUN, *args]
    assert second["command"] == [TRAINRUN, "--resume", str(rd)]
    assert first["exit_code"] == 7 and second["exit_code"] == 0
    assert first["started"] <= first["ended"] <= second["started"] <= second["ended"]
    assert first["hosts"] == [os.uname().nodename]
    # One config, one hash; another value of a key, another hash.
    assert first["config_hash"] == second["config_hash"]
    other = tmp_path / "other"
    run([QS, *sets(*BASE, "optimizer.lr=1e-3"), "--run-dir", str(other)], check=0)
    assert provenance(other)[0]["config_hash"] != first["config_hash"]
    # Every checkpoint's metadata names the same build.
    ck = sorted((rd / "checkpoints").iterdir())[-1]
    assert f"trainrun_version: {version}" in run(["inspect", str(ck)], check=0).stdout


def test_runs_lists_done_failed_preempted_running_and_sweep_points(tmp_path):
    runs = tmp_path / "runs"
    run([QS, *sets(*BASE), "--run-dir", str(runs / "done")], check=0)
    assert run([QS, *sets(*BASE), "--run-dir", str(runs / "failed")],
               env={"TRAINRUN_FAULTS": "nan:from=3"}).returncode == 7
    # A process that dies at once (as if killed) ends no attempt: stopped.
    assert run([QS, *sets(*BASE), "--run-dir", str(runs / "killed")],
               env={"TRAINRUN_FAULTS": "exit:step=4:code=9"}).returncode == 9
    run(["sweep", QS, *sets(*BASE), "--grid", "seed=1,2", "--sweep-dir", str(runs / "sw")],
        check=0)
    slow = [*BASE, "train.steps=200", "checkpoint.every=100"]
    e = dict(os.environ, TRAINRUN_FAULTS="slow:ms=50")
    e.pop("OMP_NUM_THREADS", None)
    live = subprocess.Popen([TRAINRUN, QS, *sets(*slow), "--run-dir", str(runs / "live")],
                            env=e, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for(lambda: (runs / "live" / "metrics.jsonl").exists() and
                        (runs / "live" / "metrics.jsonl").read_text().count("\n") >= 2)
        listed = {r["name"]: r for r in
                  json.loads(run(["runs", str(runs), "--json"], check=0).stdout)}
        assert listed["live"]["status"] == "running"
        live.send_signal(signal.SIGTERM)
        assert live.wait(timeout=60) == 75, live.stderr.read()
    finally:
        live.kill()
    listed = {r["name"]: r for r in json.loads(run(["runs", str(runs), "--json"], check=0).stdout)}
    assert set(listed) == {"done", "failed", "killed", "live", "seed-1", "seed-2"}
    assert listed["done"]["status"] == "done" and listed["done"]["steps"] == 6
    assert listed["failed"]["status"] == "failed (7)"
    assert listed["killed"]["status"] == "stopped" and listed["killed"]["steps"] == 3
    assert listed["live"]["status"] == "preempted"
    assert listed["seed-1"]["sweep"] == listed["seed-2"]["sweep"] == "sw"
    assert listed["done"]["best_val_loss"] == min(
        json.loads(l)["val_loss"] for l in (runs / "done" / "metrics.jsonl").read_text().splitlines()
        if '"eval"' in l)
    table = run(["runs", str(runs)], check=0).stdout
    assert "failed (7)" in table and "preempted" in table


def test_reproduce_trains_the_recorded_config_again(tmp_path):
    rd, again = tmp_path / "r", tmp_path / "again"
    run([QS, *sets(*BASE), "--run-dir", str(rd)], check=0)
    p = run(["reproduce", str(rd), "--run-dir", str(again)], check=0)
    assert "warning" not in p.stderr, p.stderr
    assert losses(again) == losses(rd)
    assert provenance(again)[0]["config_hash"] == provenance(rd)[0]["config_hash"]
    # Another binary made it: said, and it trains anyway.
    record = json.loads((rd / "provenance.json").read_text())
    record["attempts"][0]["source_commit"] = "0123456789ab"
    (rd / "provenance.json").write_text(json.dumps(record))
    p = run(["reproduce", str(rd), "--run-dir", str(tmp_path / "third")], check=0)
    assert "made by trainrun built from 0123456789ab" in p.stderr
    # Into a directory that holds a run: refused, as any run there is.
    assert run(["reproduce", str(rd), "--run-dir", str(again)]).returncode == 73
    p = run(["reproduce", str(tmp_path), "--run-dir", str(tmp_path / "x")], check=2)
    assert "no config.yaml there" in p.stderr
