"""Showing a sweep as it goes: a progress bar on a terminal, one line per run otherwise; the end summary."""

from __future__ import annotations

import json
import math
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from remat_bench.app.sweep.results import FAILED, OVERHEAD_SHIFT_PCT, SUCCESS, TIME_SHIFT_S, MethodSummary
from remat_bench.app.sweep.runs import RunSpec


def method_label(method: str, params: Any) -> str:
    """``chen (variant=greedy)``: the method with the parameters a config set, so that two variants
    of one method are told apart; ``params`` a dict or its JSON text.

    Parameters
    ----------
    method : str
        The method's name.
    params : Any
        The parameters the config set: a dict, its JSON text, or an empty text or None for none.

    Returns
    -------
    str
        The name alone when no parameter was set.
    """
    if isinstance(params, str):
        params = json.loads(params) if params else {}
    shown = ", ".join(f"{k}={v}" for k, v in (params or {}).items())
    return f"{method} ({shown})" if shown else method


def status_label(row: dict[str, Any]) -> str:
    """The status with where a proof holds: ``infeasible (in its space)`` for a method's own proof,
    ``optimal (proven)`` where it meets the any-order bound; ``(no schedule fits)`` below the floor.

    Parameters
    ----------
    row : dict
        A run's row: its ``status``, and ``status_holds_for`` and ``proven_optimal`` when it has them.

    Returns
    -------
    str
        The status alone when the row says nothing of where it holds.
    """
    status, holds = row["status"], row.get("status_holds_for")
    if holds == "every schedule":
        return f"{status} ({'proven' if row.get('proven_optimal') else 'no schedule fits'})"
    if holds == "the method's space":
        return f"{status} (in its space)"
    return str(status)


def describe(row: dict[str, Any]) -> str:
    """``chen (variant=greedy) on chain-16 at 0.8: feasible, +16.30 %, 0.02 s``.

    Parameters
    ----------
    row : dict
        A run's row: method, params, graph, budget_text and status; the overhead (shown for a schedule
        found) and the solve time, else the wall time, in s, when it has them.

    Returns
    -------
    str
        One line, without markup.
    """
    text = f"{method_label(row['method'], row.get('params'))} on {row['graph']} at {row['budget_text']}: " \
           f"{status_label(row)}"
    if row.get("overhead_pct") is not None and row["status"] in SUCCESS:
        text += f", {row['overhead_pct']:+.2f} %"
    if row.get("solve_time_s") is not None:
        text += f", {row['solve_time_s']:.2f} s"
    elif row.get("wall_time_s") is not None:
        text += f", {row['wall_time_s']:.1f} s"
    return text


def describe_replay(row: dict[str, Any]) -> str:
    """``greedy on torch-mlp-b64 at 0.8: overhead measured +3.10% (95% interval +1.02% to +5.20%, 12 pairs),
    modelled +2.95%; peak +0.000% against the simulator``; a failed replay with its reason (the pairs' range
    in place of the interval where there is none).

    Parameters
    ----------
    row : dict
        A run's row with its replay columns (`remat_bench.app.sweep.replays`).

    Returns
    -------
    str
        One line, without markup.
    """
    run = f"{method_label(row['method'], row.get('params'))} on {row['graph']} at {row['budget_text']}"
    if row.get("replay_status") != "measured":
        return f"replay of {run} failed: {row.get('replay_message') or 'no reason given'}"
    parts = []
    if row.get("measured_overhead_pct") is not None:
        low, high = row.get("measured_overhead_low_pct"), row.get("measured_overhead_high_pct")
        spread = (f"95% interval {low:+.2f}% to {high:+.2f}%, {row.get('replay_pairs')} pairs"
                  if low is not None and high is not None and low == low else
                  f"{row['measured_overhead_min_pct']:+.2f}% to {row['measured_overhead_max_pct']:+.2f}%")
        parts.append(f"overhead measured {row['measured_overhead_pct']:+.2f}% ({spread}), "
                     f"modelled {row['modelled_overhead_pct']:+.2f}%")
    else:
        parts.append(f"overhead modelled {row['modelled_overhead_pct']:+.2f}%, not measured")
    parts.append(f"peak {row['peak_error_pct']:+.3f}% against the simulator"
                 + (", above the budget" if row.get("measured_within_budget") is False else ""))
    if row.get("outputs_match") is False:
        parts.append("outputs differ from autograd")
    return f"{run}: " + "; ".join(parts)


class SweepProgress:
    """A `remat_bench.app.sweep.runner.Reporter` for the terminal (stderr)."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.bar = console.is_terminal
        self.done = 0
        self.total = 0
        self.failures = 0
        self.progress: Progress | None = None
        self.task: Any = None

    def start(self, total: int, skipped: int, pending: int) -> None:
        """Begin: say how many runs the journal holds already, and start the bar on a terminal.

        Parameters
        ----------
        total : int
            The runs the config plans.
        skipped : int
            Those already in the journal, not run again.
        pending : int
            Those to run now; the count shown counts these.
        """
        self.total = pending
        if skipped:
            self.console.print(f"{skipped} of {total} runs are in the journal already; running the other {pending}")
        if self.bar and pending:
            self.progress = Progress(
                TextColumn("[bold]sweep"), BarColumn(), MofNCompleteColumn(),
                TextColumn("[red]{task.fields[failures]} failed"), TextColumn("elapsed"), TimeElapsedColumn(),
                TextColumn("ETA"), TimeRemainingColumn(), console=self.console, transient=False)
            self.progress.start()
            self.task = self.progress.add_task("sweep", total=pending, failures=0)

    def finished(self, row: dict[str, Any]) -> None:
        """One run ended: advance the bar (or print its line); a failure is printed with its message.

        Parameters
        ----------
        row : dict
            The run's row, as the journal records it.
        """
        self.done += 1
        failed = row["status"] in FAILED
        self.failures += failed
        if self.progress is not None:
            self.progress.update(self.task, advance=1, failures=self.failures)
            if failed:
                self.progress.console.print(f"[red]{describe(row)}[/]: {row.get('message') or ''}")
        else:
            width = len(str(self.total))
            line = f"[{self.done:>{width}}/{self.total}] {describe(row)}"
            if failed and row.get("message"):
                line += f" ({row['message']})"
            self.console.print(line, markup=False)

    def lost(self, spec: RunSpec, error: str) -> None:
        """A run the executor lost (it has no row): counted as a failure and printed.

        Parameters
        ----------
        spec : RunSpec
            The run.
        error : str
            What the executor said.
        """
        self.done += 1
        self.failures += 1
        message = f"lost {spec.method} on {spec.graph} at {spec.budget_text}: {error}"
        if self.progress is not None:
            self.progress.update(self.task, advance=1, failures=self.failures)
            self.progress.console.print(message, markup=False)
        else:
            self.console.print(message, markup=False)

    def note(self, text: str) -> None:
        """Something the sweep is waiting on (no Dask workers), shown above the bar.

        Parameters
        ----------
        text : str
            The line to show, printed as it is (no markup).
        """
        (self.progress.console if self.progress is not None else self.console).print(text, markup=False)

    def replaying(self, total: int) -> None:
        """The replays begin: say how many, and start a bar of their own on a terminal.

        Parameters
        ----------
        total : int
            The schedules to replay now.
        """
        self.close()  # the runs' bar is complete
        self.done, self.total, self.failures = 0, total, 0
        if not total:
            return
        self.console.print(f"replaying {total} schedule{'s' if total != 1 else ''} of PyTorch graphs with real "
                           "tensors, one at a time, each timed against the baseline", markup=False)
        if self.bar:
            self.progress = Progress(
                TextColumn("[bold]replay"), BarColumn(), MofNCompleteColumn(),
                TextColumn("[red]{task.fields[failures]} failed"), TextColumn("elapsed"), TimeElapsedColumn(),
                TextColumn("ETA"), TimeRemainingColumn(), console=self.console, transient=False)
            self.progress.start()
            self.task = self.progress.add_task("replay", total=total, failures=0)

    def replayed(self, row: dict[str, Any]) -> None:
        """One replay ended: advance the bar and print its line (a failure with its message).

        Parameters
        ----------
        row : dict
            The run's row with its replay columns.
        """
        self.done += 1
        failed = row.get("replay_status") != "measured"
        self.failures += failed
        line = f"[{self.done:>{len(str(self.total))}}/{self.total}] {describe_replay(row)}"
        if self.progress is not None:
            self.progress.update(self.task, advance=1, failures=self.failures)
            self.progress.console.print(line, markup=False, highlight=False)
        else:
            self.console.print(line, markup=False, highlight=False)

    def close(self) -> None:
        """Stop the bar, leaving it on the terminal; a second call does nothing."""
        if self.progress is not None:
            self.progress.stop()
            self.progress = None


def summary_table(summaries: list[MethodSummary], title: str = "sweep summary") -> Table:
    """Per method: runs, success rate, shifted geometric means of overhead and solve time.

    Parameters
    ----------
    summaries : list of MethodSummary
        One per method label, in the order of the table's rows.
    title : str
        The table's title.

    Returns
    -------
    rich.table.Table
        Ready for a `rich.console.Console` to print; a mean that cannot be computed shows as ``-``.
    """
    table = Table(title=title, caption=(
        f"shifted geometric means: overhead over successful runs (shift {OVERHEAD_SHIFT_PCT:g} point), "
        f"solve time over applicable runs, those without an answer (a schedule or a proof that none "
        f"fits) at the time limit (shift {TIME_SHIFT_S:g} s); "
        "'unsupported' runs left out"))
    for column in ("method", "runs", "success", "timeouts", "failures", "overhead % (sgm)", "solve time s (sgm)"):
        table.add_column(column, justify="left" if column == "method" else "right")
    for s in summaries:
        table.add_row(s.label, str(s.runs), _rate(s), str(s.timeouts), str(s.failures),
                      _number(s.overhead_sgm, "{:.2f}"), _number(s.solve_time_sgm, "{:.2f}"))
    return table


def _rate(s: MethodSummary) -> str:
    if not s.applicable:
        return "n/a"
    return f"{s.successes}/{s.applicable} ({100 * s.success_rate:.0f}%)"


def _number(value: float, fmt: str) -> str:
    return "-" if value is None or math.isnan(value) else fmt.format(value)
