"""Feng-Huang division-tree search: run time, and the lowest peak beside none, chen and kusumoto.

Run time: the whole method (pair table, division tree, search over every max
term, lowering and simulating every distinct checkpoint set), least of three
runs, on the forward graphs of three training graphs (target: under 10 s).

Memory cut-offs at ``--budget min``: 1 - peak / baseline peak, with the
parameters (``fixed_memory``) left out of both, as the paper leaves out "the
stationary cost, such as model weights". The Eq. 2 cut-off is the paper's own
model: 1 - (checkpoint memory + largest segment) / (memory of every forward
value). The paper's figures are measured on a GPU (Table 2; ResNet50 batch 64,
ResNet152 batch 16, DenseNet121 batch 32, 224 x 224), and its memory also
holds the gradients; the batch sizes here are the paper's.
"""

from __future__ import annotations

import os

from benchmarks.common import ROOT, best_time, paper, show
from remat_bench.app.pipeline import run
from remat_bench.core.graph import Graph
from remat_bench.core.graph_io import load_graph
from remat_bench.generators import densenet121, resnet50
from remat_bench.methods.fenghuang import FengHuang

LIMIT = float(os.environ.get("BENCH_TIME_LIMIT", 300))
# Feng and Huang 2021, Table 2, "Ours Memory Cut-offs".
PUBLISHED = {"resnet50": "63%", "resnet152": "81%", "densenet121": "78%"}


def cut_off(peak: float | None, base: float, fixed: float) -> str:
    if peak is None:
        return "-"
    return f"{100 * (1 - (peak - fixed) / (base - fixed)):.1f}%"


def timing_rows() -> list[list[str]]:
    cases = [
        ("resnet50 (generated, b32)", resnet50()),
        ("densenet121 (generated, b32)", densenet121()),
        ("checkmate_resnet50_train", load_graph(paper("checkmate_resnet50_train"))),
    ]
    method = FengHuang()
    params = method.parse_params({})
    rows = []
    for label, g in cases:
        # The fastest of three runs, with that run's own phase times.
        results = [best_time(lambda g=g: method.solve(g, None, None, **params), repeat=1) for _ in range(3)]
        seconds, result = min(results, key=lambda pair: pair[0])
        s = result.stats
        rows.append([
            label, f"{s['vertices']} / {s['edges']}",
            f"{s['tree_linear']} / {s['tree_branch']} / {s['tree_complicate']} / {s['tree_leaf']}",
            s["independent_pairs"], f"{s['max_terms_solved']} of {s['max_terms']}", s["solutions"],
            f"{s['pair_table_s']:.2f}", f"{s['division_tree_s']:.2f}", f"{s['search_s']:.2f}",
            f"{s['simulate_s']:.2f}", f"{seconds:.2f}",
        ])
    return rows


def cutoff_rows() -> tuple[list[list[str]], bool]:
    have_kusumoto = (ROOT / "remat_bench" / "methods" / "kusumoto.py").exists()
    cases: list[tuple[str, str, Graph]] = [
        ("resnet50 b64", "resnet50", resnet50(batch=64)),
        ("resnet152 b16", "resnet152", resnet50(batch=16, depth=152)),
        ("densenet121 b32", "densenet121", densenet121(batch=32)),
        ("checkmate_resnet50_train", "", load_graph(paper("checkmate_resnet50_train"))),
    ]
    rows = []
    for label, key, g in cases:
        fixed = g.fixed_memory
        answers = {}
        for method in ("none", "chen", "kusumoto", "fenghuang"):
            if method == "kusumoto" and not have_kusumoto:
                answers[method] = None
                continue
            answers[method] = run(g, method, "min", time_limit=LIMIT)
        base = answers["none"].peak
        cuts = {}
        for method, r in answers.items():
            if r is None:
                cuts[method] = "n/a"
            elif not r.status.found_schedule:
                cuts[method] = r.status.value
            else:
                cuts[method] = cut_off(r.peak, base, fixed)
        fh = answers["fenghuang"]
        forward_memory = int(g.memory[g.forward_indices].sum())
        model = fh.stats["model_optimum"]
        rows.append([
            label, f"{g.n}", f"{(base - fixed) / 2**20:,.0f}",
            cuts["chen"], cuts["kusumoto"], cuts["fenghuang"],
            f"{fh.overhead_pct:.1f}%", f"{100 * (1 - model / forward_memory):.1f}%",
            f"{(fh.stats['model_optimum_peak'] - fixed) / 2**20:,.0f} / {(fh.peak - fixed) / 2**20:,.0f}",
            f"{fh.solve_time_s:.2f}", PUBLISHED.get(key, "-"),
        ])
    return rows, have_kusumoto


def main() -> None:
    show("Feng-Huang run time (whole method, --budget min, least of 3)",
         ["graph", "forward vertices / edges", "tree: linear / branch / complicate / leaf",
          "independent pairs", "max terms solved", "checkpoint sets", "pair table (s)",
          "division tree (s)", "search (s)", "lower + simulate (s)", "total (s)"],
         timing_rows())
    rows, have_kusumoto = cutoff_rows()
    note = "" if have_kusumoto else " (kusumoto n/a: remat_bench/methods/kusumoto.py does not exist yet)"
    show("Memory cut-off at the lowest simulated peak, parameters excluded" + note,
         ["graph", "nodes", "baseline activations (MiB)", "chen", "kusumoto", "fenghuang",
          "fenghuang overhead", "fenghuang Eq. 2 cut-off", "fenghuang peak, Eq. 2 optimum / chosen (MiB)",
          "fenghuang time (s)", "paper (GPU)"],
         rows)


if __name__ == "__main__":
    main()
