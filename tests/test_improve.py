"""Schedule polishing used for warm starts and hints (remat_bench.toolkit.improve)."""

from __future__ import annotations

import numpy as np

from remat_bench.core.budget import parse_budget
from remat_bench.core.graph import load_graph
from remat_bench.core.simulate import baseline, place_frees, simulate
from remat_bench.toolkit.improve import drop_recomputations, shave_peaks
from tests.bruteforce import staged_optimum
from tests.helpers import paper_graph
from tests.methods.test_checkmate import budgets, random_graph


def sim(g, nodes):
    return simulate(g, place_frees(g, nodes, np.zeros(len(nodes), dtype=np.int64), drop_unused=False))


def staged(g, nodes):
    """First computations in input order, recomputations of lower nodes only (the staged space)."""
    seen = 0
    for v in nodes.tolist():
        if v == seen:
            seen += 1
        elif v > seen:
            return False
    return seen == g.n


def test_shaving_reaches_the_staged_optimum_on_random_layered_n100_at_0_8():
    g = load_graph(paper_graph("random_layered_n100"))
    b = parse_budget("0.8", g).amount
    nodes = shave_peaks(g, np.arange(g.n), b)
    s = sim(g, nodes)
    assert s.valid and s.peak <= b
    assert staged(g, nodes)
    assert round(s.overhead_pct(g.total_duration), 3) == 2.296  # the proven staged optimum


def test_shaving_stays_in_the_staged_space_and_never_breaks_validity():
    for seed in range(20):
        g = random_graph(seed, n=8)
        for b in budgets(g):
            nodes = shave_peaks(g, np.arange(g.n), b)
            s = sim(g, nodes)
            assert s.valid
            assert staged(g, nodes)
            assert s.peak <= baseline(g).peak
            want = staged_optimum(g, b)
            if s.peak <= b:
                assert want is not None and s.duration >= want


def test_dropping_recomputations_keeps_the_budget_and_never_lengthens():
    g = load_graph(paper_graph("random_layered_n100"))
    b = parse_budget("0.9", g).amount
    # The input order with a pointless recomputation of the source before the last node.
    wasteful = np.concatenate([np.arange(g.n - 1), [0], [g.n - 1]])
    before = sim(g, wasteful)
    after_nodes = drop_recomputations(g, wasteful, max(b, before.peak))
    after = sim(g, after_nodes)
    assert after.valid and after.peak <= max(b, before.peak)
    assert after.duration == before.duration - g.duration[0]
    assert len(after_nodes) == g.n
