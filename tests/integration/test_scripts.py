"""The setup scripts: a failed build says why on the terminal (issue: a silent exit 1)."""
import os
import subprocess

from conftest import REPO


def build(tmp_path, *meson_args):
    env = dict(os.environ, BUILD_DIR=str(tmp_path / "b"))
    return subprocess.run([str(REPO / "scripts" / "build.sh"), *meson_args], env=env,
                          capture_output=True, text=True, timeout=300)


def test_meson_setup_failure_shows_the_reason(tmp_path):
    p = build(tmp_path, "-Dno_such_option_zz=1")
    assert p.returncode == 1
    assert "meson setup failed" in p.stderr
    assert "no_such_option_zz" in p.stderr, p.stderr  # meson's own message, not just "failed"
    assert "meson-log.txt" in p.stderr


def test_compile_failure_shows_the_compiler_error(tmp_path):
    p = build(tmp_path, "-Dmarch=no-such-cpu-zz", "-Dcuda=disabled", "-Dtests=false")
    assert p.returncode == 1
    assert "failed" in p.stderr
    assert "no-such-cpu-zz" in p.stderr and "error" in p.stderr, p.stderr
