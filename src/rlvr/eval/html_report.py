"""A small self-contained HTML report of a run: the reward curve as inline SVG, no plotting library needed."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any


def svg_line_chart(values: list[float], *, title: str, width: int = 640, height: int = 240, y_range=(0.0, 1.0)) -> str:
    """An SVG polyline of ``values`` against step, with a light moving average drawn over it."""
    if not values:
        return f"<p>{html.escape(title)}: no data</p>"
    pad = 36
    lo, hi = y_range
    span = (hi - lo) or 1.0

    def point(i: int, v: float) -> str:
        x = pad + (width - 2 * pad) * (i / max(len(values) - 1, 1))
        y = height - pad - (height - 2 * pad) * ((min(max(v, lo), hi) - lo) / span)
        return f"{x:.1f},{y:.1f}"

    window = max(1, len(values) // 20)
    smooth = [sum(values[max(0, i - window + 1): i + 1]) / len(values[max(0, i - window + 1): i + 1]) for i in range(len(values))]
    raw = " ".join(point(i, v) for i, v in enumerate(values))
    avg = " ".join(point(i, v) for i, v in enumerate(smooth))
    axis = (
        f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" stroke="#888"/>'
        f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{height - pad}" stroke="#888"/>'
        f'<text x="{pad - 4}" y="{height - pad}" text-anchor="end" font-size="11">{lo:g}</text>'
        f'<text x="{pad - 4}" y="{pad + 4}" text-anchor="end" font-size="11">{hi:g}</text>'
        f'<text x="{width - pad}" y="{height - pad + 16}" text-anchor="end" font-size="11">step {len(values)}</text>'
    )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" aria-label="{html.escape(title)}">'
        f'<text x="{width / 2}" y="18" text-anchor="middle" font-size="14">{html.escape(title)}</text>{axis}'
        f'<polyline fill="none" stroke="#9ecae1" stroke-width="1" points="{raw}"/>'
        f'<polyline fill="none" stroke="#08519c" stroke-width="2" points="{avg}"/></svg>'
    )


def write_demo_report(path: Path, *, metrics: list[dict[str, Any]], summary: dict[str, Any]) -> Path:
    rewards = [row["reward_mean"] for row in metrics]
    rows = "".join(f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(str(v))}</td></tr>" for k, v in summary.items())
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>rlvr demo</title>
<style>body{{font-family:sans-serif;max-width:760px;margin:2em auto}}th{{text-align:left;padding-right:1em}}</style></head>
<body><h1>rlvr demo</h1>
<p>A tiny character-level Llama learns addition: a short supervised warm start, then GRPO against an exact-match verifier.
pass@1 is greedy decoding on held-out problems that never appear in training.</p>
<table>{rows}</table>
{svg_line_chart(rewards, title="mean reward per RL step (sampled responses)")}
</body></html>
"""
    path.write_text(page)
    return path
