"""`rlvr report RUN_DIR`: a self-contained HTML page with one embedded PNG per chart, and it renders in Chromium."""

from __future__ import annotations

import json
import math
import re
import shutil
import struct
import subprocess

import pytest

from rlvr.cli import main

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
TRAINING_PLOT_IDS = [
    "plot-reward_mean", "plot-reward_components", "plot-entropy", "plot-response_len_mean", "plot-kl",
    "plot-clip_frac", "plot-reward_failures", "plot-loss", "plot-grad_norm", "plot-lr",
]
EVAL_PLOT_IDS = ["plot-eval-pass_at_k_by_step", "plot-compare-compare"]
ALL_PLOT_IDS = TRAINING_PLOT_IDS + EVAL_PLOT_IDS
IMG_TAG = re.compile(r"<img\b[^>]*>")


def _metric_row(step: int) -> dict:
    progress = step / 30
    return {
        "step": step, "reward_mean": 0.2 + 0.6 * progress, "reward_std": 0.3 - 0.1 * progress,
        "reward/correct": 0.1 + 0.7 * progress, "reward/format": 0.5 + 0.4 * progress,
        "entropy": 1.5 - progress, "response_len_mean": 120 + 40 * math.sin(step / 4), "kl": 0.002 * step,
        "clip_frac": 0.05 + 0.01 * math.cos(step), "reward_timeouts": int(step % 7 == 0), "reward_errors": int(step % 11 == 0),
        "loss": 0.5 * math.exp(-step / 10), "grad_norm": 1.0 + 0.2 * math.sin(step), "lr": 1e-6 * min(1.0, step / 5),
        "time_s": 1.5,
    }


def _summary(step: int, pass1: float) -> dict:
    def stat(value: float) -> dict:
        return {"value": value, "ci95": [value - 0.05, value + 0.05]}

    return {
        "pass@1": stat(pass1), "pass@4": stat(pass1 + 0.15), "maj@4": stat(pass1 + 0.05), "reward_mean": stat(pass1),
        "response_length": {"value": 143.2, "ci95": [130.0, 156.5]}, "n_tasks": 500, "samples_per_task": 4,
        "model": f"runs/demo/checkpoint-{step}", "data": "arithmetic:test", "step": step,
    }


def _comparison() -> dict:
    ks = [1, 2, 4, 8, 16]
    base = {str(k): min(1.0, 0.3 + 0.12 * i) for i, k in enumerate(ks)}
    trained = {str(k): min(1.0, 0.45 + 0.08 * i) for i, k in enumerate(ks)}
    return {
        "models": {"a": "models/base", "b": "runs/demo/checkpoint-30"}, "ks": ks,
        "curve": {"a": base, "b": trained},
        "ci95": {name: {k: [v - 0.04, v + 0.04] for k, v in curve.items()} for name, curve in (("a", base), ("b", trained))},
        "difference": {f"pass@{k}": {"value": trained[str(k)] - base[str(k)], "ci95": [trained[str(k)] - base[str(k)] - 0.03,
                                                                                      trained[str(k)] - base[str(k)] + 0.03]}
                       for k in ks},
        "n_tasks": 100,
    }


@pytest.fixture
def run_dir(tmp_path):
    """A fake run directory: 30 steps of metrics (one blank line among them), a config, two eval summaries, a comparison."""
    run = tmp_path / "run"
    (run / "eval").mkdir(parents=True)
    lines = [json.dumps(_metric_row(step)) for step in range(1, 31)]
    (run / "metrics.jsonl").write_text("\n".join(lines[:10]) + "\n\n" + "\n".join(lines[10:]) + "\n")
    (run / "config.yaml").write_text("model:\n  path: models/base  # <not a tag> & co\ntrain:\n  steps: 30\n")
    (run / "eval" / "step-10.json").write_text(json.dumps(_summary(10, 0.3)))
    (run / "eval" / "step-30.json").write_text(json.dumps(_summary(30, 0.5)))
    (run / "eval" / "compare.json").write_text(json.dumps(_comparison()))
    return run


@pytest.fixture
def report(run_dir, capsys):
    assert main(["report", str(run_dir)]) == 0
    html_path = run_dir / "report" / "report.html"
    assert capsys.readouterr().out.strip() == str(html_path)
    return html_path


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == PNG_MAGIC, "not a PNG file"
    return struct.unpack(">II", data[16:24])


def test_report_embeds_one_png_per_chart_and_writes_them_beside_it(report):
    page = report.read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*https?://""", page, re.I), "the page must load nothing from outside"
    assert "http://" not in page and "https://" not in page
    plots = [tag for tag in IMG_TAG.findall(page) if 'class="plot"' in tag]
    ids = [re.search(r'id="([^"]+)"', tag).group(1) for tag in plots]
    assert ids == ALL_PLOT_IDS
    for tag in plots:
        assert 'src="data:image/png;base64,' in tag
        assert re.search(r'alt="[^"]+"', tag)
    pngs = sorted(report.parent.glob("*.png"))
    assert sorted(p.stem for p in pngs) == sorted(i.removeprefix("plot-") for i in ALL_PLOT_IDS)
    for png in pngs:
        width, height = _png_size(png.read_bytes())
        assert width >= 400 and height >= 200
    # The config is shown escaped, and every eval file got its table.
    assert "&lt;not a tag&gt; &amp; co" in page
    for name in ("step-10.json", "step-30.json", "compare.json"):
        assert name in page
    assert "maj@4" in page and "95% CI" in page and "runs/demo/checkpoint-30" in page


def test_report_skips_absent_metrics_and_accepts_out_dir(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "reward_mean": s / 10}) + "\n" for s in range(5)))
    out = tmp_path / "elsewhere"
    assert main(["report", str(run), "--out", str(out)]) == 0
    page = (out / "report.html").read_text()
    assert re.findall(r'<img class="plot" id="([^"]+)"', page) == ["plot-reward_mean"]
    assert [p.name for p in out.glob("*.png")] == ["reward_mean.png"]
    assert not (run / "report").exists()


def test_report_of_evals_only(tmp_path):
    run = tmp_path / "run"
    (run / "eval").mkdir(parents=True)
    (run / "eval" / "compare.json").write_text(json.dumps(_comparison()))
    (run / "eval" / "notes.json").write_text(json.dumps({"hello": "world"}))
    assert main(["report", str(run)]) == 0
    page = (run / "report" / "report.html").read_text()
    assert re.findall(r'<img class="plot" id="([^"]+)"', page) == ["plot-compare-compare"]
    assert "notes.json" in page  # listed as not recognised, not an error


def test_missing_run_dir_exits_2_naming_it(tmp_path, capsys):
    missing = tmp_path / "no-such-run"
    assert main(["report", str(missing)]) == 2
    err = capsys.readouterr().err
    assert "rlvr report: error" in err and str(missing) in err


@pytest.mark.parametrize("metrics_text", [None, "", "\n\n"], ids=["missing", "empty", "blank-lines"])
def test_nothing_to_report_exits_2_naming_metrics_file(tmp_path, capsys, metrics_text):
    run = tmp_path / "run"
    run.mkdir()
    if metrics_text is not None:
        (run / "metrics.jsonl").write_text(metrics_text)
    assert main(["report", str(run)]) == 2
    assert str(run / "metrics.jsonl") in capsys.readouterr().err


def test_bad_json_line_exits_2_naming_file(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 1, "reward_mean": 0.5}\n{"step": 2, "rew\n')
    assert main(["report", str(run)]) == 2
    assert str(run / "metrics.jsonl") in capsys.readouterr().err


def _chromium() -> str:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("Chromium is not installed: apt-get install chromium (make test installs it as root)")
    return browser


def _run_chromium(browser: str, *args: str, tmp_path) -> subprocess.CompletedProcess:
    command = [browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
               "--no-first-run", "--hide-scrollbars", f"--user-data-dir={tmp_path / 'chromium-profile'}", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


def test_report_renders_in_headless_chromium(report, tmp_path):
    browser = _chromium()
    url = report.resolve().as_uri()
    dom = _run_chromium(browser, "--virtual-time-budget=5000", "--dump-dom", url, tmp_path=tmp_path)
    assert dom.returncode == 0, dom.stderr[-2000:]
    n = len(ALL_PLOT_IDS)
    assert f'data-plots-loaded="{n}"' in dom.stdout and f'data-plots-total="{n}"' in dom.stdout, (
        f"not every plot decoded in Chromium; body tag: {re.search(r'<body[^>]*>', dom.stdout)}"
    )
    assert len(re.findall(r'<img class="plot"', dom.stdout)) == n

    shot = tmp_path / "screenshot.png"
    result = _run_chromium(browser, f"--screenshot={shot}", "--window-size=1200,2400", url, tmp_path=tmp_path)
    assert shot.is_file(), f"Chromium wrote no screenshot: {result.stderr[-2000:]}"
    assert _png_size(shot.read_bytes()) == (1200, 2400)
    from PIL import Image  # matplotlib depends on Pillow

    with Image.open(shot) as image:
        colours = image.convert("RGB").resize((120, 240)).getcolors(maxcolors=120 * 240)
    # A blank page is one colour; charts, text and tables give many.
    assert len(colours) > 50, f"the screenshot looks blank ({len(colours)} colours)"
