"""Large graphs: a 100,000-node training graph loads, validates and simulates; which methods run.

Methods whose models grow quadratically (checkmate, checkmate-lp, monet, exact
kusumoto) must refuse with their size estimate instead of exhausting memory;
twremat, greedy, chen and the approximate kusumoto (its family thinned to fit) must run.
"""

from __future__ import annotations

import os
import resource
import tempfile
import time
from pathlib import Path

from benchmarks.common import Rows, show
from remat_bench.app.pipeline import run
from remat_bench.core.baseline import baseline_schedule
from remat_bench.core.errors import RematBenchError
from remat_bench.core.graph_io import load_graph, save_graph
from remat_bench.core.simulate import simulate
from remat_bench.generators import chain

LAYERS = int(os.environ.get("BENCH_LARGE_LAYERS", 50_000))  # 2 * LAYERS + 1 nodes
LIMIT = float(os.environ.get("BENCH_LIMIT", 120))


def main() -> None:
    rows = Rows()
    t0 = time.perf_counter()
    g = chain(LAYERS, seed=1)
    rows.append(["generate", f"{g.n:,} nodes, {g.num_edges:,} edges", f"{time.perf_counter() - t0:.2f}"])
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.json"
        t0 = time.perf_counter()
        save_graph(g, path)
        rows.append(["save", f"{path.stat().st_size / 2**20:.0f} MiB", f"{time.perf_counter() - t0:.2f}"])
        t0 = time.perf_counter()
        g = load_graph(path)
        rows.append(["load and validate", "", f"{time.perf_counter() - t0:.2f}"])
    t0 = time.perf_counter()
    schedule = baseline_schedule(g)
    rows.append(["baseline schedule", f"{len(schedule):,} steps", f"{time.perf_counter() - t0:.2f}"])
    t0 = time.perf_counter()
    sim = simulate(g, schedule)
    rows.append(["simulate", f"peak {sim.peak:,}", f"{time.perf_counter() - t0:.3f}"])
    show(f"A {g.n:,}-node training graph", ["step", "what", "time (s)"], rows)

    rows = Rows()
    for method, params, budget in [
        ("greedy", {}, "0.5"), ("chen", {}, "0.5"), ("twremat", {}, "min"),
        ("kusumoto", {"variant": "approx"}, "0.5"), ("kusumoto", {"variant": "exact"}, "0.5"),
        ("checkmate", {}, "0.5"), ("checkmate-lp", {}, "0.5"), ("monet", {}, "0.5"),
    ]:
        t0 = time.perf_counter()
        try:
            r = run(g, method, budget, time_limit=LIMIT, params=params)
            status, detail = r.status.value, (f"peak {r.peak / sim.peak:.3f} of baseline, overhead "
                                               f"{r.overhead_pct:.1f}%" if r.peak is not None else r.message)
        except RematBenchError as exc:
            status, detail = "refused", str(exc)
        wall = time.perf_counter() - t0
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10
        label = method + "".join(f" ({k}={v})" for k, v in params.items())
        rows.append([label, budget, status, detail[:150], f"{wall:.1f}", f"{rss:,.0f}"])
    show(f"Methods on the {g.n:,}-node graph (limit {LIMIT:g} s)",
         ["method", "budget", "status", "result", "wall (s)", "process peak RSS so far (MiB)"], rows)


if __name__ == "__main__":
    main()
