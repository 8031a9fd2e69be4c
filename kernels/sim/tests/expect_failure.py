#!/usr/bin/env python3
"""Runs a command that must fail, and fail for the stated reason: exits 0 only when the command
exits non-zero and its output holds EXPECTED. A fault-injection test thus cannot pass because the
mutant failed to load or crashed for another reason.

    expect_failure.py EXPECTED -- COMMAND...
"""
import subprocess
import sys

expected = sys.argv[1]
assert sys.argv[2] == "--", "usage: expect_failure.py EXPECTED -- COMMAND..."
p = subprocess.run(sys.argv[3:], capture_output=True, text=True, timeout=1200)
out = p.stdout + p.stderr
tail = "\n".join(out.splitlines()[-25:])
if p.returncode == 0:
    sys.exit(f"the command passed, but the injected fault must fail it ({expected!r}):\n{tail}")
if expected not in out:
    sys.exit(f"the command failed (exit {p.returncode}) without {expected!r}:\n{tail}")
print(f"failed as it must (exit {p.returncode}), with {expected!r}:")
print("\n".join(l for l in out.splitlines() if expected in l)[:2000])
