"""TWRemat (Kumar et al. 2019): its Figure 2 and 3 trends, its run time at 17,000+ nodes, the paper graphs.

- Feed-forward chains of 10 to 100 layers and ResNet training graphs of
  growing depth: peak and schedule length against `none` (the paper's
  Figures 2 and 3: `none` grows linearly, TWRemat sublinearly).
- Run time on generated training graphs of more than 17,000 nodes (the paper's
  ResNet200 graph has 17,705), decomposition included, with the width.
- The published graphs at the 0.9 and 0.8 budgets, beside `none`, `chen` and
  `greedy`.
"""

from __future__ import annotations

import time

from benchmarks.common import paper, show
from remat_bench.app import datasets
from remat_bench.app.pipeline import run
from remat_bench.core.baseline import baseline
from remat_bench.core.graph import Graph
from remat_bench.core.graph_io import load_graph
from remat_bench.generators import chain, resnet50, transformer
from remat_bench.methods.twremat import separator_tree, tree_decomposition, twremat_schedule

GIB = 2**30


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x"


def depth_trend(label: str, graphs: list[tuple[str, Graph]], unit: float, unit_name: str) -> None:
    """Peak and length of TWRemat at ``min`` against the baseline, one row per graph."""
    rows = []
    for name, g in graphs:
        base = baseline(g)
        r = run(g, "twremat", "min")
        assert r.simulation.valid
        # Schedule length as in the paper: operations executed (unit cost), and the duration.
        ops = r.simulation.computes
        rows.append([
            name, g.n, r.stats["width"], r.stats["k"],
            f"{base.peak / unit:.3g}", f"{r.peak / unit:.3g}", f"{r.peak / base.peak:.3f}",
            _ratio(ops, g.n), _ratio(r.duration, base.duration),
        ])
    show(label, ["graph", "nodes", "width", "k", f"none peak ({unit_name})",
                 f"twremat peak ({unit_name})", "peak ratio", "length (ops)", "length (duration)"], rows)


def large_graphs() -> None:
    """Run time at 17,000+ nodes: the decomposition, Algorithm 1 alone, and the whole method."""
    rows = []
    for name, make in [
        ("transformer, 720 layers (GPT-2 small widths)", lambda: transformer(layers=720)),
        ("chain, 8,500 layers", lambda: chain(8500)),
    ]:
        g = make()
        base = baseline(g)
        start = time.perf_counter()
        decomposition = tree_decomposition(g)
        tree = separator_tree(decomposition, g.n)
        t_decomposition = time.perf_counter() - start
        start = time.perf_counter()
        schedule = twremat_schedule(g, tree, 1)
        t_algorithm1 = time.perf_counter() - start
        start = time.perf_counter()
        fixed = run(g, "twremat", "min", params={"k": 1})
        t_fixed = time.perf_counter() - start
        start = time.perf_counter()
        searched = run(g, "twremat", "min")
        t_searched = time.perf_counter() - start
        assert fixed.simulation.valid and searched.simulation.valid
        rows.append([
            name, f"{g.n:,}", f"{g.num_edges:,}", decomposition.width, f"{len(decomposition.bags):,}",
            tree.levels, f"{t_decomposition:.1f}", f"{t_algorithm1:.1f}", f"{len(schedule):,}",
            f"{t_fixed:.1f}", f"{fixed.peak / base.peak:.3f}", _ratio(fixed.duration, base.duration),
            f"{t_searched:.1f}", f"{searched.stats['schedules_tried']} (k={searched.stats['k']})",
            f"{searched.peak / base.peak:.3f}", _ratio(searched.duration, base.duration),
        ])
    show("TWRemat on graphs of 17,000+ nodes (min_degree)",
         ["graph", "nodes", "edges", "width", "bags", "levels", "decomposition (s)",
          "Algorithm 1 build (s)", "Algorithm 1 steps",
          "k=1: total (s)", "k=1: peak / none", "k=1: duration / none",
          "min, k searched: total (s)", "schedules (best k)", "peak / none", "duration / none"], rows)


def paper_graphs() -> None:
    rows = []
    methods = [("twremat", {}), ("twremat", {"heuristic": "both"}), ("chen", {}), ("greedy", {})]
    for name in sorted(f.name.removesuffix(".json") for f in datasets.PAPER.files):
        g = load_graph(paper(name))
        for budget in ("0.9", "0.8"):
            for method, params in methods:
                r = run(g, method, budget, time_limit=300, params=params)
                label = method + ("" if not params else " (both heuristics)")
                fits = r.status.found_schedule
                rows.append([
                    name, budget, label, r.status.value,
                    f"{r.peak / r.baseline_peak:.3f}" if r.peak is not None else "-",
                    f"{r.overhead_pct:.1f}" if fits else "-",
                    r.stats.get("width", "-"), r.stats.get("k", "-"), f"{r.solve_time_s:.2f}",
                ])
    show("TWRemat on the published graphs, beside chen and greedy",
         ["graph", "budget", "method", "status", "peak / none", "overhead %", "width", "k",
          "solve (s)"], rows)


def main() -> None:
    depth_trend("TWRemat on feed-forward training chains (Figure 2b, 3b)",
                [(f"chain-{n}", chain(n)) for n in range(10, 101, 10)], 1, "units")
    depth_trend("TWRemat on ResNet training graphs, batch 32 at 224x224 (Figure 2a, 3a)",
                [(f"resnet{d}", resnet50(batch=32, resolution=224, depth=d))
                 for d in (18, 34, 50, 101, 152, 200)], GIB, "GiB")
    large_graphs()
    paper_graphs()


if __name__ == "__main__":
    main()
