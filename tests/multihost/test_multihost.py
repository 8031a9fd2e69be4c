"""trainrun across two hosts, on one machine: tests/multihost/harness.sh makes two network
namespaces joined by a veth pair (10.251.0.1 = trnode1, 10.251.0.2 = trnode2), each with its own
host name and sshd, and trainrun's mpirun (run in trnode1's namespace) starts the rank on trnode2
over ssh, as on a real cluster. The file system is shared (namespaces do not isolate mounts):
it stands in for a cluster file system.

Needs root with CAP_NET_ADMIN (CI has both). Without them these tests fail, saying why: they do
not skip, so a CI that lost the permission does not silently stop testing several hosts."""
import importlib.util
import json
import os
import pathlib
import re
import shlex
import subprocess
import time

import pytest

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
HARNESS = HERE / "harness.sh"

# The integration tests' helpers (TINY, losses, ...), under a name of their own so that both
# folders' tests can run in one pytest process.
_spec = importlib.util.spec_from_file_location("integration_conftest",
                                               REPO / "tests" / "integration" / "conftest.py")
ic = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ic)
TINY, TRAINRUN, losses, metrics, sets = ic.TINY, ic.TRAINRUN, ic.losses, ic.metrics, ic.sets

QS = str(REPO / "configs" / "quickstart.yaml")
# Open MPI uses only the test link: its TCP transport (btl) and its daemons' out-of-band channel
# (oob). In the namespaces the veth is the only interface besides lo anyway; on a real cluster
# these are what keeps Open MPI off the wrong network (docs/fault-tolerance.md, "Several hosts").
MPIRUN_ARGS = ("launcher.mpirun_args=[--mca,btl_tcp_if_include,10.251.0.0/24,"
               "--mca,oob_tcp_if_include,10.251.0.0/24]")
STEPS = 20
BASE = [*TINY, f"train.steps={STEPS}", "optimizer.warmup_steps=3", "checkpoint.every=4",
        "checkpoint.keep_last=10", "fault_tolerance.restart_backoff=0"]


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    """The two hosts, started once for this module and always stopped (even when a test fails
    or is interrupted: the finalizer runs, and `stop` kills by the namespaces' pids)."""
    if os.geteuid() != 0:
        pytest.fail("tests/multihost need root (network namespaces, sshd): run them as root with "
                    "CAP_NET_ADMIN, as CI does", pytrace=False)
    d = tmp_path_factory.mktemp("hosts")
    try:
        p = subprocess.run(["bash", str(HARNESS), "start", str(d)], capture_output=True,
                           text=True, timeout=60)
        if p.returncode != 0:
            pytest.fail(f"tests/multihost/harness.sh start failed (exit {p.returncode}); these "
                        f"tests need root with CAP_NET_ADMIN (`ip netns add`) and "
                        f"openssh-server:\n{p.stderr}", pytrace=False)
        names = dict(line.split("=", 1) for line in (d / "names").read_text().split())
        env_line = (d / "env").read_text().strip()
        agent = shlex.split(env_line.split("=", 1)[1])[0]
        names["env"] = {"OMPI_MCA_plm_rsh_agent": agent}
        names["dir"] = d
        names["hostfile"] = str(d / "hostfile")  # trnode1, trnode2 (the ssh config's names)
        names["hostfile-addresses"] = str(d / "hostfile-addresses")  # 10.251.0.1, 10.251.0.2
        yield names
    finally:
        subprocess.run(["bash", str(HARNESS), "stop", str(d)], timeout=60)


def on_host1(hosts, args, *, env=None, timeout=120, popen=None):
    """trainrun ARGS as a process of trnode1: its network namespace and host name."""
    assert ic.names_its_run_dir(args), f"name the test's own run directory: {args}"
    e = dict(os.environ)
    for k in ("OMP_NUM_THREADS", "GOMP_SPINCOUNT", "OMP_WAIT_POLICY"):
        e.pop(k, None)
    e.update(hosts["env"])
    if env:
        e.update(env)
    cmd = ["ip", "netns", "exec", hosts["NS1"], "unshare", "--uts", "sh", "-c",
           f"hostname {hosts['HOST1']}; exec \"$0\" \"$@\"", TRAINRUN, *args]
    if popen:  # a folder for its output (files: a pipe nobody reads would block the job)
        return subprocess.Popen(cmd, env=e, stdout=open(popen / "stdout", "w"),
                                stderr=open(popen / "stderr", "w"), start_new_session=True)
    return subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=timeout)


def two_hosts(hosts, *more, hostfile="hostfile"):
    return sets(*BASE, *more, "distributed.nodes=2", "distributed.nproc=1",
                f"distributed.hostfile={hosts[hostfile]}", MPIRUN_ARGS)


def checksums(rd):
    text = "".join(p.read_text() for p in sorted((rd / "logs").glob("rank-*.log")))
    return re.findall(r"rank (\d+) parameter checksum ([0-9a-f]{16}) at step (\d+)", text)


def out(p):
    return f"exit {p.returncode}\n--- stdout\n{p.stdout[-3000:]}\n--- stderr\n{p.stderr[-12000:]}"


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The same job as 2 ranks on this one host, outside the namespaces."""
    rd = tmp_path_factory.mktemp("ref") / "run"
    ic.run([QS, *sets(*BASE, "distributed.nproc=2"), "--run-dir", str(rd)], check=0, timeout=120)
    return rd


def test_dry_run_shows_the_hostfile_and_the_interfaces(hosts, tmp_path):
    p = on_host1(hosts, [QS, *two_hosts(hosts), "--dry-run", "--run-dir", str(tmp_path / "run")],
                 timeout=30)
    assert p.returncode == 0, out(p)
    assert f"--hostfile {hosts['hostfile']}" in p.stdout + p.stderr
    assert "--mca btl_tcp_if_include 10.251.0.0/24 --mca oob_tcp_if_include 10.251.0.0/24" in \
        p.stdout + p.stderr


def test_two_hosts_match_one_host_and_name_their_hosts(hosts, reference, tmp_path):
    rd = tmp_path / "run"
    t0 = time.time()
    p = on_host1(hosts, [QS, *two_hosts(hosts, hostfile="hostfile-addresses"), "--run-dir",
                         str(rd)], timeout=120)
    assert p.returncode == 0, out(p)
    elapsed = time.time() - t0
    got, want = losses(rd), losses(reference)
    assert sorted(got) == sorted(want) == list(range(1, STEPS + 1))
    for step, loss in want.items():
        assert got[step] == pytest.approx(loss, rel=1e-5), f"step {step}"
    assert f"rank 0/2 on {hosts['HOST1']}" in (rd / "logs" / "rank-0.log").read_text()
    assert f"rank 1/2 on {hosts['HOST2']}" in (rd / "logs" / "rank-1.log").read_text()
    assert elapsed < 60


def test_rank_killed_on_the_second_host_is_named_and_restarted(hosts, tmp_path):
    clean = tmp_path / "clean"
    p = on_host1(hosts, [QS, *two_hosts(hosts), "--run-dir", str(clean)], timeout=120)
    assert p.returncode == 0, out(p)
    rd = tmp_path / "run"
    t0 = time.time()
    p = on_host1(hosts, [QS, *two_hosts(hosts, "fault_tolerance.max_restarts=2"), "--run-dir",
                         str(rd)], env={"TRAINRUN_FAULTS": "kill:rank=1:step=11"}, timeout=180)
    elapsed = time.time() - t0
    assert p.returncode == 0, out(p)
    restarts = [r for r in metrics(rd, "event") if r.get("event") == "restart"]
    assert len(restarts) == 1, out(p)
    assert restarts[0]["step"] == 8  # the newest checkpoint of the 10 steps done
    # The failure names the rank and its host (killed: no record, so mpirun's name for it).
    assert f"error: rank 1 on {hosts['HOST2']} killed by signal 9" in p.stderr, out(p)
    assert "restart 1/2" in p.stderr
    want = {c[1] for c in checksums(clean) if c[2] == str(STEPS)}
    got = [c[1] for c in checksums(rd) if c[2] == str(STEPS)]
    assert len(want) == 1 and len(got) == 2 and set(got) == want, (checksums(clean),
                                                                  checksums(rd))
    assert losses(rd) == losses(clean)
    assert elapsed < 90, out(p)


@pytest.fixture(scope="module")
def slurm(hosts):
    """A two-node Slurm on the two hosts (slurmctld on trnode1, a slurmd on each); the hosts'
    `stop` ends it with everything else in the namespaces."""
    p = subprocess.run(["bash", str(HARNESS), "slurm", str(hosts["dir"])], capture_output=True,
                       text=True, timeout=60)
    if p.returncode != 0:
        pytest.fail(f"harness.sh slurm failed (exit {p.returncode}); it needs slurm-wlm and "
                    f"munge (scripts/setup.sh --test):\n{p.stderr}", pytrace=False)
    return {"SLURM_CONF": str(hosts["dir"] / "slurm" / "slurm.conf")}


def in_ns1(hosts, cmd, env, timeout=30):
    e = dict(os.environ)
    e.update(env)
    return subprocess.run(["ip", "netns", "exec", hosts["NS1"], *cmd], env=e,
                          capture_output=True, text=True, timeout=timeout)


def test_slurm_two_nodes_runs_to_completion(hosts, slurm, reference, tmp_path):
    rd = tmp_path / "run"
    t0 = time.time()
    p = on_host1(hosts, ["slurm", QS, "--nodes", "2", *sets(*BASE, f"run_dir={rd}"), "--submit"],
                 env=slurm, timeout=60)
    assert p.returncode == 0, out(p)
    job = re.search(r"\b(\d+)\b", p.stdout.strip().splitlines()[-1]).group(1)

    def gone():
        q = in_ns1(hosts, ["squeue", "-h", "-j", job, "-o", "%T"], slurm)
        return q.returncode == 0 and q.stdout.strip() == "" or "Invalid job id" in q.stderr

    if not ic.wait_for(gone, timeout=90):
        in_ns1(hosts, ["scancel", job], slurm)
        pytest.fail(f"Slurm job {job} did not end within 90 s")
    elapsed = time.time() - t0
    log = "".join(f.read_text() for f in rd.glob("slurm-*.out"))
    assert "trainrun: finished" in log, log[-4000:]
    assert "#SBATCH --nodes=2" in (rd / "job.sbatch").read_text()
    assert f"rank 0/2 on {hosts['HOST1']}" in (rd / "logs" / "rank-0.log").read_text()
    assert f"rank 1/2 on {hosts['HOST2']}" in (rd / "logs" / "rank-1.log").read_text()
    got, want = losses(rd), losses(reference)
    assert sorted(got) == sorted(want)
    for step, loss in want.items():
        assert got[step] == pytest.approx(loss, rel=1e-5), f"step {step}"
    assert elapsed < 90


def test_slurm_two_nodes_preempted_requeues_and_resumes_sharded(hosts, slurm, tmp_path):
    """A preemption (USR1, as Slurm sends before a time limit or for a higher-priority job) on two
    nodes: every rank checkpoints its own shard from its own host, the job requeues, resumes on
    both nodes and ends with the loss of the uninterrupted run."""
    steps = 60
    extra = [f"train.steps={steps}", "checkpoint.every=5", "checkpoint.sharded=true"]
    ref = tmp_path / "ref"
    ic.run([QS, *sets(*BASE, *extra, "distributed.nproc=2"), "--run-dir", str(ref)], check=0,
           timeout=120)
    rd = tmp_path / "run"
    # Slow first attempt (60 ms a step) so that the preemption lands mid-run.
    p = on_host1(hosts, ["slurm", QS, "--nodes", "2", *sets(*BASE, *extra, f"run_dir={rd}"),
                         "--submit"], env={**slurm, "TRAINRUN_FAULTS": "slow:ms=60"}, timeout=60)
    assert p.returncode == 0, out(p)
    job = re.search(r"\b(\d+)\b", p.stdout.strip().splitlines()[-1]).group(1)

    def log():
        return "".join(f.read_text() for f in rd.glob("slurm-*.out"))

    def gone():
        q = in_ns1(hosts, ["squeue", "-h", "-j", job, "-o", "%T"], slurm)
        return q.returncode == 0 and q.stdout.strip() == "" or "Invalid job id" in q.stderr

    try:
        assert ic.wait_for(lambda: list(rd.glob("checkpoints/step-*/MANIFEST")), timeout=60), \
            "no committed checkpoint within 60 s:\n" + log()[-4000:]
        in_ns1(hosts, ["scancel", "--full", "-s", "USR1", job], slurm)
        assert ic.wait_for(gone, timeout=120), f"job {job} did not end within 120 s"
    finally:
        if not gone():
            in_ns1(hosts, ["scancel", job], slurm)
    text = log()
    assert "trainrun: finished" in text, text[-4000:]
    stopped = re.search(r"checkpoint saved at step (\d+)", text)
    resumed = re.search(r"resumed from \S*step-(\d+) at step (\d+)", text)
    assert stopped and resumed, text[-4000:]
    assert int(resumed.group(2)) == int(stopped.group(1)) < steps
    # The final checkpoint: one file per rank, each written on its own host, and a manifest.
    folder = rd / "checkpoints" / f"step-{steps:07d}"
    assert sorted(f.name for f in folder.iterdir()) == [
        "MANIFEST", "rank-00000-of-00002.h5", "rank-00001-of-00002.h5"]
    got, want = losses(rd), losses(ref)
    assert sorted(got) == sorted(want) == list(range(1, steps + 1))
    assert got[steps] == want[steps], "the resumed run ended with another loss"


# Link down: measured on 2 cores (step_timeout 3 s, teardown_timeout 5 s), the watchdogs fire
# 3.1 s after the link goes down and the job ends 8.3-8.6 s after it (step_timeout + teardown
# timeout + ~0.5 s). Both ranks are then waiting in the step's allreduce and the shared file
# system still carries both heartbeats, so the watchdog says the network is stuck and lists
# both ranks with their hosts. The test allows the watchdog step_timeout + 5 s and the whole job
# step_timeout + teardown_timeout + 15 s from the link going down.
# After the job ends the launcher asks each host over ssh (5 s at most) which one is cut off.
STEP_TIMEOUT, TEARDOWN, PROBE = 3, 5, 5
WATCHDOG_BOUND, END_BOUND = STEP_TIMEOUT + 5, STEP_TIMEOUT + TEARDOWN + PROBE + 15


def test_link_down_is_caught_by_the_watchdog_and_the_job_ends(hosts, tmp_path):
    rd = tmp_path / "run"
    ns2, veth2 = hosts["NS2"], hosts["VETH2"]
    p = on_host1(hosts, [QS, *two_hosts(hosts, f"fault_tolerance.step_timeout={STEP_TIMEOUT}",
                                        f"fault_tolerance.teardown_timeout={TEARDOWN}"),
                         "--set", "train.steps=1000000",
                         # no checkpoint writes: the watchdog allows those 600 s
                         "--set", "checkpoint.every=1000000", "--run-dir", str(rd)], popen=tmp_path)
    try:
        # Down once both ranks train (a few logged steps).
        assert ic.wait_for(lambda: (rd / "metrics.jsonl").is_file() and
                           len(metrics(rd)) >= 20, timeout=60), "the job did not start training"
        subprocess.run(["ip", "netns", "exec", ns2, "ip", "link", "set", veth2, "down"],
                       check=True, timeout=10)
        t_down = time.time()
        try:
            p.wait(timeout=END_BOUND + 30)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the job did not end within {END_BOUND + 30} s of the link going down")
        t_end = time.time()
    finally:
        if p.poll() is None:
            os.killpg(p.pid, 9)
            p.wait()
        subprocess.run(["ip", "netns", "exec", ns2, "ip", "link", "set", veth2, "up"],
                       timeout=10)
    ended = t_end - t_down
    stderr = (tmp_path / "stderr").read_text()
    assert p.returncode == 8, f"exit {p.returncode}\n{stderr[-4000:]}"
    assert ended < END_BOUND, f"ended {ended:.1f} s after the link went down\n{stderr[-4000:]}"
    m = re.search(r"watchdog: rank \d made no progress for ([\d.]+) s \(limit 3\.0 s\)", stderr)
    assert m, stderr[-4000:]
    # When the watchdog fired: its failure records' time.
    recs = [json.loads(f.read_text()) for f in (rd / "logs").glob("failure-rank-*.json")]
    fired = min(r["time"] for r in recs if r["cause"] == "watchdog") - t_down
    assert 0 < fired < WATCHDOG_BOUND, f"watchdog fired {fired:.1f} s after the link went down"
    # Both ranks wait in the same allreduce, but the one on the far side of the link may still
    # be a step behind (its part of the result was lost with the link): the watchdog then
    # names it, else says the network is stuck. Either way its dump lists every rank's host.
    assert re.search(r"ranks that did not arrive: (none \(every rank is in this step's "
                     r"collective: the network between the hosts|[01] on trnode[12] \(step)",
                     stderr), stderr[-4000:]
    # The last known phase of each rank names both hosts, the unreachable one included.
    dump = (rd / "logs" / "watchdog-rank-0.txt").read_text()
    assert f"rank 1 on {hosts['HOST2']}: step" in dump and f"rank 0 on {hosts['HOST1']}" in dump
    # The launcher names a rank and its host from the earliest record (the rank that wrote it,
    # or the one its watchdog named), then ends the job. Which one varies from run to run
    # (docs/fault-tolerance.md, "Several hosts": the watchdog cannot tell which side of a lost
    # link is cut off).
    assert re.search(r"rank [01] on trnode[12] (ended with code 8 \(watchdog\)|was named by "
                     r"rank [01] on trnode[12]'s watchdog \(code 8\))", stderr), stderr[-4000:]
    # The launcher, which can still reach trnode2's neighbour but not trnode2, names the host
    # that is cut off and its rank.
    assert (f"host {hosts['HOST2']} did not answer over the remote shell within 5 s: it is cut "
            f"off or down, with rank 1") in stderr, stderr[-4000:]
    assert f"host {hosts['HOST1']} did not answer" not in stderr
    print(f"link down: watchdog after {fired:.2f} s, job ended after {ended:.2f} s")


def rows_so_far(rd, kind, event=None):
    """The run's metrics rows of KIND (events called EVENT), read while it writes (a line being
    written is skipped)."""
    path = rd / "metrics.jsonl"
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if row.get("kind") == kind and (event is None or row.get("event") == event):
            rows.append(row)
    return rows


def events_so_far(rd, name):
    return rows_so_far(rd, "event", name)


def rate_limit(hosts, on):
    """Both ends of the link at 2 Mbit/s (tbf, which these machines' kernel has), or back."""
    for ns, veth in ((hosts["NS1"], hosts["VETH1"]), (hosts["NS2"], hosts["VETH2"])):
        cmd = (["tc", "qdisc", "replace", "dev", veth, "root", "tbf", "rate", "2mbit", "burst",
                "32kbit", "latency", "400ms"] if on else ["tc", "qdisc", "del", "dev", veth, "root"])
        subprocess.run(["ip", "netns", "exec", ns, *cmd], check=on, timeout=10,
                       capture_output=True)


# Every rank sleeps 20 ms a step (no rank slower than another): the job paces itself, so the
# link can be slowed while it trains. Checks every 5 steps.
PACED = {"TRAINRUN_FAULTS": "slow:ms=20:attempts=all"}


def test_a_slow_link_is_named_as_the_network_not_a_straggler(hosts, tmp_path):
    # The link rate-limited to 2 Mbit/s mid-run: every rank waits ~0.2 s more in the allreduce.
    # The report says the collectives slowed between the hosts, and names no rank (issue 31
    # part 4).
    rd = tmp_path / "run"
    p = on_host1(hosts, [QS, *two_hosts(hosts, "logging.every=5"), "--set", "train.steps=400",
                         "--set", "checkpoint.every=1000", "--run-dir", str(rd)],
                 env=PACED, popen=tmp_path)
    try:
        assert ic.wait_for(lambda: len(rows_so_far(rd, "train")) >= 4, timeout=60), \
            "the job did not start training"
        rate_limit(hosts, True)
        try:
            # A rate-limited check (over 50 ms of waiting), not a busy machine's 10-20 ms
            # warning that can come first (a CI rehearsal once took the limit off after one).
            assert ic.wait_for(lambda: [e for e in events_so_far(rd, "slow_collectives")
                                        if e["least_wait"] > 0.05], timeout=90), \
                (tmp_path / "stderr").read_text()[-4000:]
        finally:
            rate_limit(hosts, False)
        assert p.wait(timeout=120) == 0, (tmp_path / "stderr").read_text()[-4000:]
    finally:
        if p.poll() is None:
            os.killpg(p.pid, 9)
            p.wait()
    stderr = (tmp_path / "stderr").read_text()
    # The checks while the link was slow: ~0.2 s of waiting a step on both ranks, against a few
    # ms before. (A busy machine can add a few slow-collectives warnings of 10-20 ms later on:
    # both ranks then really wait that long; the rate-limited checks are the ones over 50 ms.)
    slow = [e for e in events_so_far(rd, "slow_collectives") if e["least_wait"] > 0.05]
    assert slow, events_so_far(rd, "slow_collectives")
    assert all(e["baseline"] < 0.05 for e in slow), slow
    assert slow[0]["hosts"] == f"{hosts['HOST1']},{hosts['HOST2']}"
    assert re.search(r"slow collectives: every rank waits at least [\d.]+ ms per step in "
                     r"collectives, against [\d.]+ ms at the earlier checks: the network between "
                     rf"hosts {hosts['HOST1']}, {hosts['HOST2']} has slowed, not a rank", stderr)
    # No rank is named for the link: no straggler at those checks.
    blamed = {e["step"] for e in events_so_far(rd, "straggler")} & {e["step"] for e in slow}
    assert not blamed, events_so_far(rd, "straggler")
    report = subprocess.run([TRAINRUN, "report", str(rd)], capture_output=True, text=True,
                            timeout=60)
    assert re.search(r"slow_collectives\s+\d+ time\(s\)", report.stdout), report.stdout


def test_a_slow_rank_across_the_link_is_still_a_straggler(hosts, tmp_path):
    # The same two hosts, the link fast, rank 1 (on trnode2) 60 ms a step slower than rank 0:
    # named as the straggler, and the network is not blamed.
    rd = tmp_path / "run"
    p = on_host1(hosts, [QS, *two_hosts(hosts, "logging.every=5"), "--set", "train.steps=40",
                         "--run-dir", str(rd)],
                 env={"TRAINRUN_FAULTS": "slow:rank=1:ms=60:attempts=all"})
    assert p.returncode == 0, out(p)
    named = events_so_far(rd, "straggler")
    assert named and all(r["rank"] == 1 and r["host"] == hosts["HOST2"] for r in named), named
    # Rank 0 waits ~60 ms a step for rank 1, rank 1 does not wait: the network is not blamed.
    # (Over 40 ms: what counting rank 0's wait would report; a busy machine's 10-20 ms is not.)
    blamed = [e for e in events_so_far(rd, "slow_collectives") if e["least_wait"] > 0.04]
    assert not blamed, blamed


def test_slurm_job_array_of_a_sweep_trains_every_point_and_a_preempted_task_resumes(
        hosts, slurm, tmp_path):
    """`trainrun sweep --slurm --submit` on the two-node Slurm: one array task per point, both at
    once; one task preempted (USR1, as before a time limit) checkpoints, requeues and resumes,
    and every point ends done with the losses of a run never interrupted."""
    steps = 40
    extra = [f"train.steps={steps}", "checkpoint.every=5"]
    sw = tmp_path / "sw"
    p = on_host1(hosts, ["sweep", QS, *sets(*BASE, *extra), "--grid", "seed=1,2", "--slurm",
                         "--submit", "--parallel", "2", "--sweep-dir", str(sw)],
                 env={**slurm, "TRAINRUN_FAULTS": "slow:ms=60"}, timeout=60)
    assert p.returncode == 0, out(p)
    job = p.stdout.strip().splitlines()[-1]
    assert job.isdigit(), out(p)

    def log():
        return "".join(f.read_text() for f in (sw / "logs").glob("slurm-*.out"))

    def gone():
        q = in_ns1(hosts, ["squeue", "-h", "-j", job, "-o", "%T"], slurm)
        return q.returncode == 0 and q.stdout.strip() == "" or "Invalid job id" in q.stderr

    try:
        assert ic.wait_for(lambda: list(sw.glob("seed-1/checkpoints/step-*/MANIFEST")),
                           timeout=90), "task 0 wrote no checkpoint within 90 s:\n" + log()[-4000:]
        in_ns1(hosts, ["scancel", "--full", "-s", "USR1", f"{job}_0"], slurm)
        assert ic.wait_for(gone, timeout=180), f"array {job} did not end within 180 s"
    finally:
        if not gone():
            in_ns1(hosts, ["scancel", job], slurm)
    text = log()
    assert text.count("trainrun: finished") == 2, text[-4000:]
    assert "requeueing job" in text, text[-4000:]
    listed = {r["name"]: r for r in json.loads(ic.run(["runs", str(tmp_path), "--json"],
                                                      check=0).stdout)}
    assert {n: r["status"] for n, r in listed.items()} == {"seed-1": "done", "seed-2": "done"}
    first = json.loads((sw / "seed-1" / "provenance.json").read_text())["attempts"]
    assert [a["exit_code"] for a in first] == [75, 0]
    assert "resumed from" in (sw / "seed-1" / "logs" / "rank-0.log").read_text()
    for seed in (1, 2):
        ref = tmp_path / f"ref{seed}"
        ic.run([QS, *sets(*BASE, *extra, f"seed={seed}"), "--run-dir", str(ref)], check=0,
               timeout=120)
        assert losses(sw / f"seed-{seed}") == losses(ref), seed
    assert "0 of 2 points to run" in ic.run(["sweep", "--resume", str(sw)], check=0).stdout
