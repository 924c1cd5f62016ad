"""What every kind of chart shares: method styles, the results table as charts read it, shared drawing
(coinciding series, plain log axes), and writing a figure.

Each method keeps one colour and one marker in every chart, by its place in the registry's order
(`remat_bench.app.catalog.method_names`); a method of old results that is no longer registered takes a
stable place after them. Variants of one method (a parameter grid) share its colour and differ by line
style.
"""

from __future__ import annotations

import hashlib
import io
import math
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pandas as pd
from matplotlib import ticker
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.transforms import offset_copy

from remat_bench.core.errors import RematBenchError
from remat_bench.core.files import atomic_write_bytes

FORMATS = {".png": "png", ".svg": "svg", ".pdf": "pdf"}
# Methods take these in the registry's order. Black is not among them: it is the budget line's.
PALETTE = ("#7f7f7f", "#8c564b", "#1f77b4", "#ff7f0e", "#2ca02c", "#98df8a", "#d62728", "#9467bd",
           "#e377c2", "#17becf", "#bcbd22", "#aec7e8", "#ffbb78", "#c5b0d5", "#f7b6d2", "#c49c94", "#dbdb8d",
           "#9edae5", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#5254a3", "#b5cf6b", "#e7969c")
MARKERS = ("o", "s", "^", "v", "D", "P", "X", "*", "h", "<", ">", "p")
LINESTYLES = ("-", "--", ":", "-.")
# Reserved for lines that are not a method's (the budget).
NEUTRAL = "#000000"
# Old results may hold runs of "bound", once a method that only computed the any-order bound: no method, it
# draws no series of schedules, and it keeps the budget line's black (and the marker of its old place).
BOUND = "bound"
BOUND_STYLE = {"color": NEUTRAL, "marker": "p"}
# Series that coincide: points at (nearly) one place are spread this far apart sideways (a marker's width),
# and identical series alternate colours along dashes this long (in line widths).
DODGE_PT = 4.5
NEAR = 0.02  # points closer than this fraction of the y span overlap on the page, markers being about that tall
DASH = 3.0
# A panel's title lines are wrapped to this many characters, so that neighbouring titles do not meet.
TITLE_CHARS = 52
BOUND_EDGE = "#707070"
NOTE_COLOUR = "#555555"


K = TypeVar("K")


class ChartError(RematBenchError):
    """Nothing to draw, or an output the chart cannot be written to."""


def method_style(method: str) -> dict[str, str]:
    """The colour and marker of ``method``, the same in every chart.

    Parameters
    ----------
    method : str
        A method name, registered or not (a method of old results keeps a stable place too).

    Returns
    -------
    dict
        ``color`` and ``marker``, as matplotlib's keywords.
    """
    from remat_bench.app.catalog import method_names

    if method == BOUND:
        return dict(BOUND_STYLE)
    order = method_names()
    if method in order:
        slot = order.index(method)
    else:  # a method no longer registered (old results): a stable place after the known ones
        slot = len(order) + int(hashlib.sha1(method.encode()).hexdigest(), 16) % len(PALETTE)
    return {"color": PALETTE[slot % len(PALETTE)], "marker": MARKERS[slot % len(MARKERS)]}


def in_method_order(names: Iterable[str], method_of: Callable[[str], str] = str) -> list[str]:
    """``names`` in the registry's order of their methods, then by name; methods no longer registered last.

    Parameters
    ----------
    names : Iterable[str]
        Method names, or names that ``method_of`` reads a method name from (labels).
    method_of : Callable[[str], str]
        A name's method; the name itself by default.

    Returns
    -------
    list of str
    """
    from remat_bench.app.catalog import method_names

    rank = {m: i for i, m in enumerate(method_names())}
    return sorted(names, key=lambda name: (rank.get(method_of(name), len(rank)), name))


def image_format(path: str | Path) -> str:
    """The format ``path``'s suffix names, or a ChartError saying what is wrong with it as an image path.

    Parameters
    ----------
    path : str or Path
        Where a chart is to be written.

    Returns
    -------
    str
        ``png``, ``svg`` or ``pdf``.

    Raises
    ------
    ChartError
        ``path`` is a folder, or its suffix is none of `FORMATS`.
    """
    path = Path(path)
    if path.is_dir():
        raise ChartError(f"{path} is a folder; give an image file ending in {', '.join(FORMATS)}")
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise ChartError(f"{path}: charts are written as {', '.join(FORMATS)}; choose one of those suffixes")
    return fmt


def save(fig: Figure, path: str | Path) -> Path:
    """Write ``fig`` atomically in the format its suffix names.

    Parameters
    ----------
    fig : Figure
    path : str or Path
        The image file; its suffix (``.png``, ``.svg``, ``.pdf``) names the format.

    Returns
    -------
    Path
        ``path``.

    Raises
    ------
    ChartError
        ``path`` is a folder or has another suffix.
    OutputError
        ``path`` cannot be written.
    """
    path = Path(path)
    fmt = image_format(path)
    buffer = io.BytesIO()
    fig.savefig(buffer, format=fmt, dpi=150, bbox_inches="tight")
    atomic_write_bytes(path, buffer.getvalue())
    return path


def labelled(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with each run's ``label``, whether it succeeded (``ok``), and its variant's ``linestyle``.

    Parameters
    ----------
    frame : pandas.DataFrame
        A results table (`remat_bench.app.sweep.results.load_table`).

    Returns
    -------
    pandas.DataFrame
        A copy with the three columns added.
    """
    from remat_bench.app.sweep.results import labels, succeeded

    frame = frame.assign(label=labels(frame), ok=succeeded(frame))
    # Variants of one method get line styles in the order they appear.
    variant = {}
    for _, group in frame.groupby("method", sort=False):
        for i, label in enumerate(dict.fromkeys(group["label"])):
            variant[label] = LINESTYLES[i % len(LINESTYLES)]
    return frame.assign(linestyle=frame["label"].map(variant))


def label_order(frame: pd.DataFrame) -> list[str]:
    """The labels of a `labelled` frame in the order legends list them: by method (`in_method_order`).

    Parameters
    ----------
    frame : pandas.DataFrame
        A `labelled` results table.

    Returns
    -------
    list of str
    """
    return in_method_order(frame.drop_duplicates("label")["label"], lambda label: label.split(" (")[0])


def legend_handles(frame: pd.DataFrame, labels: Sequence[str]) -> list[Line2D]:
    """A legend entry for each of ``labels``: its method's colour and marker, its variant's line style.

    Parameters
    ----------
    frame : pandas.DataFrame
        A `labelled` results table holding every label.
    labels : Sequence[str]
        The labels to list, in order.

    Returns
    -------
    list of Line2D
    """
    handles = []
    for label in labels:
        row = frame[frame["label"] == label].iloc[0]
        style = method_style(row["method"])
        handles.append(Line2D([], [], color=style["color"], marker=style["marker"], linestyle=row["linestyle"],
                              label=label))
    return handles


def interleaved(draw: Any, args: Sequence[Any], colours: Sequence[str], **kw: Any) -> list[Line2D]:
    """``draw(*args)`` (ax.step, ax.plot) once per colour, the colours taking turns along the one path.

    Each copy is dashed with one dash on and the others' dashes off, shifted by one
    dash per copy, so identical series show every colour instead of the last one
    drawn covering the rest. One colour: a plain line.

    Parameters
    ----------
    draw : callable
        The drawing method, called as ``draw(*args, color=..., **kw)``.
    args : Sequence
        Its positional arguments (x, y).
    colours : Sequence[str]
        The colours of the series that share the path.
    **kw
        Its other keywords (a ``linestyle`` is replaced by the dashes when there are several colours).

    Returns
    -------
    list of Line2D
        Every line drawn.
    """
    if len(colours) == 1:
        return list(draw(*args, color=colours[0], **kw))
    k = len(colours)
    lines: list[Line2D] = []
    for i, colour in enumerate(colours):
        # Copy i is on over [i, i+1) dashes of every k: its pattern starts (k - i) dashes in.
        style = (((k - i) % k) * DASH, (DASH, (k - 1) * DASH))
        lines.extend(draw(*args, color=colour, **{**kw, "linestyle": style}))
    return lines


def identical_groups(series: dict[K, tuple[np.ndarray, np.ndarray]]) -> list[list[K]]:
    """The keys of ``series`` grouped by equal (x, y) arrays, in the order given.

    Parameters
    ----------
    series : dict
        Each series' (x, y) arrays by key.

    Returns
    -------
    list of list
        Groups of keys, each in the order of ``series``.
    """
    groups: list[list[K]] = []
    for key, (x, y) in series.items():
        for group in groups:
            gx, gy = series[group[0]]
            if np.array_equal(gx, x) and np.array_equal(gy, y):
                group.append(key)
                break
        else:
            groups.append([key])
    return groups


def spread_points(ax: Axes, fig: Figure, points: dict[K, tuple[np.ndarray, np.ndarray]],
                  scatter: dict[K, dict[str, Any]], log: bool = False, top: float | None = None) -> bool:
    """Scatter each key's points with its ``scatter`` keywords; True if any had to be spread.

    Points of one x (a budget, a graph size) whose y are within `NEAR` of the
    y span of all points in view (below ``top``; on a log scale with ``log``)
    would sit on one another on the page, so they are spread sideways,
    `DODGE_PT` apart in page units (the data stay put), in the order of ``points``.

    Parameters
    ----------
    ax : Axes
    fig : Figure
        The figure of ``ax``.
    points : dict
        Each key's (x, y) arrays.
    scatter : dict
        Each key's keywords for ``ax.scatter``.
    log : bool
        The y axis is logarithmic.
    top : float or None
        The top of the y axis when points above it are marked elsewhere; None for none.

    Returns
    -------
    bool
        Whether any point was moved sideways.
    """
    entries = [(label, i, float(x[i]), float(y[i] if top is None else min(y[i], top)))
               for label, (x, y) in points.items() for i in range(len(x))]
    height = {(label, i): math.log10(max(yi, 1e-300)) if log else yi for label, i, _, yi in entries}
    span = (max(height.values()) - min(height.values())) if height else 0.0
    shift = {(label, i): 0.0 for label, i, _, _ in entries}
    for xi in {xi for _, _, xi, _ in entries}:
        column = sorted((height[(label, i)], n, (label, i)) for n, (label, i, x, _) in enumerate(entries) if x == xi)
        clusters: list[list[tuple[int, tuple[Any, int]]]] = []
        for k, (h, n, key) in enumerate(column):
            if k and h - column[k - 1][0] <= NEAR * span:
                clusters[-1].append((n, key))
            else:
                clusters.append([(n, key)])
        for cluster in clusters:
            # One slot per label, in the order given (not by height): a label's own points may share one.
            slots = list(dict.fromkeys(key[0] for _, key in sorted(cluster)))
            for _, key in cluster:
                shift[key] = (slots.index(key[0]) - (len(slots) - 1) / 2) * DODGE_PT
    for label, (x, y) in points.items():
        offsets = np.array([shift[(label, i)] for i in range(len(x))])
        # One scatter per shift: the shift is in points, applied after the data transform.
        for dx in np.unique(offsets):
            pick = offsets == dx
            ax.scatter(x[pick], y[pick], **scatter[label],
                       transform=offset_copy(ax.transData, fig=fig, x=float(dx), y=0, units="points"))
        # Shifted collections do not take part in autoscaling: give the axes the true data.
        ax.update_datalim(np.column_stack([x, y]))
    ax.autoscale_view()
    return any(shift.values())


class PlainLogLocator(ticker.Locator):
    """Log-axis ticks at 1-2-5 (or 1..9, or 1) times powers of ten: the densest set with at most ``most`` in view.

    Matplotlib's default labels a log axis that spans less than a decade or two
    with minor ticks in scientific notation ("8x10^1 9x10^1 10^2"); these ticks
    are read as plain numbers instead (see `plain_number`).
    """

    def __init__(self, most: int = 7) -> None:
        self.most = most

    def __call__(self) -> Sequence[float]:
        assert self.axis is not None  # matplotlib sets it before asking for ticks
        vmin, vmax = self.axis.get_view_interval()
        return self.tick_values(vmin, vmax)

    def tick_values(self, vmin: float, vmax: float) -> Sequence[float]:
        """The ticks between ``vmin`` and ``vmax``.

        Parameters
        ----------
        vmin, vmax : float
            The axis' view interval, in either order.

        Returns
        -------
        Sequence[float]
            At most ``most`` ticks within the interval (a few plain linear steps where it is within
            one step of 1..9); empty when the interval has no positive, finite top.
        """
        vmin, vmax = sorted((float(vmin), float(vmax)))
        if not (vmax > 0 and math.isfinite(vmax)):
            return []
        vmin = max(vmin, vmax * 1e-12)  # a log axis has no zero
        decades = range(math.floor(math.log10(vmin)), math.ceil(math.log10(vmax)) + 1)
        ticks: list[float] = []
        for subs in ((1, 2, 3, 4, 5, 6, 7, 8, 9), (1, 2, 5), (1,)):
            ticks = [float(f"{s * 10.0 ** e:.12g}") for e in decades for s in subs]
            ticks = [t for t in ticks if vmin * (1 - 1e-9) <= t <= vmax * (1 + 1e-9)]
            if len(ticks) <= self.most:
                break
        else:  # very many decades: every second (third, ...) one
            ticks = ticks[::math.ceil(len(ticks) / self.most)]
        if len(ticks) < 2:  # within one step of 1..9 (say 81 to 89): plain linear steps
            ticks = [t for t in ticker.MaxNLocator(nbins=3).tick_values(vmin, vmax) if vmin <= t <= vmax and t > 0]
        return ticks


def plain_number(value: float, pos: int | None = None) -> str:
    """``1000``, ``50``, ``0.002``: no exponent, no trailing zeros.

    Parameters
    ----------
    value : float
        A tick's value (six significant digits are kept).
    pos : int or None
        The tick's position, as matplotlib's `FuncFormatter` passes it; not used.

    Returns
    -------
    str
    """
    return np.format_float_positional(float(f"{value:.6g}"), trim="-")


def plain_log_axis(axis: Any) -> None:
    """Ticks of a log ``axis`` as plain numbers (`PlainLogLocator`, `plain_number`), minor ticks unlabelled.

    Parameters
    ----------
    axis : matplotlib.axis.Axis
    """
    axis.set_major_locator(PlainLogLocator())
    axis.set_major_formatter(ticker.FuncFormatter(plain_number))
    axis.set_minor_formatter(ticker.NullFormatter())  # minor ticks stay as grid lines, unlabelled


def any_order_overheads(runs: pd.DataFrame) -> pd.Series:
    """The overhead (%) each run's any-order bound implies, for the runs that have one and a baseline.

    Parameters
    ----------
    runs : pandas.DataFrame
        Rows of a results table.

    Returns
    -------
    pandas.Series
        Indexed as ``runs``; empty when no run has a bound (or the table no such column).
    """
    if "lower_bound_any_order" not in runs:
        return pd.Series(dtype=float)
    known = runs.dropna(subset=["lower_bound_any_order", "baseline_duration"])
    known = known[known["baseline_duration"] > 0]
    return 100 * (known["lower_bound_any_order"].astype(float) / known["baseline_duration"].astype(float) - 1)
