"""``solve``, ``simulate``, ``floor`` and ``bound``: one graph, one answer (docs/design.md section 7)."""

from __future__ import annotations

import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
from rich.console import RenderableType
from rich.markup import escape
from rich.table import Table

from remat_bench.app.cli.helpers import (
    SECONDS,
    FiniteFloat,
    budget_text,
    check_output,
    err,
    gap_text,
    key_values,
    load,
    of_baseline,
    parse_params,
    show,
    skip_teardown,
    stop_on_first_ctrl_c,
    working,
)
from remat_bench.app.cli.live import LiveProgress
from remat_bench.core.baseline import baseline
from remat_bench.core.budget import format_amount
from remat_bench.core.errors import RematBenchError
from remat_bench.core.graph import Graph
from remat_bench.core.link import with_link
from remat_bench.core.provenance import cost_source, unmeasured_memory_warning

# ---------------------------------------------------------------------- solve


@click.command()
@click.argument("graph")
@click.option("--method", "-m", "methods", required=True, multiple=True,
              help="Method name (`remat-bench methods` lists them); repeat it to compare methods side by side.")
@click.option("--budget", "-b", required=True,
              help="Fraction of the baseline peak (0.8, 80%), an amount (12GiB, 1.2e10) or 'min'.")
@click.option("--time-limit", "-t", type=SECONDS, default=300.0, show_default=True,
              help="Seconds each method may spend (the any-order bound included); one method's solve ends "
                   "within this of its start.")
@click.option("--param", "-p", "params", multiple=True, metavar="K=V", help="Method parameter (repeatable).")
@click.option("-o", "--output", type=click.Path(path_type=Path), help="Write the cleaned schedule here.")
@click.option("--no-bound", is_flag=True,
              help="Skip the any-order lower bound (no gap, nothing proven optimal; saves up to a tenth of the limit).")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=1, show_default=True,
              help="With several -m: how many run at once, each in its own process (at most one per core).")
@click.option("--gap", type=FiniteFloat(minimum=0), default=None, metavar="POINTS",
              help="Stop once the schedule held is within POINTS points of overhead of a valid lower bound (the "
                   "any-order bound, or the method's own solver's bound in its space). Default: only a proof stops.")
@click.option("--progress", "progress_lines", is_flag=True,
              help="Print a line to standard error for each improving schedule (for pipes and logs).")
@click.option("--link", metavar="LINK", default=None,
              help="The host link to plan offloading with, instead of the graph's own: a device profile "
                   "(h100-pcie), x8 or /8 (the graph's link 8 times faster or slower), a bandwidth in the graph's "
                   "units (64, or 64,32 for out,back), or none.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (a list with several methods).")
def solve(graph: str, methods: tuple[str, ...], budget: str, time_limit: float, params: tuple[str, ...],
          output: Path | None, no_bound: bool, jobs: int, gap: float | None, progress_lines: bool,
          link: str | None, as_json: bool) -> None:
    """Solve GRAPH with a method at a budget; score the schedule with the simulator.

    With several -m, each runs under the same budget and limit (one after another, or
    --jobs at once), and one table compares them; -p applies to every method that
    declares the parameter. On a terminal the status line shows the time, the best
    schedule so far, the any-order bound and the gap; --json adds each run's progress
    (its improving schedules over time).
    """
    started = time.perf_counter()
    from remat_bench.app.graphs import find_graph
    from remat_bench.app.pipeline import jobs_at_once, resolve_method, run_many
    from remat_bench.core.budget import parse_budget
    from remat_bench.core.graph_io import load_graph
    from remat_bench.core.schedule import save_schedule

    graph_path = find_graph(graph)
    g = with_link(load_graph(graph_path), link)
    given = parse_params(params)
    if len(set(methods)) != len(methods):
        raise RematBenchError(f"--method names {', '.join(m for m in dict.fromkeys(methods) if methods.count(m) > 1)} "
                              "more than once; give each method once")
    per_method = {m: _params_for(m, given, several=len(methods) > 1) for m in methods}
    for m in methods:
        resolve_method(m, per_method[m])  # unknown method/parameter: fail before any work
    if output is not None:
        if len(methods) > 1:
            raise RematBenchError("-o writes one schedule: give one --method, or solve each method on its own")
        check_output(output, [graph_path], "remat-bench-schedule")
    parsed_budget = parse_budget(budget, g)
    if parsed_budget.warning:
        err.print(f"[yellow]warning:[/] {escape(parsed_budget.warning)}")
    if not as_json and (unmeasured := unmeasured_memory_warning(g)) is not None:  # --json: the costs record says it
        err.print(f"[yellow]warning:[/] {escape(unmeasured)}")

    jobs, cut = jobs_at_once(jobs, len(methods))
    if cut is not None:
        err.print(f"[yellow]warning:[/] {escape(cut)}")
    at_once = f", {jobs} at a time" if jobs > 1 and len(methods) > 1 else ""
    live = LiveProgress(f"solving {g.name} with {', '.join(methods)}{at_once} (limit {time_limit:g} s each)",
                        baseline(g).duration, err if progress_lines else None, g.units.get("memory", ""))
    skip_teardown()
    with stop_on_first_ctrl_c(), working(live, as_json):
        results = run_many(g, list(methods), parsed_budget, left_for_run(time_limit, started), per_method,
                           bound=not no_bound, jobs=jobs, gap=gap, watch=live)

    if len(results) == 1:
        show(results[0].to_json(), as_json, lambda: _result(g, results[0], output))
    else:
        show([r.to_json() for r in results], as_json, lambda: _comparison(g, results))
    if output is not None and results[0].schedule is not None:
        # After printing: a target that turns out unwritable (an immutable file) loses nothing shown.
        save_schedule(results[0].schedule, g, output)
    sys.exit(0 if any(r.exit_code == 0 for r in results) else 1)


# What a command does after its run, within its time limit: judge the answer (clean-up and simulation:
# 0.002-0.2 s on the published graphs), print it, and write -o.
AFTER_RUN_S = 0.25


def left_for_run(time_limit: float, started: float) -> float:
    """The time limit a run gets so that the command ends within ``time_limit`` of its start: less what the
    command spent before the run (finding, reading and checking the graph, the budget and the method) and
    `AFTER_RUN_S` (a twentieth of the limit at most) kept for what it does after.

    Parameters
    ----------
    time_limit : float
        The command's ``--time-limit``, in s.
    started : float
        When the command started (`time.perf_counter`).

    Returns
    -------
    float
        Seconds, at least a tenth of ``time_limit`` (a graph that takes longer than that to read leaves
        the run that much).
    """
    spent = time.perf_counter() - started
    return max(time_limit - spent - min(AFTER_RUN_S, 0.05 * time_limit), 0.1 * time_limit)


def _params_for(method: str, given: dict[str, str], several: bool) -> dict[str, str]:
    """With several methods, each gets the -p values it declares (and the pipeline's own)."""
    if not several:
        return given
    from remat_bench.app.catalog import get_method
    from remat_bench.app.evaluate import PIPELINE_PARAMS

    declared = {name for p in get_method(method).params for name in (p.name, *p.aliases)}
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


def _result(g: Graph, r: Any, output: Path | None) -> Iterator[RenderableType]:
    """One method's result, key by key; then `auto`'s members."""
    unit = g.units.get("memory", "")
    rows = [("graph", f"{g.name} ({g.n} nodes, {g.num_edges} edges)"),
            ("costs", escape(cost_source(g).describe())),
            ("method", r.method + (f"  {r.params}" if r.params else "")),
            ("status", _status_text(r))]
    if r.message:
        rows.append(("", escape(r.message)))
    rows.append(("budget", budget_text(r.budget, r.budget_fraction, unit)))
    if r.peak is not None:
        rows.append(("peak", format_amount(r.peak, unit) + of_baseline(r.peak, r.baseline_peak)))
        rows.append(("duration", f"{format_amount(r.duration)}  overhead {r.overhead_pct:+.3f}%"))
    if r.host_peak is not None:
        rows.append(("offloaded", f"{format_amount(r.to_host, unit)} to the host, {format_amount(r.to_device, unit)} "
                                  f"back; host peak {format_amount(r.host_peak, unit)}; compute waited "
                                  f"{format_amount(r.wait)}"))
    rows.append(("baseline", f"peak {format_amount(r.baseline_peak, unit)}, "
                             f"duration {format_amount(r.baseline_duration)}"))
    if g.transfer is not None:
        rows.append(("host link", _link_text(g)))
    if r.peak_lower_bound is not None:
        above = "" if r.peak is None or not r.peak_lower_bound else \
            f"; the peak found is {100 * (r.peak / r.peak_lower_bound - 1):.1f}% above it"
        rows.append(("peak, at least", f"{format_amount(r.peak_lower_bound, unit)}"
                                       f"{of_baseline(r.peak_lower_bound, r.baseline_peak)}{above} "
                                       f"({escape(r.peak_lower_bound_reason)})"))
    if r.objective is not None:
        rows.append(("objective", f"{format_amount(r.objective)} (the method's own, before clean-up)"))
    if r.lower_bound is not None:
        rows.append(("lower bound", f"{format_amount(r.lower_bound)} (in {r.method}'s space only)"))
    if r.lower_bound_any_order is not None:
        gap = "" if r.gap_pct is None else f"; gap {gap_text(r.gap_pct)}"
        how = "from the cache" if r.stats_bound.get("from_cache") else f"computed in {r.bound_time_s:.2f} s"
        if r.stats_bound.get("discarded"):
            how += f"; the cached bound was discarded: {r.stats_bound['discarded']}"
        rows.append(("bound, any order", f"{format_amount(r.lower_bound_any_order)}{gap}  ({escape(how)})"))
    elif r.lower_bound_offload is not None:
        gap = "" if r.gap_pct is None else f"; gap {gap_text(r.gap_pct)}"
        why = (r.stats.get("bound_offload") or {}).get("why", "")
        rows.append(("bound, offload", f"{format_amount(r.lower_bound_offload)}{gap}  ({escape(why)})"))
    elif not r.stats_bound and not r.below_floor and "bound_offload" not in r.stats:
        rows.append(("bound, any order", "not computed (--no-bound)"))
    rows.append(("solve time", f"{r.solve_time_s:.2f} s"))
    if r.schedule_steps is not None:
        dropped = (r.cleanup or {}).get("dropped_computations", 0)
        note = f" (clean-up dropped {dropped} computations)" if dropped else ""
        rows.append(("schedule", f"{r.schedule_steps} steps{note}"))
    if output is not None:
        rows.append(("schedule file", str(output) if r.schedule is not None else "nothing written (no schedule)"))
    yield key_values(rows)
    if "members" in r.stats:
        yield _members(r)


def _link_text(g: Graph) -> str:
    """The graph's host link, one line: each direction's bandwidth and latency, and where they come from."""
    t = g.transfer
    assert t is not None
    unit = f"{g.units.get('memory', 'units')}/{g.units.get('duration', 'unit')}"
    text = (f"to the host {t.device_to_host.bandwidth:.4g} {unit} (latency {t.device_to_host.latency:.4g}), "
            f"back {t.host_to_device.bandwidth:.4g} {unit} (latency {t.host_to_device.latency:.4g})")
    return escape(text + (f"; {t.source}" if t.source else ""))


def _members(r: Any) -> Table:
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
    return table


def _comparison(g: Graph, results: list[Any]) -> Iterator[RenderableType]:
    """Several methods side by side: one row each, then the notes and why a method found nothing."""
    unit = g.units.get("memory", "")
    first = results[0]
    budget = "min (lowest peak)" if first.budget is None else format_amount(first.budget, unit)
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
            "-" if r.gap_pct is None or not fits else gap_text(r.gap_pct) + (
                " +" if r.lower_bound_offload is not None else ""),
        )
    yield table
    bound = next((r.lower_bound_any_order for r in results if r.lower_bound_any_order is not None), None)
    notes = ["* fastest schedule found", "peak in % of the baseline peak",
             "proof: where optimal/infeasible is proven (all schedules: it meets the any-order bound)"]
    if bound is not None:
        notes.append(f"gap to the any-order bound {format_amount(bound)} (baseline duration "
                     f"{format_amount(first.baseline_duration)})")
    offload_bound = next((r.lower_bound_offload for r in results if r.lower_bound_offload is not None), None)
    if offload_bound is not None:
        notes.append(f"+ gap to the offload bound {format_amount(offload_bound)} (methods that may offload: "
                     "the any-order bound does not hold for them)")
    yield "; ".join(notes)
    yield f"costs: {escape(cost_source(g).describe())}"
    below = [r for r in results if r.below_floor]
    if below:  # the same sentence for every method: once, for the graph
        yield (f"{'every method' if len(below) == len(results) else ', '.join(r.method for r in below)}: "
               f"{escape(below[0].message)}")
    for r in results:
        # Why nothing was found; which member won (auto); whose schedule an exact method returned.
        returned = r.stats.get("returned")
        if r.below_floor:
            continue
        if r.message and (not r.status.found_schedule or "winner" in r.stats or returned not in (None, "search")):
            yield f"{r.method}: {escape(r.message)}"


# ---------------------------------------------------------------------- simulate


@click.command()
@click.argument("graph")
@click.argument("schedule", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--force", is_flag=True, help="Score a schedule written for a graph with another hash.")
@click.option("--link", metavar="LINK", default=None,
              help="The host link to score copies with, instead of the graph's own (as solve --link).")
@click.option("--timeline", type=click.Path(path_type=Path), metavar="FILE",
              help="Also draw memory at every step to FILE (.png or .svg).")
def simulate(graph: str, schedule: Path, as_json: bool, force: bool, link: str | None, timeline: Path | None) -> None:
    """Score any SCHEDULE file on GRAPH: peak, duration, overhead, first violation."""
    from remat_bench.core.baseline import baseline
    from remat_bench.core.errors import ScheduleError
    from remat_bench.core.schedule import load_schedule
    from remat_bench.core.simulate import simulate as run_simulation

    g = with_link(load(graph), link)
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
        **({k: v for k, v in sim.summary().items() if k in ("host_peak", "to_host", "to_device", "wait", "offloads",
                                                              "reloads")}),
    }
    if timeline is not None:
        from remat_bench.app.charts.common import save
        from remat_bench.app.charts.timeline import timeline_figure

        save(timeline_figure(g, [(sched.method or schedule.stem, sched)], budget=sched.budget,
                             title=f"{g.name}: {schedule.name}"), timeline)
        err.print(f"wrote {timeline}")
    unit = g.units.get("memory", "")
    show(data, as_json, lambda: key_values([
        ("schedule", f"{schedule} ({sched.method or 'unknown method'})"),
        ("valid", "[green]yes[/]"),
        ("peak", f"{format_amount(sim.peak, unit)}{of_baseline(sim.peak, base.peak)}, at step {sim.peak_step}"),
        ("duration", f"{format_amount(sim.duration)}  overhead {data['overhead_pct']:+.3f}%"),
        ("steps", f"{sim.num_steps} ({sim.computes} computes, {sim.recomputations} recomputations)"),
        *([("offloaded", f"{sim.offloads} offloads ({format_amount(sim.to_host, unit)}), {sim.reloads} reloads "
                         f"({format_amount(sim.to_device, unit)}); host peak {format_amount(sim.host_peak, unit)}; "
                         f"compute waited {format_amount(sim.wait)}")] if sim.offloads or sim.reloads else []),
    ]))


# ---------------------------------------------------------------------- floor


@click.command()
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
    started = time.perf_counter()
    from remat_bench.app.pipeline import run

    g = load(graph)
    skip_teardown()
    with stop_on_first_ctrl_c(), working(f"searching the lowest peak of {g.name} with {method} "
                                         f"(limit {time_limit:g} s)...", as_json):
        r = run(g, method, "min", left_for_run(time_limit, started), peak_only=True)
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

    def rows() -> Iterator[tuple[str, str]]:
        unit = g.units.get("memory", "")
        yield "graph", f"{g.name} ({g.n} nodes, {g.num_edges} edges)"
        yield "baseline peak", format_amount(r.baseline_peak, unit)
        if peak is not None:
            yield "lowest peak found", (f"{format_amount(peak, unit)}{of_baseline(peak, r.baseline_peak)}, by "
                                        f"{data['found_by']} (overhead there {r.overhead_pct:+.3f}%, not minimised: "
                                        "`solve --budget min` minimises it)")
        else:
            yield "lowest peak found", f"[red]none[/] ({escape(r.message)})"
        if bound is not None:
            yield "no schedule below", (f"{format_amount(bound, unit)}{of_baseline(bound, r.baseline_peak)} "
                                        f"({escape(r.peak_lower_bound_reason)})")
        if peak is not None and bound:
            yield "gap", ("[green]none: the lowest peak is proven[/]" if proven else
                          f"{100 * (peak / bound - 1):.1f}% (the lowest feasible budget lies between the two)")
        yield "time", f"{r.solve_time_s:.1f} s"

    show(data, as_json, lambda: key_values(rows()))
    sys.exit(0 if found else 1)


# ---------------------------------------------------------------------- bound


@click.command()
@click.argument("graph")
@click.option("--budget", "-b", required=True, help="Fraction of the baseline peak, an amount, or a percentage.")
@click.option("--time-limit", "-t", type=SECONDS, default=30.0, show_default=True,
              help="Seconds the bound's 0/1 programs may take (a bound cached with as much or more answers at once).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def bound(graph: str, budget: str, time_limit: float, as_json: bool) -> None:
    """A lower bound on duration valid for every schedule (any order, any recomputation).

    Exit status 0 with the bound; 1 when the bound proves that no schedule fits.
    """
    from remat_bench.app.evaluate import checked_any_order
    from remat_bench.app.pipeline import user_bound_cache
    from remat_bench.core.baseline import baseline
    from remat_bench.core.budget import parse_budget
    from remat_bench.core.simulate import overhead_pct

    g = load(graph)
    b = parse_budget(budget, g)
    if b.is_min:
        raise click.BadParameter("the bound needs a budget, not 'min'", param_hint="--budget")
    # Through the on-disk cache: a bound `solve` or a sweep computed with as much effort answers at once.
    result, _, discarded = checked_any_order(g, b.amount, time_limit, user_bound_cache())
    base = baseline(g)
    overhead = None if result.value is None else overhead_pct(result.value, base.duration)
    data = {"graph": g.name, "budget": b.amount, "budget_fraction": b.fraction, "status": result.status,
            "lower_bound": result.value, "lower_bound_overhead_pct": overhead,
            "baseline_duration": base.duration, "baseline_peak": base.peak,
            "recomputed": list(result.recomputed), "cuts": result.cuts, "solve_time_s": result.solve_time_s,
            "no_order_fits": result.no_order_fits, "order_peak_at_least": result.order_peak_at_least,
            "prefix_sizes": list(result.prefix_sizes), "recompute_cuts": result.recompute_cuts,
            "cached_bound_discarded": discarded}

    def rows() -> Iterator[tuple[str, str]]:
        unit = g.units.get("memory", "")
        yield "graph", f"{g.name} ({g.n} nodes, {g.num_edges} edges)"
        yield "budget", budget_text(b.amount, b.fraction, unit)
        if result.value is None:
            yield "bound", "[red]no schedule fits this budget[/] (below the memory floor)"
        else:
            how = {"optimal": "exact: its 0/1 program was solved to the end",
                   "limit": "its 0/1 program stopped at the time limit; more time may raise it",
                   "trivial": "every node computed once; no cut applies"}.get(result.status, result.status)
            yield "bound", (f"{format_amount(result.value)}: no schedule within the budget has an overhead "
                            f"below {overhead:.5f}% ({how})")
            if result.recomputed:
                shown = ", ".join(result.recomputed[:8]) + (" ..." if len(result.recomputed) > 8 else "")
                yield "must recompute", f"{len(result.recomputed)} values: {shown}"
            if result.no_order_fits:
                peak = "" if result.order_peak_at_least is None else (
                    f": every order holds at least {format_amount(result.order_peak_at_least, unit)} at some step")
                yield "rematerialization", f"[bold]needed[/], no order fits without recomputation{peak}"
            elif overhead == 0:
                yield "", "rematerialization may not be needed: a schedule with no recomputation may fit"
        yield "cuts", (f"{result.cuts} binding memory cuts, {len(result.prefix_sizes)} prefix cuts, "
                       f"solved in {result.solve_time_s:.2f} s")
        if discarded:
            yield "cached bound", f"discarded: {escape(discarded)}"

    show(data, as_json, lambda: key_values(rows()))
    sys.exit(1 if result.value is None else 0)
