"""Training on the CPU-executed CUDA device: the CUDA plugin's own sources, compiled by the host
compiler into libtrainrun_cudasim.so (kernels/sim/), loaded through TRAINRUN_CUDA_PLUGIN exactly
as trainrun loads the real plugin, against the CPU backend on the same runs."""
import json
import re
import pathlib
import shutil
import struct

import pytest

from conftest import REPO, TINY, TRAINRUN, checksums, losses, run, sets

SIM = pathlib.Path(TRAINRUN).parent / "kernels" / "sim" / "libtrainrun_cudasim.so"

GPT = [*TINY, "train.steps=20", "checkpoint.every=10", "checkpoint.keep_last=5"]
# d_model 34: biases sit in the packed parameter buffer at offsets that are not 16-byte aligned,
# where cuBLASLt's bias epilogue would fault (matmul.cpp adds such a bias with a kernel instead).
GPT_ODD = [*GPT, "model.d_model=34"]
LLAMA = [*GPT, "model.type=llama", "model.n_head=4", "model.n_kv_head=2", "model.d_model=32",
         "model.ffn_hidden=0"]


@pytest.fixture(scope="module")
def sim_env():
    # Never a skip: the sim is built wherever the tests are (scripts/setup.sh --test installs
    # Boost.Context, which it needs).
    assert SIM.exists(), f"{SIM} was not built (scripts/setup.sh --test installs what it needs)"
    return {"TRAINRUN_CUDA_PLUGIN": str(SIM), "OMP_NUM_THREADS": "1"}


def train(quickstart, rd, device, extra, env):
    return run([quickstart, *sets(*extra, f"device={device}"), "--run-dir", str(rd)], env=env,
               check=0, timeout=600)


@pytest.fixture(scope="module")
def reference(tmp_path_factory, sim_env):
    """reference(device, extra): the run directory of that run, trained once for the module.
    Several tests compare against the same run (one rank on the device, ZeRO-1 on four); runs
    are deterministic and the tests only read them, so each is trained once."""
    quickstart = str(REPO / "configs" / "quickstart.yaml")
    runs = {}

    def get(device, extra):
        key = (device, tuple(extra))
        if key not in runs:
            rd = tmp_path_factory.mktemp("reference") / "run"
            train(quickstart, rd, device, extra, sim_env)
            runs[key] = rd
        return runs[key]

    return get


def assert_close(a, b, rel):
    assert a.keys() == b.keys()
    for step in a:
        assert abs(a[step] - b[step]) <= rel * abs(b[step]), (step, a[step], b[step])


@pytest.mark.parametrize("model", ["gpt", "gpt-d34", "llama"])
def test_fp32_training_matches_the_cpu(quickstart, tmp_path, sim_env, reference, model):
    extra = {"gpt": GPT, "gpt-d34": GPT_ODD, "llama": LLAMA}[model]
    cpu = train(quickstart, tmp_path / "cpu", "cpu", extra, sim_env)
    sim = reference("cuda", extra)
    # the device the run used names itself
    assert "cudasim" in (sim / "logs" / "rank-0.log").read_text()
    assert "cudasim" not in cpu.stderr
    assert len(losses(sim)) == 20
    assert_close(losses(sim), losses(tmp_path / "cpu"), 1e-4)


# head_dim 32: bf16 attention runs on tensor cores (kernels/attention_tc.cu, mma.sync through the
# sim's fragment layouts); the others' head_dim 8 and 16 take the CUDA-core kernels.
BF16_MODELS = {
    "gpt": GPT, "llama": LLAMA,
    "gpt-hd32": [*GPT, "model.d_model=64"],
    "llama-hd32": [*LLAMA, "model.d_model=128", "model.seq_len=80", "train.batch_size=2"],
}


@pytest.mark.parametrize("model", BF16_MODELS)
def test_bf16_training_matches_the_cpu_bf16_reference(quickstart, tmp_path, sim_env, model):
    # bf16 weights and activations, f32 parameter gradients and masters (docs/cuda.md).
    extra = [*BF16_MODELS[model], "train.precision=bf16"]
    train(quickstart, tmp_path / "cpu", "cpu", extra, sim_env)
    train(quickstart, tmp_path / "sim", "cuda", extra, sim_env)
    assert_close(losses(tmp_path / "sim"), losses(tmp_path / "cpu"), 2e-2)


def test_two_ranks_over_nccl_match_one_rank(quickstart, tmp_path, sim_env, reference):
    one = reference("cuda", GPT)
    two = tmp_path / "two"
    train(quickstart, two, "cuda", [*GPT, "distributed.nproc=2"], sim_env)
    assert_close(losses(two), losses(one), 1e-5)
    assert len(set(checksums(two).values())) == 1  # the ranks agree on the parameters


@pytest.mark.parametrize("layout,gpus", [
    # One visible GPU per rank, as Slurm's --gpu-bind=map_gpu:2,5 sets CUDA_VISIBLE_DEVICES per
    # task: each rank's GPU 0, physical 2 and 5. (Rank 1 used to ask for GPU 1 and fail.)
    ({"TRAINRUN_SIM_GPU_BIND": "map_gpu:2,5"}, [("cuda:0", 2), ("cuda:0", 5)]),
    # A listed subset for all ranks: GPU local_rank of it.
    ({"CUDA_VISIBLE_DEVICES": "6,3"}, [("cuda:0", 6), ("cuda:1", 3)]),
])
def test_each_rank_takes_its_gpu_in_any_visible_layout(quickstart, tmp_path, sim_env, reference,
                                                      layout, gpus):
    rd = tmp_path / "two"
    train(quickstart, rd, "cuda", [*GPT, "distributed.nproc=2"], {**sim_env, **layout})
    assert_close(losses(rd), losses(reference("cuda", GPT)), 1e-5)
    for rank, (ordinal, physical) in enumerate(gpus):
        log = (rd / "logs" / f"rank-{rank}.log").read_text()
        # The log names the physical GPU: the sim's PCI bus 0x18 + its index, its UUID's last byte.
        assert re.search(rf"{ordinal} \(cudasim[^\n]*PCI 0000:{0x18 + physical:02x}:00\.0, "
                         rf"GPU-[0-9a-f-]*{physical:02x}\)", log), log


def test_a_rank_failing_alone_in_set_up_ends_the_job(quickstart, tmp_path, sim_env):
    # Rank 1 is bound to a GPU the node does not have (map_gpu:0,9 of 8): it sees none and fails
    # while rank 0 waits for it in the NCCL set-up. That waited for ever (rank 1's MPI_Finalize
    # waited for rank 0); now the failing rank leaves MPI unfinalised and mpirun ends the job.
    p = run([quickstart, *sets(*GPT, "device=cuda", "distributed.nproc=2"), "--run-dir",
             str(tmp_path / "rd")], env={**sim_env, "TRAINRUN_SIM_GPU_BIND": "map_gpu:0,9"},
            timeout=120)
    assert p.returncode == 5, p.stderr
    assert "no CUDA devices are visible (check CUDA_VISIBLE_DEVICES)" in p.stderr


@pytest.mark.parametrize("first,then", [("cuda", "cpu"), ("cpu", "cuda")])
def test_checkpoint_resumes_on_the_other_device(quickstart, tmp_path, sim_env, first, then):
    # One 10-step checkpoint written on `first`, continued to step 20 on `first` and on `then`.
    same = tmp_path / "same"
    train(quickstart, same, first, [*GPT[:-3], "train.steps=10", "checkpoint.every=10"], sim_env)
    other = tmp_path / "other"
    shutil.copytree(same, other)
    for rd, device in [(same, first), (other, then)]:
        run(["--resume", str(rd), *sets("train.steps=20", f"device={device}")], env=sim_env,
            check=0, timeout=600)
    assert_close({s: losses(other)[s] for s in range(11, 21)},
                 {s: losses(same)[s] for s in range(11, 21)}, 1e-4)


def test_out_of_range_token_gives_the_cpu_error(quickstart, tmp_path, sim_env):
    # An llm.c shard carries no vocabulary, so only the kernels that read ids can catch 40 >= 32.
    tokens = [i % 30 for i in range(4096)]
    tokens[100] = 40
    shard = tmp_path / "bad.bin"
    header = [20240520, 1, len(tokens)] + [0] * 253
    shard.write_bytes(struct.pack("<256i", *header) + struct.pack(f"<{len(tokens)}H", *tokens))
    extra = [*TINY, "train.steps=50", "data.synthetic=''", f"data.train={shard}",
             f"data.val={shard}"]
    errors = {}
    for device in ["cpu", "cuda"]:
        p = run([quickstart, *sets(*extra, f"device={device}"), "--run-dir",
                 str(tmp_path / device)], env=sim_env, timeout=600)
        assert p.returncode == 3, p.stderr
        errors[device] = [l for l in p.stderr.splitlines() if "40" in l and "vocab" in l.lower()]
        assert errors[device], p.stderr
    assert errors["cpu"][0].split("error")[-1] == errors["cuda"][0].split("error")[-1]


def test_profiled_ops_are_timed_on_the_device_by_events(quickstart, tmp_path, sim_env):
    # --profile on a GPU times each op between CUDA events on the stream (kernels/op_events.*),
    # without a wait per op: the ops arrive at the step's end and go on a "device" row of the
    # trace, one after another as the stream ran them, inside their step; the op table sums them.
    rd = tmp_path / "run"
    p = run([quickstart, *sets(*GPT, "train.steps=4", "device=cuda"), "--profile", "2:4",
             "--run-dir", str(rd)], env=sim_env, check=0, timeout=600)
    assert "cudasim" in p.stderr
    ev = json.loads((rd / "trace" / "rank-0.json").read_text())["traceEvents"]
    rows = {e["tid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
    spans = [e for e in ev if e["ph"] == "X"]
    ops = [e for e in spans if e["cat"] == "op"]
    steps = [e for e in spans if e["name"] == "step"]
    assert len(steps) == 2
    assert {"matmul", "matmul_backward", "attention", "cross_entropy", "adamw"} <= {
        e["name"] for e in ops}
    assert {rows[e["tid"]] for e in ops} == {"device"}
    assert all(rows[e["tid"]] != "device" for e in spans if e["cat"] != "op")
    for a, b in zip(ops, ops[1:]):  # the stream runs one op after another
        assert b["ts"] >= a["ts"] + a["dur"] - 1.0, (a, b)  # 1 us: the trace's rounding
    for s in steps:
        inside = [o for o in ops if o["args"]["step"] == s["args"]["step"]]
        assert inside and all(s["ts"] - 1.0 <= o["ts"] <= s["ts"] + s["dur"] + 1.0 for o in inside)
    table = (rd / "trace" / "ops-rank-0.txt").read_text()
    assert "CUDA: device time between events" in table
    mm = [o["dur"] for o in ops if o["name"] == "matmul"]
    row = [l.split() for l in table.splitlines() if l.startswith("matmul ")][0]
    assert float(row[1]) == len(mm) / 2


def test_the_step_is_annotated_with_balanced_nvtx_ranges(quickstart, tmp_path, sim_env):
    # What nsys would show over the kernels (docs/cuda.md, "NVTX"): the phases, the blocks inside
    # forward and backward, every op inside those; the sim's NVTX checks that every range closes.
    summary = tmp_path / "nvtx.txt"
    train(quickstart, tmp_path / "run", "cuda", [*GPT, "train.steps=2"],
          {**sim_env, "TRAINRUN_SIM_NVTX_SUMMARY": str(summary)})
    lines = [l.split() for l in summary.read_text().splitlines()]
    ranges = {l[1]: int(l[2]) for l in lines if l[0] == "range"}
    stats = {l[0]: int(l[1]) for l in lines if l[0] != "range"}
    assert stats["unmatched_pops"] == 0 and stats["open_at_exit"] == 0, stats
    assert stats["max_depth"] >= 3, stats  # phase > block > op
    for name in ["data", "forward", "backward", "comm", "optimizer", "blocks.0", "matmul",
                 "attention_backward", "cross_entropy", "adamw"]:
        assert ranges.get(name, 0) >= 2, (name, ranges)  # once a step at least


def test_hybrid_sharding_over_nccl_groups_matches_one_rank(quickstart, tmp_path, sim_env,
                                                          reference):
    # A 2 x 2 device mesh: each group's NCCL communicator is made from its MPI group
    # (device_mesh.h), ZeRO-1 reduce-scatters inside a dp_shard group and allreduces across.
    one = reference("cuda", GPT)
    mesh = tmp_path / "mesh"
    train(quickstart, mesh, "cuda",
          [*GPT, "distributed.nproc=4", "distributed.oversubscribe=true", "distributed.zero=1",
           "distributed.dp_replicate=2"], sim_env)
    assert_close(losses(mesh), losses(one), 1e-5)
    assert len(set(checksums(mesh).values())) == 1
    assert "mesh dp_replicate 2 x dp_shard 2" in (mesh / "logs" / "rank-2.log").read_text()


@pytest.mark.parametrize("model", ["gpt", "llama"])
def test_tensor_parallel_over_nccl_matches_one_rank(quickstart, tmp_path, sim_env, reference,
                                                   model):
    # tp 2: the row-parallel layers' outputs and the column-parallel layers' input gradients
    # are summed over the tp group's own NCCL communicator (device_mesh.h), on the device.
    extra = {"gpt": [*GPT, "model.n_head=4"], "llama": LLAMA}[model]
    one, tp = reference("cuda", extra), tmp_path / "tp"
    train(quickstart, tp, "cuda", [*extra, "distributed.nproc=2", "distributed.tp=2"], sim_env)
    assert_close(losses(tp), losses(one), 1e-5)
    assert "x tp 2: this rank at replica 0, shard 0, tp 1" in (tp / "logs" / "rank-1.log").read_text()


@pytest.mark.parametrize("mode", ["full", "selective"])
@pytest.mark.parametrize("family", ["gpt", "llama"])
def test_activation_checkpointing_on_the_device_equals_none(quickstart, tmp_path, sim_env,
                                                            reference, mode, family):
    # gpt: under selective the MLP's forward runs its GELU apart from the GEMM (the epilogue's
    # GELU reads the accumulator, a recomputation only the stored output), so both agree.
    extra = [*(LLAMA if family == "llama" else GPT), "model.dropout=0.1"]
    none = reference("cuda", extra)
    train(quickstart, tmp_path / mode, "cuda", [*extra, f"train.activation_checkpointing={mode}"],
          sim_env)
    assert losses(tmp_path / mode) == losses(none)


@pytest.mark.parametrize("extra", [["distributed.zero=3", "distributed.dp_replicate=2"],
                                   ["distributed.zero=2", "train.precision=bf16"],
                                   ["distributed.zero=3", "train.precision=bf16"],
                                   ["distributed.zero=3", "train.precision=bf16",
                                    "distributed.reduce_dtype=bf16"]])
def test_zero_2_and_3_over_nccl_match_zero_1(quickstart, tmp_path, sim_env, reference, extra):
    # The units' all-gathers (bf16 runs gather the bf16 compute weights) and reduce-scatters on
    # the device's communicators, against ZeRO-1 on the same layout. fp32: one micro-batch per
    # step, so the same sums and the same weights. bf16: the f32 gradients land in a buffer per
    # unit instead of the flat one, whose other alignment changes the last bits of some
    # bf16-input GEMMs on the device (on the CPU they are bit-identical, test_fsdp.py): within
    # the bf16 tolerance the suite uses.
    four = [*LLAMA, "distributed.nproc=4", "distributed.oversubscribe=true",
            *[e for e in extra
              if not e.startswith(("distributed.zero", "distributed.reduce_dtype"))]]
    z1 = reference("cuda", [*four, "distributed.zero=1"])
    train(quickstart, tmp_path / "z", "cuda", [*four, *extra], sim_env)
    assert len(set(checksums(tmp_path / "z").values())) == 1
    if "distributed.reduce_dtype=bf16" in extra:  # sums rounded to bf16 besides
        assert_close(losses(tmp_path / "z"), losses(z1), 2e-2)
    elif "train.precision=bf16" in extra:
        assert_close(losses(tmp_path / "z"), losses(z1), 2e-3)
    else:
        assert losses(tmp_path / "z") == losses(z1)
        assert checksums(tmp_path / "z") == checksums(z1)
