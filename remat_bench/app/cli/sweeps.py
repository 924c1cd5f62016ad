"""``sweep``, ``plot`` and ``report``: batch runs and what is drawn and written from their results
(docs/design.md section 8, docs/sweeps.md)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
from rich.markup import escape

from remat_bench.app.charts.kinds import KINDS, Kind, Source
from remat_bench.app.cli.helpers import FiniteFloat, err, load, out
from remat_bench.core.errors import RematBenchError


@click.command()
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
@click.option("--replay", "replay", is_flag=True,
              help="Then replay the schedules of PyTorch graphs with real tensors, one at a time, against the "
                   "baseline (as the config's `replay:` does; its settings, else 5 repeats).")
def sweep(config: Path, output: Path | None, workers: int | None, executor: str | None, address: str | None,
          resume: bool, csv: bool, dry_run: bool, replay: bool) -> None:
    """Run every graph x method x parameters x budget x seed x repeat of CONFIG, each in its own process.

    Every finished run is appended to <output>/journal.jsonl at once; the table
    is <output>/results.parquet. Exit status 0 when every run was recorded, 1
    when some were lost by the executor or failed for reasons of the sweep
    itself (rerun with --resume), 2 for a bad config or a results folder that
    cannot be written or is in use, 130 when interrupted (rerun with --resume). A failed replay is recorded
    in its run's row and does not change the exit status.
    """
    from dataclasses import replace

    from remat_bench.app.sweep import load_config, plan, run_sweep, summarize
    from remat_bench.app.sweep.progress import SweepProgress, summary_table
    from remat_bench.app.sweep.runner import check_output as check_results_folder
    from remat_bench.app.sweep.runs import ReplaySettings, floor_notes
    from remat_bench.app.sweep.tracing import trace_torch_graphs

    if executor == "local" and address:
        raise click.BadParameter("--address names a Dask scheduler; use it with --executor dask",
                                 param_hint="--address")
    cfg = load_config(config, output=output)
    if replay and cfg.replay is None:
        from remat_bench.torch import torch_available

        if not torch_available():
            raise click.BadParameter("replaying schedules needs PyTorch: install it with `pip install "
                                     "remat-bench[torch]` (`make install` does)", param_hint="--replay")
        cfg = replace(cfg, replay=ReplaySettings())
    if dry_run:
        check_results_folder(cfg.output, csv, create=False)  # tried, nothing made
        from remat_bench.app.sweep.runner import parallelism
        pending, skipped = plan(cfg, resume)
        traced = (f"; {len(cfg.pending)} of the graphs are PyTorch models, traced (running their code) when the "
                  "sweep starts, and their budgets checked then" if cfg.pending else "")
        out.print(f"{config}: ok; {cfg.planned_runs} runs ({cfg.planned_graphs} graphs, "
                  f"{len(cfg.methods)} methods), {skipped} already in {cfg.output}, "
                  f"{len(pending) + cfg.planned_runs - len(cfg.runs)} to run; time limit {cfg.time_limit:g} s "
                  f"(+{cfg.grace:g} s grace) per run{traced}", markup=False, highlight=False)
        if cfg.links:
            from remat_bench.app.sweep.links import variants_note

            out.print(variants_note([g.name for g in cfg.graphs], cfg.links, len(cfg.pending)), markup=False,
                      highlight=False)
        if cfg.replay is not None:
            from remat_bench.app.sweep.replays import NO_TORCH_GRAPH, torch_graphs

            if torch_graphs(cfg):
                rp = cfg.replay
                points = f"{rp.precision:g} point{'' if rp.precision == 1 else 's'}"
                pairs = (f"{rp.repeats} to {rp.max_pairs} timed pairs against the baseline, until the measured "
                         f"overhead's 95% interval is within +-{points}"
                         if rp.precision > 0 and rp.max_pairs > rp.repeats
                         else f"{rp.repeats} timed pairs against the baseline")
                steps = (f", then every step timed in place ({rp.steps} pass{'' if rp.steps == 1 else 'es'})"
                         if rp.steps else "")
                out.print(f"then the schedules of PyTorch graphs are replayed one at a time ({pairs}{steps}, at "
                          f"most {rp.time_limit:g} s each)", markup=False, highlight=False)
            else:
                out.print(f"nothing will be replayed: {NO_TORCH_GRAPH}", markup=False, highlight=False)
        _, cut = parallelism(cfg, workers, executor, address)
        for note in [*([cut] if cut else []), *floor_notes(cfg)]:
            out.print(f"warning: {note}", markup=False, highlight=False)
        return
    cfg = trace_torch_graphs(cfg, lambda text: err.print(text, markup=False, highlight=False))
    for note in floor_notes(cfg):
        err.print(f"warning: {note}", markup=False, highlight=False)
    result = run_sweep(cfg, workers=workers, executor=executor, address=address, resume=resume, csv=csv,
                       reporter=SweepProgress(err))
    if len(result.table):
        out.print(summary_table(summarize(result.table), title=f"{cfg.name}: {len(result.table)} runs"))
        from remat_bench.app.report.write import cost_sources
        from remat_bench.core.provenance import mixed_sources

        if (mixed := mixed_sources(cost_sources(cfg.output, result.table))) is not None:
            out.print(f"note: {mixed}", markup=False, highlight=False)
    if result.replayed:
        failed = f" ({result.replay_failures} failed: see replay_message)" if result.replay_failures else ""
        out.print(f"replayed {result.replayed} schedules of PyTorch graphs{failed}; `remat-bench report` sets "
                  "prediction against measurement", markup=False, highlight=False)
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


@click.command()
@click.argument("sources", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--kind", "-k", type=click.Choice(list(KINDS)), default="tradeoff", show_default=True,
              help="progress: overhead of the best schedule over solve time (log time), a panel per graph and "
                   "budget; profile: share of instances each method brings within --within of the best by each "
                   "time; time-to-best: time to each run's best schedule against nodes (log-log); prediction: "
                   "measured against modelled overhead of the replayed runs (a sweep with replay:).")
@click.option("--within", type=FiniteFloat(minimum=0), default=1.0, show_default=True, metavar="PCT",
              help="profile: the target, within PCT percent of the best duration any run found.")
@click.option("-o", "--output", type=click.Path(path_type=Path), required=True, help="Image file (.png, .svg).")
@click.option("--graph", "-g", help="timeline/intervals: the graph (a name in the results, or a graph file "
                                     "when SOURCES are schedule files); tradeoff/scaling: only this graph.")
@click.option("--budget", "-b", help="timeline/intervals from results: the budget as written in the config.")
@click.option("--method", "-m", "methods", multiple=True, help="Only these methods (repeatable).")
def plot(sources: tuple[Path, ...], kind: str, within: float, output: Path, graph: str | None, budget: str | None,
         methods: tuple[str, ...]) -> None:
    """Draw a chart from a results folder, or timeline/intervals from schedule files.

    \b
    remat-bench plot results/smoke --kind tradeoff -o tradeoff.png
    remat-bench plot results/smoke --kind timeline --graph chain-16 --budget 0.8 -o t.svg
    remat-bench plot a.json b.json --graph graphs/chain-16-train.json --kind timeline -o t.png
    remat-bench plot results/paper-progress --kind progress -o figure5.png
    remat-bench plot results/fidelity --kind prediction -o prediction.png
    """
    from remat_bench.app.charts.common import image_format, save
    from remat_bench.app.charts.selection import graph_in_results, select_runs
    from remat_bench.app.sweep.results import load_table, schedules_at, skipped_note

    chart = KINDS[kind]
    image_format(output)  # a wrong suffix is refused before the results are read
    folder = sources[0] if len(sources) == 1 and sources[0].is_dir() else None
    if folder is None:
        _plot_files(sources, chart, output, graph, budget, methods)
        return

    if budget is not None and chart.every_budget:
        raise click.BadParameter(f"a {kind} chart shows every budget; --budget picks the schedules of a timeline "
                                 "or intervals chart, or the budgets of a progress chart", param_hint="--budget")
    table = load_table(folder)
    if (skipped := skipped_note(table)) is not None:
        err.print(f"note: {skipped}", markup=False, highlight=False)
    # An unknown --graph or --method is named (with its nearest match) rather than leaving nothing to draw.
    # The graph's name in the results serves both steps below (--graph may name its file, or paper:<name>).
    if graph is not None:
        graph = graph_in_results(table, folder, graph)
    runs = select_runs(table, folder, graph, methods, need_schedule=chart.source is Source.SCHEDULES)
    if chart.source is Source.SCHEDULES:
        chosen = schedules_at(folder, table, graph=graph, budget=budget, methods=methods or None)
        fig, shown = chart.draw_at(chosen, chosen.graph.name)
        save(fig, output)
        out.print(f"wrote {output}: {kind} of {chosen.graph.name} at budget {chosen.budget_text} "
                  f"({', '.join(shown)})")
        return
    points = None
    if chart.source is Source.PROGRESS:
        runs, points = _over_time(folder, runs, kind, budget)
    save(chart.draw(runs, points, within_pct=within), output)
    out.print(f"wrote {output}: {kind} of {len(runs)} runs")


def _plot_files(sources: tuple[Path, ...], chart: Kind, output: Path, graph: str | None, budget: str | None,
                methods: tuple[str, ...]) -> None:
    """A chart of schedule files (SOURCES that are not one results folder), or which of SOURCES is wrong."""
    from remat_bench.app.charts.common import save
    from remat_bench.app.graphs import find_graph
    from remat_bench.core.errors import GraphError, ScheduleError
    from remat_bench.core.files import check_regular
    from remat_bench.core.schedule import load_schedule

    # Name the actual problem with SOURCES: a path that is not there comes before what kind of path it is.
    missing = next((path for path in sources if not path.exists()), None)
    if chart.source is not Source.SCHEDULES:
        if len(sources) > 1:
            raise click.BadParameter(f"a {chart.name} chart is drawn from one results folder; {len(sources)} were "
                                     "given", param_hint="SOURCES")
        if missing is not None:
            raise click.BadParameter(f"{missing}: no such folder", param_hint="SOURCES")
        raise click.BadParameter(f"{sources[0]} is a file; a {chart.name} chart is drawn from a results folder",
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
    # Devices and pipes are not read: /dev/zero would fill memory, a pipe without a writer never ends.
    check_regular(find_graph(graph), GraphError, hint="give a graph file")
    for path in sources:
        check_regular(path, ScheduleError, hint="give schedule files (as `remat-bench solve -o` writes them)")
    g = load(graph)
    files = [(path, load_schedule(path, g)) for path in sources]
    if chart.one_schedule and len(files) != 1:
        raise click.BadParameter(f"an {chart.name} chart shows one schedule", param_hint="SOURCES")
    save(chart.draw_files(g, files), output)
    out.print(f"wrote {output}: {chart.name} of {', '.join(str(p) for p in sources)}")


def _over_time(folder: Path, runs: Any, kind: str, budget: str | None) -> tuple[Any, Any]:
    """The runs at ``budget`` (every budget: None) and the folder's progress table, that progress charts read."""
    from remat_bench.app.sweep.profiles import load_progress

    points = load_progress(folder)
    if points is None:
        raise RematBenchError(f"{folder}: no run recorded its progress (sweeps record it since this version); "
                              f"run the sweep again to draw a {kind} chart")
    if budget is not None:
        budgets = sorted(set(map(str, runs["budget_text"].dropna())))
        runs = runs[runs["budget_text"] == budget]
        if runs.empty:
            raise RematBenchError(f"{folder}: no run at budget {budget!r}; its budgets: {', '.join(budgets)}")
    return runs, points


@click.command()
@click.argument("results", type=click.Path(path_type=Path, exists=True, file_okay=False))
@click.option("-o", "--output", type=click.Path(path_type=Path), required=True, help="Markdown file (.md).")
@click.option("--title", help="The report's title (default: from the sweep's config).")
def report(results: Path, output: Path, title: str | None) -> None:
    """Write a Markdown report of a RESULTS folder: summary, best method per budget, charts, tables."""
    from remat_bench.app.report.write import write_report
    from remat_bench.app.sweep.results import load_table, skipped_note

    table = load_table(results)
    if not table.empty and (skipped := skipped_note(table)) is not None:  # else the error names them
        err.print(f"note: {skipped}", markup=False, highlight=False)
    written = write_report(results, output, title=title, table=table)
    out.print(f"wrote {written} (charts in {written.parent / (written.stem + '-figures')})")

