"""tests/check_thread_safety.py catches a guarded member touched without its lock (the unit suite
runs it over the tree itself)."""
import subprocess
import sys

from conftest import REPO

CHECK = REPO / "tests" / "check_thread_safety.py"

SOURCE = """
#include "trainrun/core/thread_annotations.h"
namespace {
struct Counter {
  trainrun::Mutex mu;
  int n GUARDED_BY(mu) = 0;
  void good() { trainrun::MutexLock lock(mu); ++n; }
  void BODY
};
}  // namespace
int main() { Counter c; c.good(); return 0; }
"""


def check(tmp_path, body):
    src = tmp_path / "counter.cpp"
    src.write_text(SOURCE.replace("BODY", body))
    return subprocess.run([sys.executable, str(CHECK), str(REPO / "build"), "--extra", str(src),
                           "--only-extra"],
                          capture_output=True, text=True, timeout=300)


def test_unlocked_access_fails(tmp_path):
    p = check(tmp_path, "bad() { ++n; }")
    assert p.returncode == 1, p.stdout + p.stderr
    assert "counter.cpp" in p.stdout and "requires holding mutex 'mu'" in p.stdout, p.stdout


def test_locked_access_passes(tmp_path):
    p = check(tmp_path, "also_good() { trainrun::MutexLock lock(mu); n = 0; }")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "0 failed" in p.stdout
