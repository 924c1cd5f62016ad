"""knapsack's ``search``: the walk of one lowering per value beside the search as it is now, on real models.

The walk is the search as it was first written: drop values by memory per unit of duration, one
lowering (the whole training schedule built and simulated) per value, until the plan fits; then save
again each recomputed value, costliest first, one lowering each. The search now starts its walk where
the forward pass first fits, walks one place of every repeated block at a time
(`remat_bench.toolkit.blocks`), passes over values its plan's steps show cannot fit, and then trades
(``exchange``: save one more value, drop the cheapest saved values that free its memory at the peak).
Each row is one model and budget: the walk's overhead and seconds, the search's without the exchange
(the same plan as the walk's wherever its shortcuts are exact), and with it, beside the any-order bound.

Models: the zoo GPT at 12 and 24 layers (width 768, 12 heads, sequence 512, batch 8), ResNet-50 at
batch 32 and 224x224, configs/realscale.yaml's ViT (batch 32), and the Llama-style decoder of
configs/models/llama.py at 8, 16 and 32 layers (batch 8, sequence 256); at 0.6, 0.5 and 0.4, FLOPs
durations. ``BENCH_KNAPSACK_ONLY`` runs the models whose label contains it; ``BENCH_KNAPSACK_WALK=0``
leaves the walk out (it takes about a minute on Llama-32).
"""

from __future__ import annotations

import os
import time
from functools import partial

import numpy as np

from benchmarks.bench_frontier import user_model, zoo, zoo_gpt
from benchmarks.common import Rows, show
from remat_bench.core.baseline import baseline
from remat_bench.core.budget import parse_budget
from remat_bench.core.graph import Graph, Number
from remat_bench.core.simulate import simulate
from remat_bench.methods.knapsack import Knapsack, _lowered
from remat_bench.toolkit.bound_cache import BoundCache
from remat_bench.toolkit.lowering import Found

ONLY = os.environ.get("BENCH_KNAPSACK_ONLY", "")
WALK = os.environ.get("BENCH_KNAPSACK_WALK", "1") != "0"
BUDGETS = ("0.6", "0.5", "0.4")
BOUND_EFFORT = 30.0


def llama(layers: int) -> Graph:
    return user_model("llama:llama", 8, (256,), f"llama-{layers}-b8", task="language", vocab_ids=4096,
                      layers=layers)


MODELS = [
    ("GPT-12 b8", partial(zoo_gpt, 12)),
    ("GPT-24 b8", partial(zoo_gpt, 24)),
    ("ResNet-50 b32", partial(zoo, "resnet50", 32, (3, 224, 224), "resnet50-b32")),
    ("ViT b32", partial(user_model, "vit:vit", 32, (3, 224, 224), "vit-b32")),
    *((f"Llama-{n} b8", partial(llama, n)) for n in (8, 16, 32)),
]


def walk(graph: Graph, budget: Number, transient: bool) -> Found | None:
    """The search as first written, one lowering per value (module docstring); None when nothing fits.

    Parameters
    ----------
    graph : Graph
        A training graph.
    budget : Number
        In the graph's memory units.
    transient : bool
        The lowering's mode (`remat_bench.toolkit.lowering.lower_plan`).

    Returns
    -------
    Found or None
        The plan lowered and simulated: (duration, peak, schedule, knob, transient).
    """
    segments = tuple((int(v),) for v in graph.forward_indices)
    order = sorted(graph.forward_indices, key=lambda v: -float(graph.memory[v]) / (float(graph.duration[v]) + 1.0))
    saved = set(order)
    current = _lowered(graph, saved, segments, transient)
    for v in order:
        if current[1] <= budget:
            break
        saved.discard(v)
        current = _lowered(graph, saved, segments, transient)
    if current[1] > budget:
        return None
    counts = np.bincount(current[2].nodes[current[2].kinds == 0], minlength=graph.n)
    recomputed = [v for v in graph.forward_indices if counts[v] > 1]
    saved = set(graph.forward_indices) - set(recomputed)
    for v in sorted(recomputed, key=lambda v: -float(graph.duration[v])):
        trial = _lowered(graph, saved | {v}, segments, transient)
        if trial[1] <= budget and trial[0] < current[0]:
            saved.add(v)
            current = trial
    return current


def pct(duration: Number | None, base: Number) -> str:
    return "-" if duration is None else f"{100 * (duration / base - 1):+.3f}%"


def main() -> None:
    rows: Rows = []
    method = Knapsack()
    for label, make in MODELS:
        if ONLY and ONLY not in label:
            continue
        graph = make()
        base = baseline(graph).duration
        bounds = BoundCache()

        for text in BUDGETS:
            budget = parse_budget(text, graph).amount
            bound, _ = bounds.get(graph, budget, BOUND_EFFORT)
            row = [label, f"{graph.n}", text]
            if WALK:
                start = time.perf_counter()
                walked = [w for w in (walk(graph, budget, False), walk(graph, budget, True)) if w is not None]
                row += [pct(min(w[0] for w in walked) if walked else None, base), f"{time.perf_counter() - start:.2f}"]
            else:
                row += ["", ""]
            for exchange in (False, True):
                start = time.perf_counter()
                r = method.solve(graph, budget, 600, **method.parse_params({"solver": "search",
                                                                          "exchange": exchange}))
                seconds = time.perf_counter() - start
                duration = None if r.schedule is None else simulate(graph, r.schedule).duration
                row += [pct(duration, base), f"{seconds:.2f}"]
            row.append(pct(bound.value, base))
            rows.append(row)
    show("knapsack's search: the walk of one lowering per value, the search without and with its trades",
         ["model", "nodes", "budget", "walk", "walk s", "search, no trades", "s", "search", "s", "bound"], rows)
