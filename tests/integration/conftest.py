"""Shared helpers for the integration tests: they run the real trainrun binary."""
import collections
import json
import math
import os
import pathlib
import re
import subprocess
import time

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
TRAINRUN = os.environ.get("TRAINRUN_BIN", str(REPO / "build" / "trainrun"))
# Real text for the tests, first found wins: what scripts/get-data.sh fetched, the developers'
# ../shared copy, else the project's own English prose (see english_text below).
SHAKESPEARE_PLACES = [REPO / "data" / "tinyshakespeare.txt",
                      REPO.parent / "shared" / "data" / "tinyshakespeare.txt"]

# A tiny GPT on the built-in Markov source: a few hundred ms per run on 2 cores.
TINY = [
    "model.n_layer=1", "model.d_model=32", "model.n_head=2", "model.seq_len=16",
    "model.vocab_size=32", "train.batch_size=8", "train.eval_every=0", "logging.every=1",
    "optimizer.warmup_steps=2", "data.synthetic_tokens=65536",
]


def sets(*pairs):
    out = []
    for p in pairs:
        out += ["--set", p]
    return out


# Commands that never use a run directory.
NO_RUN_DIR = {"validate", "plan", "inspect", "sample", "export", "report", "data", "k8s", "--help", "runs",
              "-h", "--version", "compare"}


def names_its_run_dir(args, cwd=None):
    """Whether trainrun ARGS (run from cwd) uses a run directory of the test's own. A run, or its
    --dry-run, that names none uses the config's default, runs/NAME in the clone, which the
    README's quick start fills: such a test passes in a fresh clone and fails after
    `scripts/quickstart.sh` (exit 73, or a dry run that said so). So every test names one:
    --run-dir, --set run_dir=..., --resume DIR|FILE, a sweep's --sweep-dir, or a scratch cwd for
    relative paths."""
    args = [str(a) for a in args]
    if cwd is not None or not args or args[0] in NO_RUN_DIR or "--run-dir" in args:
        return True
    if args[0] == "sweep" and "--sweep-dir" in args:  # its points' run directories are in it
        return True
    if "--help" in args or "-h" in args:
        return True
    if any(a.startswith("run_dir=") for a in args):
        return True
    at = args.index("--resume") if "--resume" in args else -1
    return 0 <= at < len(args) - 1 and not args[at + 1].startswith("-")


def run(args, *, cwd=None, env=None, timeout=300, check=None, wrap=()):
    """trainrun ARGS (run under `wrap`, a command prefix such as prlimit, when given)."""
    assert names_its_run_dir(args, cwd), (
        f"trainrun {' '.join(map(str, args))}: name the test's own run directory (--run-dir "
        f"tmp_path / ..., or cwd=tmp_path); the default runs/NAME is the clone's, which the "
        f"quick start fills")
    e = dict(os.environ)
    # trainrun's own default (cores / ranks per node) is what users get; a stray
    # OMP_NUM_THREADS would oversubscribe multi-rank runs.
    e.pop("OMP_NUM_THREADS", None)
    # Likewise the OpenMP wait policy: trainrun chooses it (train.omp_spincount) unless told.
    e.pop("GOMP_SPINCOUNT", None)
    e.pop("OMP_WAIT_POLICY", None)
    if env:
        e.update(env)
    p = subprocess.run([*wrap, TRAINRUN, *args], cwd=cwd, env=e, capture_output=True, text=True,
                       timeout=timeout)
    if check is not None and p.returncode != check:
        raise AssertionError(f"trainrun {' '.join(args)} exited {p.returncode}, want {check}\n"
                             f"--- stdout\n{p.stdout}\n--- stderr\n{p.stderr}")
    return p


def stop_server(server):
    """Ends a server a test started (SIGTERM, then SIGKILL after 30 s) and reaps it."""
    server.terminate()
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


def ckpt(run_dir, step):
    """The checkpoint training writes at `step`: the folder RUN_DIR/checkpoints/step-NNNNNNN
    (MANIFEST and one rank file per rank; tests/integration/checkpoint_layout.py reads them)."""
    return pathlib.Path(run_dir) / "checkpoints" / f"step-{step:07d}"


def ckpt_data(run_dir, step, rank=0, world=1):
    """That checkpoint's file of rank `rank` of `world`."""
    return ckpt(run_dir, step) / f"rank-{rank:05d}-of-{world:05d}.h5"


def metrics(run_dir, kind="train"):
    rows = []
    path = pathlib.Path(run_dir) / "metrics.jsonl"
    for line in path.read_text().splitlines():
        row = json.loads(line)
        if row.get("kind") == kind:
            rows.append(row)
    return rows


def checksums(run_dir):
    """Each rank's last logged parameter checksum: {rank: hex}."""
    out = {}
    for log in sorted((pathlib.Path(run_dir) / "logs").glob("rank-*.log")):
        m = re.findall(r"rank (\d+) parameter checksum ([0-9a-f]{16})", log.read_text())
        assert m, f"no checksum in {log}"
        out[int(m[-1][0])] = m[-1][1]
    return out


def losses(run_dir):
    return {r["step"]: r["loss"] for r in metrics(run_dir)}


@pytest.fixture
def quickstart():
    return str(REPO / "configs" / "quickstart.yaml")


def english_text(out_dir):
    """tiny Shakespeare where a copy is at hand; else English prose every supported machine has:
    the project's README, man page and docs, then the licence texts every Debian ships in
    /usr/share/common-licenses (each file once), about 390 KB. A user's clone has no ../shared,
    and the tests must not need a download; generated text (the Markov source) would not test
    learning real language. Tests that judge learning compare against the text's own unigram
    entropy (unigram_entropy below), so they hold on either text."""
    for p in SHAKESPEARE_PLACES:
        if p.is_file():
            return str(p)
    parts = [REPO / "README.md", REPO / "man" / "trainrun.1", *sorted((REPO / "docs").glob("*.md"))]
    licences = pathlib.Path("/usr/share/common-licenses")
    seen = set()
    for p in sorted(licences.iterdir()) if licences.is_dir() else []:
        real = p.resolve()
        if real.is_file() and real not in seen:
            seen.add(real)
            parts.append(real)
    out = pathlib.Path(out_dir) / "english.txt"
    out.write_bytes(b"\n".join(p.read_bytes() for p in parts))
    return str(out)


def is_tiny_shakespeare(path):
    return pathlib.Path(path).name == "tinyshakespeare.txt"


def unigram_entropy(data):
    """Nats per byte of a model that knows only the byte frequencies of `data`: the loss a
    character model reaches without learning any context."""
    counts = collections.Counter(data)
    n = len(data)
    return -sum(c / n * math.log(c / n) for c in counts.values())


@pytest.fixture(scope="session")
def shakespeare(tmp_path_factory):
    return english_text(tmp_path_factory.mktemp("text"))


def wait_for(pred, timeout=60):
    """Polls pred() until it is true (True) or timeout seconds pass (False)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return True
        time.sleep(0.02)
    return False
