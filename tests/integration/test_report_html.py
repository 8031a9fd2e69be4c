"""`trainrun report RUN_DIR --html`: one self-contained page (nothing to fetch, no script) with
the run's numbers, its events and its curves, rendered by a real browser (Debian's Chromium,
headless) into a screenshot that shows the plotted lines."""
import re
import subprocess

from PIL import Image

from conftest import REPO, TINY, metrics, run, sets

QS = str(REPO / "configs/quickstart.yaml")
TRAIN_BLUE = (0x1F, 0x77, 0xB4)  # the train-loss line (src/report/report_html.cpp)
LR_GREEN = (0x2C, 0xA0, 0x2C)


def near(pixel, colour, tol=24):
    return all(abs(a - b) <= tol for a, b in zip(pixel, colour))


def test_html_report_has_the_numbers_and_renders_in_chromium(tmp_path):
    rd = tmp_path / "r"
    run([QS, *sets(*TINY, "train.steps=16", "train.eval_every=8", "train.eval_steps=2"),
         "--run-dir", str(rd)], env={"TRAINRUN_FAULTS": "nan:step=6"}, check=0)
    p = run(["report", str(rd), "--html"], check=0)
    page = rd / "report.html"
    assert str(page) in p.stdout
    assert (rd / "report.png").exists()  # the PNG is still drawn
    html = page.read_text()

    # Self-contained: no script, nothing loaded from anywhere.
    assert "<script" not in html.lower()
    assert not re.search(r"""\b(src|href)\s*=""", html)
    assert "url(" not in html and "@import" not in html
    assert html.count("<svg") == 4

    train, evals = metrics(rd), metrics(rd, "eval")
    last = train[-1]
    assert "16 / 16 (100%)" in html
    assert f"{last['loss']:.4f} at step 16" in html
    assert f"final {evals[-1]['val_loss']:.4f} (step 16)" in html
    assert "bad_step" in html  # the events table
    assert re.search(r"bad steps</td><td>\d+ \(steps 6\b", html)  # the summary, as a table

    shot = tmp_path / "shot.png"
    b = subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu",
                        "--disable-dev-shm-usage", "--hide-scrollbars", "--window-size=1200,1500",
                        f"--screenshot={shot}", page.as_uri()],
                       capture_output=True, text=True, timeout=180)
    assert shot.exists() and shot.stat().st_size > 10_000, b.stderr[-3000:]
    img = Image.open(shot).convert("RGB")
    assert img.size == (1200, 1500)
    pixels = list(img.getdata())
    assert len(set(pixels)) > 50  # not a blank or single-colour page
    assert sum(near(px, TRAIN_BLUE) for px in pixels) > 150  # the loss curve was drawn
    assert sum(near(px, LR_GREEN) for px in pixels) > 150  # and the learning rate


def test_html_report_of_a_missing_run_is_a_usage_error(tmp_path):
    p = run(["report", str(tmp_path / "missing"), "--html"], check=2)
    assert "missing" in p.stderr
    assert not (tmp_path / "missing").exists()


def test_plots_have_axis_titles_whole_step_ticks_and_mark_rollbacks(tmp_path):
    """A 3-step run ticks steps 1, 2, 3 (never 1.5); every chart names its axes with units; a
    rollback is marked on the curves, once per chart, in the HTML and in gnuplot's script."""
    short = tmp_path / "short"
    run([QS, *sets(*TINY, "train.steps=3", "logging.every=1"), "--run-dir", str(short)])
    run(["report", str(short), "--html"])
    html = (short / "report.html").read_text()
    for title in ("loss (nats per token)", "learning rate", "tokens per second",
                  "gradient L2 norm (before clipping)"):
        assert f">{title}</text>" in html, title
    assert html.count('class="axis">step</text>') == 4
    x_ticks = re.findall(r'text-anchor="middle">([^<]+)</text>', html)
    assert x_ticks and all(re.fullmatch(r"\d+", t) for t in x_ticks if t != "step"), x_ticks
    assert 'class="mark"' not in html  # nothing interrupted this run

    rolled = tmp_path / "rolled"
    run([QS, *sets(*TINY, "train.steps=12", "checkpoint.every=4", "logging.every=1",
                   "fault_tolerance.max_bad_steps=2"), "--run-dir", str(rolled)],
        env={"TRAINRUN_FAULTS": "nan:from=6"}, check=7)
    events = metrics(rolled, "event")
    steps = {e["step"] for e in events if e["event"] == "rollback"}
    assert len(steps) == 1 and len([e for e in events if e["event"] == "rollback"]) == 2
    run(["report", str(rolled), "--html"])
    html = (rolled / "report.html").read_text()
    assert html.count('class="mark">rollback</text>') == 4  # one per chart, not one per event
