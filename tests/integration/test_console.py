"""The console's redrawn progress line on a real terminal (tmux, 80 and 140 columns): it fits the
width, so no wrapped fragment ("| 17 ms/step | ETA 1s") is left behind on the screen
(issue 32 part 1). tmux comes from scripts/setup.sh --test."""
import os
import shutil
import subprocess
import time

import pytest

from conftest import REPO, TINY, TRAINRUN, sets

QS = str(REPO / "configs" / "quickstart.yaml")


def screen_after_a_run(tmp_path, width):
    if not shutil.which("tmux"):
        pytest.fail("tmux is missing: scripts/setup.sh --test installs it")
    sock = f"trainrun-test-{os.getpid()}-{width}"
    cmd = " ".join([TRAINRUN, QS, *sets(*TINY, "train.steps=40", "logging.every=1"),
                    "--run-dir", str(tmp_path / f"r{width}"), "; echo RUN-ENDED; sleep 60"])
    tmux = ["tmux", "-L", sock, "-f", "/dev/null"]
    subprocess.run([*tmux, "new-session", "-d", "-x", str(width), "-y", "50", cmd], check=True,
                   env={k: v for k, v in os.environ.items() if k != "TMUX"})
    try:
        deadline = time.time() + 120
        screen = ""
        while time.time() < deadline:
            screen = subprocess.run([*tmux, "capture-pane", "-p", "-S", "-500"],
                                    capture_output=True, text=True).stdout
            if "RUN-ENDED" in screen:
                return screen.splitlines()
            time.sleep(0.2)
        pytest.fail(f"the run did not end in tmux:\n{screen}")
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)


@pytest.mark.parametrize("width", [80, 140])
def test_the_progress_line_fits_the_terminal(tmp_path, width):
    lines = screen_after_a_run(tmp_path, width)
    progress = [l for l in lines if "ms/step" in l or "tok/s" in l or "ETA " in l]
    assert progress, lines
    for l in progress:
        # Every line with progress fields is a whole line: it starts with its step (the
        # redrawn line) or a log prefix, never with a wrapped-over remainder.
        assert l.lstrip().startswith(("step ", "[")), f"a wrapped fragment at {width}:\n" + \
            "\n".join(lines)
        assert len(l) <= width
    if width == 140:  # wide enough for every field
        assert any("MFU" in l and "norm" in l for l in progress), lines
