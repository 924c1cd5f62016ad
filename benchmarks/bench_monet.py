"""MONeT against Checkmate and Checkmate with fastest-fit implementations (issue: MONeT).

Generated ResNet-50, VGG-16 and U-Net training graphs with MONeT's operator
implementations (`remat-bench graphs generate KIND --implementations`); for
each budget from 0.4 to 0.9 of the baseline peak, the overhead each method
reaches (simulated, after clean-up, against the baseline with the default
implementations) and its solve time. Checkmate ignores implementations (it
runs every node's first, the framework default); ``impl=fastest-fit`` then
gives every compute the fastest one that fits (MONeT's "Checkmate-O").
A negative overhead is a schedule faster than the baseline: faster
implementations buy back more than the recomputation costs.

Environment: BENCH_TIME_LIMIT (seconds per solve, default 120),
BENCH_MONET_BUDGETS (comma-separated, default 0.4,...,0.9), BENCH_MONET_GRAPHS
(comma-separated kinds, default all three), BENCH_MONET_METHODS (comma-separated
among monet, checkmate, checkmate+fastest-fit; default all three).
"""

from __future__ import annotations

import os

from benchmarks.common import Rows, show
from remat_bench.app.pipeline import run
from remat_bench.core.baseline import baseline
from remat_bench.core.budget import memory_floor
from remat_bench.generators import generate

LIMIT = float(os.environ.get("BENCH_TIME_LIMIT", 120))
BUDGETS = os.environ.get("BENCH_MONET_BUDGETS", "0.4,0.5,0.6,0.7,0.8,0.9").split(",")
# Sizes for a 2-core machine: large enough that activations, not the fixed memory
# (parameters, their gradients), set the baseline peak.
GRAPHS = (
    ("resnet50", {"batch": 32, "resolution": 64}),
    ("vgg16", {"batch": 32, "resolution": 128}),
    ("unet", {"batch": 8, "resolution": 128}),
)
WANTED = os.environ.get("BENCH_MONET_GRAPHS", "resnet50,vgg16,unet").split(",")
# (label, method, params); BENCH_MONET_METHODS picks among the labels.
ALL_METHODS = (("monet", "monet", {}), ("checkmate", "checkmate", {}),
               ("checkmate+fastest-fit", "checkmate", {"impl": "fastest-fit"}))
CHOSEN = os.environ.get("BENCH_MONET_METHODS", ",".join(label for label, _, _ in ALL_METHODS)).split(",")
METHODS = tuple(m for m in ALL_METHODS if m[0] in CHOSEN)


def main() -> None:
    rows = Rows()
    for kind, options in GRAPHS:
        if kind not in WANTED:
            continue
        g = generate(kind, implementations=True, **options)
        floor = memory_floor(g).amount / baseline(g).peak
        label = f"{g.name} ({g.n} nodes, floor {floor:.2f})"
        for budget in BUDGETS:
            cells = [label, budget]
            for _, method, params in METHODS:
                r = run(g, method, budget, time_limit=LIMIT, params=params)
                if r.overhead_pct is None:
                    cells.append(r.status.value)
                else:
                    mark = "" if r.status.value == "optimal" else "*"
                    cells.append(f"{r.overhead_pct:.2f}{mark}")
                cells.append(f"{r.solve_time_s:.1f}")
            rows.append(cells)
    show(f"MONeT vs Checkmate, overhead % by budget (limit {LIMIT:g} s; * not proven optimal)",
         ["graph", "budget", *(f"{label} {unit}" for label, _, _ in METHODS for unit in ("%", "s"))], rows)


if __name__ == "__main__":
    main()
