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

from rlvr.eval.plots import plot_metrics_by_step, plot_pass_at_k_curves
from rlvr.jsonl import read_jsonl
from rlvr.errors import UserError


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
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _series(rows: list[dict[str, Any]], key: str) -> tuple[list[float], list[float]]:
    """(steps, values) of ``key`` over the rows that carry a numeric value for it."""
    points = [(row["step"], row[key]) for row in rows if _is_number(row.get("step")) and _is_number(row.get(key))]
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
        series = {key: _series(rows, key) for key in keys}
        if spec.cumulative:  # the metrics are running totals: plot what each step added
            series = {key: (steps, per_step(values)) for key, (steps, values) in series.items()}
        bands = {}
        if spec.name == "reward_mean":
            # The std band is drawn only when every plotted step has one, so the line never loses points for it.
            plotted = [r for r in rows if _is_number(r.get("step")) and _is_number(r.get("reward_mean"))]
            if plotted and all(_is_number(r.get(REWARD_STD_KEY)) for r in plotted):
                means, stds = [r["reward_mean"] for r in plotted], [r[REWARD_STD_KEY] for r in plotted]
                bands = {"reward_mean": ([m - s for m, s in zip(means, stds)], [m + s for m, s in zip(means, stds)])}
        png = plot_metrics_by_step(out_dir / f"{spec.name}.png", series, title=spec.title, ylabel=spec.ylabel, bands=bands)
        charts.append(RenderedChart(f"plot-{spec.name}", f"{spec.title}: {', '.join(keys)} against step", png))
    return charts


# --- eval/*.json ---------------------------------------------------------------------------------------------


def _is_metric_entry(value: Any) -> bool:
    return isinstance(value, dict) and _is_number(value.get("value"))


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
    loaded = []
    paths = sorted(eval_dir.glob("*.json")) if eval_dir.is_dir() else []
    for path in map(Path, extra):
        if not path.is_file():
            raise FileNotFoundError(f"--eval {path}: no such file (expected an `rlvr eval --out` summary or comparison)")
        paths.append(path)
    for path in paths:
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise UserError(f"{path} is not valid JSON: {exc}") from exc
        loaded.append((path, data))
    return loaded


def _k_of(metric: str) -> int | None:
    match = re.fullmatch(r"pass@(\d+)", metric)
    return int(match.group(1)) if match else None


def _is_fraction_metric(metric: str) -> bool:
    return bool(re.fullmatch(r"(pass|maj)@\d+", metric))


def _format_value(metric: str, value: float, *, signed: bool = False) -> str:
    if _is_fraction_metric(metric):
        return f"{100 * value:{'+' if signed else ''}.1f}{' pp' if signed else '%'}"
    return f"{value:{'+' if signed else ''}.4g}"


def _format_ci(metric: str, ci: Any, *, signed: bool = False) -> str:
    if not (isinstance(ci, (list, tuple)) and len(ci) == 2 and all(_is_number(v) for v in ci)):
        return "–"
    return f"[{_format_value(metric, ci[0], signed=signed)}, {_format_value(metric, ci[1], signed=signed)}]"


def _summary_section(path: Path, summary: dict[str, Any]) -> str:
    facts = [f"{label}: {html.escape(str(summary[key]))}" for key, label in
             (("model", "model"), ("data", "data"), ("step", "step"), ("n_tasks", "tasks"), ("samples_per_task", "samples per task"),
              ("calibration_n", "samples with a stated confidence"), ("ece_bins", "ECE bins (equal width)"))
             if key in summary]
    rows = "".join(
        f"<tr><td>{html.escape(metric)}</td><td>{_format_value(metric, entry['value'])}</td>"
        f"<td>{_format_ci(metric, entry.get('ci95'))}</td></tr>"
        for metric, entry in summary.items() if _is_metric_entry(entry)
    )
    return (
        f'<h3>{html.escape(path.name)}</h3><p class="facts">{" · ".join(facts)}</p>'
        f"<table><tr><th>metric</th><th>value</th><th>95% CI</th></tr>{rows}</table>"
    )


def _pass_at_k_by_step_chart(summaries: list[tuple[Path, dict[str, Any]]], out_dir: Path) -> RenderedChart | None:
    stepped = sorted((s for _, s in summaries if _is_number(s.get("step"))), key=lambda s: s["step"])
    if len(stepped) < 2:
        return None
    metrics = sorted({m for s in stepped for m, e in s.items() if _k_of(m) is not None and _is_metric_entry(e)}, key=_k_of)
    series, bands = {}, {}
    for metric in metrics:
        with_metric = [s for s in stepped if _is_metric_entry(s.get(metric))]
        series[metric] = ([s["step"] for s in with_metric], [s[metric]["value"] for s in with_metric])
        with_ci = [s[metric].get("ci95") for s in with_metric]
        if all(isinstance(ci, (list, tuple)) and len(ci) == 2 for ci in with_ci):
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
        return f"{key}: {models[key]}" if key in models else key

    def by_k(mapping: dict[str, Any]) -> dict[int, Any]:
        try:
            return {int(k): v for k, v in mapping.items()}
        except (TypeError, ValueError) as exc:
            raise UserError(f"{path}: the curve and ci95 keys must be values of k such as \"1\", \"4\": {exc}") from exc

    curves = {label(key): by_k(curve) for key, curve in comparison["curve"].items()}
    intervals = {label(key): by_k(ci) for key, ci in (comparison.get("ci95") or {}).items()}
    title = f"pass@k against k ({path.stem})"
    png = plot_pass_at_k_curves(out_dir / f"{element_id.removeprefix('plot-')}.png", curves, title=title, ci95=intervals)
    return RenderedChart(element_id, f"{title}: {' vs '.join(curves)}, log-2 k axis", png)


def _comparison_section(path: Path, comparison: dict[str, Any], chart: RenderedChart) -> str:
    models = "".join(f"<li>{html.escape(str(key))}: {html.escape(str(name))}</li>" for key, name in comparison["models"].items())
    facts = f"tasks: {html.escape(str(comparison['n_tasks']))}" if "n_tasks" in comparison else ""
    rows = "".join(
        f"<tr><td>{html.escape(metric)}</td><td>{_format_value(metric, entry['value'], signed=True)}</td>"
        f"<td>{_format_ci(metric, entry.get('ci95'), signed=True)}</td></tr>"
        for metric, entry in (comparison.get("difference") or {}).items() if _is_metric_entry(entry)
    )
    table = f"<table><tr><th>difference (b − a)</th><th>value</th><th>95% CI</th></tr>{rows}</table>" if rows else ""
    return f'<h3>{html.escape(path.name)}</h3><ul>{models}</ul><p class="facts">{facts}</p>{_img_tag(chart)}{table}'


# --- images with the model's answers ---------------------------------------------------------------------------

MAX_IMAGES = 12


def _answers_by_eval(eval_dir: Path) -> dict[str, dict[str, str]]:
    """{eval name: {task id: first sampled response}} from eval/*.tasks.jsonl."""
    answers: dict[str, dict[str, str]] = {}
    for path in sorted(eval_dir.glob("*.tasks.jsonl")):
        try:
            rows = read_jsonl(path)
        except json.JSONDecodeError as exc:
            raise UserError(f"{path} is not valid JSON lines: {exc}") from exc
        by_task = {}
        for row in rows:
            samples = row.get("samples") if isinstance(row, dict) else None
            if isinstance(samples, list) and samples and isinstance(samples[0], dict):
                by_task[str(row.get("task_id"))] = str(samples[0].get("response", ""))
        answers[path.name.removesuffix(".tasks.jsonl")] = by_task
    return answers


def _images_section(eval_dir: Path) -> str:
    """A table of the images in eval/*.images.jsonl with each eval's answer; "" when there are none."""
    shown = []
    for path in sorted(eval_dir.glob("*.images.jsonl")) if eval_dir.is_dir() else []:
        try:
            shown += [row for row in read_jsonl(path) if isinstance(row, dict) and isinstance(row.get("png_base64"), str)]
        except json.JSONDecodeError as exc:
            raise UserError(f"{path} is not valid JSON lines: {exc}") from exc
    if not shown:
        return ""
    answers = {name: by_task for name, by_task in _answers_by_eval(eval_dir).items()
               if any(str(row.get("task_id")) in by_task for row in shown)}
    head = "".join(f"<th>{html.escape(name)}</th>" for name in answers)
    body = []
    for row in shown[:MAX_IMAGES]:
        task = str(row.get("task_id"))
        image = (f'<img class="shown" alt="{html.escape(task)}" width="96" height="96" style="image-rendering:pixelated" '
                 f'src="data:image/png;base64,{html.escape(row["png_base64"])}">')
        cells = "".join(f"<td>{html.escape(by_task.get(task, '–'))}</td>" for by_task in answers.values())
        body.append(f"<tr><td>{image}</td><td>{html.escape(str(row.get('question', '')))}</td>"
                    f"<td>{html.escape(json.dumps(row.get('reference')))}</td>{cells}</tr>")
    return ("<h3>Held-out images and the model's answers</h3>"
            f"<table><tr><th>image</th><th>question</th><th>reference</th>{head}</tr>{''.join(body)}</table>")


# --- the page ------------------------------------------------------------------------------------------------


def _img_tag(chart: RenderedChart) -> str:
    data = base64.b64encode(chart.png.read_bytes()).decode("ascii")
    return (f'<figure><img class="plot" id="{html.escape(chart.element_id)}" alt="{html.escape(chart.alt)}" '
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
    ValueError when metrics.jsonl is empty (and there are no eval files) or a file is not valid JSON.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run directory not found: {run_dir}")
    out_dir = Path(out) if out is not None else run_dir / "report"
    metrics_path = run_dir / "metrics.jsonl"
    eval_files = _load_eval_files(run_dir / "eval", eval_files)

    rows: list[dict[str, Any]] = []
    if metrics_path.is_file():
        try:
            rows = read_jsonl(metrics_path)
        except json.JSONDecodeError as exc:
            raise UserError(f"{metrics_path} is not valid JSON lines: {exc}") from exc
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
        summaries.sort(key=lambda item: (not _is_number(item[1].get("step")), item[1].get("step") or 0, item[0].name))
        parts += [_summary_section(path, summary) for path, summary in summaries]
        used_ids: set[str] = set()
        for path, comparison in comparisons:
            element_id = f"plot-compare-{_safe_name(path.stem)}"
            while element_id in used_ids:
                element_id += "_"
            used_ids.add(element_id)
            parts.append(_comparison_section(path, comparison, _comparison_chart(path, comparison, out_dir, element_id)))
        if unrecognised:
            names = ", ".join(html.escape(p.name) for p in unrecognised)
            parts.append(f'<p class="facts">Not an eval summary or comparison, left out: {names}</p>')
        parts.append(_images_section(run_dir / "eval"))
        sections.append("".join(parts))

    config_path = run_dir / "config.yaml"
    if config_path.is_file():
        sections.append(f"<h2>Config</h2><pre>{html.escape(config_path.read_text())}</pre>")

    title = f"rlvr run report: {run_dir.resolve().name}"
    page = (
        f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>{_STYLE}</head>\n'
        f"<body><h1>{html.escape(title)}</h1><p class=\"facts\">{html.escape(str(run_dir))}</p>\n"
        + "\n".join(sections)
        + f"\n{_PLOTS_LOADED_SCRIPT}\n</body></html>\n"
    )
    html_path = out_dir / "report.html"
    html_path.write_text(page, encoding="utf-8")
    return html_path
