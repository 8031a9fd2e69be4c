"""Shared helpers for the integration tests: they run the real trainrun binary."""
import json
import os
import pathlib
import subprocess

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


def run(args, *, cwd=None, env=None, timeout=300, check=None):
    e = dict(os.environ)
    # trainrun's own default (cores / ranks per node) is what users get; a stray
    # OMP_NUM_THREADS would oversubscribe multi-rank runs.
    e.pop("OMP_NUM_THREADS", None)
    if env:
        e.update(env)
    p = subprocess.run([TRAINRUN, *args], cwd=cwd, env=e, capture_output=True, text=True,
                       timeout=timeout)
    if check is not None and p.returncode != check:
        raise AssertionError(f"trainrun {' '.join(args)} exited {p.returncode}, want {check}\n"
                             f"--- stdout\n{p.stdout}\n--- stderr\n{p.stderr}")
    return p


def metrics(run_dir, kind="train"):
    rows = []
    path = pathlib.Path(run_dir) / "metrics.jsonl"
    for line in path.read_text().splitlines():
        row = json.loads(line)
        if row.get("kind") == kind:
            rows.append(row)
    return rows


def losses(run_dir):
    return {r["step"]: r["loss"] for r in metrics(run_dir)}


@pytest.fixture
def quickstart():
    return str(REPO / "configs" / "quickstart.yaml")


def english_text(out_dir):
    """tiny Shakespeare where a copy is at hand; else the project's docs, README and man page
    joined (about 100 KB of English prose that every clone has). A user's clone has no
    ../shared, and the tests must not need a download; generated text (the Markov source) would
    not test learning real language, and prose of this size still takes a character model well
    below the thresholds the tests use."""
    for p in SHAKESPEARE_PLACES:
        if p.is_file():
            return str(p)
    parts = [REPO / "README.md", REPO / "man" / "trainrun.1", *sorted((REPO / "docs").glob("*.md"))]
    out = pathlib.Path(out_dir) / "english.txt"
    out.write_text("\n".join(p.read_text() for p in parts))
    return str(out)


@pytest.fixture(scope="session")
def shakespeare(tmp_path_factory):
    return english_text(tmp_path_factory.mktemp("text"))
