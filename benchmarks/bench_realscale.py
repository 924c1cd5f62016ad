"""Real models at tight budgets: the best schedule `auto` finds, the best bound, and the gap between them.

Instances (issue "Real models at tight budgets"): the zoo GPT with 12 layers at 0.6, 0.5, 0.4
and 0.3 and with 48 layers at 0.5 (width 768, 12 heads, sequence 512, batch 8, vocabulary
8192), the zoo ResNet-50 at batch 32 and 224x224 and the zoo U-Net at batch 8 at 0.5 and 0.4,
and the published random_layered_n500 at 0.8 and n1000 at 0.9 and 0.8. For each, the any-order
bound is computed first (`BOUND_EFFORT` seconds of effort, more on GPT-48), then `auto` runs
with the limit the issue names (300 s; 600 s on GPT-48) and reads the bound from the cache. The
table gives the schedule's overhead and whose it is, the bound, the gap in points, both times
and the peak resident memory of the whole process tree (auto's members run in child processes).
``BENCH_REALSCALE_SCALE`` multiplies every time (0.1 for a quick look); ``BENCH_REALSCALE_ONLY``
runs the instances whose label contains it.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from benchmarks.common import Rows, paper, show
from remat_bench.app.pipeline import run
from remat_bench.core.budget import parse_budget
from remat_bench.core.graph import Graph
from remat_bench.core.graph_io import load_graph
from remat_bench.toolkit.bound_cache import BoundCache

SCALE = float(os.environ.get("BENCH_REALSCALE_SCALE", 1.0))
ONLY = os.environ.get("BENCH_REALSCALE_ONLY", "")
BOUND_EFFORT = 60.0


def gpt(layers: int) -> Graph:
    from remat_bench.torch.importer import import_model

    return import_model("gpt", batch=8, input_shape=(512,), vocab=8192, max_seq=512, width=768, layers=layers,
                        heads=12, name=f"gpt-{layers}", durations="flops", workspace="none")


def zoo(model: str, batch: int, shape: tuple[int, ...] | None = None) -> Graph:
    from remat_bench.torch.importer import import_model

    return import_model(model, batch=batch, input_shape=shape, name=f"{model}-b{batch}", durations="flops",
                        workspace="none")


# (label, graph factory, budgets, auto's limit in seconds, bound effort in seconds)
CASES = [
    ("GPT-12", lambda: gpt(12), ("0.6", "0.5", "0.4", "0.3"), 300.0, BOUND_EFFORT),
    ("GPT-48", lambda: gpt(48), ("0.5",), 600.0, 4 * BOUND_EFFORT),
    ("ResNet-50 b32", lambda: zoo("resnet50", 32, (3, 224, 224)), ("0.5", "0.4"), 300.0, BOUND_EFFORT),
    ("U-Net b8", lambda: zoo("unet", 8), ("0.5", "0.4"), 300.0, BOUND_EFFORT),
    ("random_layered_n500", lambda: load_graph(paper("random_layered_n500")), ("0.8",), 300.0, BOUND_EFFORT),
    ("random_layered_n1000", lambda: load_graph(paper("random_layered_n1000")), ("0.9", "0.8"), 300.0,
     BOUND_EFFORT),
]


class TreeMemory:
    """The peak resident memory of this process and its descendants together, sampled from /proc."""

    def __init__(self, every: float = 0.25) -> None:
        self.every, self.peak = every, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> TreeMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        root = os.getpid()
        while not self._stop.wait(self.every):
            parents: dict[int, int] = {}
            rss: dict[int, int] = {}
            for entry in Path("/proc").iterdir():
                if not entry.name.isdigit():
                    continue
                try:
                    fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                    parents[int(entry.name)] = int(fields[1])
                    rss[int(entry.name)] = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
                except (OSError, ValueError, IndexError):
                    continue
            tree, frontier = {root}, [root]
            while frontier:
                pid = frontier.pop()
                for child, parent in parents.items():
                    if parent == pid and child not in tree:
                        tree.add(child)
                        frontier.append(child)
            self.peak = max(self.peak, sum(rss.get(pid, 0) for pid in tree))


def main() -> None:
    rows = Rows()
    for label, make, budgets, limit, effort in CASES:
        if ONLY and ONLY not in label:
            continue
        graph = make()
        for budget in budgets:
            bounds = BoundCache()
            amount = parse_budget(budget, graph).amount
            start = time.perf_counter()
            bound, _ = bounds.get(graph, amount, effort * SCALE)
            bound_s = time.perf_counter() - start
            with TreeMemory() as memory:
                r = run(graph, "auto", budget, time_limit=limit * SCALE, bounds=bounds)
            base = r.baseline_duration
            bound_pct = None if bound.value is None else 100 * (bound.value / base - 1)
            found = r.status.found_schedule and r.overhead_pct is not None
            gap = r.overhead_pct - bound_pct if found and bound_pct is not None else None
            rows.append([
                label, graph.n, budget,
                f"{r.overhead_pct:+.3f}%" if found else r.status.value,
                r.stats.get("winner", "-") if found else "-",
                "infeasible" if bound.value is None else f"{bound_pct:+.3f}% ({bound.status})",
                "-" if gap is None else f"{gap:.3f}", "yes" if r.proven_optimal else "",
                f"{r.solve_time_s:.0f}", f"{bound_s:.0f}", f"{memory.peak / 2**30:.2f}",
            ])
    show("Real models at tight budgets: auto's best schedule against the any-order bound",
         ["graph", "nodes", "budget", "best schedule (auto)", "found by", "bound (any order)", "gap (points)",
          "proven", "auto s", "bound s", "peak RSS (GiB)"], rows)
