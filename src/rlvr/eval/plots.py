"""PNG charts for run reports: metrics against training step, and pass@k against k (the reasoning-boundary plot).

Charts are drawn with matplotlib's Agg backend through ``FigureCanvasAgg`` directly, never through pyplot, so
they render without a display and importing this module changes no global matplotlib state (a notebook's
backend stays as it was). Each function writes one PNG and returns its path.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, MaxNLocator, NullLocator

FIGURE_SIZE_INCHES = (8.0, 3.6)
DPI = 100

# One series: the steps (x) and the values (y), same length; a band is the (low, high) pair drawn around it.
Series = tuple[Sequence[float], Sequence[float]]
Band = tuple[Sequence[float], Sequence[float]]


def _new_axes(title: str, xlabel: str, ylabel: str):
    figure = Figure(figsize=FIGURE_SIZE_INCHES, dpi=DPI, layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    axes.set_title(title)
    axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)
    axes.grid(True, alpha=0.3)
    return figure, axes


def _save(figure: Figure, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png", bbox_inches="tight")  # keeps a legend placed outside the axes
    return path


def plot_metrics_by_step(
    path: str | Path,
    series: Mapping[str, Series],
    *,
    title: str,
    ylabel: str = "value",
    bands: Mapping[str, Band] | None = None,
    band_label: str = "± std",
) -> Path:
    """A line chart of one or several metrics against training step, written to ``path`` as a PNG.

    ``series`` maps a legend label to its (steps, values); ``bands`` optionally maps some of those labels to a
    (low, high) pair shaded around the line, e.g. mean +- std, named "<label> <band_label>" in the legend. A legend is
    drawn when there are several lines or a band. Steps are whole numbers, so the x ticks are too.
    """
    if not series:
        raise ValueError(f"{title}: no series to plot")
    figure, axes = _new_axes(title, "step", ylabel)
    axes.xaxis.set_major_locator(MaxNLocator(integer=True, steps=[1, 2, 5, 10]))
    bands = bands or {}
    for label, (steps, values) in series.items():
        (line,) = axes.plot(steps, values, label=label, linewidth=1.5, marker="." if len(steps) < 40 else None)
        if label in bands:
            low, high = bands[label]
            axes.fill_between(steps, low, high, color=line.get_color(), alpha=0.2, linewidth=0, label=f"{label} {band_label}")
    if len(series) > 1 or bands:
        axes.legend(loc="best", fontsize="small")
    return _save(figure, path)


def plot_pass_at_k_curves(
    path: str | Path,
    curves: Mapping[str, Mapping[int, float]],
    *,
    title: str = "pass@k against k",
    ci95: Mapping[str, Mapping[int, Sequence[float]]] | None = None,
) -> Path:
    """pass@k against k for several models on a log-2 k axis, with 95% intervals shaded where given.

    ``curves`` maps a legend label to {k: pass@k}; ``ci95`` maps the same labels to {k: (low, high)}. Where the
    curves cross at large k, RL narrowed the set of problems the model can solve at all (Yue et al., 2025).
    """
    if not curves:
        raise ValueError(f"{title}: no curves to plot")
    figure, axes = _new_axes(title, "k (samples per task, log₂ scale)", "pass@k")
    axes.set_xscale("log", base=2)
    all_ks: set[int] = set()
    for label, curve in curves.items():
        ks = sorted(curve)
        all_ks.update(ks)
        (line,) = axes.plot(ks, [curve[k] for k in ks], marker="o", linewidth=1.8, label=label)
        intervals = (ci95 or {}).get(label) or {}
        shaded = [k for k in ks if k in intervals]
        if shaded:
            axes.fill_between(
                shaded, [intervals[k][0] for k in shaded], [intervals[k][1] for k in shaded],
                color=line.get_color(), alpha=0.2, linewidth=0, label=f"{label} 95% CI",
            )
    ticks = sorted(all_ks)
    axes.xaxis.set_major_locator(FixedLocator(ticks))
    axes.xaxis.set_minor_locator(NullLocator())
    axes.set_xticklabels([str(k) for k in ticks])
    if len(ticks) == 1:
        k = ticks[0]
        axes.set_xlim(k / math.sqrt(2), k * math.sqrt(2))
    axes.set_ylim(0.0, 1.02)
    # outside the axes, below them: pass@k curves rise into every corner, so a legend inside covers some of them
    axes.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, fontsize="small", frameon=False)
    return _save(figure, path)
