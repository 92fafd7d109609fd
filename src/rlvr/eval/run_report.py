"""`rlvr report RUN_DIR`: one self-contained HTML page for a run (training curves, eval tables, pass@k curves).

The page embeds every chart as a base64 PNG data: URI and loads nothing from outside, so it opens offline and
can be mailed as one file; the same PNGs are also written beside it. Inputs, all read from the run directory:

    metrics.jsonl   one JSON object per step; each known metric present is plotted against "step"
    config.yaml     shown verbatim
    eval/*.json     either `rlvr eval` summaries ({"pass@1": {"value", "ci95"}, ...}, optionally with "step")
                    or model comparisons ({"models", "ks", "curve", "ci95", "difference"}); told apart by their keys
    eval/*.images.jsonl   images shown to the model (rows {"task_id", "question", "reference", "png_base64"}, as
                    `rlvr demo --vlm` writes for a few held-out tasks): each is shown with the model's answer to it
                    in every eval/*.tasks.jsonl that has its task (e.g. before and after RL)

Everything these files hold is shown as text, never as markup: escaped, with control characters written as visible
escapes, and bounded (``MAX_TEXT`` characters per shown value, ``MAX_CONFIG`` of the config, ``MAX_ROWS`` table
rows, ``MAX_SERIES`` lines per chart, ``MAX_POINTS`` points per line, images up to ``MAX_IMAGE_BASE64`` characters),
so the page of a run with hostile samples or metrics is small and written in time linear in its inputs. Numbers
that are not finite (NaN, inf) or larger than ``MAX_ABS`` are left out of charts and tables. A file that is not
valid JSON (JSON lines) is one error naming it (and the line).
"""

from __future__ import annotations

import base64
import html
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlvr.errors import UserError
from rlvr.eval.plots import plot_metrics_by_step, plot_pass_at_k_curves

MAX_TEXT = 500  # characters of one shown value (a question, an answer, a name); the rest is counted, not shown
MAX_CONFIG = 50_000  # characters of config.yaml shown
MAX_ROWS = 200  # rows of one table (metrics of a summary, models of a comparison, images' answers)
MAX_SERIES = 12  # lines in one chart (e.g. reward/ components) and models in one comparison chart
MAX_POINTS = 2_000  # points of one line: longer series are thinned evenly (the first and last point kept)
MAX_IMAGE_BASE64 = 2_000_000  # characters of one shown image's base64 PNG
MAX_EVAL_FILES = 200  # eval/*.json files read
MAX_DIGITS = 300  # an integer with more digits is read as infinite (and left out) instead of parsed
MAX_ABS = 1e100  # larger magnitudes are left out: an axis spanning -1e308..1e308 cannot be drawn

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")
_BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")


def _text(value: Any, cap: int = MAX_TEXT) -> str:
    """``value`` as escaped HTML text: at most ``cap`` characters of it, control characters (and lone surrogates)
    as visible ``\\xNN`` escapes, the count of what was cut said after it."""
    text = value if isinstance(value, str) else str(value)
    cut = len(text) - cap
    text = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text[:cap] if cut > 0 else text)
    return html.escape(text) + (f" … ({cut} more characters)" if cut > 0 else "")


def _label(value: Any) -> str:
    """A chart label: short, plain (matplotlib reads $...$ as math, and a bad formula fails the drawing)."""
    text = _CONTROL.sub("?", str(value)[:80]).replace("$", r"\$")
    return text if not text.startswith("_") else " " + text  # matplotlib hides labels starting with "_"


def _int_or_inf(digits: str) -> int | float:
    if len(digits.lstrip("-")) > MAX_DIGITS:
        return -math.inf if digits.startswith("-") else math.inf
    return int(digits)


def _loads(text: str, where: str) -> Any:
    try:
        return json.loads(text, parse_int=_int_or_inf)
    except json.JSONDecodeError as exc:
        raise UserError(f"{where}: invalid JSON: {exc.msg} (column {exc.colno})") from None
    except RecursionError:
        raise UserError(f"{where}: invalid JSON: nested too deeply") from None
    except ValueError as exc:
        raise UserError(f"{where}: invalid JSON: {exc}") from None


def _read_text(path: Path) -> str:
    if not path.is_file():  # a FIFO or a device would block or never end
        raise UserError(f"{path}: not a regular file")
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: not valid UTF-8 (byte {exc.start})") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read: {exc.strerror or exc}") from None


def _read_json(path: Path) -> Any:
    return _loads(_read_text(path), str(path))


def read_jsonl(path: Path) -> list[Any]:
    """Every non-blank line of a JSON lines file; a bad line is a UserError naming the file and line."""
    return [_loads(line, f"{path}:{n}") for n, line in enumerate(_read_text(path).splitlines(), start=1)
            if line.strip()]


@dataclass(frozen=True)
class TrainingChart:
    """One chart of training metrics: the metric keys it plots (all on one set of axes) and how it is labelled."""

    name: str
    title: str
    ylabel: str
    keys: tuple[str, ...] = ()
    key_prefix: str | None = None  # plot every metric whose key starts with this, instead of ``keys``
    cumulative: bool = False  # the metrics are running totals; the chart shows each step's increment


# The charts of metrics.jsonl, in page order. A chart whose metrics are all absent is left out.
TRAINING_CHARTS = (
    TrainingChart("reward_mean", "Mean reward per step", "reward", keys=("reward_mean",)),
    TrainingChart("reward_components", "Reward components (per-component means)", "reward", key_prefix="reward/"),
    TrainingChart("entropy", "Policy entropy", "nats per token", keys=("entropy",)),
    TrainingChart("response_len_mean", "Mean response length", "tokens", keys=("response_len_mean",)),
    TrainingChart("kl", "KL divergence to the reference policy", "KL", keys=("kl",)),
    TrainingChart("clip_frac", "Fraction of tokens clipped", "fraction", keys=("clip_frac",)),
    TrainingChart("reward_failures", "Reward-runner failures per step", "count", keys=("reward_timeouts", "reward_errors"),
                  cumulative=True),
    TrainingChart("loss", "Loss", "loss", keys=("loss",)),
    TrainingChart("grad_norm", "Gradient norm (before clipping)", "norm", keys=("grad_norm",)),
    TrainingChart("lr", "Learning rate", "lr", keys=("lr",)),
)
REWARD_STD_KEY = "reward_std"  # drawn as a band of mean +- std on the reward_mean chart


@dataclass(frozen=True)
class RenderedChart:
    """A PNG written to disk, with the id and alt text its <img> gets in the page."""

    element_id: str
    alt: str
    png: Path


def _is_number(value: Any) -> bool:
    """A finite number of magnitude up to ``MAX_ABS`` (NaN, inf and larger numbers are not)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value) and abs(value) <= MAX_ABS
    except OverflowError:
        return False


def _thin(points: list) -> list:
    """At most ``MAX_POINTS`` of ``points``, evenly spaced, the first and last kept."""
    if len(points) <= MAX_POINTS:
        return points
    step = (len(points) - 1) / (MAX_POINTS - 1)
    return [points[round(i * step)] for i in range(MAX_POINTS)]


def _series(rows: list[dict[str, Any]], key: str) -> tuple[list[float], list[float]]:
    """(steps, values) of ``key`` over the rows that carry a numeric value for it (thinned to ``MAX_POINTS``)."""
    points = _thin([(row["step"], row[key]) for row in rows if _is_number(row.get("step")) and _is_number(row.get(key))])
    return [s for s, _ in points], [v for _, v in points]


def per_step(totals: list[float]) -> list[float]:
    """Increments of a running total (the first value is its own increment)."""
    return [b - a for a, b in zip([0.0] + totals[:-1], totals)]


def _safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "chart"


def _training_charts(rows: list[dict[str, Any]], out_dir: Path) -> list[RenderedChart]:
    present = {key for row in rows for key, value in row.items() if key != "step" and _is_number(value)}
    charts = []
    for spec in TRAINING_CHARTS:
        keys = sorted(k for k in present if k.startswith(spec.key_prefix)) if spec.key_prefix else [k for k in spec.keys if k in present]
        if not keys:
            continue
        keys = keys[:MAX_SERIES]
        series = {key: _series(rows, key) for key in keys}
        if spec.cumulative:  # the metrics are running totals: plot what each step added
            series = {key: (steps, per_step(values)) for key, (steps, values) in series.items()}
        bands = {}
        if spec.name == "reward_mean":
            # The std band is drawn only when every plotted step has one, so the line never loses points for it.
            plotted = [r for r in rows if _is_number(r.get("step")) and _is_number(r.get("reward_mean"))]
            if plotted and all(_is_number(r.get(REWARD_STD_KEY)) for r in plotted):
                plotted = _thin(plotted)
                means, stds = [r["reward_mean"] for r in plotted], [r[REWARD_STD_KEY] for r in plotted]
                bands = {"reward_mean": ([m - s for m, s in zip(means, stds)], [m + s for m, s in zip(means, stds)])}
        labels = {key: _label(key) for key in keys}
        series = {labels[key]: points for key, points in series.items()}
        bands = {labels[key]: band for key, band in bands.items()}
        png = plot_metrics_by_step(out_dir / f"{spec.name}.png", series, title=spec.title, ylabel=spec.ylabel, bands=bands)
        charts.append(RenderedChart(f"plot-{spec.name}", f"{spec.title}: {', '.join(keys)} against step", png))
    return charts


# --- eval/*.json ---------------------------------------------------------------------------------------------


def _is_metric_entry(value: Any) -> bool:
    return isinstance(value, dict) and _is_number(value.get("value"))


def _is_pair(value: Any) -> bool:
    """A (low, high) interval of two finite numbers."""
    return isinstance(value, (list, tuple)) and len(value) == 2 and all(_is_number(v) for v in value)


def _is_comparison(data: Any) -> bool:
    """A model comparison: {"models": {...}, "curve": {model: {k: pass@k}}, ...}."""
    if not isinstance(data, dict):
        return False
    curve = data.get("curve")
    return (isinstance(data.get("models"), dict) and isinstance(curve, dict) and bool(curve)
            and all(isinstance(c, dict) and c for c in curve.values()))


def _is_summary(data: Any) -> bool:
    """An `rlvr eval` summary: some key maps to {"value": number, "ci95": [low, high]}."""
    return isinstance(data, dict) and not _is_comparison(data) and any(_is_metric_entry(v) for v in data.values())


def _load_eval_files(eval_dir: Path, extra: Sequence[str | Path] = ()) -> list[tuple[Path, dict[str, Any]]]:
    paths = sorted(p for p in eval_dir.glob("*.json") if p.is_file())[:MAX_EVAL_FILES] if eval_dir.is_dir() else []
    for path in map(Path, extra):
        if not path.is_file():
            raise FileNotFoundError(f"--eval {path}: no such file (expected an `rlvr eval --out` summary or comparison)")
        paths.append(path)
    return [(path, _read_json(path)) for path in paths]


def _k_of(metric: str) -> int | None:
    match = re.fullmatch(r"pass@(\d{1,9})", metric)
    return int(match.group(1)) if match else None


def _is_fraction_metric(metric: str) -> bool:
    return bool(re.fullmatch(r"(pass|maj)@\d+", metric))


def _format_value(metric: str, value: float, *, signed: bool = False) -> str:
    if _is_fraction_metric(metric):
        return f"{100 * value:{'+' if signed else ''}.1f}{' pp' if signed else '%'}"
    return f"{value:{'+' if signed else ''}.4g}"


def _format_ci(metric: str, ci: Any, *, signed: bool = False) -> str:
    if not _is_pair(ci):
        return "–"
    return f"[{_format_value(metric, ci[0], signed=signed)}, {_format_value(metric, ci[1], signed=signed)}]"


def _summary_section(path: Path, summary: dict[str, Any]) -> str:
    facts = [f"{label}: {_text(summary[key])}" for key, label in
             (("model", "model"), ("data", "data"), ("step", "step"), ("n_tasks", "tasks"), ("samples_per_task", "samples per task"),
              ("calibration_n", "samples with a stated confidence"), ("ece_bins", "ECE bins (equal width)"))
             if key in summary]
    entries = [(metric, entry) for metric, entry in summary.items() if _is_metric_entry(entry)]
    rows = "".join(
        f"<tr><td>{_text(metric)}</td><td>{_format_value(metric, entry['value'])}</td>"
        f"<td>{_format_ci(metric, entry.get('ci95'))}</td></tr>"
        for metric, entry in entries[:MAX_ROWS]
    )
    return (
        f'<h3>{_text(path.name)}</h3><p class="facts">{" · ".join(facts)}</p>'
        f"<table><tr><th>metric</th><th>value</th><th>95% CI</th></tr>{rows}</table>{_left_out(len(entries), 'metrics')}"
    )


def _left_out(count: int, what: str) -> str:
    """A note of the rows past ``MAX_ROWS`` that a table leaves out ("" when none)."""
    return f'<p class="facts">{count - MAX_ROWS} more {what} left out.</p>' if count > MAX_ROWS else ""


def _pass_at_k_by_step_chart(summaries: list[tuple[Path, dict[str, Any]]], out_dir: Path) -> RenderedChart | None:
    stepped = sorted((s for _, s in summaries if _is_number(s.get("step"))), key=lambda s: s["step"])
    if len(stepped) < 2:
        return None
    metrics = sorted({m for s in stepped for m, e in s.items() if _k_of(m) is not None and _is_metric_entry(e)},
                     key=_k_of)[:MAX_SERIES]
    series, bands = {}, {}
    for metric in metrics:
        with_metric = [s for s in stepped if _is_metric_entry(s.get(metric))]
        series[metric] = ([s["step"] for s in with_metric], [s[metric]["value"] for s in with_metric])
        with_ci = [s[metric].get("ci95") for s in with_metric]
        if all(_is_pair(ci) for ci in with_ci):
            bands[metric] = ([ci[0] for ci in with_ci], [ci[1] for ci in with_ci])
    if not series:
        return None
    title = "Evaluation pass@k against training step"
    png = plot_metrics_by_step(out_dir / "eval-pass_at_k_by_step.png", series, title=title, ylabel="pass@k", bands=bands,
                               band_label="95% CI")
    return RenderedChart("plot-eval-pass_at_k_by_step", f"{title}: {', '.join(metrics)}", png)


def _comparison_chart(path: Path, comparison: dict[str, Any], out_dir: Path, element_id: str) -> RenderedChart:
    models = comparison["models"]

    def label(key: str) -> str:
        return _label(f"{key}: {models[key]}" if key in models else key)

    def by_k(mapping: Any, keep) -> dict[int, Any]:
        """{k: value} of the entries whose key is a k ("1", "4", ...) and whose value ``keep`` accepts."""
        if not isinstance(mapping, dict):
            return {}
        pairs = ((k, v) for k, v in mapping.items() if isinstance(k, str) and k.isdigit() and len(k) <= 9 and keep(v))
        return dict(sorted((int(k), v) for k, v in pairs if int(k) >= 1)[:MAX_POINTS])

    shown = list(comparison["curve"].items())[:MAX_SERIES]
    curves = {label(key): by_k(curve, _is_number) for key, curve in shown}
    curves = {name: curve for name, curve in curves.items() if curve}
    if not curves:
        raise UserError(f"{path}: no curve has a pass@k number for a k such as \"1\", \"4\"")
    ci95 = comparison.get("ci95") if isinstance(comparison.get("ci95"), dict) else {}
    intervals = {label(key): by_k(ci95.get(key), _is_pair) for key, _ in shown if label(key) in curves}
    title = f"pass@k against k ({path.stem})"
    png = plot_pass_at_k_curves(out_dir / f"{element_id.removeprefix('plot-')}.png", curves, title=title, ci95=intervals)
    return RenderedChart(element_id, f"{title}: {' vs '.join(curves)}, log-2 k axis", png)


def _comparison_section(path: Path, comparison: dict[str, Any], chart: RenderedChart) -> str:
    listed = list(comparison["models"].items())
    models = "".join(f"<li>{_text(key)}: {_text(name)}</li>" for key, name in listed[:MAX_ROWS])
    facts = f"tasks: {_text(comparison['n_tasks'])}" if "n_tasks" in comparison else ""
    difference = comparison.get("difference") if isinstance(comparison.get("difference"), dict) else {}
    entries = [(metric, entry) for metric, entry in difference.items() if _is_metric_entry(entry)]
    rows = "".join(
        f"<tr><td>{_text(metric)}</td><td>{_format_value(metric, entry['value'], signed=True)}</td>"
        f"<td>{_format_ci(metric, entry.get('ci95'), signed=True)}</td></tr>"
        for metric, entry in entries[:MAX_ROWS]
    )
    table = f"<table><tr><th>difference (b − a)</th><th>value</th><th>95% CI</th></tr>{rows}</table>" if rows else ""
    return (f'<h3>{_text(path.name)}</h3><ul>{models}</ul>{_left_out(len(listed), "models")}<p class="facts">{facts}</p>'
            f"{_img_tag(chart)}{table}{_left_out(len(entries), 'differences')}")


# --- images with the model's answers ---------------------------------------------------------------------------

MAX_IMAGES = 12


def _answers_by_eval(eval_dir: Path) -> dict[str, dict[str, str]]:
    """{eval name: {task id: first sampled response}} from eval/*.tasks.jsonl."""
    answers: dict[str, dict[str, str]] = {}
    for path in sorted(eval_dir.glob("*.tasks.jsonl"))[:MAX_EVAL_FILES]:
        by_task = {}
        for row in read_jsonl(path):
            samples = row.get("samples") if isinstance(row, dict) else None
            if isinstance(samples, list) and samples and isinstance(samples[0], dict):
                by_task[str(row.get("task_id"))] = str(samples[0].get("response", ""))
        answers[path.name.removesuffix(".tasks.jsonl")] = by_task
    return answers


def _is_base64_png(value: Any) -> bool:
    """Base64 text of at most ``MAX_IMAGE_BASE64`` characters (nothing else goes into an image's src)."""
    return isinstance(value, str) and 0 < len(value) <= MAX_IMAGE_BASE64 and _BASE64.fullmatch(value) is not None


def _images_section(eval_dir: Path) -> str:
    """A table of the images in eval/*.images.jsonl with each eval's answer; "" when there are none."""
    shown = []
    for path in sorted(eval_dir.glob("*.images.jsonl"))[:MAX_EVAL_FILES] if eval_dir.is_dir() else []:
        shown += [row for row in read_jsonl(path) if isinstance(row, dict) and _is_base64_png(row.get("png_base64"))]
    if not shown:
        return ""
    answers = {name: by_task for name, by_task in _answers_by_eval(eval_dir).items()
               if any(str(row.get("task_id")) in by_task for row in shown[:MAX_IMAGES])}
    answers = dict(list(answers.items())[:MAX_SERIES])
    head = "".join(f"<th>{_text(name)}</th>" for name in answers)
    body = []
    for row in shown[:MAX_IMAGES]:
        task = str(row.get("task_id"))
        image = (f'<img class="shown" alt="{_text(task)}" width="96" height="96" style="image-rendering:pixelated" '
                 f'src="data:image/png;base64,{row["png_base64"]}">')
        cells = "".join(f"<td>{_text(by_task.get(task, '–'))}</td>" for by_task in answers.values())
        body.append(f"<tr><td>{image}</td><td>{_text(row.get('question', ''))}</td>"
                    f"<td>{_text(json.dumps(row.get('reference')))}</td>{cells}</tr>")
    return ("<h3>Held-out images and the model's answers</h3>"
            f"<table><tr><th>image</th><th>question</th><th>reference</th>{head}</tr>{''.join(body)}</table>")


# --- the page ------------------------------------------------------------------------------------------------


def _img_tag(chart: RenderedChart) -> str:
    data = base64.b64encode(chart.png.read_bytes()).decode("ascii")
    return (f'<figure><img class="plot" id="{html.escape(chart.element_id)}" alt="{_text(chart.alt)}" '
            f'src="data:image/png;base64,{data}"></figure>')


# Counts the charts that decoded, so a headless browser test can read data-plots-loaded="N" from the DOM.
_PLOTS_LOADED_SCRIPT = """<script>
window.addEventListener("load", function () {
  var plots = document.querySelectorAll("img.plot");
  var loaded = 0;
  for (var i = 0; i < plots.length; i++) { if (plots[i].complete && plots[i].naturalWidth > 0) loaded++; }
  document.body.dataset.plotsLoaded = String(loaded);
  document.body.dataset.plotsTotal = String(plots.length);
});
</script>"""

_STYLE = """<style>
body{font-family:system-ui,sans-serif;max-width:900px;margin:2em auto;padding:0 1em;color:#222}
h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:2em}
figure{margin:1em 0}img.plot{max-width:100%;height:auto}
table{border-collapse:collapse;margin:.5em 0 1.5em}th,td{border:1px solid #ddd;padding:.25em .7em;text-align:left}
td:nth-child(n+2){font-variant-numeric:tabular-nums}.facts{color:#555}
pre{background:#f6f6f6;padding:1em;overflow-x:auto;font-size:.85em}
</style>"""


def _steps_fact(rows: list[dict[str, Any]]) -> str:
    steps = [row["step"] for row in rows if _is_number(row.get("step"))]
    if not steps:
        return "<p>metrics.jsonl has no rows with a step.</p>"
    text = f"{len(steps)} steps logged (step {min(steps)} to {max(steps)})"
    last = rows[-1].get("reward_mean")
    if _is_number(last) and math.isfinite(last):
        text += f"; reward_mean at the last step: {last:.4g}"
    return f'<p class="facts">{text}.</p>'


def write_run_report(run_dir: str | Path, out: str | Path | None = None, *, eval_files: Sequence[str | Path] = ()) -> Path:
    """Write ``report.html`` and its PNG charts into ``out`` (default RUN_DIR/report/); return the HTML path.
    ``eval_files`` adds `rlvr eval --out` summaries or comparisons written outside RUN_DIR/eval.

    Raises FileNotFoundError when ``run_dir`` does not exist or has neither metrics.jsonl nor eval/*.json, and
    UserError when metrics.jsonl is empty (and there are no eval files) or a file is not valid JSON (JSON lines),
    naming the file and line.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run directory not found: {run_dir}")
    out_dir = Path(out) if out is not None else run_dir / "report"
    metrics_path = run_dir / "metrics.jsonl"
    eval_files = _load_eval_files(run_dir / "eval", eval_files)

    rows: list[dict[str, Any]] = []
    if metrics_path.is_file():
        rows = read_jsonl(metrics_path)
    if not rows and not eval_files:
        nothing = f"and {run_dir / 'eval'} holds no *.json files: nothing to report"
        if not metrics_path.is_file():
            raise FileNotFoundError(f"{metrics_path} not found {nothing}")
        raise UserError(f"{metrics_path} is empty {nothing}")
    rows = [row for row in rows if isinstance(row, dict)]
    out_dir.mkdir(parents=True, exist_ok=True)

    sections = []
    if rows:
        charts = _training_charts(rows, out_dir)
        body = "".join(_img_tag(chart) for chart in charts) or "<p>No known metrics to plot.</p>"
        sections.append(f"<h2>Training</h2>{_steps_fact(rows)}{body}")

    summaries = [(p, d) for p, d in eval_files if _is_summary(d)]
    comparisons = [(p, d) for p, d in eval_files if _is_comparison(d)]
    unrecognised = [p for p, d in eval_files if not (_is_summary(d) or _is_comparison(d))]
    if eval_files:
        parts = ["<h2>Evaluation</h2>"]
        by_step = _pass_at_k_by_step_chart(summaries, out_dir)
        if by_step is not None:
            parts.append(_img_tag(by_step))
        summaries.sort(key=lambda item: (not _is_number(item[1].get("step")),
                                         item[1]["step"] if _is_number(item[1].get("step")) else 0, item[0].name))
        parts += [_summary_section(path, summary) for path, summary in summaries]
        used_ids: set[str] = set()
        for path, comparison in comparisons:
            element_id = f"plot-compare-{_safe_name(path.stem)}"
            while element_id in used_ids:
                element_id += "_"
            used_ids.add(element_id)
            parts.append(_comparison_section(path, comparison, _comparison_chart(path, comparison, out_dir, element_id)))
        if unrecognised:
            names = ", ".join(_text(p.name) for p in unrecognised)
            parts.append(f'<p class="facts">Not an eval summary or comparison, left out: {names}</p>')
        parts.append(_images_section(run_dir / "eval"))
        sections.append("".join(parts))

    config_path = run_dir / "config.yaml"
    if config_path.is_file():
        config = config_path.read_bytes()[:4 * MAX_CONFIG].decode("utf-8", errors="replace")
        sections.append(f"<h2>Config</h2><pre>{_text(config, cap=MAX_CONFIG)}</pre>")

    title = f"rlvr run report: {run_dir.resolve().name}"
    page = (
        f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>{_text(title)}</title>{_STYLE}</head>\n'
        f"<body><h1>{_text(title)}</h1><p class=\"facts\">{_text(run_dir)}</p>\n"
        + "\n".join(sections)
        + f"\n{_PLOTS_LOADED_SCRIPT}\n</body></html>\n"
    )
    html_path = out_dir / "report.html"
    html_path.write_text(page, encoding="utf-8")
    return html_path
