"""Checkpoints and exact resume: bitwise on the same world size, within 1e-5 across world sizes,
damaged checkpoints detected with a fallback, SIGTERM saves and exits 75, a writer killed
mid-write never costs the previous checkpoint, and model changes are refused on resume. Training
writes each checkpoint as a folder (checkpoint_layout.py): a flipped bit in its MANIFEST or its
data, or a non-finite weight, makes it unusable for resume and inspect alike. Single files of
formats 1-3 (as `trainrun export` still writes them) still resume."""
import os
import shutil
import signal
import subprocess
import time

import h5py
import numpy as np
import pytest
import yaml

from checkpoint_layout import flip_data, manifest, poison, write_manifest
from conftest import REPO, TINY, TRAINRUN, ckpt, ckpt_data, losses, metrics, run, sets, wait_for

STEPS = 20
BASE = [*TINY, f"train.steps={STEPS}", "checkpoint.every=5", "checkpoint.keep_last=10",
        "optimizer.warmup_steps=3"]


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    rd = tmp_path_factory.mktemp("full") / "run"
    run([str(REPO / "configs/quickstart.yaml"), *sets(*BASE), "--run-dir", str(rd)], check=0)
    return losses(rd)


def start_interrupted(rd, extra=(), fault="exit:step=13:code=9", expect=10):
    """A run that dies at step 12 (after its step-10 checkpoint), as a crash would."""
    p = run([str(REPO / "configs/quickstart.yaml"), *sets(*BASE, *extra), "--run-dir", str(rd)],
            env={"TRAINRUN_FAULTS": fault})
    assert p.returncode != 0
    if expect:
        assert (ckpt(rd, expect) / "MANIFEST").exists()


def assert_unique_steps(rd):
    steps = [r["step"] for r in metrics(rd)]
    assert steps == sorted(set(steps)), "a step was logged twice"


@pytest.mark.parametrize("async_write", [False, True])
def test_resume_is_bitwise_identical(tmp_path, full_run, async_write):
    rd = tmp_path / "r"
    # An async write still in flight when the process dies is lost (the previous checkpoint
    # stays): the crash at step 12 may or may not have let step 10's write finish.
    start_interrupted(rd, [f"checkpoint.async={str(async_write).lower()}"],
                      expect=None if async_write else 10)
    p = run(["--resume", str(rd)], check=0)
    assert "resumed from" in p.stderr
    if not async_write:
        assert f"resumed from {ckpt(rd, 10)} at step 10" in p.stderr, p.stderr
    assert losses(rd) == full_run  # every step, exact
    assert_unique_steps(rd)
    # The HDF5 metrics agree with the JSONL after the resume too.
    with h5py.File(rd / "metrics.h5", "r") as f:
        assert list(f["train/step"][:]) == [float(s) for s in sorted(full_run)]


@pytest.mark.parametrize("first,then,zero", [(1, 2, 0), (2, 1, 0), (1, 2, 1), (2, 1, 1)])
def test_resume_on_another_world_size(tmp_path, full_run, first, then, zero):
    rd = tmp_path / "r"
    start_interrupted(rd, [f"distributed.nproc={first}", f"distributed.zero={zero}"])
    run(["--resume", str(rd), *sets(f"distributed.nproc={then}")], check=0)
    got = losses(rd)
    assert sorted(got) == sorted(full_run)
    for step, want in full_run.items():
        assert got[step] == pytest.approx(want, rel=1e-5), f"step {step}"
    assert_unique_steps(rd)


def test_resume_from_a_checkpoint_with_more_steps(tmp_path, full_run):
    rd = tmp_path / "r"
    start_interrupted(rd)
    run(["--resume", str(ckpt(rd, 10)),
         *sets(f"train.steps={STEPS + 5}")], check=0)
    assert max(losses(rd)) == STEPS + 5


def test_resume_refuses_a_model_change(tmp_path):
    rd = tmp_path / "r"
    start_interrupted(rd)
    p = run(["--resume", str(rd), *sets("model.n_layer=3")], check=2)
    assert "model.n_layer" in p.stderr


def truncate(path, keep=0.5):
    path.write_bytes(path.read_bytes()[: int(path.stat().st_size * keep)])


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_damaged_newest_checkpoint_falls_back(tmp_path, full_run, damage):
    rd = tmp_path / "r"
    start_interrupted(rd, fault="exit:step=18:code=9")
    newest = ckpt(rd, 15)
    if damage == "flip":
        flip_data(newest)
        why = "slice optimizer/v/blocks.0.mlp.fc.weight [0:128, 0:32] fails its CRC-32C"
    else:
        truncate(ckpt_data(rd, 15))
        why = "truncated file"
    p = run(["inspect", str(newest)], check=4)
    assert "DAMAGED (rank-00000-of-00001.h5: " in p.stdout and why in p.stdout, p.stdout
    assert run(["inspect", str(ckpt(rd, 10))], check=0).stdout
    # `sample` falls back the same way and says which newer checkpoint it skipped.
    p = run(["sample", str(rd), "--tokens", "5"], check=0)
    assert "warning:" in p.stderr and f"{newest} is damaged" in p.stderr, p.stderr
    p = run(["--resume", str(rd)], check=0)
    assert f"{newest} is damaged" in p.stderr and why in p.stderr, p.stderr  # named, and why
    assert f"resumed from {ckpt(rd, 10)} at step 10" in p.stderr  # fell back
    assert losses(rd) == full_run


def test_no_usable_checkpoint_is_exit_4(tmp_path):
    rd = tmp_path / "r"
    start_interrupted(rd)
    for f in (rd / "checkpoints").glob("step-*/*.h5"):
        f.write_bytes(b"garbage")
    p = run(["--resume", str(rd)], check=4)
    assert "no usable checkpoint" in p.stderr
    p = run(["--resume", str(tmp_path / "nothing-here")], check=4)
    assert "no such run directory or checkpoint file" in p.stderr


def test_config_resume_before_its_run_directory_exists_starts_the_run(tmp_path):
    # What `trainrun k8s`'s launcher runs on a new claim, and a requeued batch job's first start:
    # `trainrun run CONFIG --resume`, the config's run directory not there yet.
    rd = tmp_path / "claim" / "run"
    cfg = [str(REPO / "configs/quickstart.yaml"), *sets(*TINY, "train.steps=4", f"run_dir={rd}")]
    p = run(["run", *cfg, "--resume"], check=0)
    assert f"no run directory {rd} yet: starting the run" in p.stderr
    assert max(losses(rd)) == 4
    # An explicit path that is not there stays an error (a typo must not start a new run).
    p = run(["run", *cfg, "--resume", str(tmp_path / "typo")], check=4)
    assert "no such run directory or checkpoint file" in p.stderr


def test_h5dump_reads_a_checkpoint(tmp_path):
    """A rank file is plain HDF5: h5dump shows /slices (float32, contiguous) and /index, whose
    JSON names the tensors and each slice's CRC-32C; the exported single file keeps fletcher32."""
    rd = tmp_path / "r"
    start_interrupted(rd)
    out = subprocess.run(["h5dump", "-H", "-p", str(ckpt_data(rd, 10))],
                         capture_output=True, text=True, check=True).stdout
    assert 'DATASET "slices"' in out and "H5T_IEEE_F32LE" in out and "CONTIGUOUS" in out, out
    out = subprocess.run(["h5dump", "-d", "/index", str(ckpt_data(rd, 10))],
                         capture_output=True, text=True, check=True).stdout
    assert "blocks.0.attn.qkv.weight" in out and "crc32c" in out
    single = tmp_path / "single.h5"
    run(["export", str(ckpt(rd, 10)), "--out", str(single)], check=0)
    out = subprocess.run(["h5dump", "-H", "-p", str(single)],
                         capture_output=True, text=True, check=True).stdout
    assert "blocks.0.attn.qkv.weight" in out and "FLETCHER32" in out.upper()


def popen(args, rd, env=None):
    e = dict(os.environ, OMP_NUM_THREADS="2", **(env or {}))
    return subprocess.Popen([TRAINRUN, *args, "--run-dir", str(rd)], env=e, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)



def test_sigterm_checkpoints_and_exits_75(tmp_path):
    rd = tmp_path / "r"
    proc = popen([str(REPO / "configs/quickstart.yaml"),
                  *sets(*TINY, "train.steps=100000", "checkpoint.every=0")], rd)
    assert wait_for(lambda: (rd / "metrics.jsonl").exists())
    time.sleep(0.3)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 75, err
    ckpts = sorted((rd / "checkpoints").glob("step-*"))
    assert len(ckpts) == 1 and (ckpts[0] / "MANIFEST").exists()
    stopped = int(ckpts[0].name.split("-")[1])
    run(["--resume", str(rd), *sets(f"train.steps={stopped + 3}")], check=0)
    assert max(losses(rd)) == stopped + 3
    assert_unique_steps(rd)


def test_writer_killed_mid_write_keeps_previous_checkpoint(tmp_path):
    # A model big enough that each checkpoint write takes a while, checkpointing every step:
    # SIGKILL lands inside a write at some of these delays. Whatever it hits, resume works.
    big = ["model.n_layer=4", "model.d_model=256", "model.n_head=4", "model.seq_len=16",
           "model.vocab_size=64", "train.batch_size=2", "train.eval_every=0",
           "checkpoint.every=1", "checkpoint.keep_last=2", "train.steps=100000"]
    for delay in [0.05, 0.2, 0.45, 0.8]:
        rd = tmp_path / f"k{delay}"
        proc = popen([str(REPO / "configs/quickstart.yaml"), *sets(*big)], rd)
        assert wait_for(lambda: any((rd / "checkpoints").glob("step-*/MANIFEST"))
                        if (rd / "checkpoints").exists() else False)
        time.sleep(delay)
        proc.kill()
        proc.wait()
        p = run(["--resume", str(rd), *sets("train.steps=1")], check=None)
        # Resuming a run already past train.steps=1 finishes at once: what matters is that a
        # good checkpoint was found and loaded.
        assert p.returncode == 0, p.stderr
        assert "resumed from" in p.stderr
        leftovers = [f for f in (rd / "checkpoints").rglob("*") if ".tmp" in f.name]
        assert not leftovers or all(not f.name.endswith(".h5") for f in leftovers)


# --- poisoned or unverifiable checkpoints: never resumed from, and inspect agrees -------------

def flip_lr_scale(folder, mask):
    """Flips bits in the MANIFEST's lr_scale (1.0) as a bad disk would: 0x08 turns it into 9.0,
    0x01 into 0.0."""
    path = folder / "MANIFEST"
    data = bytearray(path.read_bytes())
    at = data.find(b'"health/lr_scale": 1.0')
    assert at >= 0, "lr_scale's value not found"
    data[at + len(b'"health/lr_scale": ')] ^= mask
    path.write_bytes(bytes(data))


def rewrite_lr_scale(folder, value):
    """lr_scale changed in the MANIFEST with its checksum recomputed, as a tool or a bit flip in
    memory before the write would."""
    table = manifest(folder)
    table["state"]["health/lr_scale"] = value
    write_manifest(folder, table)


def export_single_file(rd, step):
    """Replaces the folder checkpoint at `step` by the single file `trainrun export` writes
    (format 3, what training wrote before the folder layout): RUN_DIR/checkpoints/step-N.h5."""
    single = rd / "checkpoints" / f"step-{step:07d}.h5"
    run(["export", str(ckpt(rd, step)), "--out", str(single)], check=0)
    shutil.rmtree(ckpt(rd, step))
    with h5py.File(single, "r") as f:
        assert f.attrs["format_version"] == 3
    return single


@pytest.mark.parametrize("how", ["disk-9", "disk-0", "rewrite-2", "rewrite-half"])
def test_flipped_lr_scale_bit_is_detected(tmp_path, full_run, how):
    rd = tmp_path / "r"
    start_interrupted(rd, fault="exit:step=18:code=9")
    newest = ckpt(rd, 15)
    if how.startswith("disk"):  # 1.0 -> 9.0 or 0.0
        flip_lr_scale(newest, 0x08 if how == "disk-9" else 0x01)
        why = "MANIFEST fails its CRC-32C"
    else:  # the checksum right, the value impossible (2) or possible (0.5): the rank file's
        # copy of the train state tells
        rewrite_lr_scale(newest, 2.0 if how == "rewrite-2" else 0.5)
        why = "rank-00000-of-00001.h5: its /index and MANIFEST differ in the train state"
    p = run(["inspect", str(newest)], check=4)
    assert "verdict: DAMAGED (" in p.stdout and why in p.stdout, p.stdout
    p = run(["--resume", str(rd)], check=0)
    assert f"{newest} is damaged" in p.stderr and why in p.stderr, p.stderr  # named, and why
    assert f"resumed from {ckpt(rd, 10)} at step 10" in p.stderr
    assert losses(rd) == full_run  # the learning rate never saw the flipped value


def test_non_finite_checkpoint_is_unusable_and_skipped(tmp_path, full_run):
    rd = tmp_path / "r"
    start_interrupted(rd, fault="exit:step=18:code=9")
    newest = ckpt(rd, 15)
    poison(newest)  # every checksum right: only the finiteness check can catch it
    p = run(["inspect", str(newest)], check=4)
    assert "UNUSABLE (rank-00000-of-00001.h5: model/wte.weight [0:32, 0:32] holds 1 non-finite " \
        "value of 1024 (the first, element 0, is inf))" in p.stdout, p.stdout
    p = run(["--resume", str(rd)], check=0)
    assert f"{newest} is not usable" in p.stderr
    assert "falling back to" in p.stderr and f"resumed from {ckpt(rd, 10)}" in p.stderr
    assert losses(rd) == full_run


def make_format_1(path):
    """A checkpoint as trainrun wrote them before /metadata existed."""
    with h5py.File(path, "r+") as f:
        del f["metadata"]
        f.attrs.modify("format_version", 1)


def test_format_1_checkpoint_still_resumes(tmp_path, full_run):
    rd = tmp_path / "r"
    start_interrupted(rd)
    single = export_single_file(rd, 10)
    make_format_1(single)
    p = run(["inspect", str(single)], check=0)
    assert "metadata checksum: none (format 1" in p.stdout
    assert "verdict: OK (format 1" in p.stdout
    p = run(["--resume", str(rd)], check=0)
    assert "format 1" in p.stderr and f"resumed from {single} at step 10" in p.stderr
    assert losses(rd) == full_run


def make_format_2(path):
    """A checkpoint as trainrun wrote them before format 3: /metadata and /config as 1-D
    character arrays, chunked with fletcher32."""
    with h5py.File(path, "r+") as f:
        for name in ("metadata", "config"):
            text = f[name][()].replace(b"format_version=3\n", b"format_version=2\n")
            del f[name]
            f.create_dataset(name, data=np.frombuffer(text, dtype="S1"), chunks=True,
                             fletcher32=True)
        f.attrs.modify("format_version", 2)


def test_h5py_reads_config_and_metadata_as_strings(tmp_path):
    """The MANIFEST holds the config as one string; so does the single file export writes."""
    rd = tmp_path / "r"
    start_interrupted(rd)
    table = manifest(ckpt(rd, 10))
    assert yaml.safe_load(table["config"])["train"]["steps"] == STEPS
    assert table["state"]["train/step"] == 10 and table["format_version"] == 5
    single = tmp_path / "single.h5"
    run(["export", str(ckpt(rd, 10)), "--out", str(single)], check=0)
    with h5py.File(single, "r") as f:
        assert f["config"].shape == () and f["metadata"].shape == ()
        config = f["config"].asstr()[()]  # one string, not an array of characters
        assert yaml.safe_load(config)["train"]["steps"] == STEPS
        assert "step=10\n" in f["metadata"].asstr()[()]
        assert f.attrs["format_version"] == 3


def test_format_2_checkpoint_still_resumes(tmp_path, full_run):
    rd = tmp_path / "r"
    start_interrupted(rd)
    single = export_single_file(rd, 10)
    make_format_2(single)
    with h5py.File(single, "r") as f:
        assert f["config"].shape[0] > 100 and f.attrs["format_version"] == 2
    p = run(["inspect", str(single)], check=0)
    assert "format_version: 2" in p.stdout and "verdict: OK" in p.stdout
    p = run(["--resume", str(rd)], check=0)
    assert f"resumed from {single} at step 10" in p.stderr
    assert losses(rd) == full_run


def test_inspect_agrees_with_resume_on_every_file(tmp_path):
    """Each kind of checkpoint, good or not: `inspect` exits 0 exactly when --resume PATH can
    start."""
    rd = tmp_path / "r"
    start_interrupted(rd, ["checkpoint.every=2"], fault="exit:step=16:code=9", expect=14)
    ck = sorted((rd / "checkpoints").glob("step-*"))
    assert len(ck) == 7

    def format_1(folder):
        make_format_1(export_single_file(rd, int(folder.name.split("-")[1])))

    damage = [lambda p: None, lambda p: flip_lr_scale(p, 0x08),
              lambda p: rewrite_lr_scale(p, 2.0), poison, format_1, flip_data,
              lambda p: truncate(p / "rank-00000-of-00001.h5")]
    for spoil, path in zip(damage, ck):
        spoil(path)
    ck = sorted((rd / "checkpoints").glob("step-*"))  # format_1 made one a file
    assert [p.suffix for p in ck] == ["", "", "", "", ".h5", "", ""]
    for i, path in enumerate(ck[: len(damage)]):
        step = int(path.name.split("-")[1].split(".")[0])
        inspected = run(["inspect", str(path)]).returncode
        # Each into a run directory of its own: an older checkpoint than the run's newest one
        # is resumed only as a branch (test_resume_history.py).
        resumed = run(["--resume", str(path), "--run-dir", str(tmp_path / f"branch{i}"),
                       *sets(f"train.steps={step + 1}")])
        assert inspected in (0, 4) and resumed.returncode in (0, 4), resumed.stderr
        assert (inspected == 0) == (resumed.returncode == 0), (path.name, resumed.stderr[-2000:])
    assert [run(["inspect", str(p)]).returncode for p in ck[: len(damage)]] == [0, 4, 4, 4, 0, 4, 4]


@pytest.mark.parametrize("which", ["single file", "MANIFEST", "rank file"])
def test_a_fifo_in_a_checkpoint_s_place_is_refused_not_waited_on(quickstart, tmp_path, which):
    # Opening a FIFO blocks until a writer comes: inspect, export and --resume each hung for ever.
    rd = tmp_path / "r"
    run([quickstart, *sets(*TINY, "train.steps=4", "checkpoint.every=2"), "--run-dir", str(rd)],
        check=0)
    newest = ckpt(rd, 4)
    if which == "single file":  # where a format 1-3 checkpoint would be
        shutil.rmtree(newest)
        newest = rd / "checkpoints" / "step-0000004.h5"
        fifo = newest
    else:
        fifo = newest / ("MANIFEST" if which == "MANIFEST" else "rank-00000-of-00001.h5")
        fifo.unlink()
    os.mkfifo(fifo)
    p = run(["inspect", str(newest)], check=4, timeout=60)
    assert "not a regular file" in p.stdout + p.stderr, p.stdout + p.stderr
    run(["export", str(newest), "--out", str(tmp_path / "x.h5")], check=4, timeout=60)
    p = run(["--resume", str(rd), *sets("train.steps=5")], check=0, timeout=120)
    assert "step-0000002" in p.stderr  # it went back to the checkpoint before the FIFO


def test_when_every_checkpoint_is_damaged_the_warnings_say_so(quickstart, tmp_path):
    # Each said "no older checkpoint is left to fall back to", also while older ones existed.
    rd = tmp_path / "r"
    run([quickstart, *sets(*TINY, "train.steps=4", "checkpoint.every=2"), "--run-dir", str(rd)],
        check=0)
    for f in (rd / "checkpoints").glob("step-*/rank-*.h5"):
        f.write_bytes(f.read_bytes()[:1000])
    p = run(["--resume", str(rd)], check=None, timeout=120)
    assert p.returncode != 0
    assert p.stderr.count("none of the 2 checkpoint(s) of the run verifies") == 2, p.stderr
    assert "no older checkpoint is left" not in p.stderr
