"""The command line: help, version, validate, and a clear error with the right exit code for
every class of bad config and bad data. Nothing may be written for bad input."""
import json
import math
import os
import pathlib
import re
import struct

import pytest

from conftest import REPO, TINY, run, sets


def test_help_and_version():
    p = run(["--help"], check=0)
    for word in ["run", "validate", "data", "sample", "inspect", "export", "slurm", "k8s",
                 "Exit codes"]:
        assert word in p.stdout
    assert run(["--version"], check=0).stdout.startswith("trainrun ")
    assert "--resume" in run(["run", "--help"], check=0).stdout


def test_validate_prints_resolved_config(quickstart):
    p = run(["validate", quickstart, "--set", "optimizer.betas=[0.9,0.95]"], check=0)
    assert "betas: [0.9, 0.95]" in p.stdout
    assert "run_dir: runs/quickstart" in p.stdout
    assert "OK" in p.stderr


def write(tmp_path, text):
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    return str(f)


def test_unknown_key_names_key_line_and_suggestion(tmp_path):
    cfg = write(tmp_path, "name: x\nmodel:\n  n_layrs: 2\ndata:\n  synthetic: markov\n")
    p = run([cfg, "--run-dir", str(tmp_path / "run")], check=2)
    assert "model.n_layrs" in p.stderr and "3:3" in p.stderr and "model.n_layer" in p.stderr
    assert not (tmp_path / "run").exists()  # nothing written


def test_wrong_type_and_range(tmp_path):
    cfg = write(tmp_path, "model:\n  n_layer: two\ndata:\n  synthetic: markov\n")
    p = run(["validate", cfg], check=2)
    assert "model.n_layer" in p.stderr and "2:12" in p.stderr
    cfg = write(tmp_path, "model:\n  dropout: 1.5\ndata:\n  synthetic: markov\n")
    assert "model.dropout" in run(["validate", cfg], check=2).stderr


def test_yaml_syntax_error_has_line_and_column(tmp_path):
    cfg = write(tmp_path, "model:\n  n_layer: [1, 2\ndata: {synthetic: markov}\n")
    p = run(["validate", cfg], check=2)
    assert "bad.yaml" in p.stderr and ":" in p.stderr


def test_cross_field_rules(quickstart, tmp_path):
    p = run([quickstart, *sets("model.n_head=3"), "--run-dir", str(tmp_path / "r")], check=2)
    assert "d_model" in p.stderr and "n_head" in p.stderr
    p = run([quickstart, *sets("train.batch_size=10", "train.micro_batch_size=4"), "--run-dir",
             str(tmp_path / "r")], check=2)
    assert "batch_size" in p.stderr and "micro_batch_size" in p.stderr
    assert not (tmp_path / "r").exists()


def test_bad_set_override(quickstart, tmp_path):
    rd = ["--run-dir", str(tmp_path / "r")]
    p = run([quickstart, "--set", "train.stepz=3", *rd], check=2)
    assert "train.stepz" in p.stderr and "train.steps" in p.stderr
    p = run([quickstart, "--set", "train.steps=many", *rd], check=2)
    assert "train.steps" in p.stderr


def test_missing_config_file(tmp_path):
    p = run(["no/such/config.yaml", "--run-dir", str(tmp_path / "r")], check=2)
    assert "no/such/config.yaml" in p.stderr


def test_bad_data_exit_3(quickstart, tmp_path):
    base = [quickstart, *sets(*TINY, "train.steps=2", "data.synthetic=''")]
    # missing file
    p = run([*base, "--set", f"data.train={tmp_path}/none.bin", "--run-dir", str(tmp_path / "a")],
            check=3)
    assert "none.bin" in p.stderr
    # wrong magic
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"not a shard at all" * 10)
    p = run([*base, "--set", f"data.train={junk}", "--run-dir", str(tmp_path / "b")], check=3)
    assert "junk.bin" in p.stderr and "magic" in p.stderr
    # llm.c shard with a token >= vocab_size
    toks = [1, 2, 3, 40] * 50
    hdr = struct.pack("<256i", 20240520, 1, len(toks), *([0] * 253))
    shard = tmp_path / "big.bin"
    shard.write_bytes(hdr + struct.pack(f"<{len(toks)}H", *toks))
    p = run([*base, "--set", f"data.train={shard}", "--run-dir", str(tmp_path / "c")], check=3)
    assert "big.bin" in p.stderr and "40" in p.stderr and "vocab_size" in p.stderr
    # truncated llm.c shard (header says more tokens than the file holds)
    trunc = tmp_path / "trunc.bin"
    trunc.write_bytes(struct.pack("<256i", 20240520, 1, 1000, *([0] * 253)) + b"\x01\x00" * 10)
    p = run([*base, "--set", f"data.train={trunc}", "--run-dir", str(tmp_path / "d")], check=3)
    assert "trunc.bin" in p.stderr and "truncated" in p.stderr.lower()


def test_device_cuda_without_gpu_is_a_clear_error(quickstart, tmp_path):
    p = run([quickstart, *sets(*TINY, "train.steps=2", "device=cuda"), "--run-dir",
             str(tmp_path / "r")], check=5)
    assert "cuda" in p.stderr.lower()
    p = run([quickstart, *sets(*TINY, "train.steps=2", "device=auto"), "--run-dir",
             str(tmp_path / "r2")], check=0)
    assert "cpu" in p.stderr.lower()


def test_a_run_that_cannot_fit_is_refused_with_the_numbers(quickstart, tmp_path):
    p = run([quickstart, *sets("model.d_model=8192", "model.n_layer=48", "model.n_head=64",
                               "model.vocab_size=50304"), "--run-dir", str(tmp_path / "r")],
            check=2)
    assert "GiB per rank" in p.stderr and "trainrun plan" in p.stderr
    assert not (tmp_path / "r").exists()


def test_plan_collectives_model_and_a_measured_link(quickstart):
    # The collectives' time from the alpha-beta model (collectives.h), at 8 to 4096 ranks too;
    # --link-bw/--link-latency state the link between nodes (bench/collectives_link.py).
    p = run(["plan", quickstart, *sets("distributed.nodes=2")], check=0)
    assert "collectives at scale" in p.stdout and "10 GbE (assumed)" in p.stdout
    for w in (8, 64, 512, 4096):
        assert re.search(rf"^  {w} ranks +[\d.]+ [mu]?s \([\d.]+ [mu]?s exposed\): "
                         r"(ring|tree) over ", p.stdout, re.M), p.stdout
    j = json.loads(run(["plan", quickstart, "--json", "--link-bw", "1", "--link-latency", "50",
                        *sets("distributed.nodes=2")], check=0).stdout)
    c = j["collectives"]
    assert c["algorithm"] == "ring" and c["link"] == "the --link-bw link"
    # 2 ranks, one bucket: 2 (p-1)/p of the f32 gradients at 1 MB/s, and 2 hops of 50 us.
    assert math.isclose(c["bandwidth_seconds"], 4 * j["params"] / 1e6, rel_tol=1e-9)
    assert math.isclose(c["latency_seconds"], 2 * 50e-6, rel_tol=1e-9)
    assert math.isclose(j["allreduce_seconds_per_step"], c["seconds"])
    assert [a["world"] for a in j["at_scale"]] == [8, 64, 512, 4096]
    assert j["interconnect"]["inter_bw"] == 1e6
    bad = run(["plan", quickstart, "--link-bw", "0"], check=None)
    assert bad.returncode == 2 and "--link-bw" in bad.stderr


def test_plan_disk_bw_sets_the_checkpoint_write_rate(quickstart):
    # --disk-bw replaces the assumed rate: the plan prints it and writes at it.
    p = run(["plan", quickstart, "--disk-bw", "123.5", *sets("distributed.nproc=2")], check=0)
    assert "123.5 MB/s per rank (--disk-bw)" in p.stdout
    assert "write" in p.stdout and "at 123.5 MB/s" in p.stdout
    assert "allreduce time" in p.stdout
    assert "assumed" in run(["plan", quickstart], check=0).stdout  # without it: said so
    j = json.loads(run(["plan", quickstart, "--disk-bw", "123.5", "--json",
                        *sets("checkpoint.sharded=true", "distributed.nproc=2")],
                       check=0).stdout)
    c = j["checkpoint"]
    assert j["device"]["disk_bw"] == 123.5e6 and c["files"] == 3  # 2 rank files + MANIFEST
    assert math.isclose(c["write_seconds"], c["bytes_per_rank"] / 123.5e6)
    assert c["bytes_per_rank"] - c["file_overhead"] <= c["state_bytes"] / 2 + 12
    # checkpoint.sharded, which chose that layout when there were two, changes nothing now.
    plain = json.loads(run(["plan", quickstart, "--disk-bw", "123.5", "--json",
                            *sets("distributed.nproc=2")], check=0).stdout)["checkpoint"]
    for key in ("files", "state_bytes", "file_overhead", "bytes_per_rank", "write_seconds"):
        assert plain[key] == c[key], key
    # A disk this slow makes saving every step the run's main cost: warned, with the fix.
    w = json.loads(run(["plan", quickstart, "--disk-bw", "0.01", "--json",
                        *sets("checkpoint.every=1")], check=0).stdout)["warnings"]
    assert any("checkpointing takes" in x and "raise checkpoint.every" in x for x in w), w
    assert run(["plan", quickstart, "--disk-bw", "0"], check=2).returncode == 2


def test_every_option_of_every_command_is_in_the_man_page():
    """Walks `--help` down every subcommand: each long option it lists must appear in
    man/trainrun.1 (groff escapes its hyphens as \\-)."""
    import re
    man = (REPO / "man" / "trainrun.1").read_text().replace("\\-", "-")
    missing, seen = [], set()

    def walk(path):
        out = run([*path, "--help"], check=0).stdout
        for opt in re.findall(r"^\s+(?:-\w,)?(--[a-z][a-z0-9-]*)", out, re.M):
            if opt not in ("--help", "--version") and not re.search(re.escape(opt) + r"\b", man):
                missing.append(f"{' '.join(path) or 'trainrun'} {opt}")
        subs = out.split("Subcommands:")[1] if "Subcommands:" in out else ""
        for sub in re.findall(r"^\s{2}(\w[\w-]*)\s", subs, re.M):
            if sub != "help" and (*path, sub) not in seen:
                seen.add((*path, sub))
                walk([*path, sub])

    walk([])
    assert len(seen) >= 12  # run, validate, plan, ..., data prepare, data tokenizer train, ...
    assert not missing, f"options missing from man/trainrun.1: {missing}"


# Every numeric option of every command: nan, inf and meaningless negatives are refused (exit 2)
# naming the option and the value, never accepted and ignored.
@pytest.mark.parametrize("args", [
    ["plan", "QS", "--disk-bw", "nan"], ["plan", "QS", "--disk-bw", "inf"],
    ["plan", "QS", "--disk-bw", "-5"], ["plan", "QS", "--link-bw", "nan"],
    ["plan", "QS", "--link-bw", "-inf"], ["plan", "QS", "--link-latency", "nan"],
    ["plan", "QS", "--link-latency", "inf"], ["plan", "QS", "--link-latency", "-1"],
    ["sample", "RUN", "--temperature", "nan"], ["sample", "RUN", "--temperature", "inf"],
    ["sample", "RUN", "--temperature", "-0.5"], ["sample", "RUN", "--seed", "-1"],
    ["data", "prepare", "QS", "--out", "OUT", "--val-fraction", "nan"],
    ["data", "prepare", "QS", "--out", "OUT", "--val-fraction", "inf"],
])
def test_numeric_options_refuse_nan_inf_and_negatives(quickstart, tmp_path, args):
    args = [{"QS": quickstart, "RUN": str(tmp_path / "none"), "OUT": str(tmp_path / "out")}.get(a, a)
            for a in args]
    p = run(args, check=2)
    option, value = args[-2], args[-1]
    assert f"{option} {value}" in p.stderr or f"{option}: {value}" in p.stderr, p.stderr
    assert "finite" in p.stderr or "(0, 0.9]" in p.stderr, p.stderr
    assert not (tmp_path / "out").exists()


def test_a_non_finite_config_value_is_named_as_such(quickstart, tmp_path):
    for value in (".nan", ".NaN", ".inf", "-.inf", "nan", "inf"):
        cfg = write(tmp_path, f"optimizer:\n  lr: {value}\ndata:\n  synthetic: markov\n")
        p = run(["validate", cfg], check=2)
        assert f"bad.yaml:2:7: optimizer.lr: expected a number (must be > 0), found " \
               f"{value} (not a finite number)" in p.stderr, p.stderr
        p = run(["validate", quickstart, "--set", f"model.dropout={value}"], check=2)
        assert f"--set model.dropout={value}: model.dropout: expected a number (must be " \
               f"in [0, 1)), found {value} (not a finite number)" in p.stderr, p.stderr
    # An integer key says the same: not "found string".
    cfg = write(tmp_path, "model:\n  n_layer: .inf\ndata:\n  synthetic: markov\n")
    assert "found .inf (not a finite number)" in run(["validate", cfg], check=2).stderr


@pytest.mark.parametrize("text", [
    "model: " + "[" * 3000 + "]" * 3000 + "\n",
    "model: " + "{a: " * 3000 + "}" * 3000 + "\n",
], ids=["lists", "mappings"])
def test_yaml_nested_too_deep_says_so_with_the_limit(tmp_path, text):
    cfg = write(tmp_path, text)
    p = run(["validate", cfg], check=2)
    assert "bad file" not in p.stderr, p.stderr
    assert re.search(r"bad\.yaml:1:\d+: nested more than \d+ levels deep", p.stderr), p.stderr
    assert "a config is a mapping of sections" in p.stderr
    p = run(["validate", str(REPO / "configs" / "quickstart.yaml"), "--set",
             "model.hidden=" + "[" * 3000 + "]" * 3000], check=2)
    assert "bad file" not in p.stderr and "nested more than" in p.stderr, p.stderr


def test_a_tab_indenting_a_line_is_named_in_the_yaml_error(tmp_path):
    # yaml-cpp says only "illegal map value": the commonest cause is a tab, which YAML forbids.
    cfg = write(tmp_path, "data:\n  synthetic: markov\nmodel:\n\tn_layer: 2\n")
    p = run(["validate", cfg], check=2)
    assert "bad.yaml:4:" in p.stderr and "YAML syntax error" in p.stderr, p.stderr
    assert "line 4 is indented with a tab: YAML indents with spaces only" in p.stderr, p.stderr
    # A tab inside a value is no indentation: nothing said about tabs.
    cfg = write(tmp_path, "data:\n  synthetic: markov\nmodel: {n_layer: 2\nname: a\tb\n")
    assert "indented with a tab" not in run(["validate", cfg], check=2).stderr


def test_plan_prints_extreme_rates_and_times_in_significant_digits(quickstart):
    # A slow link or disk stated on the command line gives times of years: said in a few digits,
    # not hundreds, and the rate not rounded to "0.0 MB/s".
    p = run(["plan", quickstart, "--link-latency", "1e300", "--disk-bw", "0.001",
             *sets("distributed.nproc=2")], check=0)
    assert not re.search(r"\d{12}", p.stdout), p.stdout
    assert not re.search(r"\b0\.0 MB/s", p.stdout) and "at 0.001 MB/s" in p.stdout, p.stdout
    assert re.search(r"allreduce time +[\d.]+e\+\d+ s \([\d.]+e\+\d+ days\)", p.stdout), p.stdout


def test_a_number_beyond_a_double_is_named_as_a_number(quickstart):
    for value in ("1e400", "-1e400", "1e-400"):
        p = run(["validate", quickstart, "--set", f"optimizer.lr={value}"], check=2)
        assert f"optimizer.lr: expected a number (must be > 0), found number {value} (beyond " \
               f"the range of a double)" in p.stderr, p.stderr
