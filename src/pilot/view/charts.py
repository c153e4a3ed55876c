"""The geometry of the "why" page's two plots, drawn by its template as inline SVG (no script, no library).

An interval plot of acceptance per arm (the estimate and its 95 % interval
on a 0-100 % axis) and a scatter of each run's agent cost against its Q
(the threshold q drawn across). Coordinates are in the SVG's own units; the
page scales the drawing to its width.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from pilot.view.aggregates import Acceptance, Point

WIDTH = 640
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 150, 24, 12, 36


@dataclass(frozen=True)
class Tick:
    at: float
    label: str


@dataclass(frozen=True)
class Interval:
    label: str
    sensitivity: bool
    arm: str
    shade: str
    y: float
    x: float | None
    x_low: float | None
    x_high: float | None
    text: str


@dataclass
class IntervalPlot:
    width: int
    height: int
    left: int
    right: int
    rows: list[Interval]
    ticks: list[Tick]


def interval_plot(acc: list[Acceptance], row_height: int = 30) -> IntervalPlot:
    """Acceptance per arm: a dot at the estimate, a bar across its interval; a missing estimate says so."""
    right = WIDTH - MARGIN_RIGHT
    span = right - MARGIN_LEFT

    def x(p: float | None) -> float | None:
        return None if p is None else MARGIN_LEFT + span * max(0.0, min(1.0, p))

    rows = []
    for i, a in enumerate(acc):
        y = MARGIN_TOP + row_height * i + row_height / 2
        if a.p_hat is None:
            text = f"not estimable ({a.note or 'no scored run'})"
        else:
            ci = (
                f" [{100 * a.low:.0f}%, {100 * a.high:.0f}%]"
                if a.low is not None and a.high is not None
                else " (no interval)"
            )
            text = f"{100 * a.p_hat:.0f}%{ci}; {a.accepted}/{a.scored} runs accepted, {a.scenarios} scenarios"
        c = a.column
        rows.append(Interval(c.label, c.sensitivity, c.arm, c.shade, y, x(a.p_hat), x(a.low), x(a.high), text))
    height = MARGIN_TOP + row_height * max(len(acc), 1) + MARGIN_BOTTOM
    ticks = [Tick(MARGIN_LEFT + span * k / 4, f"{25 * k}%") for k in range(5)]
    return IntervalPlot(WIDTH, height, MARGIN_LEFT, right, rows, ticks)


@dataclass(frozen=True)
class Dot:
    run_id: str
    arm: str
    sensitivity: bool
    shade: str
    x: float
    y: float
    accepted: bool | None
    title: str


@dataclass
class ScatterPlot:
    width: int
    height: int
    left: int
    right: int
    top: int
    bottom: int
    dots: list[Dot]
    xticks: list[Tick]
    yticks: list[Tick]
    q_y: float
    legend: list[tuple[str, str, str]] = field(
        default_factory=list
    )  # (label, arm, colour class of a sensitivity model)


def _nice_step(top: float) -> float:
    """A round tick step giving about five ticks up to ``top``."""
    raw = top / 5 if top > 0 else 1.0
    mag = 10 ** math.floor(math.log10(raw))
    return next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)


def scatter_plot(points: list[Point], q: float, height: int = 320) -> ScatterPlot:
    """Each run's agent cost (x, dollars) against its Q (y, 0-100), the threshold q across."""
    left, right, top = 56, WIDTH - MARGIN_RIGHT, MARGIN_TOP
    bottom = height - MARGIN_BOTTOM
    max_cost = max((p.cost for p in points), default=1.0) or 1.0
    step = _nice_step(max_cost)
    x_top = step * math.ceil(max_cost / step)

    def x(c: float) -> float:
        return left + (right - left) * c / x_top

    def y(v: float) -> float:
        return bottom - (bottom - top) * max(0.0, min(100.0, v)) / 100

    dots = [
        Dot(
            p.run_id,
            p.column.arm,
            p.column.sensitivity,
            p.column.shade,
            x(p.cost),
            y(p.q),
            p.accepted,
            f"{p.run_id}: ${p.cost:,.2f}, Q {p.q:.1f}"
            + ("" if p.accepted is None else (", accepted" if p.accepted else ", not accepted")),
        )
        for p in points
    ]
    n = int(round(x_top / step))
    xticks = [Tick(x(k * step), f"${k * step:,.2f}".rstrip("0").rstrip(".")) for k in range(n + 1)]
    yticks = [Tick(y(v), str(v)) for v in (0, 25, 50, 75, 100)]
    legend = sorted({(p.column.label, p.column.arm, p.column.shade) for p in points}, key=lambda lt: (lt[2], lt[0]))
    return ScatterPlot(WIDTH, height, left, right, top, bottom, dots, xticks, yticks, y(q), legend)
