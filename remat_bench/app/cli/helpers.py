"""What every command shares: the consoles, one way to print an answer (JSON or tables), number formats,
argument parsing, the output-file check and the first Ctrl-C."""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, cast

import click
from rich.console import Console, RenderableType
from rich.protocol import is_renderable
from rich.table import Table

from remat_bench.core.budget import format_amount
from remat_bench.core.errors import RematBenchError
from remat_bench.core.graph import Graph, Number

# The exit status of a command whose standard output was closed by its reader: a unix tool's on EPIPE
# (killed by SIGPIPE, which a shell reports as 128 + 13). 1 would read as "no schedule" after a solve.
STDOUT_CLOSED_STATUS = 141


class PipeSafeConsole(Console):
    """A console that a closed pipe silences instead of ending the process.

    rich's own answer to a closed pipe is ``SystemExit(1)`` raised from inside the print, with
    standard output sent to /dev/null whichever stream was closed: a ``--progress`` line on a
    stderr whose reader has gone would end a solve as "no schedule" and lose its answer. Here
    the stream goes quiet (its descriptor points at /dev/null, so that nothing written later,
    nor Python's flush at exit, fails on it) and the command carries on; `stdout_closed` tells
    the command group that standard output went so.
    """

    closed = False  # a print found the stream's reader gone

    def on_broken_pipe(self) -> None:
        """Stop printing on this stream; the command goes on (rich calls this on BrokenPipeError)."""
        self.quiet = True
        self.closed = True
        _to_devnull(self.file)


def _to_devnull(stream: Any) -> None:
    """Point ``stream``'s descriptor at /dev/null, so that later writes and its flush succeed unread."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):  # captured (a test's runner): nothing to redirect
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


# Piped or captured output gets room for the comparison tables (rich assumes 80 columns there).
out = PipeSafeConsole(highlight=False, soft_wrap=True,
                      width=None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 120)
err = PipeSafeConsole(stderr=True, highlight=False, soft_wrap=True)


def stdout_closed() -> bool:
    """Whether a command's answer found standard output closed by its reader (``remat-bench ... | head -1``).

    Returns
    -------
    bool
        True once a print to standard output (a table or JSON) met a closed pipe; that output and
        everything after it was dropped.
    """
    return out.closed


# ---------------------------------------------------------------------- output

Rendered = RenderableType | Iterable[RenderableType]


def show(data: Any, as_json: bool, render: Callable[[], Rendered]) -> None:
    """A command's answer: ``data`` as one JSON value with --json, else what ``render`` draws (a table, or
    tables and lines in turn). ``render`` is called only for the tables: they format what JSON leaves raw.

    Parameters
    ----------
    data : Any
        The answer as JSON prints it (non-finite numbers print as null).
    as_json : bool
        The command was given --json.
    render : Callable[[], Rendered]
        Draws the answer for the terminal: one rich renderable, or several printed in turn.
    """
    if as_json:
        print_json(data)
        return
    rendered = render()
    for part in [rendered] if is_renderable(rendered) else cast(Iterable[RenderableType], rendered):
        out.print(part)


def key_values(rows: Iterable[tuple[str, str]]) -> Table:
    """A two-column table without borders, the keys in bold: how one result is shown.

    Parameters
    ----------
    rows : Iterable[tuple[str, str]]
        ``(key, value)`` pairs, in the order shown.

    Returns
    -------
    Table
    """
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    for key, value in rows:
        table.add_row(key, value)
    return table


def print_json(data: Any) -> None:
    """Print ``data`` as one line of JSON on stdout.

    Parameters
    ----------
    data : Any
        Infinity and NaN print as null, numpy values as their Python value, anything else JSON does not
        know as its text.
    """
    try:
        click.echo(json.dumps(_finite(data), default=_json_default))
    except BrokenPipeError:  # the reader has gone: as a closed pipe under a table (PipeSafeConsole)
        out.on_broken_pipe()


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    return str(value)


def _finite(data: Any) -> Any:
    """JSON has no infinity or NaN: such values print as null."""
    if isinstance(data, float) and not math.isfinite(data):
        return None
    if isinstance(data, dict):
        return {k: _finite(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [_finite(v) for v in data]
    return data


# ---------------------------------------------------------------------- numbers


def of_baseline(amount: Number, baseline_peak: Number) -> str:
    """``"  = 80.0% of baseline"``, or nothing when the baseline peak is zero (an all-zero graph).

    Parameters
    ----------
    amount : Number
        A memory amount.
    baseline_peak : Number
        The graph's baseline peak, in the same units.

    Returns
    -------
    str
    """
    return f"  = {100 * amount / baseline_peak:.1f}% of baseline" if baseline_peak else ""


def budget_text(amount: Number | None, fraction: float | None, unit: str) -> str:
    """A run's budget: its amount (``min (lowest peak)`` for --budget min) and its share of the baseline.

    Parameters
    ----------
    amount : Number or None
        The budget in the graph's memory units; None for ``min``.
    fraction : float or None
        Its share of the baseline peak; None for none shown.
    unit : str
        The graph's memory unit (``bytes`` amounts get a binary-prefixed size beside them).

    Returns
    -------
    str
    """
    text = "min (lowest peak)" if amount is None else format_amount(amount, unit)
    return text + (f"  = {100 * fraction:.1f}% of baseline" if fraction is not None else "")


def gap_text(gap_pct: float) -> str:
    """A gap to three decimals; one above zero that rounds to zero reads ``<0.001%``, so that only a
    schedule that meets the bound shows ``0.000%``.

    Parameters
    ----------
    gap_pct : float
        The gap, in percent.

    Returns
    -------
    str
        Such as ``1.250%``.
    """
    return "<0.001%" if 0 < gap_pct < 0.0005 else f"{gap_pct:.3f}%"


# ---------------------------------------------------------------------- arguments


def load(text: str) -> Graph:
    """The graph a GRAPH argument names (`remat_bench.app.graphs.find_graph`), read.

    Parameters
    ----------
    text : str
        The argument: a file, a shipped graph's name, ``paper:<name>``.

    Returns
    -------
    Graph

    Raises
    ------
    GraphError
        A name that names no graph, or a file that is not a valid graph.
    DatasetError
        A published graph that is not on this machine.
    """
    from remat_bench.app.graphs import find_graph
    from remat_bench.core.graph_io import load_graph

    return load_graph(find_graph(text))


def parse_params(pairs: tuple[str, ...]) -> dict[str, str]:
    """The --param options as a dict.

    Parameters
    ----------
    pairs : tuple of str
        Each ``key=value`` as given; a key given twice keeps its last value.

    Returns
    -------
    dict
        Keys and values as text, stripped of spaces around them.

    Raises
    ------
    click.BadParameter
        A pair without ``=`` or without a key.
    """
    params = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"'{pair}' is not of the form key=value", param_hint="--param")
        params[key.strip()] = value.strip()
    return params


class Seconds(click.ParamType):
    """A positive, finite number of seconds (nan, inf and 1e400 are refused)."""

    name = "seconds"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        """The option's value as seconds, as click asks a parameter type.

        Parameters
        ----------
        value : Any
            What was given (text on the command line).
        param : click.Parameter or None
            The option, named in the refusal.
        ctx : click.Context or None

        Returns
        -------
        float
            Positive and finite.

        Raises
        ------
        click.BadParameter
            Not a number, or not a positive, finite one.
        """
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        if not math.isfinite(seconds) or seconds <= 0:
            self.fail(f"{value!r}: give a positive, finite number of seconds", param, ctx)
        return seconds


SECONDS = Seconds()


def check_output(path: Path, inputs: list[Path], fmt: str) -> None:
    """Refuse, before any work, an output that is an input, cannot be written, or is not ours to replace.

    An existing file is replaced only when its first bytes say it is a remat-bench file
    of this kind (a device or a huge file is never read in full).

    Parameters
    ----------
    path : Path
        The output file.
    inputs : list of Path
        The command's input files.
    fmt : str
        The ``format`` the output declares (``remat-bench-schedule``, ...).

    Raises
    ------
    RematBenchError
        ``path`` is an input, or an existing file of another kind.
    OutputError
        ``path`` cannot be written (`remat_bench.core.files.check_writable`).
    """
    from remat_bench.core.files import check_writable, file_format

    target = path.resolve()
    for src in inputs:
        if src.exists() and src.resolve() == target:
            raise RematBenchError(f"{path}: is one of the inputs; choose another output path")
    check_writable(path)
    if path.exists() and file_format(path) != fmt:
        raise RematBenchError(
            f"{path}: exists and is not a {fmt} file; remove it or choose another path "
            "(remat-bench only replaces files it wrote)"
        )


# ---------------------------------------------------------------------- the end of a command

_teardown_skipped = False


def skip_teardown() -> None:
    """Have the process end without Python's teardown once this command has answered.

    After a solve, the interpreter's teardown frees every object still alive, CP-SAT's models
    among them (they sit in reference cycles until then): 0.3 s on an idle machine and up to
    2.8 s beside two busy processes on ``paper:random_layered_n1000`` at 10 s (docs/benchmarks.md,
    "A solve's wall time"), all of it past the time limit. The answer is printed and its file
    written by then; `remat_bench.app.cli.main.RematGroup` flushes the output, runs the exit
    handlers and ends the process at once (only when the command line is the process's own, never
    under a test's runner).
    """
    global _teardown_skipped
    _teardown_skipped = True


def teardown_skipped() -> bool:
    """Whether the running command asked to end without Python's teardown (`skip_teardown`).

    Returns
    -------
    bool
    """
    return _teardown_skipped


# ---------------------------------------------------------------------- long work


@contextlib.contextmanager
def stop_on_first_ctrl_c() -> Iterator[None]:
    """First Ctrl-C: the method stops and returns its best so far; a second one aborts.

    Yields
    ------
    None
        While the block runs, SIGINT asks for an interrupt (`remat_bench.core.control.interrupted`);
        the previous handler is back after it.
    """
    from remat_bench.core.control import interrupted, request_interrupt, reset_interrupt

    def handler(signum: int, frame: Any) -> None:
        if interrupted():
            raise KeyboardInterrupt
        request_interrupt()
        err.print("stopping: finishing with the best schedule so far (Ctrl-C again to abort)")

    reset_interrupt()
    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def working(text: RenderableType, as_json: bool) -> contextlib.AbstractContextManager[Any]:
    """A spinner with ``text`` on a terminal while a command works; nothing with --json or when captured.

    Parameters
    ----------
    text : str or rich renderable
        What is shown beside the spinner; a renderable is drawn again at each refresh
        (`remat_bench.app.cli.live.LiveProgress`: the elapsed time ticks).
    as_json : bool
        The command prints JSON: no spinner.

    Returns
    -------
    context manager
    """
    return err.status(text) if not as_json and err.is_terminal else contextlib.nullcontext()


class FiniteFloat(click.ParamType):
    """A finite number, at least ``minimum`` when one is given (click's FloatRange takes nan, inf and 1e400,
    which overflows to inf).

    Parameters
    ----------
    minimum : float or None
        The smallest value taken; None for no bound.
    """

    name = "number"

    def __init__(self, minimum: float | None = None) -> None:
        self.minimum = minimum

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        """The option's value as a finite float, as click asks a parameter type.

        Parameters
        ----------
        value : Any
            What was given (text on the command line, or the default).
        param : click.Parameter or None
            The option, named in the refusal.
        ctx : click.Context or None

        Returns
        -------
        float
            Finite, and at least ``minimum``.

        Raises
        ------
        click.BadParameter
            Not a number, not finite, or below ``minimum``.
        """
        at_least = f" of at least {self.minimum:g}" if self.minimum is not None else ""
        try:
            number = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number; give a finite number{at_least}", param, ctx)
        if not math.isfinite(number) or (self.minimum is not None and number < self.minimum):
            self.fail(f"{value!r}: give a finite number{at_least}", param, ctx)
        return number


FINITE = FiniteFloat()
