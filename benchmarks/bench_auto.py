"""``auto`` beside the methods it runs, on the cases where no single method is best.

Each row is one graph and budget; every method runs alone with the same time limit, in one
run of this benchmark, one after another (the machine otherwise idle), and the any-order
bound is computed once before the row so that every method gets its whole limit. The
columns give each method's overhead after clean-up (and its seconds); the last two say
whether ``auto`` is at or below the best single method, and whether moccasin alone is at
or below greedy and kusumoto where they found a schedule.

The graphs: `graphs generate resnet50 --batch 8` (349 nodes); the zoo GPT with 12 and 48
layers, width 768, 12 heads, sequence 512, batch 8, vocabulary 8192 (415 and 1,603 nodes;
needs torch). ``BENCH_AUTO_SCALE`` multiplies every limit (0.25 for a quick look).
"""

from __future__ import annotations

import os

from benchmarks.common import Rows, show
from remat_bench.app.pipeline import run
from remat_bench.core.budget import parse_budget
from remat_bench.core.graph import Graph
from remat_bench.toolkit.bound_cache import BoundCache

SCALE = float(os.environ.get("BENCH_AUTO_SCALE", 1.0))
METHODS = ("greedy", "kusumoto", "checkmate", "moccasin", "auto")


def gpt(layers: int) -> Graph:
    from remat_bench.torch.importer import import_model

    return import_model("gpt", batch=8, input_shape=(512,), vocab=8192, max_seq=512, width=768, layers=layers,
                        heads=12, durations="flops", workspace="none")


def cases() -> list[tuple[str, Graph, str, float]]:
    from remat_bench.generators import generate

    resnet = generate("resnet50", batch=8)
    gpt12, gpt48 = gpt(12), gpt(48)
    return [
        ("ResNet-50 b8 (generated)", resnet, "0.8", 30.0),
        ("GPT-12 (zoo, 415 nodes)", gpt12, "0.5", 120.0),
        ("GPT-12 (zoo, 415 nodes)", gpt12, "0.6", 120.0),
        ("GPT-48 (zoo, 1,603 nodes)", gpt48, "0.5", 120.0),
    ]


def pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.3f}%"


def main() -> None:
    rows = Rows()
    for label, g, budget, limit in cases():
        limit *= SCALE
        bounds = BoundCache()
        amount = parse_budget(budget, g).amount
        bound, _ = bounds.get(g, amount, max(0.5, min(30.0, limit / 10)))
        results = {m: run(g, m, budget, time_limit=limit, bounds=bounds) for m in METHODS}
        found = {m: r.overhead_pct for m, r in results.items() if r.status.found_schedule and m != "auto"}
        best_single = min(found.values(), default=None)
        auto = results["auto"].overhead_pct if results["auto"].status.found_schedule else None
        auto_ok = "-" if best_single is None else "yes" if auto is not None and auto <= best_single + 1e-9 else "NO"
        mocc = found.get("moccasin")
        fast = [found[m] for m in ("greedy", "kusumoto") if m in found]
        mocc_ok = "-" if not fast else "yes" if mocc is not None and mocc <= min(fast) + 1e-9 else "NO"
        base = results["greedy"].baseline_duration
        bound_pct = "-" if bound.value is None else pct(100 * (bound.value / base - 1))
        winner = results["auto"].stats.get("winner", "-")
        rows.append([label, budget, f"{limit:g}",
                     *[f"{pct(r.overhead_pct) if r.status.found_schedule else r.status.value} ({r.solve_time_s:.1f} s)"
                       for r in results.values()],
                     bound_pct, winner, auto_ok, mocc_ok])
    show("auto beside its members (each alone at the same limit)",
         ["graph", "budget", "limit (s)", *METHODS, "bound (any order)", "auto's winner", "auto <= best single",
          "moccasin <= greedy, kusumoto"], rows)
