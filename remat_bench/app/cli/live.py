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

from rich.console import Console
from rich.markup import escape
from rich.text import Text

from remat_bench.core.budget import format_amount
from remat_bench.core.graph import Number
from remat_bench.core.progress import ANY_ORDER, ProgressPoint
from remat_bench.core.simulate import overhead_pct


class LiveProgress:
    """The watcher a solve hands the evaluation path (a `remat_bench.core.progress.Watcher`).

    Parameters
    ----------
    text : str
        What is being done (``solving g with moccasin``), shown before the figures.
    baseline_duration : int or float
        Overheads are in percent of this duration.
    lines : Console or None
        Where ``--progress`` prints a line per improvement (None: no lines). A line that cannot be
        written ends the lines, never the solve.
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
        self.incumbents: dict[str, ProgressPoint] = {}  # by method: the schedule its run holds
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ the watcher

    def take(self, point: ProgressPoint) -> None:
        """Note a point of a watched run (its source ``method`` or ``method/who``), and print its line.

        Parameters
        ----------
        point : ProgressPoint
            A schedule (the incumbent of its run from now on), or the any-order bound (a method's
            own bound, in its space, is not shown).
        """
        with self._lock:
            if point.source == ANY_ORDER:
                self.any_order = point.bound
                self._line(f"bound, any order: {self._pct(point.bound)}")
                return
            if point.duration is None:
                return
            self.incumbents[point.source.partition("/")[0]] = point
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
        held = list(self.incumbents.values())
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
        if self.lines is None:
            return
        try:
            self.lines.print(f"{time.perf_counter() - self.start:8.2f} s  {text}")
        except OSError:
            # A line is a courtesy: one that cannot be written (a full disk, a hung-up terminal) must
            # not end the solve it reports on, so the lines stop here. A closed pipe does not get
            # this far: the console silences itself (`remat_bench.app.cli.helpers.PipeSafeConsole`).
            self.lines = None
