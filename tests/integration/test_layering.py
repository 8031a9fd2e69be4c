"""tests/check_layering.py fails on each kind of violation (meson's unit suite runs it on the
tree itself)."""
import shutil
import subprocess
import sys

from conftest import REPO

CHECK = REPO / "tests" / "check_layering.py"


def check(root):
    return subprocess.run([sys.executable, str(CHECK), "--root", str(root)], capture_output=True,
                          text=True, timeout=120)


def copy_tree(tmp_path):
    for top in ("src", "kernels", "include"):
        shutil.copytree(REPO / top, tmp_path / top)
    return tmp_path


def test_a_back_reference_fails(tmp_path):
    root = copy_tree(tmp_path)
    params = root / "include" / "trainrun" / "model" / "params.h"
    params.write_text(params.read_text().replace(
        '#include "trainrun/core/param_entry.h"', '#include "trainrun/checkpoint/checkpoint.h"'))
    p = check(root)
    assert p.returncode == 1
    assert "include/trainrun/model/params.h" in p.stdout
    assert "model includes trainrun/checkpoint/checkpoint.h (checkpoint), which comes later" \
        in p.stdout


def test_a_private_header_from_another_folder_fails(tmp_path):
    root = copy_tree(tmp_path)
    src = root / "src" / "model" / "gpt.cpp"
    src.write_text('#include "../config/schema.h"\n' + src.read_text())
    p = check(root)
    assert p.returncode == 1
    assert "src/model/gpt.cpp:1: includes \"../config/schema.h\" from outside its own folder" \
        in p.stdout


def test_a_public_header_outside_a_concept_folder_fails(tmp_path):
    root = copy_tree(tmp_path)
    (root / "include" / "trainrun" / "newthing.h").write_text("#pragma once\n")
    p = check(root)
    assert p.returncode == 1
    assert "newthing.h: public header outside a concept's folder" in p.stdout


def test_including_a_public_header_that_is_not_there_fails(tmp_path):
    root = copy_tree(tmp_path)
    src = root / "src" / "model" / "gpt.cpp"
    src.write_text('#include "trainrun/model/gone.h"\n' + src.read_text())
    p = check(root)
    assert p.returncode == 1
    assert "src/model/gpt.cpp:1: includes trainrun/model/gone.h, which is not a public header" \
        in p.stdout


def test_a_plugin_file_naming_a_sim_header_fails(tmp_path):
    root = copy_tree(tmp_path)
    src = root / "kernels" / "attention.cu"
    src.write_text('#include "sim/include/sim_device.h"\n' + src.read_text())
    p = check(root)
    assert p.returncode == 1
    assert "kernels/attention.cu:1: includes \"sim/include/sim_device.h\" from kernels/sim/" \
        in p.stdout


def test_an_include_is_resolved_as_the_build_does(tmp_path):
    """kernels/ may include src/backend's plugin_api.h (the build gives it that folder); a name
    that resolves nowhere used to pass as if it were in the including file's folder."""
    root = copy_tree(tmp_path)
    assert check(root).returncode == 0  # cuda_backend.cpp's "plugin_api.h" resolves
    src = root / "kernels" / "attention.cu"
    src.write_text('#include "shard.h"\n' + src.read_text())  # src/data's private header
    p = check(root)
    assert p.returncode == 1
    assert "kernels/attention.cu:1: \"shard.h\" resolves nowhere the build looks" in p.stdout


def test_a_bare_std_mutex_fails(tmp_path):
    root = copy_tree(tmp_path)
    src = root / "src" / "train" / "watchdog.h"
    src.write_text(src.read_text().replace("  Mutex mu_;", "  std::mutex mu_;"))
    p = check(root)
    assert p.returncode == 1
    assert "src/train/watchdog.h" in p.stdout
    assert "a bare std::mutex: use Mutex/CondVar" in p.stdout


def test_an_inline_variable_defined_twice_fails(tmp_path):
    # Two headers' `inline constexpr ... kName` are one object: the linker keeps either value.
    root = copy_tree(tmp_path)
    h = root / "src" / "data" / "manifest.h"
    h.write_text(h.read_text().replace("kShardManifestName =", "kManifestName ="))
    p = check(root)
    assert p.returncode == 1
    assert "src/data/manifest.h" in p.stdout and "kManifestName" in p.stdout
    assert "src/checkpoint/checkpoint_folder.h" in p.stdout


def test_siblings_in_the_order_do_not_use_each_other(tmp_path):
    # plan and report are one level of the order: the report may not use the plan, nor the
    # plan the report.
    root = copy_tree(tmp_path)
    src = root / "src" / "report" / "report.cpp"
    src.write_text('#include "trainrun/plan/plan.h"\n' + src.read_text())
    p = check(root)
    assert p.returncode == 1
    assert "src/report/report.cpp:1: report includes trainrun/plan/plan.h (plan), its sibling" \
        in p.stdout


def test_the_rank_runtime_does_not_use_the_launcher(tmp_path):
    # launch/ is the launcher and supervisor; a rank's runtime (runtime/) comes before it, and
    # so does preflight/: neither may reach into the launcher.
    root = copy_tree(tmp_path)
    for rel in ("src/runtime/rank_env.cpp", "src/preflight/data_check.cpp"):
        src = root / rel
        src.write_text('#include "trainrun/launch/run_command.h"\n' + src.read_text())
    p = check(root)
    assert p.returncode == 1
    for rel, mine in (("src/runtime/rank_env.cpp", "runtime"),
                      ("src/preflight/data_check.cpp", "preflight")):
        assert f"{rel}:1: {mine} includes trainrun/launch/run_command.h (launch), which comes " \
            "later" in p.stdout


def test_train_uses_the_runtime_but_not_the_launcher(tmp_path):
    # launch | train are siblings: the trainer uses a rank's runtime (runtime/), never the
    # launcher, and the launcher is handed the trainer as a function.
    root = copy_tree(tmp_path)
    (root / "src" / "train" / "layering_probe.cpp").write_text(
        '#include "trainrun/runtime/stop_signals.h"\n#include "trainrun/launch/run_command.h"\n')
    (root / "src" / "launch" / "layering_probe.cpp").write_text(
        '#include "trainrun/train/trainer.h"\n')
    p = check(root)
    assert p.returncode == 1
    assert "src/train/layering_probe.cpp:1" not in p.stdout
    assert "src/train/layering_probe.cpp:2: train includes trainrun/launch/run_command.h " \
        "(launch), its sibling" in p.stdout
    assert "src/launch/layering_probe.cpp:1: launch includes trainrun/train/trainer.h (train), " \
        "its sibling" in p.stdout
