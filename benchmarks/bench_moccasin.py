"""Moccasin (staged retention intervals, CP-SAT) on the published graphs, beside the paper's Table 2.

For each instance: the overhead reached (simulated, after clean-up), the time
at which the method's own objective first reached the published overhead,
CP-SAT's best bound and the gap. Then a profile on random_layered_n250 at 0.8:
where the time goes, and what each modelling choice is worth (each variant
switched off in turn, same time limit).
"""

from __future__ import annotations

import os

from benchmarks.common import Rows, paper, show
from remat_bench.app.pipeline import run
from remat_bench.core.graph_io import load_graph

# Moccasin paper, Table 2 (Moccasin column, 16-core workstation): (TDI %, seconds).
PUBLISHED = {
    ("random_layered_n100", "0.9"): (0.8, 9.3),
    ("random_layered_n100", "0.8"): (2.3, 9.5),
    ("random_layered_n250", "0.9"): (0.9, 55.0),
    ("random_layered_n250", "0.8"): (4.9, 639.5),
    ("random_layered_n500", "0.9"): (0.7, 1803.3),
    ("random_layered_n500", "0.8"): (3.4, 1804.8),
    ("random_layered_n1000", "0.9"): (0.7, 3612.9),
    ("random_layered_n1000", "0.8"): (3.4, 3611.8),
    ("checkmate_fcn8_vgg_train", "0.9"): (0.0, 3.1),
    ("checkmate_fcn8_vgg_train", "0.8"): (0.1, 3.1),
    ("checkmate_resnet50_train", "0.9"): (0.2, 65.2),
    ("checkmate_resnet50_train", "0.8"): (0.3, 69.3),
}
LIMIT = float(os.environ.get("BENCH_TIME_LIMIT", 300))
LARGE_LIMIT = float(os.environ.get("BENCH_LARGE_TIME_LIMIT", 600))
PROFILE_LIMIT = float(os.environ.get("BENCH_PROFILE_TIME_LIMIT", LIMIT))


def reached_at(result, target: float) -> str:
    """Seconds until the objective (phase 2) first rounds to the published overhead or better."""
    base = result.baseline_duration
    for phase, t, value in result.stats.get("progress", []):
        if phase == "phase2" and round(100 * (value / base - 1), 1) <= target + 1e-9:
            return f"{t:.1f}"
    if result.overhead_pct is not None and round(result.overhead_pct, 1) <= target + 1e-9:
        return f"<= {result.solve_time_s:.1f}"
    return "-"


def pct(result, value) -> str:
    return "-" if value is None else f"{100 * (value / result.baseline_duration - 1):.4f}"


def table2() -> None:
    rows = Rows()
    for (name, budget), (published, published_s) in PUBLISHED.items():
        g = load_graph(paper(name))
        limit = LARGE_LIMIT if g.n >= 500 else LIMIT
        r = run(g, "moccasin", budget, time_limit=limit)
        gap = "-"
        if r.lower_bound is not None and r.objective:
            gap = f"{100 * (r.objective - r.lower_bound) / r.objective:.3f}"
        over = "-" if r.overhead_pct is None else f"{r.overhead_pct:.4f}"
        rows.append([name, budget, r.status.value, over, pct(r, r.objective), f"{published:.1f} / {published_s:g}",
                     reached_at(r, published), f"{r.solve_time_s:.1f}", pct(r, r.lower_bound), gap,
                     r.stats.get("phase1_hint", ""), f"{r.stats.get('phase1_time_s', 0):.1f}"])
    show(f"Moccasin on the paper's Table 2 graphs (limit {LIMIT:g} s, {LARGE_LIMIT:g} s from 500 nodes)",
         ["graph", "budget", "status", "overhead % (cleaned)", "objective %", "published % / s",
          "time to published (s)", "time (s)", "bound %", "gap %", "phase-1 hint", "phase 1 (s)"], rows)


def profile() -> None:
    g = load_graph(paper("random_layered_n250"))
    variants = [
        ("as shipped", {}),
        ("reservoir precedence (paper)", {"precedence": "reservoir"}),
        ("without feeds-consumer", {"feeds_consumer": "false"}),
        ("baseline hint only", {"hints": "baseline"}),
        ("3 intervals", {"max_intervals": "3"}),
    ]
    rows = Rows()
    for label, params in variants:
        r = run(g, "moccasin", "0.8", time_limit=PROFILE_LIMIT, params=params)
        progress = r.stats.get("progress", [])
        first1 = next((t for ph, t, _ in progress if ph == "phase1"), None)
        first2 = next((t for ph, t, _ in progress if ph == "phase2"), None)
        rows.append([label, r.status.value, "-" if r.overhead_pct is None else f"{r.overhead_pct:.3f}",
                     f"{r.stats.get('model_build_time_s', 0):.2f}", "-" if first1 is None else f"{first1:.1f}",
                     f"{r.stats.get('phase1_time_s', 0):.1f}", "-" if first2 is None else f"{first2:.1f}",
                     f"{r.solve_time_s:.1f}", pct(r, r.lower_bound)])
    show(f"Profile: random_layered_n250 at 0.8 (limit {PROFILE_LIMIT:g} s)",
         ["variant", "status", "overhead %", "build (s)", "phase 1 first solution (s)", "phase 1 (s)",
          "phase 2 first solution (s)", "total (s)", "bound %"], rows)


def main() -> None:
    table2()
    profile()


if __name__ == "__main__":
    main()
