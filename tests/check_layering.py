#!/usr/bin/env python3
"""The layering check: no concept includes one that comes later in the dependency order.

    tests/check_layering.py [--root DIR]     exit 0 when clean, 1 with one line per violation

Each library in src/ is one concept; the order below is the order of the subdir() calls in the
top-level meson.build, and a concept may use only those before it (and itself). A file's concept
is its folder: src/<concept>/..., kernels/ (the CUDA half of backend), src/main.cpp (cli). A
public header's concept is listed in PUBLIC; a private header (any .h beside the sources) may be
included only from its own folder. tests/ and bench/ may include anything. It also refuses a
bare std::mutex or std::condition_variable outside thread_annotations.h (see BARE_LOCK).
"""
import argparse
import pathlib
import re
import sys

ORDER = ["core", "comm", "backend", "model", "optim", "config", "data", "checkpoint", "obs",
         "plan", "launch", "train", "cluster", "cli"]

# include/trainrun/<header> -> the concept that owns it. A new public header must be added here.
PUBLIC = {
    "bf16.h": "core", "clock.h": "core", "crc32c.h": "core", "durable_file.h": "core", "dropout_mask.h": "core", "adamw_update.h": "core", "enum_names.h": "core",
    "errors.h": "core", "experiment.h": "core", "host_device.h": "core", "param_entry.h": "core",
    "rng.h": "core", "shard.h": "core", "state_buffer.h": "core", "tensor.h": "core", "thread_annotations.h": "core",
    "comm.h": "comm",
    "backend.h": "backend", "cuda_plugin.h": "backend",
    "model.h": "model", "params.h": "model", "flops.h": "model", "model_spec.h": "model",
    "model/activation.h": "model", "model/attention.h": "model", "model/block.h": "model",
    "model/embedding.h": "model", "model/layernorm.h": "model", "model/linear.h": "model",
    "model/mlp.h": "model", "model/rmsnorm.h": "model", "model/swiglu_mlp.h": "model",
    "model/llama_block.h": "model", "model/pre_norm_block.h": "model",
    "optimizer.h": "optim",
    "config.h": "config", "schema.h": "config",
    "data.h": "data", "markov.h": "data", "tokenizer.h": "data", "output_files.h": "data",
    "checkpoint.h": "checkpoint", "h5_handle.h": "checkpoint",
    "metrics.h": "obs", "trace.h": "obs", "stragglers.h": "obs", "tensorboard.h": "obs",
    "tb_events.h": "obs", "prometheus.h": "obs", "metrics_server.h": "obs",
    "plan.h": "plan", "report.h": "plan",
    "launch.h": "launch", "failure_record.h": "launch", "mpirun_failure.h": "launch",
    "run_command.h": "launch", "supervisor.h": "launch", "stop_signals.h": "launch",
    "omp_wait.h": "launch", "heartbeats.h": "launch",
    "trainer.h": "train",
    "cluster.h": "cluster",
    "cli.h": "cli",
}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
# Shared state is guarded by the annotated Mutex/CondVar (trainrun/thread_annotations.h), which
# Clang checks; a bare standard mutex would escape the check. The CPU-executed device
# (kernels/sim/) is exempt: a test device with its own fiber scheduler.
BARE_LOCK = re.compile(r'^[^/\n]*\bstd::(mutex|condition_variable|shared_mutex)\b', re.M)
LOCK_HOME = pathlib.PurePath("include/trainrun/thread_annotations.h")
SOURCES = ("*.h", "*.cpp", "*.cu", "*.cuh")


def concept_of_file(rel):
    parts = rel.parts
    if parts[0] == "kernels":
        return "backend"
    if parts[0] == "src":
        return "cli" if len(parts) == 2 else parts[1]
    if parts[:2] == ("include", "trainrun"):
        return PUBLIC.get("/".join(parts[2:]))
    return None


# The folders besides its own where the build finds a file's quoted includes, as meson.build
# files set them: kernels/ (the CUDA plugin and the CPU-executed device) are given src/backend
# (plugin_api.h, the plugin's contract with the loader, backend_private_inc) and the sim its
# stand-in toolkit headers.
PRIVATE_INCLUDES = {
    ("kernels",): ["src/backend"],
    ("kernels", "sim"): ["kernels/sim/include", "kernels", "src/backend"],
}


def resolve_private(root, path, rel, name):
    """The file a quoted #include names, searched as the compiler does; None when none is."""
    dirs = [path.parent]
    for prefix in sorted(PRIVATE_INCLUDES, key=len, reverse=True):
        if rel.parts[:len(prefix)] == prefix:
            dirs += [root / d for d in PRIVATE_INCLUDES[prefix]]
            break
    for d in dirs:
        if (d / name).is_file():
            return (d / name).resolve()
    return None


def check(root):
    problems = []
    rank = {c: i for i, c in enumerate(ORDER)}
    files = []
    for top in ("src", "kernels", "include"):
        for pattern in SOURCES:
            files += (root / top).rglob(pattern)
    for path in sorted(set(files)):
        rel = path.relative_to(root)
        mine = concept_of_file(rel)
        if rel.parts[0] == "include" and mine is None:
            problems.append(f"{rel}: public header not in PUBLIC of tests/check_layering.py: "
                            "add it with the concept that owns it")
            continue
        if mine not in rank:
            problems.append(f"{rel}: folder is not a concept in ORDER of tests/check_layering.py")
            continue
        text = path.read_text(errors="replace")
        if rel != LOCK_HOME and rel.parts[:2] != ("kernels", "sim"):
            for m in BARE_LOCK.finditer(text):
                line = text.count("\n", 0, m.start()) + 1
                problems.append(f"{rel}:{line}: a bare std::{m.group(1)}: use Mutex/CondVar from "
                                "trainrun/thread_annotations.h, so Clang checks what it guards")
        for m in INCLUDE.finditer(text):
            name = m.group(1)
            line = text.count("\n", 0, m.start()) + 1
            where = f"{rel}:{line}"
            if name.startswith("trainrun/"):
                theirs = PUBLIC.get(name[len("trainrun/"):])
                if theirs is None:
                    problems.append(f"{where}: includes {name}, which is not a listed public "
                                    "header")
                elif rank[theirs] > rank[mine]:
                    problems.append(f"{where}: {mine} includes {name} ({theirs}), which comes "
                                    f"later in the order {' < '.join(ORDER)}")
                continue
            # A private header: resolved as the compiler does (the file's own folder, then the
            # private include folders the build gives that part of the tree), it must lie in the
            # including file's own concept.
            target = resolve_private(root, path, rel, name)
            if target is None:
                problems.append(f"{where}: \"{name}\" resolves nowhere the build looks (its "
                                "folder, or the folders in PRIVATE_INCLUDES)")
                continue
            homes = [path.parent.resolve()]
            if rel.parts[0] == "src" and len(rel.parts) > 2:
                homes = [(root / "src" / rel.parts[1]).resolve()]
            elif rel.parts[0] == "kernels":
                homes = [(root / d).resolve() for d in ("kernels", "src/backend")]
            if not any(target.is_relative_to(h) for h in homes):
                problems.append(f"{where}: includes \"{name}\" from outside its own folder: "
                                "make it a public header (include/trainrun/) or move it")
            # The CPU-executed device (kernels/sim/) is test infrastructure: the plugin's sources
            # see its headers only as the toolkit's, through the include path, never by name.
            sim = (root / "kernels" / "sim").resolve()
            if target.is_relative_to(sim) and not path.resolve().is_relative_to(sim):
                problems.append(f"{where}: includes \"{name}\" from kernels/sim/, the "
                                "CPU-executed device: only its own files may name its headers")
    return problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=pathlib.Path(__file__).resolve().parents[1],
                    type=pathlib.Path)
    root = ap.parse_args().root.resolve()
    problems = check(root)
    for p in problems:
        print(p)
    if problems:
        print(f"layering: {len(problems)} violation(s)", file=sys.stderr)
        return 1
    print("layering: clean")
    return 0


if __name__ == "__main__":
    sys.exit(main())
