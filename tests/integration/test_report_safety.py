"""`trainrun report RUN_DIR` on a run directory it did not make itself (copied, unpacked, someone
else's): nothing read from it reaches gnuplot's script, the terminal or the page unescaped, its
config.yaml is checked as a run checks a config, its files are read only when they are regular
files (a FIFO or a link to /dev/zero is refused at once, not waited on or read forever), a link
at report.png is replaced and never written through, and an output it cannot write is a clear
error with its documented exit code (man trainrun, EXIT STATUS), never "internal error"."""
import json
import os
import pathlib
import shutil
import stat
import subprocess

import pytest

from conftest import REPO, TINY, run, sets

QS = str(REPO / "configs" / "quickstart.yaml")
# A report reads two small files and runs gnuplot once: well under a second. A hang (the bug: a
# FIFO blocked the open forever) shows as a timeout far above that.
HANG = 60
ESC = "\x1b"


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """One short run, shared: each test reports on a copy of its files."""
    rd = tmp_path_factory.mktemp("report-safety") / "run"
    run([QS, *sets(*TINY, "train.steps=4"), "--run-dir", str(rd)], check=0)
    return rd


def copy_run(finished, dst, config=True):
    dst = pathlib.Path(dst)
    dst.mkdir()
    shutil.copy(finished / "metrics.jsonl", dst)
    if config:
        shutil.copy(finished / "config.yaml", dst)
    return dst


def set_name(rd, name_yaml):
    """config.yaml with its `name:` line replaced by `name: NAME_YAML`."""
    cfg = rd / "config.yaml"
    lines = [f"name: {name_yaml}" if line.startswith("name:") else line
             for line in cfg.read_text().splitlines()]
    cfg.write_text("\n".join(lines) + "\n")


def add_event(rd, cause):
    with open(rd / "metrics.jsonl", "a") as f:
        f.write('{"kind":"event","step":2,"event":"restart","cause":%s}\n'
                % json.dumps(cause))


def test_a_name_breaking_out_of_gnuplots_string_is_refused_and_runs_nothing(finished, tmp_path):
    """A name with a newline closed gnuplot's string and ran the next line: system(...)."""
    rd = copy_run(finished, tmp_path / "r")
    set_name(rd, r'"x\nsystem(\"touch MARKER\")\n#"')
    p = run(["report", str(rd)], cwd=tmp_path, timeout=HANG)
    assert not (tmp_path / "MARKER").exists()
    assert p.returncode == 2, p.stderr
    assert f"{rd}/config.yaml" in p.stderr and "name" in p.stderr
    assert not (rd / "report.png").exists()


def test_a_run_directory_path_breaking_out_of_gnuplots_string_runs_nothing(finished, tmp_path):
    """Without a config.yaml the plot's title is the run directory's path, as given: a newline
    in it is shown escaped in the title, never read by gnuplot as a command."""
    name = 'r\nsystem("touch MARKER")\n#'
    rd = copy_run(finished, tmp_path / name, config=False)
    p = run(["report", name], cwd=tmp_path, timeout=HANG, check=0)
    assert not (tmp_path / "MARKER").exists(), p.stdout
    assert (rd / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_terminal_escapes_from_the_run_directory_are_printed_escaped(finished, tmp_path):
    rd = copy_run(finished, tmp_path / "r")
    add_event(rd, f"{ESC}]0;owned\x07{ESC}[2J killed")
    p = run(["report", str(rd)], timeout=HANG, check=0)
    assert ESC not in p.stdout and "\x07" not in p.stdout
    assert "\\x1b]0;owned\\x07\\x1b[2J killed" in p.stdout

    # A name is letters, digits, . _ - (as for a run): one with an escape is refused, and the
    # refusal quotes it escaped.
    set_name(rd, r'"a\e[31mred"')
    p = run(["report", str(rd)], timeout=HANG)
    assert p.returncode == 2, p.stdout
    assert ESC not in p.stdout + p.stderr
    assert "\\x1b" in p.stderr and "config.yaml" in p.stderr


def test_the_page_escapes_what_the_run_directory_holds(finished, tmp_path):
    rd = copy_run(finished, tmp_path / "r")
    add_event(rd, "<script>alert(1)</script>")
    run(["report", str(rd), "--html"], timeout=HANG, check=0)
    page = (rd / "report.html").read_text()
    assert "<script" not in page.lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page

    set_name(rd, '"<b>bold</b>"')  # not a name a run takes: refused before any page is made
    (rd / "report.html").unlink()
    p = run(["report", str(rd), "--html"], timeout=HANG)
    assert p.returncode == 2 and "config.yaml" in p.stderr
    assert not (rd / "report.html").exists()


@pytest.mark.parametrize("name", ["config.yaml", "metrics.jsonl"])
def test_a_fifo_in_the_run_directory_is_refused_not_waited_on(finished, tmp_path, name):
    rd = copy_run(finished, tmp_path / "r")
    (rd / name).unlink()
    os.mkfifo(rd / name)
    p = run(["report", str(rd)], timeout=HANG)  # was: blocked in open(2) forever
    assert p.returncode == 73, p.stderr
    assert f"{rd / name} is a FIFO" in p.stderr


def test_metrics_jsonl_linked_to_dev_zero_is_refused(finished, tmp_path):
    """It was read without end (2.2 GB in 3 s) until the memory ran out."""
    rd = copy_run(finished, tmp_path / "r")
    (rd / "metrics.jsonl").unlink()
    (rd / "metrics.jsonl").symlink_to("/dev/zero")
    p = run(["report", str(rd)], timeout=HANG)
    assert p.returncode == 73, p.stderr
    assert "metrics.jsonl is a character device (through a symbolic link)" in p.stderr


def test_a_link_loop_is_named_not_an_internal_error(finished, tmp_path):
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    p = run(["report", str(loop)], timeout=HANG)
    assert p.returncode == 2 and f"cannot read {loop}: Too many levels" in p.stderr, p.stderr
    rd = copy_run(finished, tmp_path / "r")
    (rd / "metrics.jsonl").unlink()
    (rd / "metrics.jsonl").symlink_to(rd / "metrics.jsonl")
    p = run(["report", str(rd)], timeout=HANG)
    assert p.returncode == 73 and "metrics.jsonl: Too many levels" in p.stderr, p.stderr


def test_an_oversized_metrics_jsonl_is_refused_before_it_is_read(finished, tmp_path):
    rd = copy_run(finished, tmp_path / "r")
    with open(rd / "metrics.jsonl", "r+b") as f:
        f.truncate(5 << 30)  # sparse: no disk used, 5 GiB of zeros without a newline
    p = run(["report", str(rd)], timeout=HANG)
    assert p.returncode == 73, p.stderr
    assert "metrics.jsonl is larger than the 4 GiB" in p.stderr


def test_links_at_the_report_files_are_replaced_not_written_through(finished, tmp_path):
    rd = copy_run(finished, tmp_path / "r")
    mine = tmp_path / "mine.txt"
    mine.write_text("the user's own file\n")
    for name in ("report.png", "report.html"):
        (rd / name).symlink_to(mine)
    run(["report", str(rd), "--html"], timeout=HANG, check=0)
    assert mine.read_text() == "the user's own file\n"
    assert not (rd / "report.png").is_symlink() and not (rd / "report.html").is_symlink()
    assert (rd / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "<!DOCTYPE html>" in (rd / "report.html").read_text()


def test_out_to_a_fifo_is_refused(finished, tmp_path):
    rd = copy_run(finished, tmp_path / "r")
    fifo = tmp_path / "plot.png"
    os.mkfifo(fifo)
    p = run(["report", str(rd), "--out", str(fifo), "--force"], timeout=HANG)
    assert p.returncode == 2, p.stderr
    assert str(fifo) in p.stderr and "FIFO" in p.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def read_only_wrap(path):
    """(command prefix, undo): under the prefix `path` is read-only, for root too (root ignores
    a mode of 0555). Root: a read-only bind mount in a mount namespace of the command's own
    (unshare -m, so nothing outlives it), else `chattr +i`; anyone else: chmod 0555."""
    if os.geteuid() != 0:
        path.chmod(0o555)
        return (), lambda: path.chmod(0o755)
    bind = ("unshare", "-m", "sh", "-c", 'mount --bind -o ro "$0" "$0" && exec "$@"', str(path))
    probe = subprocess.run([*bind, "sh", "-c", f'! touch "{path}/.probe" 2>/dev/null'],
                           capture_output=True)
    if probe.returncode == 0:
        return bind, lambda: None
    if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode == 0:
        return (), lambda: subprocess.run(["chattr", "-i", str(path)], check=True)
    pytest.skip("as root here neither a read-only bind mount (unshare -m) nor chattr +i works: "
                "no way to make a directory read-only")


def test_a_read_only_run_directory_is_an_output_error_naming_the_fix(finished, tmp_path):
    rd = copy_run(finished, tmp_path / "r")
    wrap, undo = read_only_wrap(rd)
    try:
        p = run(["report", str(rd)], wrap=wrap, timeout=HANG)
        assert p.returncode == 74, p.stderr  # was 1, "internal error (a bug)"
        assert f"cannot write {rd}/report.png" in p.stderr and "--out" in p.stderr
        assert "steps" in p.stdout  # the summary needs no write

        p = run(["report", str(rd), "--html"], wrap=wrap, timeout=HANG)
        assert p.returncode == 74, p.stderr
        assert f"cannot write {rd}/report.html" in p.stderr and "copy the run" in p.stderr

        p = run(["report", str(rd), "--out", str(rd / "p.png")], wrap=wrap, timeout=HANG)
        assert p.returncode == 74 and "choose another --out" in p.stderr, p.stderr

        # Elsewhere it is drawn.
        out = tmp_path / "elsewhere.png"
        run(["report", str(rd), "--out", str(out)], wrap=wrap, timeout=HANG, check=0)
        assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    finally:
        undo()
    assert sorted(x.name for x in rd.iterdir()) == ["config.yaml", "metrics.jsonl"]


def test_a_missing_tmpdir_is_an_output_error_naming_it(finished, tmp_path):
    rd = copy_run(finished, tmp_path / "r")
    gone = tmp_path / "gone"
    p = run(["report", str(rd)], env={"TMPDIR": str(gone)}, timeout=HANG)
    assert p.returncode == 74, p.stderr  # was 1, "internal error (a bug)"
    assert str(gone) in p.stderr and "set TMPDIR" in p.stderr
    assert not (rd / "report.png").exists()
