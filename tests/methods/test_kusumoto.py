"""Kusumoto lower-set DP against a brute force over every chain of lower sets (eq. 1-2)."""

from __future__ import annotations

from itertools import combinations, pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remat_bench.app.pipeline import run
from remat_bench.core.baseline import baseline
from remat_bench.core.graph import Graph
from remat_bench.core.graph_io import load_graph
from remat_bench.core.simulate import simulate
from remat_bench.generators import ForwardOp, chain, training_graph
from remat_bench.methods.kusumoto import (
    Kusumoto,
    ancestor_sets,
    best_chain,
    chain_plan,
    enumerate_lower_sets,
    evaluate_chain,
    forward_graph,
    lower_set_family,
    solve_dp,
)
from tests.helpers import make_graph, paper_graph

# ---------------------------------------------------------------------- the brute force, on plain sets


def forward_sets(g: Graph) -> tuple[list[int], dict[int, set[int]], dict[int, set[int]]]:
    """Forward nodes, and each one's forward inputs and forward consumers (graph indices)."""
    nodes = g.forward_indices
    preds = {v: {u for u in g.inputs[v] if g.is_forward[u]} for v in nodes}
    succs = {v: {w for w in g.consumers[v] if g.is_forward[w]} for v in nodes}
    return nodes, preds, succs


def all_lower_sets(g: Graph) -> list[frozenset[int]]:
    """Every subset of the forward nodes with no edge coming in from outside it."""
    nodes, preds, _ = forward_sets(g)
    return [frozenset(s) for k in range(len(nodes) + 1) for s in combinations(nodes, k)
            if all(preds[v] <= set(s) for v in s)]


def approx_sets(g: Graph) -> list[frozenset[int]]:
    """{}, V and {v} + ancestors(v), computed by walking inputs."""
    nodes, preds, _ = forward_sets(g)
    family = {frozenset(), frozenset(nodes)}
    for v in nodes:
        seen, todo = {v}, [v]
        while todo:
            for u in preds[todo.pop()]:
                if u not in seen:
                    seen.add(u)
                    todo.append(u)
        family.add(frozenset(seen))
    return list(family)


def score(g: Graph, chain_sets: list[frozenset[int]]) -> tuple[int, int]:
    """Eq. 1 overhead and eq. 2 peak of a chain {} = L0 < ... < Lk = V, written out literally."""
    _, preds, succs = forward_sets(g)

    def M(s: set[int]) -> int:
        return sum(int(g.memory[v]) for v in s)

    def T(s: set[int]) -> int:
        return sum(int(g.duration[v]) for v in s)

    def boundary(L: frozenset[int]) -> set[int]:
        return {v for v in L if succs[v] - L}

    overhead, peak, kept = 0, 0, 0
    for before, L in pairwise(chain_sets):
        block = L - before
        after = set().union(*(succs[v] for v in L)) - L
        inputs_of_after = set().union(*(preds[w] for w in after)) - L
        overhead += T(block - boundary(L))
        peak = max(peak, kept + 2 * M(block) + M(after) + M(inputs_of_after))
        kept += M(boundary(L) - before)
    return overhead, peak


def every_chain(g: Graph, family: list[frozenset[int]]) -> list[tuple[int, int]]:
    """(overhead, peak) of every strictly increasing chain from {} to V inside ``family``."""
    everything = frozenset(g.forward_indices)
    found = []
    stack = [[frozenset()]]
    while stack:
        path = stack.pop()
        if path[-1] == everything:
            found.append(score(g, path))
            continue
        stack.extend([*path, L] for L in family if path[-1] < L)
    return found


def brute(scores: list[tuple[int, int]], budget: int, strategy: str) -> int | None:
    fitting = [t for t, m in scores if m <= budget]
    if not fitting:
        return None
    return min(fitting) if strategy == "tc" else max(fitting)


def family_of(g: Graph, variant: str):
    fg = forward_graph(g)
    sets = enumerate_lower_sets(fg) if variant == "exact" else ancestor_sets(fg)
    return fg, lower_set_family(fg, sets)


def as_sets(fg, fam, chain_indices) -> list[frozenset[int]]:
    return [frozenset(fg.nodes[fam.member[i]].tolist()) for i in chain_indices]


# ---------------------------------------------------------------------- graphs


def forward_net(edges: dict[str, list[str]], memory: int | dict[str, int] = 1,
                duration: int | dict[str, int] = 1) -> Graph:
    """A Checkmate-shaped training graph of the forward graph ``edges`` ({node: inputs})."""
    ops = [ForwardOp(v, "op", ins, memory if isinstance(memory, int) else memory[v],
                     duration if isinstance(duration, int) else duration[v]) for v, ins in edges.items()]
    return training_graph(ops, name="net")


SMALL = {
    "chain-5": chain(5),
    "chain-7-seeded": chain(7, seed=3),
    "diamond": forward_net({"a": [], "b": ["a"], "c": ["a"], "d": ["b", "c"], "e": ["d"]}),
    "skip": forward_net({"a": [], "b": ["a"], "c": ["b"], "d": ["c", "a"], "e": ["d"], "f": ["e", "b"]}),
    "two-branches": forward_net({"a": [], "b": ["a"], "c": ["b"], "d": ["a"], "e": ["d"], "f": ["c", "e"]}),
    "two-sources": forward_net({"a": [], "b": [], "c": ["a"], "d": ["b", "c"], "e": ["d"]}),
}


@st.composite
def small_nets(draw) -> Graph:
    """Training graphs of random forward DAGs with 1 to 6 nodes and random sizes."""
    n = draw(st.integers(1, 6))
    edges = {f"f{i}": sorted(draw(st.sets(st.sampled_from([f"f{j}" for j in range(i)]), max_size=2))) if i else []
             for i in range(n)}
    memory = {v: draw(st.integers(0, 6)) for v in edges}
    duration = {v: draw(st.integers(0, 5)) for v in edges}
    return forward_net(edges, memory, duration)


# ---------------------------------------------------------------------- the DP against the brute force


@pytest.mark.parametrize("name", list(SMALL))
@pytest.mark.parametrize("variant", ["exact", "approx"])
def test_dp_equals_brute_force_over_every_budget(name, variant):
    g = SMALL[name]
    fg, fam = family_of(g, variant)
    sets = all_lower_sets(g) if variant == "exact" else approx_sets(g)
    assert sorted(map(sorted, as_sets(fg, fam, range(fam.count)))) == sorted(map(sorted, sets))
    scores = every_chain(g, sets)
    least = min(m for _, m in scores)
    assert best_chain(fam, None, "peak").peak == least
    for budget in sorted({least - 1, *(m for _, m in scores)}):
        for strategy in ("tc", "mc"):
            want = brute(scores, budget, strategy)
            got = best_chain(fam, budget, strategy)
            plain = solve_dp(fam, budget, strategy)
            if want is None:
                assert got is None and plain is None
                continue
            assert got.overhead == want == plain.overhead
            # The chain it returns scores as it says, under the literal eq. 1-2.
            assert score(g, as_sets(fg, fam, got.chain)) == (got.overhead, got.peak)
            assert got.peak <= budget


@settings(max_examples=60, deadline=None)
@given(small_nets())
def test_dp_equals_brute_force_and_exact_never_loses_to_approx(g):
    _, exact = family_of(g, "exact")
    _, approx = family_of(g, "approx")
    scores = every_chain(g, all_lower_sets(g))
    for budget in sorted({min(m for _, m in scores) - 1, *(m for _, m in scores)}):
        for strategy in ("tc", "mc"):
            got = best_chain(exact, budget, strategy)
            want = brute(scores, budget, strategy)
            assert (got and got.overhead) == want
        exact_tc, approx_tc = best_chain(exact, budget, "tc"), best_chain(approx, budget, "tc")
        if approx_tc is not None:
            assert exact_tc is not None and exact_tc.overhead <= approx_tc.overhead


def test_eq1_and_eq2_on_a_chain_of_three_by_hand():
    g = forward_net({"a": [], "b": ["a"], "c": ["b"]})
    fg, fam = family_of(g, "exact")
    # {} < {a} < V: block {a} keeps a (b reads it): 2*1 + M({b}) = 3; block {b, c}
    # recomputes both (nothing leaves V): 1 kept + 2*2 = 5.
    assert evaluate_chain(fam, [0, 1, 3]) == (2, 5)
    assert score(g, as_sets(fg, fam, [0, 1, 3])) == (2, 5)


def test_chain_plan_keeps_the_boundaries_and_cuts_the_blocks():
    g = chain(6)
    fg, fam = family_of(g, "exact")
    # The lower sets of a chain are its prefixes, in order of size: index i = first i layers.
    plan = chain_plan(fg, fam, (0, 2, 4, 6))
    assert sorted(plan.kept) == [1, 3]  # layer2 and layer4 (indices 1 and 3)
    assert plan.segments == ((0, 1), (2, 3), (4, 5))


# ---------------------------------------------------------------------- lower sets


def test_lower_sets_of_parallel_chains_multiply():
    # Three independent chains of 2, 3 and 4 layers: (2+1)(3+1)(4+1) lower sets.
    edges: dict[str, list[str]] = {}
    for branch, length in enumerate((2, 3, 4)):
        for i in range(length):
            edges[f"b{branch}_{i}"] = [f"b{branch}_{i - 1}"] if i else []
    g = forward_net(edges)
    assert len(enumerate_lower_sets(forward_graph(g))) == 60
    assert enumerate_lower_sets(forward_graph(g), limit=59) is None


def test_enumeration_has_no_recursion_limit():
    fg = forward_graph(chain(3000))
    sets = enumerate_lower_sets(fg)
    assert len(sets) == 3001 and len(set(sets)) == 3001


@settings(max_examples=60, deadline=None)
@given(small_nets())
def test_enumeration_finds_every_lower_set_once(g):
    fg = forward_graph(g)
    sets = enumerate_lower_sets(fg)
    assert len(sets) == len(set(sets)) == len(all_lower_sets(g))


# ---------------------------------------------------------------------- the method


def test_graph_without_backward_nodes_is_unsupported():
    g = make_graph({"a": [], "b": ["a"], "c": ["b"]})
    r = run(g, "kusumoto", "min")
    assert r.status.value == "unsupported"
    assert "no backward nodes" in r.message


def test_too_many_lower_sets_says_so_and_approx_still_answers():
    g = forward_net({f"x{i}": [] for i in range(12)})  # 2**12 lower sets
    r = run(g, "kusumoto", "min", params={"max_lower_sets": 1000})
    assert r.status.value == "no_solution"
    assert "more than 1000 lower sets" in r.message and "variant=approx" in r.message
    r = run(g, "kusumoto", "min", params={"variant": "approx"})
    assert r.status.value == "feasible" and r.stats["lower_sets"] == 14


def test_a_family_too_large_to_tabulate_is_thinned_or_declined(monkeypatch):
    # The approximate family of a 50,000-layer chain needed over 24 GiB and was killed by the
    # kernel; past MAX_TABLE_CELLS the approximate family is now thinned and the exact one declined
    # in a sentence. Scaled down here.
    import remat_bench.methods.kusumoto as kusumoto

    g = chain(40)  # 40 forward nodes, 41 ancestor sets ({} and one per node, the last = V): 1,640 cells
    full = run(g, "kusumoto", "0.5", params={"variant": "approx"})
    assert full.status.value == "feasible" and full.stats["lower_sets"] == 41
    monkeypatch.setattr(kusumoto, "MAX_TABLE_CELLS", 1_000)  # room for 25 sets of 40 nodes
    r = run(g, "kusumoto", "0.5", params={"variant": "approx"})
    assert r.status.value == "feasible" and r.simulation.valid and r.peak <= r.budget
    assert r.stats["lower_sets"] == 25 and r.stats["lower_sets_before_thinning"] == 41
    assert "41 ancestor sets were thinned to 25" in r.message
    assert r.stats["dp_overhead"] >= full.stats["dp_overhead"]  # a sub-family never does better
    r = run(g, "kusumoto", "0.5", params={"variant": "exact"})
    assert r.status.value == "no_solution"
    assert "41 lower sets over 40 forward nodes" in r.message and "MiB of tables" in r.message
    assert "use variant=approx" in r.message


@settings(max_examples=100, deadline=None)
@given(small_nets(), st.integers(2, 8))
def test_thinning_keeps_empty_and_whole_and_spreads_by_size(g, keep):
    from remat_bench.methods.kusumoto import thin_family

    fg = forward_graph(g)
    sets = ancestor_sets(fg)
    thinned = thin_family(sets, keep)
    assert thinned[0] == 0 and thinned[-1] == fg.everything
    assert set(thinned) <= set(sets) and len(thinned) == min(keep, len(set(sets)))
    sizes = [s.bit_count() for s in thinned]
    assert sizes == sorted(sizes)
    fam = lower_set_family(fg, thinned)  # still a family the DP walks
    assert best_chain(fam, None, "peak") is not None


def test_tightens_the_internal_budget_when_the_simulator_disagrees():
    g = chain(10)
    budget = 9
    r = run(g, "kusumoto", str(budget))
    assert r.status.value == "feasible", r.message
    assert r.peak <= budget
    # At the DP budget 9 the paper's model fits but the lowered schedule peaks at 10.
    assert r.stats["bisection_steps"] >= 1
    assert "bisection" in r.message and "the paper's model said 9" in r.message
    assert r.stats["internal_budget"] < budget
    assert r.stats["simulated_peak"] == r.peak


def test_when_the_model_says_no_but_the_simulator_says_yes():
    g = load_graph(paper_graph("checkmate_resnet50_train"))
    least = run(g, "kusumoto", "min", params={"strategy": "mc"})
    assert least.stats["simulated_peak"] < least.stats["model_peak"]
    budget = (least.stats["simulated_peak"] + least.stats["model_peak"]) // 2
    r = run(g, "kusumoto", str(budget), params={"strategy": "mc"})
    assert r.status.value == "feasible" and r.peak <= budget
    assert "puts every chain above the budget" in r.message


def test_no_solution_when_even_the_leanest_chain_is_over():
    g = chain(10)
    r = run(g, "kusumoto", "6")
    assert r.status.value == "no_solution"
    assert "no canonical strategy fits" in r.message


@pytest.mark.parametrize("name", ["checkmate_vgg16_train", "checkmate_resnet50_train"])
@pytest.mark.parametrize("variant", ["exact", "approx"])
def test_published_graphs(name, variant):
    g = load_graph(paper_graph(name))
    peaks = {}
    for strategy in ("tc", "mc"):
        for budget in ("min", "0.9"):
            r = run(g, "kusumoto", budget, time_limit=60, params={"variant": variant, "strategy": strategy})
            assert r.status.value == "feasible", r.message
            assert r.simulation.valid
            assert r.budget is None or r.peak <= r.budget
            assert r.stats["simulated_peak"] >= r.peak  # clean-up never raises the peak
            peaks[strategy, budget] = r.peak
    assert peaks["tc", "min"] < baseline(g).peak
    assert peaks["mc", "min"] <= peaks["mc", "0.9"]


def test_method_schedule_is_the_lowered_plan_before_clean_up():
    g = chain(8, seed=1)
    method = Kusumoto()
    r = method.solve(g, None, 30, **method.parse_params({"strategy": "mc"}))
    sim = simulate(g, r.schedule)
    assert sim.valid
    assert r.objective == sim.duration
    assert r.stats["simulated_peak"] == sim.peak


@settings(max_examples=40, deadline=None)
@given(small_nets(), st.floats(0, 1), st.sampled_from(["tc", "mc"]), st.sampled_from(["exact", "approx"]))
def test_any_answer_is_valid_and_within_budget(g, t, strategy, variant):
    from remat_bench.core.budget import memory_floor

    floor, peak = memory_floor(g).amount, baseline(g).peak
    budget = max(1, int(floor + t * (peak - floor)))
    r = run(g, "kusumoto", str(budget), params={"strategy": strategy, "variant": variant}, bound=False)
    assert r.status.value in ("feasible", "no_solution", "infeasible"), r.message
    if r.status.found_schedule:
        assert r.simulation.valid and r.peak <= r.budget
    else:
        assert r.message


def test_exact_beats_approx_where_the_ancestor_sets_miss_a_cut():
    g = SMALL["two-branches"]
    (_, exact), (_, approx) = family_of(g, "exact"), family_of(g, "approx")
    budgets = sorted({m for _, m in every_chain(g, all_lower_sets(g))})
    better = [b for b in budgets
              if (a := best_chain(approx, b, "tc")) is None or best_chain(exact, b, "tc").overhead < a.overhead]
    assert better  # {a, b, d} is a lower set but no ancestor set: only the exact DP may cut there


def test_out_of_time_says_so():
    r = run(chain(20), "kusumoto", "min", time_limit=0)
    assert r.status.value == "no_solution"
    assert "ran out while tabulating 21 lower sets over 20 forward nodes" in r.message
