"""Small line charts as inline SVG, drawn on the server.

The Airflow machines of an operator are often offline and a plugin page must not load a
charting library from a CDN; a few polylines need none. Server-side SVG also means the
page works without JavaScript and is testable as plain text.

Series often coincide (every registered orphan waiting in grace; nothing waiting for
retention and nothing deleted): a line that a later one covers somewhere is drawn wider
than it, and a dot wider than the later dots on it, so it still shows as a band (a ring)
of its own colour around the other. Run labels are made unique (``run_labels``): runs a
few seconds apart must not read as one.
"""

from __future__ import annotations

import math
import time
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


#: Run labels, shortest first: the first that tells every run apart is used.
_LABEL_FORMATS = ("%m-%d %H:%M", "%m-%d %H:%M:%S", "%Y-%m-%d %H:%M:%S")
#: How much wider each series' line (and dot) is than the next one's, in px.
_LINE_STEP, _DOT_STEP = 3.0, 1.5


def run_labels(times_ms: Sequence[int | None]) -> list[str]:
    """An x-axis label per run (UTC): the shortest form in which no two runs share one;
    runs in the same second are numbered."""
    labels: list[str] = []
    for form in _LABEL_FORMATS:
        labels = [time.strftime(form, time.gmtime(ms / 1000)) if ms else "?" for ms in times_ms]
        if len(set(labels)) == len(labels):
            return labels
    seen: dict[str, int] = {}
    unique = []
    for label in labels:
        seen[label] = seen.get(label, 0) + 1
        unique.append(f"{label} #{seen[label]}" if labels.count(label) > 1 else label)
    return unique


def _sizes(values: Sequence[Sequence[float]]) -> tuple[list[float], list[list[float]]]:
    """Each series' line width and dot radii (drawn in order, later ones on top): wider
    than every later line that covers a stretch of it, a dot wider than every later dot
    on the same value; 2 px and 3 px where nothing covers them."""
    widths = [2.0] * len(values)
    radii = [[3.0] * len(v) for v in values]
    for i in reversed(range(len(values))):
        for j in range(i + 1, len(values)):
            pairs = list(zip(values[i], values[j], strict=False))
            shared = any(
                pairs[k][0] == pairs[k][1] and pairs[k + 1][0] == pairs[k + 1][1]
                for k in range(len(pairs) - 1)
            )
            if shared:
                widths[i] = max(widths[i], widths[j] + _LINE_STEP)
            for k, (mine, theirs) in enumerate(pairs):
                if mine == theirs:
                    radii[i][k] = max(radii[i][k], radii[j][k] + _DOT_STEP)
    return widths, radii


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
        # The last label ends at its run and the first starts before it, so that neither
        # runs out of the chart's box.
        anchor = "end" if i == count - 1 and count > 1 else "middle"
        parts.append(
            f'<text x="{x(i) + (8 if anchor == "end" else 0):.1f}" '
            f'y="{HEIGHT - _BOTTOM + 16}" text-anchor="{anchor}" class="axis x">'
            f"{escape(labels[i])}</text>"
        )
    widths, radii = _sizes([list(s.values[:count]) for s in series])
    for index, s in enumerate(series):
        points = [(x(i), y(v)) for i, v in enumerate(s.values[:count])]
        if len(points) > 1:
            coords = " ".join(f"{px:.1f},{py:.1f}" for px, py in points)
            parts.append(
                f'<polyline fill="none" stroke="{s.color}" stroke-width="{widths[index]:g}" '
                f'stroke-linejoin="round" data-series="{escape(s.name)}" points="{coords}"/>'
            )
        for i, (px, py) in enumerate(points):
            tip = f"{s.name} · {labels[i]}: {fmt(s.values[i])}"
            parts.append(
                f'<circle cx="{px:.1f}" cy="{py:.1f}" r="{radii[index][i]:g}" '
                f'fill="{s.color}"><title>{escape(tip)}</title></circle>'
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
