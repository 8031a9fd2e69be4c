"""`trainrun slurm`: the generated batch script, its logic under stand-in srun/scontrol, and a
preempted, requeued, resumed 2-rank run on a real single-node Slurm (tests/slurm/slurm-harness.sh).

The binary comes from TRAINRUN_BIN (default: <repo>/build/trainrun). The real-Slurm test needs
root, slurm-wlm and munge (scripts/setup.sh --test installs them).
"""

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = os.environ.get("TRAINRUN_BIN", str(REPO / "build" / "trainrun"))
HARNESS = REPO / "tests" / "slurm" / "slurm-harness.sh"
QUICKSTART = REPO / "configs" / "quickstart.yaml"


def trainrun(*args, env=None, timeout=60, check=True):
    r = subprocess.run([BIN, *map(str, args)], capture_output=True, text=True, env=env,
                       timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError(f"trainrun {' '.join(map(str, args))} exited {r.returncode}:\n"
                             f"{r.stdout}\n{r.stderr}")
    return r


def sbatch_lines(script):
    return [l[len("#SBATCH "):] for l in script.splitlines() if l.startswith("#SBATCH ")]


def step_words(script):
    """The words of the script's `step=(...)` array, as bash expands them."""
    (line,) = [l for l in script.splitlines() if l.startswith("step=(")]
    out = subprocess.run(["bash", "-c", line + '\nprintf "%s\\n" "${step[@]}"'],
                         capture_output=True, text=True, check=True).stdout
    return out.splitlines()


def bash_n(script, tmp_path):
    f = tmp_path / "job.sbatch"
    f.write_text(script)
    r = subprocess.run(["bash", "-n", str(f)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


# --- the script's text ----------------------------------------------------------------------

CASES = [
    # (flags, expected #SBATCH lines after --job-name, expected launcher words)
    ([], ["--nodes=1", "--ntasks-per-node=1"], ["srun", "--mpi=pmix", "--kill-on-bad-exit=1"]),
    (["--nodes", "2", "--ntasks-per-node", "4", "--gpus-per-node", "4", "--cpus-per-task", "6",
      "--time", "12:00:00", "--partition", "gpu", "--account", "ml-team", "--signal-seconds",
      "900"],
     ["--nodes=2", "--ntasks-per-node=4", "--gpus-per-node=4", "--cpus-per-task=6",
      "--time=12:00:00", "--partition=gpu", "--account=ml-team"],
     ["srun", "--mpi=pmix", "--kill-on-bad-exit=1"]),
    (["--ntasks-per-node", "2", "--launcher", "mpirun", "--time", "90"],
     ["--nodes=1", "--ntasks-per-node=2", "--time=90"],
     ["mpirun", "-np", "2", "--bind-to", "none"]),
]


@pytest.mark.parametrize("flags,shape,launcher", CASES)
def test_script_lines(flags, shape, launcher, tmp_path):
    run_dir = tmp_path / "run dir"
    script = trainrun("slurm", QUICKSTART, "--set", f"run_dir={run_dir}",
                      "--set", "slurm.extra=[--constraint=cpu, --mail-type=END]", *flags).stdout
    signal_s = flags[flags.index("--signal-seconds") + 1] if "--signal-seconds" in flags else "300"
    expected = (["--job-name=quickstart"] + shape +
                ["--requeue", f"--signal=B:USR1@{signal_s}",
                 f'--output="{run_dir}/slurm-%j.out"', "--open-mode=append",
                 f"--chdir={os.getcwd()}", "--constraint=cpu", "--mail-type=END"])
    assert sbatch_lines(script) == expected
    words = step_words(script)
    assert words[:len(launcher)] == launcher
    rest = words[len(launcher):]
    assert rest[:6] == [str(Path(BIN).resolve()), "run", str(QUICKSTART), "--resume",
                        "--run-dir", str(run_dir)]
    assert ["--set", f"run_dir={run_dir}"] == rest[6:8]
    nodes = [s for s in shape if s.startswith("--nodes=")][0].split("=")[1]
    if nodes != "1":
        assert f"distributed.nodes={nodes}" in rest
    assert "scontrol requeue \"$SLURM_JOB_ID\"" in script
    assert "trap 'forward USR1' USR1" in script and "trap 'forward TERM' TERM" in script
    bash_n(script, tmp_path)


@pytest.mark.parametrize("flags,message", [
    (["--ntasks-per-node", "3"], "not divisible"),
    (["--time", "4:00"], "lengthen --time"),
    (["--time", "tomorrow"], "not a Slurm time limit"),
    (["--gpus-per-node", "1", "--ntasks-per-node", "2"], "each rank drives its own GPU"),
    (["--signal-seconds", "0"], "--signal-seconds 0"),
])
def test_script_refuses(flags, message):
    r = trainrun("slurm", QUICKSTART, *flags, check=False)
    assert r.returncode == 2, r.stderr
    assert message in r.stderr


# --- the script's logic, with stand-in srun and scontrol ------------------------------------

FAKE_SRUN = """#!/bin/bash
# Stand-in srun: reports what it got, then behaves as FAKE_MODE says.
echo "srun OMP_NUM_THREADS=${OMP_NUM_THREADS:-unset} args: $*" >> "$FAKE_LOG"
case $FAKE_MODE in
  finish) exit 0 ;;
  fail) exit 3 ;;
  crash) exit 137 ;;
  checkpoint) exit 75 ;;
  wait-signal)
    trap 'echo "srun got USR1" >> "$FAKE_LOG"; exit 75' USR1
    echo ready > "$FAKE_READY"
    for i in $(seq 1 200); do sleep 0.05; done
    exit 9 ;;
esac
"""
FAKE_SCONTROL = """#!/bin/bash
echo "scontrol $*" >> "$FAKE_LOG"
"""


def run_script_with_fakes(tmp_path, mode, extra_env=None, signal_after_ready=None, sets=()):
    bindir = tmp_path / "fakebin"
    bindir.mkdir(exist_ok=True)
    for name, text in [("srun", FAKE_SRUN), ("scontrol", FAKE_SCONTROL)]:
        (bindir / name).write_text(text)
        (bindir / name).chmod(0o755)
    script = trainrun("slurm", QUICKSTART, "--set", f"run_dir={tmp_path}/run",
                      "--ntasks-per-node", "2", *[w for kv in sets for w in ("--set", kv)]).stdout
    (tmp_path / "job.sbatch").write_text(script)
    log, ready = tmp_path / "fake.log", tmp_path / "ready"
    for f in (log, ready):
        f.unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("SLURM_") and k != "OMP_NUM_THREADS"}
    env.update(PATH=f"{bindir}:{env['PATH']}", FAKE_LOG=str(log), FAKE_READY=str(ready),
               FAKE_MODE=mode, SLURM_JOB_ID="77", **(extra_env or {}))
    p = subprocess.Popen(["bash", str(tmp_path / "job.sbatch")], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if signal_after_ready:
        deadline = time.time() + 10
        while not ready.exists():
            assert time.time() < deadline, "stand-in srun never started"
            time.sleep(0.02)
        p.send_signal(signal_after_ready)
    out, _ = p.communicate(timeout=30)
    return p.returncode, out, log.read_text().splitlines() if log.exists() else []


def test_script_requeues_on_75(tmp_path):
    rc, out, log = run_script_with_fakes(tmp_path, "checkpoint")
    assert rc == 0, out
    assert log[-1] == "scontrol requeue 77"
    assert "restart 0" in out


def test_script_finishes_and_fails(tmp_path):
    rc, out, log = run_script_with_fakes(tmp_path, "finish", {"SLURM_RESTART_COUNT": "2"})
    assert rc == 0 and "trainrun: finished" in out and "restart 2" in out
    assert not any(l.startswith("scontrol") for l in log)
    rc, out, log = run_script_with_fakes(tmp_path, "fail")
    assert rc == 3, out
    assert not any(l.startswith("scontrol") for l in log)


def test_script_restarts_a_crash_up_to_max_restarts(tmp_path):
    """fault_tolerance.max_restarts under Slurm: a crash (137) is requeued while Slurm's restart
    count is below it; bad input (3) never is; without max_restarts nothing is."""
    sets = ["fault_tolerance.max_restarts=2"]
    rc, out, log = run_script_with_fakes(tmp_path, "crash", {"SLURM_RESTART_COUNT": "1"}, sets=sets)
    assert rc == 0, out
    assert log[-1] == "scontrol requeue 77"
    assert "restart 2 of 2, fault_tolerance.max_restarts" in out
    rc, out, log = run_script_with_fakes(tmp_path, "crash", {"SLURM_RESTART_COUNT": "2"}, sets=sets)
    assert rc == 137, out
    assert not any(l.startswith("scontrol") for l in log)
    rc, out, log = run_script_with_fakes(tmp_path, "fail", sets=sets)
    assert rc == 3, out
    assert not any(l.startswith("scontrol") for l in log)
    rc, out, log = run_script_with_fakes(tmp_path, "crash")
    assert rc == 137, out
    assert not any(l.startswith("scontrol") for l in log)


def test_script_says_where_the_metrics_endpoint_is(tmp_path):
    _, out, _ = run_script_with_fakes(tmp_path, "finish")
    assert "/metrics" not in out
    _, out, _ = run_script_with_fakes(tmp_path, "finish", sets=["logging.prometheus_port=9500"])
    host = subprocess.run(["hostname"], capture_output=True, text=True).stdout.strip()
    assert f"trainrun: metrics for Prometheus at http://{host}:9500/metrics" in out, out


def test_script_threads(tmp_path):
    _, _, log = run_script_with_fakes(tmp_path, "finish", {"SLURM_CPUS_ON_NODE": "8"})
    assert log[0].startswith("srun OMP_NUM_THREADS=4 args: --mpi=pmix ")
    _, _, log = run_script_with_fakes(tmp_path, "finish",
                                      {"SLURM_CPUS_ON_NODE": "8", "SLURM_CPUS_PER_TASK": "3"})
    assert log[0].startswith("srun OMP_NUM_THREADS=3 ")


@pytest.mark.parametrize("sig", [signal.SIGUSR1, signal.SIGTERM])
def test_script_forwards_signals(tmp_path, sig):
    """Slurm's B:USR1 (and TERM) reach only the batch shell: it must pass them to the step,
    wait for the step's own exit code (75) and requeue."""
    rc, out, log = run_script_with_fakes(tmp_path, "wait-signal", signal_after_ready=sig)
    assert f"batch shell got SIG{sig.name[3:]}" in out
    assert "srun got USR1" in log, out
    assert log[-1] == "scontrol requeue 77"
    assert rc == 0, out


# --- a real Slurm ---------------------------------------------------------------------------

def wait_for(what, predicate, timeout, interval=0.5):
    deadline = time.time() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.time() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


@pytest.fixture
def slurm(tmp_path_factory):
    assert os.geteuid() == 0, "the Slurm test runs slurmd as root"
    for prog in ("slurmctld", "slurmd", "munged", "sbatch"):
        assert shutil.which(prog) or Path(f"/usr/sbin/{prog}").exists(), \
            f"{prog} missing: scripts/setup.sh --test installs slurm-wlm and munge"
    # A short path: munge's socket path must fit in a sockaddr_un.
    state = Path(tempfile.mkdtemp(prefix="trs-")) / "slurm"
    try:
        r = subprocess.run(["bash", str(HARNESS), "start", str(state)], capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 0, f"slurm-harness start failed:\n{r.stdout}\n{r.stderr}"
        env = dict(os.environ, SLURM_CONF=str(state / "slurm.conf"))
        yield env
    finally:
        r = subprocess.run(["bash", str(HARNESS), "stop", str(state)], capture_output=True,
                           text=True, timeout=90)
        print(r.stderr)
        shutil.rmtree(state.parent, ignore_errors=True)


def scontrol_job(env, job):
    r = subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True, env=env)
    return dict(re.findall(r"(\w+)=(\S*)", r.stdout)) if r.returncode == 0 else {}


def train_rows(run_dir):
    rows = [json.loads(l) for l in (run_dir / "metrics.jsonl").read_text().splitlines() if l]
    return [r for r in rows if r.get("kind") == "train"]


# 2 ranks of the quick-start model: about 10 s per run on 2 idle cores.
E2E_SETS = ["device=cpu", "train.steps=100", "checkpoint.every=10", "checkpoint.keep_last=3",
            "logging.every=5", "train.eval_every=50", "distributed.nproc=2"]


def test_preempted_job_requeues_resumes_and_matches(slurm, tmp_path):
    env = dict(slurm, OMP_NUM_THREADS="1")
    sets = [a for s in E2E_SETS for a in ("--set", s)]
    run_dir = tmp_path / "slurm-run"
    job = trainrun("slurm", QUICKSTART, *sets, "--set", f"run_dir={run_dir}", "--submit",
                   env=env).stdout.strip()
    assert job.isdigit(), job
    assert (run_dir / "job.sbatch").exists() and (run_dir / "config.submitted.yaml").exists()
    out = run_dir / f"slurm-{job}.out"

    def log():
        return out.read_text() if out.exists() else ""

    try:
        # Preempt once it runs and has a checkpoint to come back to.
        def first_checkpoint():
            ckpts = sorted((run_dir / "checkpoints").glob("step-*/MANIFEST"))
            if not ckpts:
                state = scontrol_job(env, job).get("JobState")
                assert state in ("PENDING", "RUNNING", "CONFIGURING"), \
                    f"job {state} before its first checkpoint:\n{log()}"
            return ckpts

        wait_for("a first checkpoint", first_checkpoint, 60, 0.2)
        subprocess.run(["scancel", "--full", "-s", "USR1", job], env=env, check=True)
        wait_for("the requeue", lambda: "requeueing job" in log(), 60)
        info = wait_for("the job to finish",
                        lambda: (lambda j: j if j.get("JobState") in
                                 ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT") else None)(
                            scontrol_job(env, job)), 90, 1)
    finally:
        print(log())
    assert info["JobState"] == "COMPLETED", log()
    assert info["ExitCode"] == "0:0"
    assert info["Restarts"] == "1"
    text = log()
    assert f"trainrun: job {job} restart 0" in text and f"trainrun: job {job} restart 1" in text
    stopped = re.search(r"checkpoint saved at step (\d+)", text)
    resumed = re.search(r"resumed from .*step-(\d+) at step (\d+)", text)
    assert stopped and resumed, text
    assert int(resumed.group(2)) == int(stopped.group(1)), "resumed from a stale checkpoint"
    assert 0 < int(stopped.group(1)) < 100
    assert "trainrun: finished" in text

    # The same run, uninterrupted, straight through mpirun.
    direct = tmp_path / "direct-run"
    ompi = dict(env, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    ompi.pop("SLURM_CONF")
    trainrun(QUICKSTART, *sets, "--run-dir", direct,
             env=ompi, timeout=120)

    rows = train_rows(run_dir)
    steps = [r["step"] for r in rows]
    assert len(steps) == len(set(steps)), f"duplicate steps in metrics.jsonl: {steps}"
    last = max(rows, key=lambda r: r["step"])
    last_direct = max(train_rows(direct), key=lambda r: r["step"])
    assert last["step"] == last_direct["step"] == 100
    assert last["loss"] == last_direct["loss"], \
        f"resumed run ended at loss {last['loss']}, uninterrupted at {last_direct['loss']}"
