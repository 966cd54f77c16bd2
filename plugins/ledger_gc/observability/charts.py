"""Small line charts as inline SVG, drawn on the server.

The Airflow machines of an operator are often offline and a plugin page must not load a
charting library from a CDN; a few polylines need none. Server-side SVG also means the
page works without JavaScript and is testable as plain text.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape

WIDTH = 560
HEIGHT = 220
_LEFT, _RIGHT, _TOP, _BOTTOM = 72, 40, 12, 44


@dataclass(frozen=True)
class Series:
    """One line: its name (legend, tooltips), colour and one value per run."""

    name: str
    color: str
    values: Sequence[float]


def axis_maximum(top: float) -> float:
    """The y axis' top: four grid steps of 1, 2 or 5 times a power of ten, at least 1 each,
    so that counts get whole-number grid lines."""
    need = max(top / 4, 1.0)
    power = 10 ** math.floor(math.log10(need))
    step = next(s * power for s in (1, 2, 5, 10) if need <= s * power)
    return float(4 * step)


def line_chart(
    title: str,
    labels: Sequence[str],
    series: Sequence[Series],
    fmt: Callable[[float], str] = lambda v: f"{v:g}",
) -> str:
    """An SVG line chart: one x position per label (a run), one line per series."""
    top = max((v for s in series for v in s.values), default=0)
    y_max = axis_maximum(top)
    plot_w = WIDTH - _LEFT - _RIGHT
    plot_h = HEIGHT - _TOP - _BOTTOM
    count = len(labels)

    def x(i: int) -> float:
        return _LEFT + (plot_w / 2 if count <= 1 else plot_w * i / (count - 1))

    def y(v: float) -> float:
        return _TOP + plot_h * (1 - v / y_max)

    parts = [
        f'<svg class="chart" role="img" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'width="{WIDTH}" height="{HEIGHT}" aria-label="{escape(title)}">',
        f"<title>{escape(title)}</title>",
    ]
    for k in range(5):  # horizontal grid lines with their values
        value = y_max * k / 4
        gy = y(value)
        parts.append(
            f'<line x1="{_LEFT}" x2="{WIDTH - _RIGHT}" y1="{gy:.1f}" y2="{gy:.1f}" '
            'class="grid"/>'
            f'<text x="{_LEFT - 6}" y="{gy + 4:.1f}" text-anchor="end" class="axis">'
            f"{escape(fmt(value))}</text>"
        )
    if count == 0:
        parts.append(
            f'<text x="{WIDTH / 2}" y="{HEIGHT / 2}" text-anchor="middle" class="axis">'
            "no runs yet</text>"
        )
    # At most ~6 x labels, always the first and the last run.
    shown = {0, count - 1} | set(range(0, count, max(1, math.ceil(count / 6))))
    for i in sorted(i for i in shown if 0 <= i < count):
        parts.append(
            f'<text x="{x(i):.1f}" y="{HEIGHT - _BOTTOM + 16}" text-anchor="middle" '
            f'class="axis">{escape(labels[i])}</text>'
        )
    for index, s in enumerate(series):
        points = [(x(i), y(v)) for i, v in enumerate(s.values[:count])]
        if len(points) > 1:
            coords = " ".join(f"{px:.1f},{py:.1f}" for px, py in points)
            # The first line is drawn wide and pale, so that a later line with the same
            # values (registered = waiting in grace, often) still shows both.
            style = 'stroke-width="6" stroke-opacity="0.45"' if index == 0 else 'stroke-width="2"'
            parts.append(f'<polyline fill="none" stroke="{s.color}" {style} points="{coords}"/>')
        for i, (px, py) in enumerate(points):
            tip = f"{s.name} · {labels[i]}: {fmt(s.values[i])}"
            parts.append(
                f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3" fill="{s.color}">'
                f"<title>{escape(tip)}</title></circle>"
            )
    legend_x = float(_LEFT)
    for s in series:
        parts.append(
            f'<rect x="{legend_x:.0f}" y="{HEIGHT - 16}" width="10" height="10" '
            f'fill="{s.color}"/><text x="{legend_x + 14:.0f}" y="{HEIGHT - 7}" '
            f'class="legend">{escape(s.name)}</text>'
        )
        legend_x += 24 + 7 * len(s.name)
    parts.append("</svg>")
    return "".join(parts)
