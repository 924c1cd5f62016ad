"""Sweeps: configs/smoke.yaml and configs/paper-moccasin.yaml end to end, with their reports.

Writes results/smoke/ and results/paper-moccasin/ (table, schedules, report.md
with charts) and prints, for each, the per-method summary, what a fresh process
per run costs, and for the paper config the comparison with Table 2 of the
Moccasin paper. A sweep already in its folder is resumed, not redone, so an
interrupted `make bench` goes on where it stopped; delete the folder to measure
again. The paper sweep took 4,540 s on 2 cores (2026-11-23); BENCH_SWEEPS=smoke (a
comma-separated list of config names) runs only those.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

import pandas as pd
from rich.console import Console

from benchmarks.common import ROOT, show
from remat_bench.app.report.write import write_report
from remat_bench.app.sweep import load_config, run_sweep, summarize
from remat_bench.app.sweep.progress import SweepProgress
from remat_bench.app.sweep.results import SUCCESS

CONFIGS = ("smoke", "paper-moccasin", "paper-orderfree")
# Moccasin paper, Table 2 (16-core workstation, Checkmate with Gurobi): (TDI %, seconds); None: none in time.
PUBLISHED = {
    ("random_layered_n100", "0.9"): ((0.8, 18.5), (0.8, 9.3)),
    ("random_layered_n100", "0.8"): ((2.3, 22.7), (2.3, 9.5)),
    ("random_layered_n250", "0.9"): ((0.9, 685.1), (0.9, 55.0)),
    ("random_layered_n250", "0.8"): (None, (4.9, 639.5)),
    ("random_layered_n500", "0.9"): (None, (0.7, 1803.3)),
    ("random_layered_n500", "0.8"): (None, (3.4, 1804.8)),
    ("random_layered_n1000", "0.9"): (None, (0.7, 3612.9)),
    ("random_layered_n1000", "0.8"): (None, (3.4, 3611.8)),
    ("checkmate_fcn8_vgg_train", "0.9"): ((0.0, 6.3), (0.0, 3.1)),
    ("checkmate_fcn8_vgg_train", "0.8"): ((0.1, 5.6), (0.1, 3.1)),
    ("checkmate_resnet50_train", "0.9"): ((0.1, 434.1), (0.2, 65.2)),
    ("checkmate_resnet50_train", "0.8"): ((0.3, 485.3), (0.3, 69.3)),
}


def _fmt(value: float, spec: str = "{:.2f}") -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else spec.format(value)


def sweep(name: str) -> tuple[pd.DataFrame, float, int]:
    """Run (or resume) one config; returns its table, the wall time and the runs done this time."""
    config = load_config(ROOT / "configs" / f"{name}.yaml", output=ROOT / "results" / name)
    resume = (config.output / "journal.jsonl").exists()
    start = time.perf_counter()
    outcome = run_sweep(config, resume=resume, csv=True, reporter=SweepProgress(Console(stderr=True)))
    wall = time.perf_counter() - start
    write_report(config.output, config.output / "report.md")
    return outcome.table, wall, outcome.finished


def summary(name: str, table: pd.DataFrame, wall: float, finished: int) -> None:
    rows = [[s.label, s.runs, "n/a" if not s.applicable else f"{s.successes}/{s.applicable}", s.timeouts,
             s.failures, _fmt(s.overhead_sgm), _fmt(s.solve_time_sgm)] for s in summarize(table)]
    show(f"Sweep {name}: {len(table)} runs, {finished} run now in {wall:.0f} s (results/{name}/report.md)",
         ["method", "runs", "success", "timeouts", "failures", "overhead % (sgm, shift 1)",
          "solve time s (sgm, shift 1)"], rows)
    # What a process per run costs: the run's wall time as the sweep saw it, less the method's solve time.
    extra = (table["wall_time_s"].astype(float) - table["solve_time_s"].astype(float)).dropna()
    rss = table["peak_rss"].dropna().astype(float) / 2**20
    show(f"Sweep {name}: cost of one process per run",
         ["runs", "median wall - solve (s)", "p90 wall - solve (s)", "median peak RSS (MiB)", "max peak RSS (MiB)"],
         [[len(table), f"{extra.median():.2f}", f"{extra.quantile(0.9):.2f}", f"{rss.median():.0f}",
           f"{rss.max():.0f}"]])


def paper_comparison(table: pd.DataFrame) -> None:
    """Our overhead and time per graph and budget beside the published Checkmate and Moccasin numbers."""
    table = table.assign(file=table["graph_path"].map(lambda p: Path(str(p)).stem))
    rows = []
    for (stem, budget), (checkmate, moccasin) in PUBLISHED.items():
        runs = table[(table["file"] == stem) & (table["budget_text"] == budget)]

        def ours(method: str, order: str | None = None, runs: pd.DataFrame = runs) -> str:
            mine = runs[runs["method"] == method]
            if order is not None:
                mine = mine[mine["params"].astype(str).str.contains(f'"order":"{order}"', regex=False)]
            if mine.empty:
                return "not run"
            ok = mine[mine["status"].isin(SUCCESS)]
            if ok.empty:
                return f"{mine['status'].iloc[0]} ({mine['wall_time_s'].astype(float).max():.0f} s)"
            best = ok.sort_values("overhead_pct").iloc[0]
            return f"{best['overhead_pct']:.2f}% / {best['solve_time_s']:.1f} s ({best['status']})"

        ok = runs[runs["status"].isin(SUCCESS)]
        best = "none" if ok.empty else (
            f"{ok.sort_values('overhead_pct').iloc[0]['method']} {ok['overhead_pct'].min():.2f}%")
        bound = runs["lower_bound_any_order"].dropna().astype(float)
        base = runs["baseline_duration"].dropna().astype(float)
        implied = (f"{100 * (bound.max() / base.iloc[0] - 1):.3f}%" if len(bound) and len(base) and base.iloc[0]
                   else "-")
        proven = "yes" if runs["proven_optimal"].fillna(False).astype(bool).any() else "no"
        published = [("none in time" if p is None else f"{p[0]:.1f}% / {p[1]:.1f} s") for p in (checkmate, moccasin)]
        rows.append([stem, budget, *published, ours("checkmate"), ours("moccasin", "staged"), ours("reorder"),
                     ours("moccasin", "free"), best, implied, proven])
    show("Moccasin paper Table 2: published (16 cores, Gurobi) against remat-bench (2 cores, HiGHS/CP-SAT, 300 s)",
         ["graph", "budget", "Checkmate (paper)", "Moccasin (paper)", "checkmate (ours)", "moccasin staged (ours)",
          "reorder (ours)", "moccasin order=free (ours)", "best of every method (ours)", "any-order bound",
          "proven optimal"], rows)


def main() -> None:
    wanted = [n.strip() for n in os.environ.get("BENCH_SWEEPS", ",".join(CONFIGS)).split(",") if n.strip()]
    for name in wanted:
        table, wall, finished = sweep(name)
        summary(name, table, wall, finished)
        if name == "paper-moccasin":
            paper_comparison(table)


if __name__ == "__main__":
    main()
