"""Per-partition timelines as PNG (matplotlib, Agg): acknowledged writes/s and produce latency,
fault windows shaded, leader changes marked. Reads only the history's events.

Drawn on a bare `Figure` with an Agg canvas, not pyplot: no global figure state to close, no
backend switch, no pyplot module. The margins are fixed (LEFT_IN ... AXES_GAP_IN) instead of
`tight_layout`, which draws every text once more to measure it: a quarter of the plot's CPU; the
y labels are short ("p0 latency ms"), so fixed margins fit them."""

from __future__ import annotations

import io
from collections import defaultdict
from collections.abc import Sequence
from typing import Final

from chaos.checkers.availability import fault_windows
from chaos.history import Event

BIN_S: Final = 1.0
COLORS: Final = ("#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
FIGURE_WIDTH_IN: Final = 11.0
AXES_HEIGHT_IN: Final = 2.6  # per axes: each partition gets a rate and a latency axes
PNG_DPI: Final = 90
# Fixed margins in inches, about what tight_layout chose, without its measuring of every text:
# the left one fits a y label beside 6-character tick labels ("-1.499", "1000.0"), the gap between
# stacked axes (they share x; only the last shows x tick labels) fits a y axis' offset text.
LEFT_IN: Final = 0.95
RIGHT_IN: Final = 0.15
TOP_IN: Final = 0.15
BOTTOM_IN: Final = 0.5
AXES_GAP_IN: Final = 0.3


def leader_changes(events: Sequence[Event]) -> dict[int, list[tuple[float, int, int]]]:
    """partition -> [(t, leader, leader_epoch)] whenever a sample shows a new epoch."""
    last: dict[int, int | None] = {}
    out: dict[int, list[tuple[float, int, int]]] = defaultdict(list)
    for e in events:
        if e["kind"] != "sample" or e.get("leader_epoch") is None or last.get(e["partition"]) == e["leader_epoch"]:
            continue
        if e["partition"] in last:
            out[e["partition"]].append((e["t"], e["leader"], e["leader_epoch"]))
        last[e["partition"]] = e["leader_epoch"]
    return out


def isr_changes(events: Sequence[Event]) -> dict[int, list[tuple[float, list[int]]]]:
    last: dict[int, list[int]] = {}
    out: dict[int, list[tuple[float, list[int]]]] = defaultdict(list)
    for e in events:
        if e["kind"] == "sample" and e.get("isr") is not None:
            isr = sorted(e["isr"])
            if last.get(e["partition"]) not in (None, isr):
                out[e["partition"]].append((e["t"], isr))
            last[e["partition"]] = isr
    return out


def timeline_png(events: Sequence[Event]) -> bytes:
    # imported here: matplotlib costs ~0.5 s of imports, paid only by a run that writes a report
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    invoked: dict[str, float] = {}
    acked: dict[int, list[float]] = defaultdict(list)
    latency: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for e in events:
        if e["kind"] == "invoke":
            invoked[e["value"]] = e["t"]
        elif e["kind"] == "ok":
            acked[e["partition"]].append(e["t"])
            if e["value"] in invoked:
                latency[e["partition"]].append((e["t"], (e["t"] - invoked[e["value"]]) * 1000))
    partitions = sorted({e["partition"] for e in events if e["kind"] == "invoke"}) or [0]
    end = max((e["t"] for e in events), default=1.0)
    windows = fault_windows(events)
    leaders, isrs = leader_changes(events), isr_changes(events)
    rows = 2 * len(partitions)
    height = rows * AXES_HEIGHT_IN
    figure = Figure(figsize=(FIGURE_WIDTH_IN, height))
    FigureCanvasAgg(figure)
    figure.subplots_adjust(left=LEFT_IN / FIGURE_WIDTH_IN, right=1 - RIGHT_IN / FIGURE_WIDTH_IN,
                           top=1 - TOP_IN / height, bottom=BOTTOM_IN / height,
                           hspace=AXES_GAP_IN * rows / (height - TOP_IN - BOTTOM_IN - AXES_GAP_IN * (rows - 1)))
    axes = figure.subplots(rows, 1, sharex=True, squeeze=False)
    for row, partition in enumerate(partitions):
        rate_ax, latency_ax = axes[2 * row][0], axes[2 * row + 1][0]
        bins = int(end / BIN_S) + 1
        counts = [0] * bins
        for t in acked[partition]:
            counts[int(t / BIN_S)] += 1
        rate_ax.step([i * BIN_S for i in range(bins)], [c / BIN_S for c in counts], where="post", color="#1f77b4")
        rate_ax.set_ylabel(f"p{partition} acked/s")
        points = latency[partition]
        latency_ax.plot([t for t, _ in points], [ms for _, ms in points], ".", markersize=2, color="#2ca02c")
        latency_ax.set_ylabel(f"p{partition} latency ms")
        if points and max(ms for _, ms in points) > 50 * (sorted(ms for _, ms in points)[len(points) // 2] + 1):
            latency_ax.set_yscale("log")
        for ax in (rate_ax, latency_ax):
            for i, (start, stop, what) in enumerate(windows):
                ax.axvspan(start, stop, color=COLORS[i % len(COLORS)], alpha=0.15,
                           label=what if ax is rate_ax and row == 0 else None)
            for t, leader, epoch in leaders.get(partition, []):
                ax.axvline(t, color="black", linestyle="--", linewidth=0.8)
                if ax is rate_ax:
                    ax.annotate(f"leader {leader} e{epoch}", (t, 0), xytext=(2, 2), textcoords="offset points",
                                fontsize=7, rotation=90, va="bottom")
            for t, isr in isrs.get(partition, []):
                ax.axvline(t, color="orange", linestyle=":", linewidth=0.8)
                if ax is latency_ax:
                    ax.annotate(f"ISR {isr}", (t, 1), xycoords=("data", "axes fraction"), fontsize=6,
                                rotation=90, va="top")
    if windows:
        axes[0][0].legend(loc="upper right", fontsize=7)
    axes[-1][0].set_xlabel("seconds since the run began (one monotonic clock)")
    out = io.BytesIO()
    figure.savefig(out, format="png", dpi=PNG_DPI)
    return out.getvalue()
