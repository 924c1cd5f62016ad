"""The ``remat-bench`` command line (docs/design.md section 7): parse, call the library, format.

Every user-caused error becomes one sentence on stderr and exit status 2;
``solve`` exits 0 when a schedule within budget was found and 1 otherwise.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from remat_bench import __version__
from remat_bench.core.budget import format_amount
from remat_bench.core.errors import RematBenchError, printable
from remat_bench.core.graph import Graph, Number

# Piped or captured output gets room for the comparison tables (rich assumes 80 columns there).
out = Console(highlight=False, soft_wrap=True,
              width=None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 120)
err = Console(stderr=True, highlight=False, soft_wrap=True)


# ---------------------------------------------------------------------- helpers


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, Path):
        return str(value)
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


def print_json(data: Any) -> None:
    click.echo(json.dumps(_finite(data), default=_json_default))


fmt_amount = format_amount  # the CLI's name for it


def of_baseline(amount: Number, baseline_peak: Number) -> str:
    """``"  = 80.0% of baseline"``, or nothing when the baseline peak is zero (an all-zero graph)."""
    return f"  = {100 * amount / baseline_peak:.1f}% of baseline" if baseline_peak else ""


def gap_text(gap_pct: float) -> str:
    """A gap to three decimals; one above zero that rounds to zero reads ``<0.001%``, so that only a
    schedule that meets the bound shows ``0.000%``."""
    return "<0.001%" if 0 < gap_pct < 0.0005 else f"{gap_pct:.3f}%"


def graph_search_path() -> list[Path]:
    """Where graph names are looked up: $REMAT_BENCH_GRAPHS, then the shipped graphs/."""
    paths = [Path(p) for p in os.environ.get("REMAT_BENCH_GRAPHS", "").split(os.pathsep) if p]
    paths.append(Path(__file__).resolve().parents[2] / "graphs")
    return paths


def resolve_graph(text: str) -> Path:
    """A path as given, ``paper:<name>`` (a published graph), or a graph's name on the search path."""
    from remat_bench.app import datasets

    published = datasets.resolve(text)
    if published is not None:
        return published
    path = Path(text)
    if path.exists():
        return path
    for folder in graph_search_path():
        for candidate in (folder / text, folder / f"{text}.json"):
            if candidate.is_file():
                return candidate
    # A graph also answers to the name inside it (`graphs list` and results show that one).
    for folder in graph_search_path():
        for candidate in sorted(folder.glob("*.json")) if folder.is_dir() else ():
            if _declared_name(candidate) == text:
                return candidate
    from remat_bench.core.errors import GraphError

    raise GraphError(
        f"{text}: no such file, and no shipped graph of that name (`remat-bench graphs list` shows them; "
        "published graphs are named paper:<name>)"
    )


def _declared_name(path: Path) -> str | None:
    """The ``name`` a remat-bench graph file declares near its start (its first 4 KiB), else None."""
    import re

    try:
        with open(path, "rb") as fh:
            head = fh.read(4096)
    except OSError:
        return None
    match = re.search(rb'^\s*\{\s*"format"\s*:\s*"remat-bench-graph"[^{]*?"name"\s*:\s*"([^"\\]*)"', head)
    return match.group(1).decode("utf-8", "replace") if match else None


def load(text: str) -> Graph:
    from remat_bench.core.graph import load_graph

    return load_graph(resolve_graph(text))


def check_output(path: Path, inputs: list[Path], fmt: str) -> None:
    """Refuse, before any work, an output that is an input, cannot be written, or is not ours to replace.

    An existing file is replaced only when its first bytes say it is a remat-bench file
    of this kind (a device or a huge file is never read in full).
    """
    from remat_bench.core.errors import RematBenchError as Refused
    from remat_bench.core.files import check_writable, file_format

    target = path.resolve()
    for src in inputs:
        if src.exists() and src.resolve() == target:
            raise Refused(f"{path}: is one of the inputs; choose another output path")
    check_writable(path)
    if path.exists() and file_format(path) != fmt:
        raise Refused(
            f"{path}: exists and is not a {fmt} file; remove it or choose another path "
            "(remat-bench only replaces files it wrote)"
        )


def parse_params(pairs: tuple[str, ...]) -> dict[str, str]:
    params = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"'{pair}' is not of the form key=value", param_hint="--param")
        params[key.strip()] = value.strip()
    return params


@contextlib.contextmanager
def stop_on_first_ctrl_c() -> Iterator[None]:
    """First Ctrl-C: the method stops and returns its best so far; a second one aborts."""
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


class Seconds(click.ParamType):
    """A positive, finite number of seconds (nan, inf and 1e400 are refused)."""

    name = "seconds"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        if not math.isfinite(seconds) or seconds <= 0:
            self.fail(f"{value!r}: give a positive, finite number of seconds", param, ctx)
        return seconds


SECONDS = Seconds()


class RematGroup(click.Group):
    """Turns RematBenchError into one sentence and its exit status; Ctrl-C into status 130."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            # One sentence, as for every other bad input (click would add its usage lines).
            where = exc.ctx.command_path if exc.ctx is not None else ctx.command_path
            err.print(f"[bold red]error:[/] {escape(printable(exc.format_message()))} (see `{where} -h`)",
                      markup=True, highlight=False)
            sys.exit(exc.exit_code)
        except RematBenchError as exc:
            err.print(f"[bold red]error:[/] {escape(printable(str(exc)))}", markup=True, highlight=False)
            sys.exit(exc.exit_code)
        except KeyboardInterrupt:
            err.print("interrupted")
            sys.exit(130)


@click.group(cls=RematGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="remat-bench")
def main() -> None:
    """Compare tensor-rematerialization methods on one footing.

    Every method reads one graph format and writes one schedule format; one
    shared simulator scores every schedule for peak memory and duration.
    """


# ---------------------------------------------------------------------- solve


@main.command()
@click.argument("graph")
@click.option("--method", "-m", "methods", required=True, multiple=True,
              help="Method name (`remat-bench methods` lists them); repeat it to compare methods side by side.")
@click.option("--budget", "-b", required=True,
              help="Fraction of the baseline peak (0.8, 80%), an amount (12GiB, 1.2e10) or 'min'.")
@click.option("--time-limit", "-t", type=SECONDS, default=300.0, show_default=True,
              help="Seconds each method may spend (the any-order bound included).")
@click.option("--param", "-p", "params", multiple=True, metavar="K=V", help="Method parameter (repeatable).")
@click.option("-o", "--output", type=click.Path(path_type=Path), help="Write the cleaned schedule here.")
@click.option("--no-bound", is_flag=True,
              help="Skip the any-order lower bound (no gap, nothing proven optimal; saves up to a tenth of the limit).")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=1, show_default=True,
              help="With several -m: how many run at once, each in its own process (they share the cores).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (a list with several methods).")
def solve(graph: str, methods: tuple[str, ...], budget: str, time_limit: float, params: tuple[str, ...],
          output: Path | None, no_bound: bool, jobs: int, as_json: bool) -> None:
    """Solve GRAPH with a method at a budget; score the schedule with the simulator.

    With several -m, each runs under the same budget and limit (one after another, or
    --jobs at once), and one table compares them; -p applies to every method that
    declares the parameter.
    """
    from remat_bench.app.pipeline import resolve_method, run_many
    from remat_bench.core.budget import parse_budget
    from remat_bench.core.errors import RematBenchError as Refused
    from remat_bench.core.schedule import save_schedule

    graph_path = resolve_graph(graph)
    g = load(graph)
    given = parse_params(params)
    if len(set(methods)) != len(methods):
        raise Refused(f"--method names {', '.join(m for m in dict.fromkeys(methods) if methods.count(m) > 1)} "
                      "more than once; give each method once")
    per_method = {m: _params_for(m, given, several=len(methods) > 1) for m in methods}
    for m in methods:
        resolve_method(m, per_method[m])  # unknown method/parameter: fail before any work
    if output is not None:
        if len(methods) > 1:
            raise Refused("-o writes one schedule: give one --method, or solve each method on its own")
        check_output(output, [graph_path], "remat-bench-schedule")
    parsed_budget = parse_budget(budget, g)
    if parsed_budget.warning:
        err.print(f"[yellow]warning:[/] {escape(parsed_budget.warning)}")

    show_progress = not as_json and err.is_terminal
    at_once = f", {min(jobs, len(methods))} at a time" if jobs > 1 and len(methods) > 1 else ""
    with stop_on_first_ctrl_c():
        status = (err.status(f"solving {g.name} with {', '.join(methods)}{at_once} (limit {time_limit:g} s each)...")
                  if show_progress else contextlib.nullcontext())
        with status:
            results = run_many(g, list(methods), parsed_budget, time_limit, per_method, bound=not no_bound, jobs=jobs)

    if as_json:
        print_json(results[0].to_json() if len(results) == 1 else [r.to_json() for r in results])
    elif len(results) == 1:
        _print_result(g, results[0], output)
    else:
        _print_comparison(g, results)
    if output is not None and results[0].schedule is not None:
        # After printing: a target that turns out unwritable (an immutable file) loses nothing shown.
        save_schedule(results[0].schedule, g, output)
    sys.exit(0 if any(r.exit_code == 0 for r in results) else 1)


def _params_for(method: str, given: dict[str, str], several: bool) -> dict[str, str]:
    """With several methods, each gets the -p values it declares (and the pipeline's own)."""
    if not several:
        return given
    from remat_bench.app.catalog import get_solver
    from remat_bench.app.pipeline import PIPELINE_PARAMS

    declared = {name for p in get_solver(method).params for name in (p.name, *p.aliases)}
    return {k: v for k, v in given.items() if k in declared or k in PIPELINE_PARAMS}


def _status_text(r: Any) -> str:
    """The status with where it holds: a method's own proof names its space."""
    colour = "green" if r.status.found_schedule else "red"
    text = f"[{colour}]{r.status.value}[/]"
    if r.proven_optimal:
        return text + "  (proven optimal: it meets the any-order bound, so no schedule is faster)"
    if r.status_holds_for == "every schedule":
        return text + "  (no schedule at all fits)"
    if r.status_holds_for == "the method's space":
        return text + f"  in {r.method}'s space only: {escape(r.space)}"
    return text


def _print_comparison(g: Graph, results: list[Any]) -> None:
    unit = g.units.get("memory", "")
    first = results[0]
    budget = "min (lowest peak)" if first.budget is None else fmt_amount(first.budget, unit)
    if first.budget_fraction is not None:
        budget += f" = {100 * first.budget_fraction:.1f}% of baseline"
    table = Table(title=f"{g.name} ({g.n} nodes), budget {budget}", title_justify="left")
    for col in ("method", "status", "proof", "overhead", "peak", "solve s", "bound s", "gap"):
        table.add_column(col, justify="left" if col in ("method", "status", "proof") else "right", no_wrap=True)
    found = [r for r in results if r.status.found_schedule]
    best = min((r.duration for r in found), default=None)
    for r in results:
        mark = " *" if best is not None and r.status.found_schedule and r.duration == best else ""
        proof = {"every schedule": "all schedules", "the method's space": "its space"}.get(r.status_holds_for, "")
        # A schedule that does not fit the budget has no overhead or gap to show: only its peak.
        fits = r.status.found_schedule
        table.add_row(
            r.method + mark, r.status.value, proof,
            "-" if r.overhead_pct is None or not fits else f"{r.overhead_pct:+.3f}%",
            "-" if r.peak is None else f"{100 * r.peak / r.baseline_peak:.1f}%" if r.baseline_peak else str(r.peak),
            f"{r.solve_time_s:.2f}", f"{r.bound_time_s:.2f}",
            "-" if r.gap_pct is None or not fits else gap_text(r.gap_pct),
        )
    out.print(table)
    bound = first.lower_bound_any_order
    notes = ["* fastest schedule found", "peak in % of the baseline peak",
             "proof: where optimal/infeasible is proven (all schedules: it meets the any-order bound)"]
    if bound is not None:
        notes.append(f"gap to the any-order bound {fmt_amount(bound)} (baseline duration "
                     f"{fmt_amount(first.baseline_duration)})")
    out.print("; ".join(notes))
    below = [r for r in results if r.below_floor]
    if below:  # the same sentence for every method: once, for the graph
        out.print(f"{'every method' if len(below) == len(results) else ', '.join(r.method for r in below)}: "
                  f"{escape(below[0].message)}")
    for r in results:
        # Why nothing was found; which member won (auto); whose schedule an exact method returned.
        returned = r.stats.get("returned")
        if r.below_floor:
            continue
        if r.message and (not r.status.found_schedule or "winner" in r.stats or returned not in (None, "search")):
            out.print(f"{r.method}: {escape(r.message)}")


def _print_result(g: Graph, r: Any, output: Path | None) -> None:
    unit = g.units.get("memory", "")
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    table.add_row("graph", f"{g.name} ({g.n} nodes, {g.num_edges} edges)")
    table.add_row("method", r.method + (f"  {r.params}" if r.params else ""))
    table.add_row("status", _status_text(r))
    if r.message:
        table.add_row("", r.message)
    budget = "min (lowest peak)" if r.budget is None else fmt_amount(r.budget, unit)
    if r.budget_fraction is not None:
        budget += f"  = {100 * r.budget_fraction:.1f}% of baseline"
    table.add_row("budget", budget)
    if r.peak is not None:
        table.add_row("peak", fmt_amount(r.peak, unit) + of_baseline(r.peak, r.baseline_peak))
        table.add_row("duration", f"{fmt_amount(r.duration)}  overhead {r.overhead_pct:+.3f}%")
    table.add_row("baseline", f"peak {fmt_amount(r.baseline_peak, unit)}, duration {fmt_amount(r.baseline_duration)}")
    if r.peak_lower_bound is not None:
        above = "" if r.peak is None or not r.peak_lower_bound else \
            f"; the peak found is {100 * (r.peak / r.peak_lower_bound - 1):.1f}% above it"
        table.add_row("peak, at least", f"{fmt_amount(r.peak_lower_bound, unit)}"
                      f"{of_baseline(r.peak_lower_bound, r.baseline_peak)}{above} "
                      f"({escape(r.peak_lower_bound_reason)})")
    if r.objective is not None:
        table.add_row("objective", f"{fmt_amount(r.objective)} (the method's own, before clean-up)")
    if r.lower_bound is not None:
        table.add_row("lower bound", f"{fmt_amount(r.lower_bound)} (in {r.method}'s space only)")
    if r.lower_bound_any_order is not None:
        gap = "" if r.gap_pct is None else f"; gap {gap_text(r.gap_pct)}"
        how = "from the cache" if r.stats_bound.get("from_cache") else f"computed in {r.bound_time_s:.2f} s"
        if r.stats_bound.get("discarded"):
            how += f"; the cached bound was discarded: {r.stats_bound['discarded']}"
        table.add_row("bound, any order", f"{fmt_amount(r.lower_bound_any_order)}{gap}  ({escape(how)})")
    elif not r.stats_bound and not r.below_floor:
        table.add_row("bound, any order", "not computed (--no-bound)")
    table.add_row("solve time", f"{r.solve_time_s:.2f} s")
    if r.schedule_steps is not None:
        dropped = (r.cleanup or {}).get("dropped_computations", 0)
        note = f" (clean-up dropped {dropped} computations)" if dropped else ""
        table.add_row("schedule", f"{r.schedule_steps} steps{note}")
    if output is not None:
        table.add_row("schedule file", str(output) if r.schedule is not None else "nothing written (no schedule)")
    out.print(table)
    if "members" in r.stats:
        _print_members(r)


def _print_members(r: Any) -> None:
    """A portfolio's members (``auto``): what each found, in the order they ran."""
    table = Table(title="members", title_justify="left")
    for col in ("method", "role", "status", "overhead", "peak", "seconds", "note"):
        table.add_column(col, justify="right" if col in ("overhead", "peak", "seconds") else "left")
    for m in r.stats["members"]:
        overhead = "-" if m.get("overhead_pct") is None or m["status"] not in ("optimal", "feasible") else \
            f"{m['overhead_pct']:+.3f}%"
        peak = "-" if m.get("peak") is None or not r.baseline_peak else f"{100 * m['peak'] / r.baseline_peak:.1f}%"
        note = m.get("message", "") if m["status"] not in ("optimal", "feasible") else (
            f"returned {m['returned']}" if m.get("returned") not in (None, "search") else "")
        if m["role"] == "polish" and m.get("returned"):
            note = f"from {m['returned']}'s schedule: {m.get('message', '')}"
        table.add_row(m["method"], m["role"], m["status"], overhead, peak, f"{m.get('seconds', 0):.2f}",
                      escape(textwrap.shorten(note, 160, placeholder=" ...")))
    out.print(table)


# ---------------------------------------------------------------------- simulate


@main.command()
@click.argument("graph")
@click.argument("schedule", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--force", is_flag=True, help="Score a schedule written for a graph with another hash.")
@click.option("--timeline", type=click.Path(path_type=Path), metavar="FILE",
              help="Also draw memory at every step to FILE (.png or .svg).")
def simulate(graph: str, schedule: Path, as_json: bool, force: bool, timeline: Path | None) -> None:
    """Score any SCHEDULE file on GRAPH: peak, duration, overhead, first violation."""
    from remat_bench.core.errors import ScheduleError
    from remat_bench.core.schedule import load_schedule
    from remat_bench.core.simulate import baseline
    from remat_bench.core.simulate import simulate as run_simulation

    g = load(graph)
    sched = load_schedule(schedule, g, force=force)
    sim = run_simulation(g, sched)
    if not sim.valid:
        raise ScheduleError(f"{schedule}: {sim.violation}")
    base = baseline(g)
    data = {
        "peak": sim.peak,
        "duration": sim.duration,
        "baseline_peak": base.peak,
        "baseline_duration": base.duration,
        "overhead_pct": sim.overhead_pct(base.duration),
        "steps": sim.num_steps,
        "computes": sim.computes,
        "recomputations": sim.recomputations,
        "peak_step": sim.peak_step,
    }
    if timeline is not None:
        from remat_bench.app.charts import timeline as draw_timeline

        draw_timeline(g, [(sched.method or schedule.stem, sched)], timeline, budget=sched.budget,
                      title=f"{g.name}: {schedule.name}")
        err.print(f"wrote {timeline}")
    if as_json:
        print_json(data)
        return
    unit = g.units.get("memory", "")
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    table.add_row("schedule", f"{schedule} ({sched.method or 'unknown method'})")
    table.add_row("valid", "[green]yes[/]")
    table.add_row("peak", f"{fmt_amount(sim.peak, unit)}{of_baseline(sim.peak, base.peak)}, at step {sim.peak_step}")
    table.add_row("duration", f"{fmt_amount(sim.duration)}  overhead {data['overhead_pct']:+.3f}%")
    table.add_row("steps", f"{sim.num_steps} ({sim.computes} computes, {sim.recomputations} recomputations)")
    out.print(table)


# ---------------------------------------------------------------------- floor


@main.command()
@click.argument("graph")
@click.option("--method", "-m", default="auto", show_default=True,
              help="The method that searches for the lowest peak (auto: the best any method finds).")
@click.option("--time-limit", "-t", type=SECONDS, default=120.0, show_default=True, help="Seconds for the search.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def floor(graph: str, method: str, time_limit: float, as_json: bool) -> None:
    """The lowest feasible budget: the lowest peak a schedule reaches, and a peak no schedule goes below.

    The schedule is the method's answer to `--budget min`, ended as soon as its peak meets the
    lower bound (the duration there is then not minimised); the lower bound holds for every
    schedule (the memory floor, or all outputs resident when the last is computed). Exit status 0
    when a schedule was found, 1 otherwise.
    """
    from remat_bench.app.pipeline import run

    g = load(graph)
    with stop_on_first_ctrl_c():
        status = err.status(f"searching the lowest peak of {g.name} with {method} (limit {time_limit:g} s)...") \
            if not as_json and err.is_terminal else contextlib.nullcontext()
        with status:
            r = run(g, method, "min", time_limit, peak_only=True)
    peak = r.peak if r.status.found_schedule else None
    found = peak is not None
    bound = r.peak_lower_bound
    proven = peak is not None and bound is not None and peak <= bound
    data: dict[str, Any] = {
        "graph": g.name, "method": method, "status": r.status.value, "message": r.message,
        "peak_lower_bound": r.peak_lower_bound, "peak_lower_bound_reason": r.peak_lower_bound_reason,
        "peak_lower_bound_fraction": (r.peak_lower_bound / r.baseline_peak
                                      if r.peak_lower_bound is not None and r.baseline_peak else None),
        "lowest_peak_found": peak,
        "lowest_peak_fraction": peak / r.baseline_peak if peak is not None and r.baseline_peak else None,
        "duration_there": r.duration if found else None, "overhead_pct_there": r.overhead_pct if found else None,
        "found_by": r.stats.get("winner", method) if found else None,
        "proven": proven,
        "baseline_peak": r.baseline_peak, "solve_time_s": r.solve_time_s,
    }
    if as_json:
        print_json(data)
    else:
        unit = g.units.get("memory", "")
        table = Table(show_header=False, box=None, pad_edge=False)
        table.add_column(style="bold")
        table.add_column()
        table.add_row("graph", f"{g.name} ({g.n} nodes, {g.num_edges} edges)")
        table.add_row("baseline peak", fmt_amount(r.baseline_peak, unit))
        if peak is not None:
            table.add_row("lowest peak found", f"{fmt_amount(peak, unit)}{of_baseline(peak, r.baseline_peak)}"
                          f", by {data['found_by']} (overhead there {r.overhead_pct:+.3f}%, not minimised: "
                          "`solve --budget min` minimises it)")
        else:
            table.add_row("lowest peak found", f"[red]none[/] ({escape(r.message)})")
        if bound is not None:
            table.add_row("no schedule below", f"{fmt_amount(bound, unit)}{of_baseline(bound, r.baseline_peak)} "
                          f"({escape(r.peak_lower_bound_reason)})")
        if peak is not None and bound:
            table.add_row("gap", "[green]none: the lowest peak is proven[/]" if proven else
                          f"{100 * (peak / bound - 1):.1f}% (the lowest feasible budget lies between the two)")
        table.add_row("time", f"{r.solve_time_s:.1f} s")
        out.print(table)
    sys.exit(0 if found else 1)


# ---------------------------------------------------------------------- bound


@main.command()
@click.argument("graph")
@click.option("--budget", "-b", required=True, help="Fraction of the baseline peak, an amount, or a percentage.")
@click.option("--time-limit", "-t", type=SECONDS, default=30.0, show_default=True,
              help="Seconds the bound's 0/1 programs may take (a bound cached with as much or more answers at once).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def bound(graph: str, budget: str, time_limit: float, as_json: bool) -> None:
    """A lower bound on duration valid for every schedule (any order, any recomputation).

    Exit status 0 with the bound; 1 when the bound proves that no schedule fits.
    """
    from remat_bench.core.budget import parse_budget
    from remat_bench.core.simulate import baseline, overhead_pct
    from remat_bench.toolkit.bound import BoundCache, default_cache_folder

    g = load(graph)
    b = parse_budget(budget, g)
    if b.is_min:
        raise click.BadParameter("the bound needs a budget, not 'min'", param_hint="--budget")
    # Through the on-disk cache: a bound `solve` or a sweep computed with as much effort answers at once.
    result, _ = BoundCache(default_cache_folder()).get(g, b.amount, time_limit)
    base = baseline(g)
    overhead = None if result.value is None else overhead_pct(result.value, base.duration)
    data = {"graph": g.name, "budget": b.amount, "budget_fraction": b.fraction, "status": result.status,
            "lower_bound": result.value, "lower_bound_overhead_pct": overhead,
            "baseline_duration": base.duration, "baseline_peak": base.peak,
            "recomputed": list(result.recomputed), "cuts": result.cuts, "solve_time_s": result.solve_time_s,
            "no_order_fits": result.no_order_fits, "order_peak_at_least": result.order_peak_at_least,
            "prefix_sizes": list(result.prefix_sizes), "recompute_cuts": result.recompute_cuts}
    if as_json:
        print_json(data)
    else:
        unit = g.units.get("memory", "")
        table = Table(show_header=False, box=None, pad_edge=False)
        table.add_column(style="bold")
        table.add_column()
        table.add_row("graph", f"{g.name} ({g.n} nodes, {g.num_edges} edges)")
        table.add_row("budget", f"{fmt_amount(b.amount, unit)}" + (
            f"  = {100 * b.fraction:.1f}% of baseline" if b.fraction is not None else ""))
        if result.value is None:
            table.add_row("bound", "[red]no schedule fits this budget[/] (below the memory floor)")
        else:
            how = {"optimal": "exact: its 0/1 program was solved to the end",
                   "limit": "its 0/1 program stopped at the time limit; more time may raise it",
                   "trivial": "every node computed once; no cut applies"}.get(result.status, result.status)
            table.add_row("bound", f"{fmt_amount(result.value)}: no schedule within the budget has an overhead "
                          f"below {overhead:.5f}% ({how})")
            if result.recomputed:
                shown = ", ".join(result.recomputed[:8]) + (" ..." if len(result.recomputed) > 8 else "")
                table.add_row("must recompute", f"{len(result.recomputed)} values: {shown}")
            if result.no_order_fits:
                peak = "" if result.order_peak_at_least is None else (
                    f": every order holds at least {fmt_amount(result.order_peak_at_least, unit)} at some step")
                table.add_row("rematerialization", f"[bold]needed[/], no order fits without recomputation{peak}")
            elif overhead == 0:
                table.add_row("", "rematerialization may not be needed: a schedule with no recomputation may fit")
        table.add_row("cuts", f"{result.cuts} binding memory cuts, {len(result.prefix_sizes)} prefix cuts, "
                          f"solved in {result.solve_time_s:.2f} s")
        out.print(table)
    sys.exit(1 if result.value is None else 0)


# ---------------------------------------------------------------------- methods


@main.command()
@click.argument("name", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
def methods(name: str | None, as_json: bool) -> None:
    """List every method, its parameters and whether it can run here; NAME: one method in full."""
    from remat_bench.app.catalog import get_solver, solver_names
    from remat_bench.core.errors import MethodError

    if name is not None:
        get_solver(name)  # an unknown name: one sentence, with a suggestion
    rows: list[dict[str, Any]] = []
    for method in [name] if name else solver_names():
        try:
            cls = get_solver(method)
        except MethodError as exc:  # a plugin (or a module) that fails to import: list it, say why
            rows.append({"name": method, "description": "", "available": False, "missing": str(exc),
                         "space": "", "params": []})
            continue
        ok, why = cls.available()
        rows.append({
            "name": method,
            "description": cls.description,
            "available": ok,
            "missing": why,
            "space": cls.search_space,
            "params": [{"name": p.name, "type": p.type.__name__, "default": p.default, "help": p.help,
                        "accepts": p.accepts, **({"choices": list(p.choices)} if p.choices else {}),
                        **({"minimum": p.minimum} if p.minimum is not None else {}),
                        **({"maximum": p.maximum} if p.maximum is not None else {}),
                        **({"aliases": list(p.aliases)} if p.aliases else {})} for p in cls.params],
        })
    if as_json:
        print_json(rows)
        return
    if name is not None:
        _print_method(rows[0])
        return
    table = Table(title="remat-bench methods")
    table.add_column("method", style="bold")
    table.add_column("here")
    table.add_column("description")
    table.add_column("parameters (default)")
    for row in rows:
        params = "\n".join(f"{p['name']}={p['default']}" for p in row["params"]) or "-"
        here = "[green]yes[/]" if row["available"] else f"[red]no[/]: {escape(row['missing'])}"
        table.add_row(row["name"], here, row["description"], params)
    out.print(table)
    out.print("`remat-bench methods NAME` says what each parameter means and what it accepts; any method also "
              "takes -p impl=first|fastest-fit.")


def _print_method(row: dict[str, Any]) -> None:
    out.print(f"[bold]{row['name']}[/]: {escape(row['description'])}")
    out.print(f"searches: {escape(row['space'])} (its optimal and infeasible hold there only)")
    if not row["available"]:
        out.print(f"[red]not available here[/]: {escape(row['missing'])}")
    if not row["params"]:
        out.print("parameters: none")
        return
    table = Table()
    for col in ("parameter", "default", "accepts", "meaning"):
        table.add_column(col, style="bold" if col == "parameter" else None)
    for p in row["params"]:
        label = p["name"] + (f" (also {', '.join(p['aliases'])})" if p.get("aliases") else "")
        table.add_row(label, str(p["default"]), escape(p["accepts"]), escape(p["help"]))
    out.print(table)


# ---------------------------------------------------------------------- graphs


@main.group(cls=RematGroup)
def graphs() -> None:
    """List, show, validate, import and generate graphs."""


@graphs.command("list")
@click.option("--json", "as_json", is_flag=True)
def graphs_list(as_json: bool) -> None:
    """Graphs on the search path (shipped graphs/, $REMAT_BENCH_GRAPHS) and the published ones (paper:<name>)."""
    from remat_bench.app import datasets
    from remat_bench.core.graph import load_graph
    from remat_bench.core.simulate import baseline

    entries: list[tuple[str, Path | None]] = [(path.stem, path) for folder in graph_search_path() if folder.is_dir()
               for path in sorted(folder.glob("*.json"))]
    entries += [(datasets.PREFIX + f.name.removesuffix(".json"), datasets.find(f.name))
                for f in datasets.PAPER.files]
    rows: list[dict[str, Any]] = []
    for label, path in entries:
        if path is None:
            rows.append({"graph": label, "file": None, "error": f"not on this machine: {datasets.FETCH_HINT}"})
            continue
        try:
            g = load_graph(path)
        except RematBenchError as exc:
            rows.append({"graph": label, "file": str(path), "error": str(exc)})
            continue
        rows.append({
            "graph": label, "file": str(path), "name": g.name, "nodes": g.n, "edges": g.num_edges,
            "kind": "training" if g.has_backward else "forward only",
            "baseline_peak": baseline(g).peak, "memory_unit": g.units.get("memory", ""),
        })
    if as_json:
        print_json(rows)
        return
    table = Table(title="graphs")
    # The first column is what a user types: never cut; the long names give way first.
    table.add_column("graph", no_wrap=True, min_width=max((len(r["graph"]) for r in rows), default=5))
    table.add_column("name", overflow="fold", ratio=1)
    for col in ("nodes", "edges", "kind", "baseline peak"):
        table.add_column(col, no_wrap=True)
    for r in rows:
        if "error" in r:
            table.add_row(r["graph"], f"[red]{escape(r['error'])}[/]", "", "", "", "")
        else:
            table.add_row(r["graph"], r["name"], str(r["nodes"]), str(r["edges"]), r["kind"],
                          fmt_amount(r["baseline_peak"], r["memory_unit"]))
    out.print(table)


@graphs.command("fetch")
@click.argument("dataset", type=click.Choice(["paper"]))
@click.option("-o", "--output", type=click.Path(path_type=Path, file_okay=False),
              help="Folder to put the files in (default: the user cache, $REMAT_BENCH_CACHE).")
@click.option("--source", metavar="URL|DIR",
              help="Base URL of a mirror, or a local folder holding the files (default: the pinned commit "
                   "of haoming-codes/moccasin on GitHub).")
@click.option("--deadline", type=SECONDS, metavar="SECONDS",
              help="Give up on the whole fetch after this long (default 600; each read also times out after 60).")
def graphs_fetch(dataset: str, output: Path | None, source: str | None, deadline: float | None) -> None:
    """Download the published graphs (DATASET: paper, the Moccasin paper's Table 2), SHA-256 checked.

    Each file is checked against the hash pinned in remat_bench/app/datasets.py
    before it is renamed into place; a file already there with the right hash
    is kept. The graphs are then named paper:<name> everywhere (solve,
    graphs show, sweep configs). A fetch that fails part-way keeps the files
    that arrived (listed), and leaves no partial file.
    """
    from remat_bench.app import datasets

    data = datasets.DATASETS[dataset]
    dest = output or datasets.cache_dir() / "graphs" / data.name
    label = source or data.source
    err.print(f"fetching {len(data.files)} graphs of '{data.name}' ({data.description}) from {label} into {dest}")
    show = err.is_terminal
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), console=err,
                  disable=not show, transient=True) as bar:
        tasks: dict[str, Any] = {}

        def progress(name: str, received: int, total: int) -> None:
            if name not in tasks:
                tasks[name] = bar.add_task(name, total=total)
            bar.update(tasks[name], completed=received)

        failed: datasets.FetchError | None = None
        try:
            fetched = datasets.fetch(data, dest, source, progress, deadline=deadline or datasets.DEADLINE_S)
        except datasets.FetchError as exc:  # the files that arrived stay: list them before the error
            fetched, failed = exc.fetched, exc
    for f in fetched:
        out.print(f"{f.action:>10}  {f.path}" + ("" if f.action == "present" else f"  (sha256 ok, from {f.source})"))
    if failed is not None:
        raise failed
    where = [p.resolve() for p in datasets.search_path(data)]
    if dest.resolve() not in where:
        out.print(f"the graphs are in {dest}; set PAPER_GRAPHS={dest} so that paper:<name> finds them")
    elif (first := datasets.find(data.files[0].name, data)) is not None and first != fetched[0].path:
        out.print(f"note: paper:<name> still reads {first.parent} first "
                  "(PAPER_GRAPHS, then ../shared/graphs/paper beside the checkout, then the cache)")


@graphs.command("show")
@click.argument("graph")
@click.option("--json", "as_json", is_flag=True)
def graphs_show(graph: str, as_json: bool) -> None:
    """Summary of one graph: size, kinds, baseline, memory floor."""
    from remat_bench.core.budget import memory_floor
    from remat_bench.core.simulate import baseline

    g = load(graph)
    base = baseline(g)
    floor = memory_floor(g)
    data = {
        "name": g.name, "sha256": g.sha256, "nodes": g.n, "edges": g.num_edges,
        "forward_nodes": len(g.forward_indices), "backward_nodes": len(g.backward_indices),
        "nodes_with_implementations": sum(1 for nd in g.nodes if nd.implementations),
        "outputs": g.outputs, "fixed_memory": g.fixed_memory, "units": g.units,
        "baseline_peak": base.peak, "baseline_duration": base.duration,
        "memory_floor": floor.amount, "memory_floor_node": floor.node,
        "memory_floor_fraction": floor.amount / base.peak if base.peak else None,
        "total_memory": g.memory.sum().item(),
    }
    if as_json:
        print_json(data)
        return
    unit = g.units.get("memory", "")
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    for key, value in data.items():
        if key in ("baseline_peak", "memory_floor", "fixed_memory", "total_memory"):
            value = fmt_amount(value, unit)
        elif key == "baseline_duration":
            value = fmt_amount(value)
        elif key == "memory_floor_fraction" and value is not None:
            value = f"{value:.4f} of the baseline peak (no budget below it is feasible)"
        elif key == "outputs":
            value = ", ".join(value[:8]) + (f" ... ({len(value)} in all)" if len(value) > 8 else "")
        if key == "total_memory":
            table.add_row("all values at once", f"{value}: every node's value held together, the fixed memory "
                          "not included")
            continue
        table.add_row(key.replace("_", " "), str(value))
    out.print(table)


@graphs.command("validate")
@click.argument("graph", nargs=-1, required=True)
def graphs_validate(graph: tuple[str, ...]) -> None:
    """Check graph files against the format; one line per file, exit 2 on the first bad one."""
    for text in graph:
        g = load(text)
        out.print(f"{text}: ok ({g.n} nodes, {g.num_edges} edges, sha256 {g.sha256[:12]})")


@graphs.command("import")
@click.argument("source", type=click.Path(path_type=Path))
@click.option("-o", "--output", type=click.Path(path_type=Path), required=True)
def graphs_import(source: Path, output: Path) -> None:
    """Convert a networkx node-link graph (Checkmate, Moccasin) to remat-bench JSON."""
    from remat_bench.core.graph import load_graph, save_graph

    g = load_graph(source)
    check_output(output, [source], "remat-bench-graph")
    save_graph(g, output)
    out.print(f"wrote {output} ({g.n} nodes, {g.num_edges} edges)")


@graphs.command("generate")
@click.argument("kind")
@click.option("--batch", type=int)
@click.option("--layers", type=int, help="Chain/transformer layers; ResNet/U-Net depth.")
@click.option("--nodes", type=int, help="Nodes of a random layered graph.")
@click.option("--seed", type=int)
@click.option("--resolution", type=int, help="Input image side, in pixels.")
@click.option("--width", type=int, help="Transformer width; random layered mean layer width.")
@click.option("--seq", type=int, help="Transformer sequence length.")
@click.option("--implementations", is_flag=True, help="Emit alternative operator implementations.")
@click.option("-o", "--output", type=click.Path(path_type=Path), required=True)
def graphs_generate(kind: str, output: Path, **options: Any) -> None:
    """Generate a graph: chain, random-layered, vgg16, resnet50, unet, densenet121, transformer."""
    from remat_bench.core.graph import save_graph
    from remat_bench.generators import generate

    check_output(output, [], "remat-bench-graph")
    g = generate(kind, **options)
    save_graph(g, output)
    out.print(f"wrote {output}: {g.name} ({g.n} nodes, {g.num_edges} edges)")


@graphs.command("import-torch")
@click.argument("model")
@click.option("--batch", type=click.IntRange(min=1), help="Batch size (default 8).")
@click.option("--input-shape", metavar="DxDx...",
              help="Per-sample input shape, e.g. 3x32x32 (zoo models have a default).")
@click.option("--durations", type=click.Choice(["flops", "profile"]), default="flops", show_default=True,
              help="FLOPs from fake tensors, or each operator timed (ns) on real ones, with its workspace.")
@click.option("--workspace", type=click.Choice(["none", "measure"]),
              help="Scratch memory of each operator: 0, or measured on real tensors on this machine "
                   "(default: measure with --durations profile, else none).")
@click.option("--task", type=click.Choice(["classify", "segment", "language", "regress"]),
              help="The loss: cross-entropy over (N, C), (N, C, ...) or next-token (N, T, V) logits, or "
                   "mean squared error (default: the zoo's; classify an (N, C) output, else regress).")
@click.option("--input-dtype", type=click.Choice(["float32", "float64", "float16", "bfloat16", "int64", "int32"]),
              help="Dtype of the input batch (default: int64 with --task language, else float32).")
@click.option("--vocab", type=click.IntRange(min=1),
              help="Integer inputs are ids in [0, N) (default with --task language: the logits' vocabulary).")
@click.option("--kwarg", "kwargs", multiple=True, metavar="KEY=VALUE",
              help="Argument for the model's factory or constructor, repeatable; VALUE is read as a JSON "
                   "literal (16, true, [1, 2], \"text\") when it is one, else as a string.")
@click.option("--time-limit", "-t", type=SECONDS, default=600.0, show_default=True,
              help="Seconds to build and trace the model; it runs in a child process, stopped then.")
@click.option("-o", "--output", type=click.Path(path_type=Path), required=True)
def graphs_import_torch(model: str, batch: int | None, input_shape: str | None, durations: str,
                        workspace: str | None, task: str | None, input_dtype: str | None, vocab: int | None,
                        kwargs: tuple[str, ...], time_limit: float, output: Path) -> None:
    """Trace MODEL's training step into a graph: a zoo name or package.module:factory.

    Zoo: mlp, vgg11, resnet18, resnet50, unet, gpt. A factory runs only when it
    is an nn.Module subclass or a function in a file of your own (never the
    standard library). Tracing uses fake tensors, so any batch size imports
    without allocating it (except --durations profile and --workspace measure,
    which run the operators).
    """
    _require_torch("graphs import-torch")
    from remat_bench.app.sweep.config import trace_model
    from remat_bench.core.graph import save_graph

    check_output(output, [], "remat-bench-graph")
    shape = _parse_shape(input_shape) if input_shape else None
    # In a child process: the factory and forward pass are the user's code, which may hang or exit.
    g = trace_model(dict(model=model, batch=batch, input_shape=shape, durations=durations, workspace=workspace,
                         task=task, input_dtype=input_dtype, input_range=vocab, model_kwargs=_parse_kwargs(kwargs)),
                    time_limit)
    save_graph(g, output)
    out.print(f"wrote {output}: {g.name} ({g.n} nodes, {g.num_edges} edges, fixed memory "
              f"{fmt_amount(g.fixed_memory, 'bytes')})")


def _require_torch(command: str) -> None:
    """One sentence and exit status 2 when PyTorch is missing (escaped: the hint has brackets)."""
    from remat_bench.torch import TorchMissingError, require_torch

    try:
        require_torch(command)
    except TorchMissingError as exc:
        err.print(f"[bold red]error:[/] {escape(str(exc))}")
        sys.exit(exc.exit_code)


def _parse_kwargs(pairs: tuple[str, ...]) -> dict[str, Any]:
    """``--kwarg key=value`` pairs; a value is a JSON literal when it parses as one (16, true), else text."""
    kwargs: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        key = key.strip()
        if not sep or not key.isidentifier():
            raise click.BadParameter(f"'{pair}' is not of the form key=value with a Python name as key",
                                     param_hint="--kwarg")
        try:
            kwargs[key] = json.loads(text)
        except ValueError:
            kwargs[key] = text
    return kwargs


def _parse_shape(text: str) -> tuple[int, ...]:
    parts = text.replace(",", "x").replace("*", "x").split("x")
    try:
        shape = tuple(int(p) for p in parts if p.strip())
    except ValueError:
        shape = ()
    if not shape or any(d < 1 for d in shape):
        raise click.BadParameter(f"'{text}' is not a shape such as 3x32x32", param_hint="--input-shape")
    return shape


# ---------------------------------------------------------------------- sweep, plot, report


@main.command()
@click.argument("config", type=click.Path(path_type=Path))
@click.option("-o", "--output", type=click.Path(path_type=Path),
              help="Results folder (default: the config's `output`, else results/<config name>).")
@click.option("-j", "--workers", type=click.IntRange(min=1),
              help="Runs at once (default: the config's, else the number of cores).")
@click.option("--executor", type=click.Choice(["local", "dask"]),
              help="Where runs go (default: the config's, else local).")
@click.option("--address", metavar="tcp://HOST:PORT", help="A Dask scheduler (implies --executor dask).")
@click.option("--resume", is_flag=True, help="Continue the sweep in the output folder, skipping finished runs.")
@click.option("--csv", is_flag=True, help="Write results.csv beside results.parquet.")
@click.option("--dry-run", is_flag=True, help="Check the config and count the runs; run nothing.")
def sweep(config: Path, output: Path | None, workers: int | None, executor: str | None, address: str | None,
          resume: bool, csv: bool, dry_run: bool) -> None:
    """Run every graph x method x parameters x budget x seed x repeat of CONFIG, each in its own process.

    Every finished run is appended to <output>/journal.jsonl at once; the table
    is <output>/results.parquet. Exit status 0 when every run was recorded, 1
    when some were lost by the executor or failed for reasons of the sweep
    itself (rerun with --resume), 2 for a bad config or a results folder that
    cannot be written or is in use, 130 when interrupted (rerun with --resume).
    """
    from remat_bench.app.sweep import load_config, plan, run_sweep, summarize
    from remat_bench.app.sweep.config import floor_notes, trace_torch_graphs
    from remat_bench.app.sweep.progress import SweepProgress, summary_table
    from remat_bench.app.sweep.runner import check_output as check_results_folder

    if executor == "local" and address:
        raise click.BadParameter("--address names a Dask scheduler; use it with --executor dask",
                                 param_hint="--address")
    cfg = load_config(config, output=output)
    if dry_run:
        check_results_folder(cfg.output, csv, create=False)  # tried, nothing made
        pending, skipped = plan(cfg, resume)
        traced = (f"; {len(cfg.pending)} of the graphs are PyTorch models, traced (running their code) when the "
                  "sweep starts, and their budgets checked then" if cfg.pending else "")
        out.print(f"{config}: ok; {cfg.planned_runs} runs ({len(cfg.graphs) + len(cfg.pending)} graphs, "
                  f"{len(cfg.methods)} methods), {skipped} already in {cfg.output}, "
                  f"{len(pending) + cfg.planned_runs - len(cfg.runs)} to run; time limit {cfg.time_limit:g} s "
                  f"(+{cfg.grace:g} s grace) per run{traced}", markup=False, highlight=False)
        for note in floor_notes(cfg):
            out.print(f"warning: {note}", markup=False, highlight=False)
        return
    cfg = trace_torch_graphs(cfg, lambda text: err.print(text, markup=False, highlight=False))
    for note in floor_notes(cfg):
        err.print(f"warning: {note}", markup=False, highlight=False)
    result = run_sweep(cfg, workers=workers, executor=executor, address=address, resume=resume, csv=csv,
                       reporter=SweepProgress(err))
    if len(result.table):
        out.print(summary_table(summarize(result.table), title=f"{cfg.name}: {len(result.table)} runs"))
    if result.written:  # else the table could not be written, and result.failure says why
        out.print("wrote " + ", ".join(str(p) for p in result.written) + f" ({result.finished} runs this time)")
    if result.interrupted:
        err.print(f"interrupted: finished runs are recorded; continue with `remat-bench sweep {config} "
                  f"--output {cfg.output} --resume`")
        sys.exit(130)
    if result.failure:
        err.print(f"[bold red]error:[/] {escape(result.failure)}", markup=True, highlight=False)
    elif result.lost:
        err.print(f"{len(result.lost)} runs were lost by the executor (not recorded); run again with --resume")
    if result.faults:
        n = len(result.faults)
        err.print(f"{n} run{'s' if n != 1 else ''} failed for reasons of the sweep itself, e.g. "
                  f"{result.faults[0].get('message')}; fix that and run again with --resume, which runs them again",
                  markup=False, highlight=False)
    if result.failure or result.lost or result.faults:
        sys.exit(1)


@main.command()
@click.argument("sources", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--kind", "-k", type=click.Choice(["tradeoff", "scaling", "timeline", "intervals"]),
              default="tradeoff", show_default=True)
@click.option("-o", "--output", type=click.Path(path_type=Path), required=True, help="Image file (.png, .svg).")
@click.option("--graph", "-g", help="timeline/intervals: the graph (a name in the results, or a graph file "
                                     "when SOURCES are schedule files); tradeoff/scaling: only this graph.")
@click.option("--budget", "-b", help="timeline/intervals from results: the budget as written in the config.")
@click.option("--method", "-m", "methods", multiple=True, help="Only these methods (repeatable).")
def plot(sources: tuple[Path, ...], kind: str, output: Path, graph: str | None, budget: str | None,
         methods: tuple[str, ...]) -> None:
    """Draw a chart from a results folder, or timeline/intervals from schedule files.

    \b
    remat-bench plot results/smoke --kind tradeoff -o tradeoff.png
    remat-bench plot results/smoke --kind timeline --graph chain-16 --budget 0.8 -o t.svg
    remat-bench plot a.json b.json --graph graphs/chain-16-train.json --kind timeline -o t.png
    """
    from remat_bench.app import charts
    from remat_bench.app.sweep.results import load_table, schedules_at, skipped_note
    from remat_bench.core.schedule import load_schedule

    charts.image_format(output)  # a wrong suffix is refused before the results are read
    folder = sources[0] if len(sources) == 1 and sources[0].is_dir() else None
    if folder is None:
        # Name the actual problem with SOURCES: a path that is not there comes before what kind of path it is.
        missing = next((path for path in sources if not path.exists()), None)
        if kind not in ("timeline", "intervals"):
            if len(sources) > 1:
                raise click.BadParameter(f"a {kind} chart is drawn from one results folder; {len(sources)} were "
                                         "given", param_hint="SOURCES")
            if missing is not None:
                raise click.BadParameter(f"{missing}: no such folder", param_hint="SOURCES")
            raise click.BadParameter(f"{sources[0]} is a file; a {kind} chart is drawn from a results folder",
                                     param_hint="SOURCES")
        if missing is not None:
            raise click.BadParameter(f"{missing}: no such file or folder", param_hint="SOURCES")
        folders = [path for path in sources if path.is_dir()]
        if folders:
            raise click.BadParameter(f"{folders[0]} is a folder; give one results folder, or schedule files only",
                                     param_hint="SOURCES")
        if methods or budget:
            raise click.BadParameter("schedule files are drawn as given; --method and --budget pick the runs of a "
                                     "results folder", param_hint="--method" if methods else "--budget")
        if not graph:
            raise click.BadParameter("schedule files need --graph, the graph file they were written for",
                                     param_hint="--graph")
        g = load(graph)
        scheds = [(path.stem, load_schedule(path, g)) for path in sources]
        if kind == "intervals" and len(scheds) != 1:
            raise click.BadParameter("an intervals chart shows one schedule", param_hint="SOURCES")
        if kind == "timeline":
            # Named by file, a colour and a budget line each: two files are often one method at two budgets.
            named = [(f"{path.name} ({s.method})" if s.method else path.name, s)
                     for path, (_, s) in zip(sources, scheds)]
            charts.timeline(g, named, output, budgets=[s.budget for _, s in scheds], colour_each=True)
        else:
            charts.intervals(g, scheds[0][1], output)
        out.print(f"wrote {output}: {kind} of {', '.join(str(p) for p in sources)}")
        return

    if budget is not None and kind in ("tradeoff", "scaling"):
        raise click.BadParameter(f"a {kind} chart shows every budget; --budget picks the schedules of a timeline "
                                 "or intervals chart", param_hint="--budget")
    table = load_table(folder)
    if (skipped := skipped_note(table)) is not None:
        err.print(f"note: {skipped}", markup=False, highlight=False)
    # An unknown --graph or --method is named (with its nearest match) rather than leaving nothing to draw.
    chosen_runs = charts.select_runs(table, folder, graph, methods, need_schedule=kind in ("timeline", "intervals"))
    if kind in ("tradeoff", "scaling"):
        (charts.tradeoff if kind == "tradeoff" else charts.scaling)(chosen_runs, output)
        out.print(f"wrote {output}: {kind} of {len(chosen_runs)} runs")
        return
    chosen = schedules_at(folder, table, graph=graph, budget=budget, methods=methods or None)
    if kind == "timeline":
        charts.timeline(chosen.graph, chosen.schedules, output, budget=chosen.budget,
                        title=f"{chosen.graph.name} at budget {chosen.budget_text}: memory at every step")
        shown = ", ".join(label for label, _ in chosen.schedules)
    else:
        label, best = chosen.schedules[int(chosen.rows["duration"].astype(float).to_numpy().argmin())]
        charts.intervals(chosen.graph, best, output,
                         title=f"{chosen.graph.name}, {label} at budget {chosen.budget_text}: when each value is held")
        shown = label
    out.print(f"wrote {output}: {kind} of {chosen.graph.name} at budget {chosen.budget_text} ({shown})")


@main.command()
@click.argument("results", type=click.Path(path_type=Path, exists=True, file_okay=False))
@click.option("-o", "--output", type=click.Path(path_type=Path), required=True, help="Markdown file (.md).")
@click.option("--title", help="The report's title (default: from the sweep's config).")
def report(results: Path, output: Path, title: str | None) -> None:
    """Write a Markdown report of a RESULTS folder: summary, best method per budget, charts, tables."""
    from remat_bench.app.report import write_report
    from remat_bench.app.sweep.results import load_table, skipped_note

    table = load_table(results)
    if not table.empty and (skipped := skipped_note(table)) is not None:  # else the error names them
        err.print(f"note: {skipped}", markup=False, highlight=False)
    written = write_report(results, output, title=title, table=table)
    out.print(f"wrote {written} (charts in {written.parent / (written.stem + '-figures')})")


# ---------------------------------------------------------------------- replay


@main.command()
@click.argument("graph")
@click.argument("schedule", type=click.Path(path_type=Path))
@click.option("--device", type=click.Choice(["cuda", "cpu"]), help="Default: cuda when present, else cpu.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def replay(graph: str, schedule: Path, device: str | None, as_json: bool) -> None:
    """Run SCHEDULE with real tensors through PyTorch and measure the real peak.

    For a graph imported with `graphs import-torch`, every step runs the
    model's real operator and the loss and gradients are checked against
    plain autograd; for other graphs each node allocates its size and reads
    its inputs. Exit status 1 when the outputs differ from autograd, or when
    the measured peak is above the budget the schedule file holds.
    """
    _require_torch("replay")
    from remat_bench.torch.replay import load_schedule_for
    from remat_bench.torch.replay import replay as run_replay

    g = load(graph)
    sched = load_schedule_for(g, schedule)  # refuses a schedule written for another graph
    show_progress = not as_json and err.is_terminal
    if show_progress:
        with err.status(f"replaying {schedule.name} on {g.name}..."):
            result = run_replay(g, sched, device)
    else:
        result = run_replay(g, sched, device)
    if as_json:
        print_json(result.to_json())
    else:
        _print_replay(g, result)
    if result.within_budget is False and result.budget is not None:
        unit = g.units.get("memory", "")
        over = result.measured_peak - result.budget
        err.print(f"over budget: the measured peak {fmt_amount(result.measured_peak, unit)} is above the "
                  f"schedule's budget {fmt_amount(result.budget, unit)} by {fmt_amount(over, unit)}: "
                  f"{escape(result.budget_note)}", highlight=False)
    sys.exit(1 if result.outputs_match is False or result.within_budget is False else 0)


def _print_replay(g: Graph, r: Any) -> None:
    unit = g.units.get("memory", "")
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    table.add_row("graph", f"{g.name} ({'real operators' if r.mode == 'model' else 'synthetic tensors'}, {r.device})")
    table.add_row("measured peak", f"{fmt_amount(r.measured_peak, unit)}  ({r.peak_error_pct:+.3f}% vs simulated)")
    table.add_row("simulated peak", fmt_amount(r.simulated_peak, unit))
    if r.budget is not None:
        verdict = "[green]measured peak within it[/]" if r.within_budget else "[red]measured peak above it[/]"
        table.add_row("budget", f"{fmt_amount(r.budget, unit)}  ({verdict})")
    table.add_row("fixed memory", f"{fmt_amount(r.measured_fixed, unit)} measured, "
                                  f"{fmt_amount(r.fixed_memory, unit)} in the graph")
    if r.outputs_match is not None:
        verdict = "[green]yes[/]" if r.outputs_match else "[red]no[/]"
        table.add_row("outputs match autograd", f"{verdict}  (max abs diff {r.max_abs_diff:.3g}, max rel diff "
                                                 f"{r.max_rel_diff:.3g}; tolerance rtol 1e-5, atol 1e-6)")
    table.add_row("wall time", f"{r.wall_time_s:.3f} s  (modelled duration {fmt_amount(r.simulated_duration)} "
                               f"{r.duration_unit})")
    table.add_row("steps", f"{r.steps} ({r.computes} computes, {r.recomputations} recomputations)")
    table.add_row("measured by", r.measurement)
    if r.note:
        table.add_row("note", r.note)
    out.print(table)


if __name__ == "__main__":
    main()
