"""TensorBoard event files checked with the real thing: PyPI's tensorboard (its EventAccumulator,
run in build/test-venv, which scripts/setup.sh --test makes) reads every scalar of a run that was
stopped with SIGTERM, resumed, killed and relaunched by the supervisor, and finds exactly the
rows of metrics.jsonl, each step once; the real `tensorboard` server serves the loss curve over
its HTTP API; logging.tensorboard=false writes nothing."""
import json
import math
import os
import signal
import socket
import struct
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from conftest import REPO, TINY, TRAINRUN, metrics, run, sets, stop_server

QS = str(REPO / "configs/quickstart.yaml")
VENV = REPO / "build" / "test-venv" / "bin"

# Prints every scalar and text of a log directory as TensorBoard's own reader sees them.
READER = r"""
import json, sys
from tensorboard.backend.event_processing import event_accumulator as ea
from tensorboard.util import tensor_util
acc = ea.EventAccumulator(sys.argv[1], size_guidance={ea.SCALARS: 0, ea.TENSORS: 0})
acc.Reload()
out = {"scalars": {}, "texts": {}}
for tag in acc.Tags()["scalars"]:
    out["scalars"][tag] = [[e.step, e.value] for e in acc.Scalars(tag)]
for tag in acc.Tags()["tensors"]:
    out["texts"][tag] = [[e.step, tensor_util.make_ndarray(e.tensor_proto).item().decode()]
                         for e in acc.Tensors(tag)]
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def venv():
    if not (VENV / "python").exists():
        pytest.fail(f"{VENV}/python is missing: scripts/setup.sh --test installs tensorboard there")
    return VENV


def read_events(venv, logdir):
    p = subprocess.run([str(venv / "python"), "-c", READER, str(logdir)], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def f32(v):
    """A metrics.jsonl value as TensorBoard stores it (float32; null is NaN)."""
    return math.nan if v is None else struct.unpack("f", struct.pack("f", v))[0]


def same(a, b):
    return (math.isnan(a) and math.isnan(b)) or a == b


def check_against_jsonl(rd, ev):
    """Every numeric field of every train and eval row is a scalar at its step, and TensorBoard
    holds nothing else: the same steps, in order, none twice."""
    for kind in ("train", "eval"):
        rows = metrics(rd, kind)
        assert rows, kind
        for key in rows[0]:
            if key in ("kind", "step"):
                continue
            tag = f"{kind}/{key}"
            got = ev["scalars"][tag]
            assert [s for s, _ in got] == [r["step"] for r in rows], tag
            for (step, value), row in zip(got, rows):
                assert same(value, f32(row[key])), (tag, step, value, row[key])


def popen(args, rd, env=None):
    e = dict(os.environ, **(env or {}))
    e.pop("OMP_NUM_THREADS", None)
    return subprocess.Popen([TRAINRUN, *args, "--run-dir", str(rd)], env=e, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def logged_rows(rd):
    """Train rows so far, counted without parsing: the last line may be half written."""
    path = rd / "metrics.jsonl"
    return path.read_text().count('"kind":"train"') if path.exists() else 0


def test_scalars_match_metrics_across_sigterm_resume_and_restart(tmp_path, venv):
    rd = tmp_path / "r"
    base = [*TINY, "train.eval_every=5", "train.eval_steps=1"]
    proc = popen([QS, *sets(*base, "train.steps=100000", "checkpoint.every=0")], rd)
    deadline = time.time() + 60
    while time.time() < deadline and logged_rows(rd) < 8:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 75, err
    stopped = max(r["step"] for r in metrics(rd))

    # Resume; the supervisor then sees the job killed 3 steps past a checkpoint and relaunches
    # it from there: those 3 steps are logged twice by the run, and must be in TensorBoard once.
    ckpt = (stopped // 4 + 1) * 4
    run(["--resume", str(rd),
         *sets(f"train.steps={ckpt + 8}", "checkpoint.every=4", "fault_tolerance.max_restarts=1",
               "fault_tolerance.restart_backoff=0")],
        env={"TRAINRUN_FAULTS": f"kill:step={ckpt + 4}"}, check=0)
    assert max(r["step"] for r in metrics(rd)) == ckpt + 8
    assert [r["event"] for r in metrics(rd, "event")] == ["restart"]

    files = sorted((rd / "tb").iterdir())
    assert len(files) >= 3, files  # the first run, the resume, the relaunch (one file each)
    assert all(f.name.startswith("events.out.tfevents.") for f in files)
    ev = read_events(venv, rd / "tb")
    check_against_jsonl(rd, ev)
    loss_steps = [s for s, _ in ev["scalars"]["train/loss"]]
    assert len(loss_steps) == len(set(loss_steps))  # one curve, no step twice
    assert stopped in loss_steps and ckpt + 1 in loss_steps

    assert [s for s, _ in ev["texts"]["config"]] == [0]
    assert "tensorboard: true" in ev["texts"]["config"][0][1]
    (step, text), = ev["texts"]["events/restart"]
    assert step == ckpt and "cause: " in text and "steps_lost: " in text


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def test_tensorboard_server_serves_the_loss_curve(tmp_path, venv):
    rd = tmp_path / "r"
    run([QS, *sets(*TINY, "train.steps=12", "train.eval_every=6", "train.eval_steps=1"),
         "--run-dir", str(rd)], check=0)
    want = [(r["step"], f32(r["loss"])) for r in metrics(rd)]
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [str(venv / "tensorboard"), "--logdir", str(rd / "tb"), "--host", "127.0.0.1",
         "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        tags, deadline = {}, time.time() + 90
        while time.time() < deadline and not any("train/loss" in t for t in tags.values()):
            assert server.poll() is None, server.communicate()[0]
            try:
                tags = get_json(f"{base}/data/plugin/scalars/tags")
            except (urllib.error.URLError, ConnectionError):
                pass
            time.sleep(0.5)
        runs = [r for r, t in tags.items() if "train/loss" in t]
        assert runs, tags
        q = urllib.parse.urlencode({"run": runs[0], "tag": "train/loss"})
        curve = get_json(f"{base}/data/plugin/scalars/scalars?{q}")  # [[wall_time, step, value]]
        assert [(step, value) for _, step, value in curve] == want
        assert "eval/val_loss" in tags[runs[0]]
        assert "config" in get_json(f"{base}/data/plugin/text/tags")[runs[0]]  # text, too
    finally:
        stop_server(server)
    assert server.returncode is not None


def test_tensorboard_off_writes_no_event_files(tmp_path):
    rd = tmp_path / "r"
    run([QS, *sets(*TINY, "train.steps=3", "logging.tensorboard=false"), "--run-dir", str(rd)],
        check=0)
    assert metrics(rd)
    assert not (rd / "tb").exists()
