"""The Prometheus endpoint, checked with the real tool: Debian's `prometheus` scrapes a run on
loopback every 200 ms, and its HTTP API must return the run's loss series, step by step equal to
metrics.jsonl, with the metric types trainrun declares. Also: a port in use is refused (exit 2)
before anything is written, and nothing listens when the key is 0.

prometheus comes from scripts/setup.sh --test (Debian's package).
"""
import json
import os
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request

from conftest import REPO, TRAINRUN, metrics, run, sets, wait_for

QS = str(REPO / "configs" / "quickstart.yaml")
# A few ms a step on 2 idle cores; the scrape test stops it once Prometheus has enough.
SMALL = [
    "model.n_layer=2", "model.d_model=64", "model.n_head=2", "model.seq_len=64",
    "model.vocab_size=32", "train.batch_size=8", "train.steps=100000", "train.eval_every=10",
    "train.eval_steps=1", "logging.every=5", "optimizer.warmup_steps=2",
    "data.synthetic_tokens=65536", "checkpoint.every=10",
]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


class Prometheus:
    """A real prometheus scraping 127.0.0.1:target_port every 200 ms, storage in tmp_path."""

    def __init__(self, tmp_path, target_port):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        config = tmp_path / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 200ms\n  scrape_timeout: 200ms\n"
            "scrape_configs:\n  - job_name: trainrun\n"
            f"    static_configs:\n      - targets: ['127.0.0.1:{target_port}']\n")
        self.log = open(tmp_path / "prometheus.log", "w")
        self.proc = subprocess.Popen(
            ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            stdout=self.log, stderr=subprocess.STDOUT)
        assert wait_for(self.ready, timeout=30), (tmp_path / "prometheus.log").read_text()

    def ready(self):
        assert self.proc.poll() is None, "prometheus exited"
        try:
            with urllib.request.urlopen(f"{self.base}/-/ready", timeout=2) as r:
                return r.status == 200
        except (urllib.error.URLError, ConnectionError):
            return False

    def api(self, path, **params):
        body = get_json(f"{self.base}/api/v1/{path}?{urllib.parse.urlencode(params)}")
        assert body["status"] == "success", body
        return body["data"]

    def samples(self, metric):
        """Every stored sample of `metric` (one series): {timestamp: value}."""
        data = self.api("query", query=f"{metric}[10m]")
        assert len(data["result"]) == 1, data
        return {ts: float(v) for ts, v in data["result"][0]["values"]}

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def scraped_rows(prom):
    """{step: loss} as Prometheus stored them: one scrape stores both at one timestamp."""
    try:
        loss, step = prom.samples("trainrun_loss"), prom.samples("trainrun_step")
    except AssertionError:  # no series yet
        return {}
    return {int(step[ts]): v for ts, v in loss.items() if ts in step}


def check_dashboard(prom):
    """Every query of docs/grafana-dashboard.json runs on this Prometheus, over the run's data."""
    dash = json.loads((REPO / "docs" / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    assert any("trainrun_loss" in e for e in exprs)
    at = max(prom.samples("trainrun_step"))  # the last scrape
    for expr in exprs:
        q = expr.replace("$instance", ".*").replace("$__range", "10m")
        data = prom.api("query", query=q, time=at)
        # Single-rank runs have no straggler rows; every other panel shows data.
        if "straggler" not in expr:
            assert data["result"], expr


def test_prometheus_scrapes_the_loss_series_of_a_run(tmp_path):
    port = free_port()
    prom = Prometheus(tmp_path, port)
    rd = tmp_path / "r"
    # The run is the load, Prometheus the tool under test: one thread and a low priority for the
    # run, so that on a 2-core machine Prometheus is not starved into a handful of scrapes (seen
    # once: 3 scrapes stored in 90 s, every one healthy).
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    train = subprocess.Popen(
        ["nice", "-n", "15", TRAINRUN, QS, *sets(*SMALL, f"logging.prometheus_port={port}",
                             "logging.prometheus_address=127.0.0.1"), "--run-dir", str(rd)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        # Scraped while it trains (however fast this machine is): then it is stopped.
        meta = {}

        def enough():
            assert train.poll() is None, train.communicate()[0]
            meta.update(prom.api("metadata"))
            time.sleep(0.2)  # a scrape's worth
            return (len(scraped_rows(prom)) >= 4 and "trainrun_val_loss" in meta
                    and "trainrun_checkpoint_age_seconds" in meta)

        # On failure: what was stored, and Prometheus's own word on its last scrape.
        assert wait_for(enough, timeout=90), (scraped_rows(prom), [
            (t["health"], t["lastError"], t["lastScrapeDuration"])
            for t in prom.api("targets")["activeTargets"]])
        train.send_signal(signal.SIGTERM)
        out, _ = train.communicate(timeout=60)
        assert train.returncode == 75, out  # stopped after a checkpoint: resume me
        assert "metrics for Prometheus: http://" in out and f":{port}/metrics" in out
        # The types Prometheus read from the TYPE lines.
        assert meta["trainrun_loss"][0]["type"] == "gauge"
        assert meta["trainrun_restarts_total"][0]["type"] == "counter"
        assert meta["trainrun_bad_steps_total"][0]["type"] == "counter"
        assert meta["trainrun_step_phase_seconds"][0]["type"] == "gauge"
        size = prom.samples("trainrun_checkpoint_size_bytes")
        assert min(size.values()) > 100_000  # 106k parameters, weights and moments

        want = {r["step"]: r["loss"] for r in metrics(rd)}
        got = scraped_rows(prom)
        assert len(got) >= 4, got
        for s, v in got.items():
            assert v == want[s], (s, v, want[s])  # the same double, digit for digit
        evals = {r["step"]: r["val_loss"] for r in metrics(rd, "eval")}
        val, val_step = prom.samples("trainrun_val_loss"), prom.samples("trainrun_val_step")
        for ts, v in val.items():
            assert v == evals[int(val_step[ts])]
        up = prom.api("query", query='up{job="trainrun"}[10m]')["result"][0]["values"]
        assert any(v == "1" for _, v in up)
        check_dashboard(prom)
    finally:
        if train.poll() is None:
            train.kill()
            train.wait()
        prom.stop()


def test_a_port_in_use_is_refused_before_anything_is_written(tmp_path):
    with socket.socket() as busy:
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        port = busy.getsockname()[1]
        rd = tmp_path / "r"
        p = run([QS, *sets(*SMALL, f"logging.prometheus_port={port}"), "--run-dir", str(rd)],
                check=2)
    assert f"logging.prometheus_port: cannot serve metrics on 0.0.0.0:{port}" in p.stderr
    assert "Address already in use" in p.stderr
    assert "--set logging.prometheus_port=N" in p.stderr
    assert not rd.exists()


def test_no_endpoint_by_default(tmp_path):
    rd = tmp_path / "r"
    p = run([QS, *sets(*SMALL, "train.steps=5"), "--run-dir", str(rd)], check=0)
    assert "metrics for Prometheus" not in p.stdout + p.stderr
    assert (rd / "config.yaml").read_text().count("prometheus_port: 0") == 1


def test_the_log_names_the_address_the_endpoint_is_bound_to(tmp_path):
    # Bound to loopback, the URL printed is loopback's (a host name would not reach it), and the
    # line says which key serves every interface; bound to every interface, it says so.
    port = free_port()
    p = run([QS, *sets(*SMALL, "train.steps=2", f"logging.prometheus_port={port}",
                       "logging.prometheus_address=127.0.0.1"), "--run-dir", str(tmp_path / "a")],
            check=0)
    out = p.stdout + p.stderr
    assert f"metrics for Prometheus: http://127.0.0.1:{port}/metrics (bound to 127.0.0.1 only; " \
           "logging.prometheus_address=0.0.0.0 serves every interface)" in out, out
    port = free_port()
    p = run([QS, *sets(*SMALL, "train.steps=2", f"logging.prometheus_port={port}"),
             "--run-dir", str(tmp_path / "b")], check=0)
    out = p.stdout + p.stderr
    assert re.search(rf"metrics for Prometheus: http://\S+:{port}/metrics \(bound to 0\.0\.0\.0: "
                     r"every interface; logging\.prometheus_address=127\.0\.0\.1 keeps it on "
                     r"this host\)", out), out
