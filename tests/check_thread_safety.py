#!/usr/bin/env python3
"""Compiles every source that uses trainrun/core/thread_annotations.h with Clang's thread-safety
analysis as an error, using the flags Meson recorded for it.

    tests/check_thread_safety.py BUILD_DIR [--extra FILE ...] [--only-extra]

GCC builds the project; these annotations are only checked by Clang, so this runs clang++
-fsyntax-only beside the real build. --extra compiles more files with the flags of the first
annotated source (the tests use it to prove a wrong lock is caught); --only-extra compiles those
alone (the unit suite checks the tree, so the tests need not again: 17 s each).
"""
import argparse
import json
import pathlib
import re
import shlex
import subprocess
import sys

HEADER = "trainrun/core/thread_annotations.h"
FLAGS = ["-fsyntax-only", "-Wthread-safety", "-Werror=thread-safety",
         "-Wno-unknown-warning-option"]


def uses_annotations(src):
    """The source, or a header beside it that it includes, includes the annotations."""
    text = src.read_text(errors="replace")
    if HEADER in text:
        return True
    for name in re.findall(r'^\s*#\s*include\s+"([^"/]+\.h)"', text, re.M):
        h = src.parent / name
        if h.is_file() and HEADER in h.read_text(errors="replace"):
            return True
    return False


def clang_args(entry):
    args = entry.get("arguments") or shlex.split(entry["command"])
    out, skip = ["clang++"], False
    for a in args[1:]:
        if skip:
            skip = False
        elif a in ("-o", "-MQ", "-MF"):
            skip = True
        elif a == "-c":
            pass
        elif a in ("-MD", "-Werror") or a.startswith("-fdiagnostics-color"):
            pass
        else:
            out.append(a)
    return out


def compile_one(entry, src, cwd):
    args = [a for a in clang_args(entry) if a != entry["file"]] + FLAGS + [str(src)]
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build_dir", type=pathlib.Path)
    ap.add_argument("--extra", nargs="*", default=[], type=pathlib.Path)
    ap.add_argument("--only-extra", action="store_true")
    a = ap.parse_args()
    db = json.loads((a.build_dir / "compile_commands.json").read_text())
    chosen, seen = [], set()
    for e in db:
        src = (pathlib.Path(e["directory"]) / e["file"]).resolve()
        if src.suffix == ".cpp" and src not in seen and uses_annotations(src):
            seen.add(src)
            chosen.append((e, src))
    if not chosen:
        print("thread-safety: no source uses " + HEADER, file=sys.stderr)
        return 1
    jobs = [] if a.only_extra else chosen
    jobs += [(chosen[0][0], f.resolve()) for f in a.extra]
    failed = 0
    for entry, src in jobs:
        p = compile_one(entry, src, entry["directory"])
        status = "ok" if p.returncode == 0 else "FAILED"
        print(f"thread-safety {status}: {src}")
        if p.returncode != 0:
            failed += 1
            print(p.stdout + p.stderr)
    print(f"thread-safety: {len(jobs) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
