"""A stream's items per hour over the last days, as an SVG bar chart made here.

One bar per hour (``Store.hourly``: one SQL aggregate), a line at each day's start
labelled with its date, the tallest bar's count on the left.  It scales to its box
(``viewBox``; the stylesheet makes it as wide as the page).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from xml.sax.saxutils import escape, quoteattr

DAYS = 7
HOUR = 3600.0
WIDTH, HEIGHT, LEFT, BOTTOM, TOP = 720, 180, 40, 22, 10
LABEL_WIDTH = 40  # a date label ("Dec 08") at font-size 11, with room to spare


def hourly_svg(counts: Mapping[float, int], now: float, days: int = DAYS) -> str:
    """The chart of ``counts`` (start of an hour -> items) for the ``days`` up to
    ``now``."""
    hours = days * 24
    first = (now // HOUR - hours + 1) * HOUR
    values = [counts.get(first + n * HOUR, 0) for n in range(hours)]
    total, most = sum(values), max(values, default=0)
    caption = f"Items stored per hour, last {days} days: {total:,} in all, at most {most:,} an hour"
    plot_w, plot_h = WIDTH - LEFT - 4, HEIGHT - BOTTOM - TOP
    step = plot_w / hours
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" id="stream-chart" role="img"'
        f' viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="11"'
        f" aria-label={quoteattr(caption)}><title>{escape(caption)}</title>",
        f'<line x1="{LEFT}" y1="{TOP + plot_h}" x2="{WIDTH - 4}" y2="{TOP + plot_h}"'
        ' stroke="#999"/>',
        f'<text x="{LEFT - 4}" y="{TOP + 10}" text-anchor="end" fill="#555">{most:,}</text>',
        f'<text x="{LEFT - 4}" y="{TOP + plot_h}" text-anchor="end" fill="#555">0</text>',
    ]
    for n, value in enumerate(values):
        start = first + n * HOUR
        x = LEFT + n * step
        if start % 86400.0 == 0:
            day = datetime.fromtimestamp(start, tz=UTC).strftime("%b %d")
            # a day begun a few hours ago: its label left of its line, inside the chart
            late = x + 2 + LABEL_WIDTH > WIDTH
            label = f'x="{x - 2:.1f}" text-anchor="end"' if late else f'x="{x + 2:.1f}"'
            parts.append(
                f'<line x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{TOP + plot_h}" stroke="#ddd"/>'
                f'<text {label} y="{HEIGHT - 6}" fill="#555">{day}</text>'
            )
        if value:
            tall = max(1.0, plot_h * value / most)
            stamp = datetime.fromtimestamp(start, tz=UTC).strftime("%Y-%m-%d %H:00 UTC")
            wide = max(1.0, step - 0.6)
            parts.append(
                f'<rect x="{x:.1f}" y="{TOP + plot_h - tall:.1f}" width="{wide:.1f}"'
                f' height="{tall:.1f}" fill="#c33"><title>{stamp}: {value:,}</title></rect>'
            )
    parts.append("</svg>")
    return "".join(parts)
