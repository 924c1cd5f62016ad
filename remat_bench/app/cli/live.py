"""What a solve shows while it runs: the schedule held, the bound and the gap, as they change.

On a terminal one status line (redrawn by rich several times a second, so the elapsed time
ticks): elapsed time, the incumbent's overhead and who found it, the best bound and the gap in
points of overhead. With ``--progress`` one line per improvement on standard error, for pipes and
logs. Both read the points the evaluation path passes on (`remat_bench.core.progress`): every
overhead shown is a simulated one.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.text import Text

from remat_bench.core.budget import format_amount
from remat_bench.core.graph import Number
from remat_bench.core.progress import ANY_ORDER, ProgressPoint
from remat_bench.core.simulate import overhead_pct


@dataclass
class _Run:
    """What is known of one method's run."""

    incumbent: ProgressPoint | None = None
    own_bound: Number | None = None


class LiveProgress:
    """The watcher a solve hands the evaluation path (a `remat_bench.core.progress.ProgressSink`).

    Parameters
    ----------
    text : str
        What is being done (``solving g with moccasin``), shown before the figures.
    baseline_duration : int or float
        Overheads are in percent of this duration.
    lines : Console or None
        Where ``--progress`` prints a line per improvement (None: no lines).
    unit : str
        The graph's memory unit, for peaks.
    """

    def __init__(self, text: str, baseline_duration: Number, lines: Console | None = None, unit: str = "") -> None:
        self.text = text
        self.unit = unit
        self.baseline_duration = baseline_duration
        self.lines = lines
        self.start = time.perf_counter()
        self.any_order: Number | None = None
        self.runs: dict[str, _Run] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ the sink

    def offer(self, schedule: Any, bound: Number | None = None, source: str = "") -> bool:
        """Not used: the runs watched score their own schedules and pass points (`take`).

        Parameters
        ----------
        schedule : Any
            A schedule a method offers.
        bound : Number or None
            The method's own bound at that moment.
        source : str
            Who found it.

        Returns
        -------
        bool
            Never: it always raises.

        Raises
        ------
        TypeError
            Always: a watcher is passed scored points only.
        """
        raise TypeError("LiveProgress shows scored points only")

    def take(self, point: ProgressPoint) -> None:
        """Note a point of a watched run (its source ``method`` or ``method/who``), and print its line.

        Parameters
        ----------
        point : ProgressPoint
            A schedule (the incumbent of its run from now on), the method's own bound, or the
            any-order bound.
        """
        with self._lock:
            if point.source == ANY_ORDER:
                self.any_order = point.bound
                self._line(f"bound, any order: {self._pct(point.bound)}")
                return
            method, _, _who = point.source.partition("/")
            run = self.runs.setdefault(method, _Run())
            if point.duration is None:
                run.own_bound = point.bound
                return
            run.incumbent = point
            self._line(f"{escape(point.source)}: overhead {point.overhead_pct:+.3f}%, "
                       f"peak {format_amount(point.peak, self.unit)}" + self._gap_text(point))

    # ------------------------------------------------------------------ the status line

    def __rich__(self) -> Text:
        """The status line as it is now (rich calls this at each redraw)."""
        with self._lock:
            parts = [f"{self.text}  {time.perf_counter() - self.start:6.1f} s"]
            best = self._best()
            if best is None:
                parts.append("no schedule yet")
            else:
                parts.append(f"best {best.overhead_pct:+.3f}% ({best.source})")
            bound = self._bound_pct()
            if bound is not None:
                parts.append(f"bound {bound:+.3f}%")
                if best is not None and best.overhead_pct is not None:
                    parts.append(f"gap {max(0.0, best.overhead_pct - bound):.3f} pts")
            return Text("  ".join(parts))

    # ------------------------------------------------------------------ its steps

    def _best(self) -> ProgressPoint | None:
        held = [r.incumbent for r in self.runs.values() if r.incumbent is not None]
        return min(held, key=lambda p: (p.duration, p.peak)) if held else None

    def _bound_pct(self) -> float | None:
        """The best bound valid for every schedule: the any-order bound, in percent overhead."""
        return None if self.any_order is None else overhead_pct(self.any_order, self.baseline_duration)

    def _pct(self, amount: Number | None) -> str:
        return "none" if amount is None else f"{overhead_pct(amount, self.baseline_duration):+.3f}%"

    def _gap_text(self, point: ProgressPoint) -> str:
        bound = self._bound_pct()
        if bound is None or point.overhead_pct is None:
            return ""
        return f", {max(0.0, point.overhead_pct - bound):.3f} pts above the any-order bound"

    def _line(self, text: str) -> None:
        if self.lines is not None:
            self.lines.print(f"{time.perf_counter() - self.start:8.2f} s  {text}")
