"""Hand-drawn SVG for the game-day pages (chaos/report.py, chaos/history.py): axis ticks at round numbers, text
labels laid out so that no two overlap, and line charts. Pure functions that return markup: the pages carry no
script and load nothing, so they open as they are from a CI artifact or a report volume.

Why not matplotlib (the simulator's report uses it): it is an optional extra (`ha-ops[plan]`), and a game day must
write its report wherever it runs; these pages need a few lines and text, nothing a plotting library adds to.

Text widths are estimated, not measured (nothing measures text without a browser): the estimate is an upper bound
for the common sans-serif faces at the size used, and tests/unit/test_gameday_report.py checks in headless Chromium
that the boxes it lays out do not overlap as rendered.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass

FONT_PX = 11
FONT = "font-family='DejaVu Sans, Verdana, sans-serif'"
GAP_PX = 8  # between two labels on one row
# Per-character advance as a fraction of the font size: an upper bound for DejaVu Sans and Verdana (the widest of
# the usual sans-serif faces), by character class.
_WIDE, _NARROW = set("MWmw@%"), set("ijlrtfI.,:;'|!() ")


def text_width(text: str, font_px: float = FONT_PX) -> float:
    """An upper bound of the rendered width of `text` in px."""
    em = 0.0
    for ch in text:
        if ch in _WIDE:
            em += 1.0
        elif ch in _NARROW:
            em += 0.42
        elif ch.isupper() or ord(ch) > 0x2000:  # capitals, and symbols such as the failure mark
            em += 0.82
        else:
            em += 0.68
    return em * font_px


def nice_step(span: float, most: int) -> float:
    """The smallest step of 1, 2 or 5 times a power of ten that cuts `span` into at most `most` parts."""
    if span <= 0 or most < 1:
        return 1.0
    raw = span / most
    power = 10 ** math.floor(math.log10(raw))
    for factor in (1, 2, 5, 10):
        if factor * power >= raw:
            return factor * power
    return 10 * power  # (not reached)


def ticks(lo: float, hi: float, most: int, whole: bool = False) -> list[float]:
    """Round values from lo to hi, at most `most` + 1 of them (whole numbers only, with `whole`)."""
    step = max(nice_step(hi - lo, most), 1.0) if whole else nice_step(hi - lo, most)
    first = math.ceil(lo / step - 1e-9) * step
    count = math.floor((hi - first) / step + 1e-9) + 1
    return [round(first + i * step, 10) for i in range(max(count, 0))]


def number(value: float) -> str:
    """A tick's text: no trailing zeros."""
    return f"{value:.6g}"


@dataclass(frozen=True)
class Label:
    at: float  # the x (px) of the point it names
    left: float  # its box's left edge (px)
    width: float
    row: int
    text: str
    colour: str


def place_labels(
    points: Sequence[tuple[float, str, str]], lo: float, hi: float, font_px: float = FONT_PX
) -> list[Label]:
    """Each (x, text, colour) as a label centred on x where that fits between lo and hi (else moved inside), on the
    first row where it overlaps no label already placed: rows are added as crowding needs them."""
    row_ends: list[float] = []  # the right edge of the last label on each row
    placed = []
    for x, text, colour in sorted(points, key=lambda p: p[0]):
        width = min(text_width(text, font_px), hi - lo)
        left = min(max(x - width / 2, lo), hi - width)
        row = next((i for i, end in enumerate(row_ends) if left >= end + GAP_PX), len(row_ends))
        if row == len(row_ends):
            row_ends.append(left + width)
        row_ends[row] = left + width
        placed.append(Label(x, left, width, row, text, colour))
    return placed


def labels_markup(labels: Sequence[Label], top: float, row_height: float, from_y: float) -> str:
    """Labels on their rows below `top`, each with a dashed leader up to `from_y` at the point it names. The leaders
    are drawn first and each text over a white halo: a leader that passes behind another row's text never crosses
    its letters."""
    leaders, texts = [], []
    for label in labels:
        baseline = top + label.row * row_height + FONT_PX
        leaders.append(
            f"<line x1='{label.at:.1f}' y1='{from_y:.1f}' x2='{label.at:.1f}' y2='{baseline - FONT_PX - 2:.1f}' "
            f"stroke='{label.colour}' stroke-width='0.7' stroke-dasharray='2,2'/>"
        )
        texts.append(
            f"<text class='label' x='{label.left:.1f}' y='{baseline:.1f}' font-size='{FONT_PX}' {FONT} "
            f"fill='{label.colour}' stroke='white' stroke-width='3' paint-order='stroke'>"
            f"{html.escape(label.text)}</text>"
        )
    return "".join(leaders + texts)


@dataclass(frozen=True)
class Series:
    name: str
    colour: str
    points: list[tuple[float, float]]  # (x, y); a gap in x is a gap in the line
    marks: list[float] | None = None  # x values to mark as failures (a cross on the x axis)


PALETTE = ["#1565c0", "#2e7d32", "#ef6c00", "#6a1b9a", "#00838f", "#ad1457", "#5d4037", "#9e9d24", "#37474f"]


def line_chart(
    series: Sequence[Series],
    x_range: tuple[float, float],
    x_label: str,
    width: int = 720,
    height: int = 240,
    y_percent: bool = False,
) -> str:
    """Lines with dots over round-numbered axes (x: whole numbers, the runs), the legend to the right, one entry per
    line (never overlapping: one row each; the chart grows to hold them). The y axis' name and unit are the
    caller's heading."""
    legend_w = max([text_width(s.name) for s in series] + [60.0]) + 24
    height = max(height, 12 + 6 + len(series) * (FONT_PX + 6) + 48)
    left, right, top, bottom = 48.0, width - legend_w - 12, 12.0, height - 36.0
    ys = [y for s in series for _, y in s.points]
    y_hi = 1.0 if y_percent else max([*ys, 1.0]) * 1.1
    x_lo, x_hi = x_range
    if x_hi <= x_lo:
        x_hi = x_lo + 1

    def px(x: float) -> float:
        return left + (x - x_lo) / (x_hi - x_lo) * (right - left)

    def py(y: float) -> float:
        return bottom - y / y_hi * (bottom - top)

    parts = [f"<svg class='chart' width='{width}' height='{height}' xmlns='http://www.w3.org/2000/svg'>",
             f"<line x1='{left}' y1='{bottom}' x2='{right}' y2='{bottom}' stroke='#555'/>",
             f"<line x1='{left}' y1='{top}' x2='{left}' y2='{bottom}' stroke='#555'/>"]  # fmt: skip
    for y in ticks(0, y_hi, max(2, int((bottom - top) // 28))):
        text = f"{y * 100:.0f}%" if y_percent else number(y)
        parts.append(f"<line x1='{left - 4}' y1='{py(y):.1f}' x2='{right}' y2='{py(y):.1f}' stroke='#eee'/>"
                     f"<text class='tick' x='{left - 6}' y='{py(y) + 4:.1f}' font-size='{FONT_PX}' {FONT} "
                     f"text-anchor='end'>{text}</text>")  # fmt: skip
    widest_x = text_width(number(x_hi)) + GAP_PX
    for x in ticks(x_lo, x_hi, max(1, int((right - left) // max(widest_x, 40))), whole=True):
        parts.append(f"<line x1='{px(x):.1f}' y1='{bottom}' x2='{px(x):.1f}' y2='{bottom + 4}' stroke='#555'/>"
                     f"<text class='tick' x='{px(x):.1f}' y='{bottom + 16}' font-size='{FONT_PX}' {FONT} "
                     f"text-anchor='middle'>{number(x)}</text>")  # fmt: skip
    parts.append(
        f"<text class='axis' x='{(left + right) / 2:.1f}' y='{height - 4}' font-size='{FONT_PX}' {FONT} "
        f"text-anchor='middle'>{html.escape(x_label)}</text>"
    )
    for s in series:
        runs: list[list[tuple[float, float]]] = []
        for x, y in sorted(s.points):
            if runs and x - runs[-1][-1][0] <= 1:
                runs[-1].append((x, y))
            else:
                runs.append([(x, y)])
        for run in runs:
            if len(run) > 1:
                path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in run)
                parts.append(f"<polyline points='{path}' fill='none' stroke='{s.colour}' stroke-width='1.5'/>")
        for x, y in s.points:
            tip = f"{html.escape(s.name)}: {number(round(y, 2))} at {number(x)}"
            parts.append(
                f"<circle cx='{px(x):.1f}' cy='{py(y):.1f}' r='2.5' fill='{s.colour}'><title>{tip}</title></circle>"
            )
        for x in s.marks or []:
            tip = f"{html.escape(s.name)}: failed at {number(x)}"
            parts.append(f"<path d='M{px(x) - 3:.1f},{bottom - 3} l6,6 m0,-6 l-6,6' stroke='#c62828' "
                         f"stroke-width='1.5'><title>{tip}</title></path>")  # fmt: skip
    for i, s in enumerate(series):
        y = top + 6 + i * (FONT_PX + 6)
        parts.append(f"<line x1='{right + 12}' y1='{y:.1f}' x2='{right + 24}' y2='{y:.1f}' stroke='{s.colour}' "
                     f"stroke-width='2'/><text class='legend' x='{right + 28}' y='{y + 4:.1f}' font-size='{FONT_PX}' "
                     f"{FONT}>{html.escape(s.name)}</text>")  # fmt: skip
    parts.append("</svg>")
    return "".join(parts)
