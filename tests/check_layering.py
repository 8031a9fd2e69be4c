#!/usr/bin/env python3
"""The layering check: no concept includes one that comes later in the dependency order.

    tests/check_layering.py [--root DIR]     exit 0 when clean, 1 with one line per violation

Each library in src/ is one concept; the order below is the order of the subdir() calls in the
top-level meson.build, and a concept may use only those before it (and itself). Concepts grouped
in one level of the order are siblings: neither may use the other. A file's concept
is its folder: src/<concept>/..., kernels/ (the CUDA half of backend), src/main.cpp (cli), and
include/trainrun/<concept>/... for the public headers, so a header's path names its owner; a
private header (any .h beside the sources) may be included only from its own folder. tests/ and bench/ may include anything. It also refuses a
bare std::mutex or std::condition_variable outside thread_annotations.h (see BARE_LOCK), and two
namespace-scope inline variables of one name in different headers (see INLINE_VAR).
"""
import argparse
import pathlib
import re
import sys

# A tuple is one level of siblings that do not use each other: plan and report are both offline
# analysis, and neither needs the other; train uses the rank's runtime, never the launcher, and
# the launcher is handed the trainer as a function (run_command's RankMain).
LEVELS = ["core", "comm", "backend", "model", "optim", "config", "data", "checkpoint", "obs",
          "runtime", ("plan", "report", "hf"), "preflight", ("launch", "train"), "cluster", "sweep", "cli"]
ORDER = [c for level in LEVELS for c in (level if isinstance(level, tuple) else (level,))]
ORDER_TEXT = " < ".join(" | ".join(level) if isinstance(level, tuple) else level
                        for level in LEVELS)

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
# Shared state is guarded by the annotated Mutex/CondVar (trainrun/core/thread_annotations.h), which
# Clang checks; a bare standard mutex would escape the check. The CPU-executed device
# (kernels/sim/) is exempt: a test device with its own fiber scheduler.
BARE_LOCK = re.compile(r'^[^/\n]*\bstd::(mutex|condition_variable|shared_mutex)\b', re.M)
# An inline variable is one object program-wide: two headers defining `inline constexpr ... kName`
# with different values in one namespace break the one-definition rule silently, and the linker
# keeps either (a checkpoint folder's MANIFEST once became the shards' manifest.json that way).
INLINE_VAR = re.compile(r'^inline\s+constexpr\s[^=;(]*?\b(k[A-Za-z0-9_]+)\s*(?:=|\{)', re.M)
LOCK_HOME = pathlib.PurePath("include/trainrun/core/thread_annotations.h")
SOURCES = ("*.h", "*.cpp", "*.cu", "*.cuh")


def concept_of_file(rel):
    parts = rel.parts
    if parts[0] == "kernels":
        return "backend"
    if parts[0] == "src":
        return "cli" if len(parts) == 2 else parts[1]
    if parts[:2] == ("include", "trainrun"):
        return public_concept(parts[2:])
    return None


def public_concept(parts):
    """include/trainrun/<concept>/...: the folder names the concept that owns the header."""
    return parts[0] if len(parts) > 1 and parts[0] in ORDER else None


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
        # A header the build generates from NAME.in beside it (meson's configure_file, vcs_tag).
        if (d / (name + ".in")).is_file():
            return (d / (name + ".in")).resolve()
    return None


def check(root):
    problems = []
    rank = {c: i for i, level in enumerate(LEVELS)
            for c in (level if isinstance(level, tuple) else (level,))}
    files = []
    for top in ("src", "kernels", "include"):
        for pattern in SOURCES:
            files += (root / top).rglob(pattern)
    inline_vars = {}
    for path in sorted(set(files)):
        rel = path.relative_to(root)
        if path.suffix == ".h":
            text = path.read_text(errors="replace")
            for m in INLINE_VAR.finditer(text):
                line = text.count("\n", 0, m.start()) + 1
                first = inline_vars.setdefault(m.group(1), f"{rel}:{line}")
                if first != f"{rel}:{line}":
                    problems.append(f"{rel}:{line}: inline variable {m.group(1)} is also defined "
                                    f"at {first}: one object program-wide; rename one")
        mine = concept_of_file(rel)
        if rel.parts[0] == "include" and mine is None:
            problems.append(f"{rel}: public header outside a concept's folder: move it to "
                            "include/trainrun/<concept>/ of the concept that owns it")
            continue
        if mine not in rank:
            problems.append(f"{rel}: folder is not a concept in ORDER of tests/check_layering.py")
            continue
        text = path.read_text(errors="replace")
        if rel != LOCK_HOME and rel.parts[:2] != ("kernels", "sim"):
            for m in BARE_LOCK.finditer(text):
                line = text.count("\n", 0, m.start()) + 1
                problems.append(f"{rel}:{line}: a bare std::{m.group(1)}: use Mutex/CondVar from "
                                "trainrun/core/thread_annotations.h, so Clang checks what it guards")
        for m in INCLUDE.finditer(text):
            name = m.group(1)
            line = text.count("\n", 0, m.start()) + 1
            where = f"{rel}:{line}"
            if name.startswith("trainrun/"):
                theirs = public_concept(name.split("/")[1:])
                if theirs is None or not (root / "include" / name).is_file():
                    problems.append(f"{where}: includes {name}, which is not a public header "
                                    "(include/trainrun/<concept>/...)")
                elif rank[theirs] > rank[mine]:
                    problems.append(f"{where}: {mine} includes {name} ({theirs}), which comes "
                                    f"later in the order {ORDER_TEXT}")
                elif theirs != mine and rank[theirs] == rank[mine]:
                    problems.append(f"{where}: {mine} includes {name} ({theirs}), its sibling "
                                    f"in the order {ORDER_TEXT}: neither may use the other")
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
