"""rotor (Beaumont et al. 2019): its optimum against brute force on chains, its stages and pinned values,
and its schedules through the simulator on training graphs."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remat_bench.app.pipeline import run
from remat_bench.core.baseline import baseline
from remat_bench.core.budget import memory_floor
from remat_bench.core.graph import Graph, Node
from remat_bench.core.outcome import SolutionStatus, Termination
from remat_bench.core.simulate import Simulation, simulate
from remat_bench.generators import ForwardOp, chain, training_graph
from remat_bench.generators.architectures import transformer
from remat_bench.methods.base import Role
from remat_bench.methods.chen import Chen
from remat_bench.methods.rotor import Rotor
from remat_bench.methods.rotor_dp import build_stages, decompositions, stage_model
from tests.bruteforce import any_order_optimum, staged_optimum
from tests.helpers import make_graph

UNITS = {"memory": "units", "duration": "units"}


def solve(graph: Graph, budget: int | None, time_limit: float | None = None, **params) -> tuple:
    """Rotor's result and its schedule's simulation (None without a schedule)."""
    result = Rotor().solve(graph, budget, time_limit, **Rotor.parse_params(params))
    return result, None if result.schedule is None else simulate(graph, result.schedule)


def recurrent(steps: int = 4, layers: int = 2) -> Graph:
    """A stack of ``layers`` recurrent cells unrolled over ``steps``: h_l,t = mix(sigmoid(W x + U h_l,t-1), h_l,t-1)."""
    ops = [ForwardOp(f"h{k}_0", "zeros", [], 2, 1) for k in range(layers)]
    for t in range(1, steps + 1):
        ops.append(ForwardOp(f"x{t}", "input", [], 2, 1))
        for k in range(layers):
            below = f"x{t}" if k == 0 else f"h{k - 1}_{t}"
            ops += [ForwardOp(f"ih{k}_{t}", "matmul", [below], 6, 8),
                    ForwardOp(f"hh{k}_{t}", "matmul", [f"h{k}_{t - 1}"], 6, 8),
                    ForwardOp(f"gate{k}_{t}", "sigmoid", [f"ih{k}_{t}", f"hh{k}_{t}"], 2, 1),
                    ForwardOp(f"h{k}_{t}", "mix", [f"gate{k}_{t}", f"h{k}_{t - 1}"], 2, 1)]
    ops.append(ForwardOp("head", "linear", [f"h{layers - 1}_{steps}"], 1, 2))
    return training_graph(ops, name="recurrent", units=UNITS)


def skip_graph(skip_memory: int = 1) -> Graph:
    """a -> b -> c -> d -> e, and e reads a too: a long skip."""
    ops = [ForwardOp("a", "layer", [], skip_memory, 1), ForwardOp("b", "layer", ["a"], 1, 1),
           ForwardOp("c", "layer", ["b"], 1, 1), ForwardOp("d", "layer", ["c"], 1, 1),
           ForwardOp("e", "layer", ["d", "a"], 1, 1)]
    return training_graph(ops, name="skip", units=UNITS)


def fits(sim: Simulation | None, budget: int) -> bool:
    return sim is not None and sim.valid and sim.peak <= budget


# ---------------------------------------------------------------------- the optimum on chains

# chain(n): least duration at each budget (units; none below 4): what the brute forces give, and rotor.
CHAIN_OPTIMUM = {3: {4: 11, 5: 10}, 4: {4: 16, 5: 14, 6: 13}, 5: {4: 22, 5: 18, 6: 17, 7: 16}}


@pytest.mark.parametrize("n", sorted(CHAIN_OPTIMUM))
def test_on_a_chain_rotor_reaches_the_brute_force_optimum_at_every_budget(n):
    g = chain(n)
    for budget in range(1, baseline(g).peak + 1):
        expected = CHAIN_OPTIMUM[n].get(budget)
        assert staged_optimum(g, budget) == expected
        if g.n <= 7:
            assert any_order_optimum(g, budget) == expected
        result, sim = solve(g, budget)
        if expected is None:
            assert result.solution_status is SolutionStatus.NO_SOLUTION and result.message
        else:
            assert fits(sim, budget) and sim.duration == expected == result.objective


@pytest.mark.parametrize("n, seed", [(4, 0), (5, 1), (5, 2)])
def test_on_heterogeneous_chains_rotor_reaches_the_brute_force_optimum(n, seed):
    g = chain(n, seed=seed)
    for budget in range(int(memory_floor(g).amount), baseline(g).peak + 1):
        _, sim = solve(g, budget)
        expected = staged_optimum(g, budget)
        assert (sim.duration if fits(sim, budget) else None) == expected, budget


def test_an_optimum_that_drops_a_subchains_input_is_outside_rotors_space():
    # chain(4, seed=4) at 38: the optimum (114) holds layer1 to recompute layer2, then drops it for
    # layer2's gradient and computes it a third time; rotor keeps a subchain's input until its
    # backward (a persistent schedule) and recomputes both once more (124).
    g = chain(4, seed=4)
    _, sim = solve(g, 38)
    assert fits(sim, 38) and sim.duration == 124
    assert staged_optimum(g, 38) == 114


@pytest.mark.parametrize("n", [3, 4, 5])
def test_at_min_rotor_reaches_the_least_peak(n):
    g = chain(n)
    least = min(b for b in range(1, baseline(g).peak + 1) if staged_optimum(g, b) is not None)
    result, sim = solve(g, None)
    assert result.solution_status is SolutionStatus.FEASIBLE and sim.valid and sim.peak == least == 4


@settings(max_examples=25, deadline=None)
@given(n=st.integers(2, 14), seed=st.integers(0, 10**6), fraction=st.floats(0, 1))
def test_on_random_chains_rotor_fits_and_is_never_slower_than_chen(n, seed, fraction):
    g = chain(n, seed=seed)
    floor, peak = memory_floor(g).amount, baseline(g).peak
    budget = int(floor + fraction * (peak - floor))
    _, sim = solve(g, budget)
    if sim is not None:
        assert fits(sim, budget)
    chen = Chen().solve(g, budget, None, **Chen.parse_params({}))
    if chen.solution_status is SolutionStatus.FEASIBLE:
        assert sim is not None and sim.duration <= simulate(g, chen.schedule).duration


# ---------------------------------------------------------------------- options: keeping some activations


def cheap_wide(steps: int = 3) -> Graph:
    """A recurrent step m_j = M(x_j-1) (1 unit, 10 s), a_j = A(m_j, x_j-1) (3 units, 1 s), x_j = X(a_j, m_j);
    its gradient reads a_j, m_j and x_j-1: a wide value, cheap to compute again from what the step keeps."""
    nodes, prev = [Node("x0", (), 1, 1)], "x0"
    for j in range(1, steps + 1):
        nodes += [Node(f"m{j}", (prev,), 1, 10), Node(f"a{j}", (f"m{j}", prev), 3, 1),
                  Node(f"x{j}", (f"a{j}", f"m{j}"), 1, 1)]
        prev = f"x{j}"
    nodes.append(Node("loss", (prev,), 1, 1, kind="backward"))
    grad = "loss"
    for j in range(steps, 0, -1):
        nodes.append(Node(f"g{j}", (grad, f"a{j}", f"m{j}", "x0" if j == 1 else f"x{j - 1}"), 1, 1,
                          kind="backward"))
        grad = f"g{j}"
    return Graph(nodes, name="cheap-wide", outputs=[grad])


def test_a_stage_may_keep_all_but_a_wide_value_cheap_to_compute_again():
    g = cheap_wide()
    [stages] = [d for d in decompositions(g, 100) if d.count == 4]  # x0, then a stage per step
    model = stage_model(g, stages, max_options=4)
    # A step's options: drop a_j (3 units), which B_j computes again from m_j and x_j-1 (1 s); or drop m_j
    # too (11 s). The last step's gradient reads x3 as well: its one option drops all three.
    assert [[sorted(g.ids[v] for v in o.dropped) for o in options] for options in model.options] == [
        [], [["a1"], ["a1", "m1"]], [["a2"], ["a2", "m2"]], [["a3", "m3", "x3"]]]
    assert [[(o.extra, o.u_back - model.u_back[j]) for o in options] for j, options in enumerate(model.options)] == [
        [], [(1, 1), (0, 11)], [(1, 1), (0, 11)], [(0, 12)]]
    # At 11 units rotor's own choices (keep a step whole or only its input) give 54 s; keeping m_j and x_j
    # and computing a1 and a2 again before their gradients gives the baseline's 41 s and two more: 43 s.
    for options, expected in ((0, 54), (4, 43)):
        result, sim = solve(g, 11, options=options)
        assert fits(sim, 11) and sim.duration == expected == result.objective
    assert solve(g, 17)[1].duration == baseline(g).duration == 41  # nothing computed again when all fits


def test_options_are_never_slower_at_the_same_budget_on_the_wide_step():
    g = cheap_wide(4)
    faster = []
    for budget in range(int(memory_floor(g).amount), baseline(g).peak + 1):
        _, plain = solve(g, budget, options=0)
        _, sim = solve(g, budget)
        assert plain is not None and fits(sim, budget) and sim.duration <= plain.duration, budget
        faster.append(sim.duration < plain.duration)
    assert sum(faster) >= len(faster) // 2  # strictly faster at most budgets, not merely as fast


@settings(max_examples=20, deadline=None)
@given(steps=st.integers(2, 5), layers=st.integers(1, 3), fraction=st.floats(0, 1))
def test_on_recurrent_stacks_every_schedule_with_options_is_valid_and_fits(steps, layers, fraction):
    g = recurrent(steps, layers)
    floor, peak = memory_floor(g).amount, baseline(g).peak
    budget = int(floor + fraction * (peak - floor))
    result, sim = solve(g, budget)
    if result.schedule is not None:
        assert fits(sim, budget) and result.objective == sim.duration


# ---------------------------------------------------------------------- stages and pinned values


def test_a_chain_has_a_stage_per_layer():
    [stages] = decompositions(chain(6), 100)
    assert stages.count == 6 and stages.cuts == (0, 1, 2, 3, 4) and not stages.pinned


def test_an_unrolled_recurrent_stack_has_a_stage_per_time_step():
    g = recurrent()
    stages = decompositions(g, 100)[0]
    assert stages.cuts == (0, 6, 15, 24, 33, 37) and not stages.pinned
    # Each boundary carries the two hidden states of one step (the first layer's, then the second's).
    assert [sorted(g.ids[v] for v in a) for a in stages.inputs] == [
        [], ["h0_0"], ["h0_1", "h1_0"], ["h0_2", "h1_1"], ["h0_3", "h1_2"], ["h0_4", "h1_3"], ["h1_4"]]
    # Each step's backward reads its own activations and the step before's hidden states.
    assert sorted(g.ids[v] for v in stages.backward[2]) == sorted(
        ["gate0_2_grad", "hh0_2_grad", "ih0_2_grad", "x2_grad", "gate1_1_grad", "hh1_1_grad", "ih1_1_grad",
         "h0_1_grad", "h1_0_grad"])


def test_a_value_read_beyond_the_next_stage_is_pinned_until_its_earliest_reader_is_done():
    g = skip_graph()
    stages = build_stages(g, [0, 1, 2, 3])
    a, e = g.index["a"], g.index["e"]
    # e reads a from 4 stages away; a's gradient (in stage 1, where b's is) reads e, its other reader.
    assert stages.pinned == {a, e}
    assert stages.release == {a: 1, e: 1}  # the backward of stage 1 is the last to read them
    assert g.ids[stages.backward[1][-1]] == "a_grad"
    # Without pinning, a's span leaves one cut (after a); pinning the long spans (a's, and b's, which a's
    # gradient reads with e) leaves a cut after every layer, or after a and b.
    assert [(d.cuts, sorted(g.ids[v] for v in d.pinned)) for d in decompositions(g, 100)] == [
        ((0,), []), ((0, 1, 2, 3), ["a", "b", "e"]), ((0, 1), ["a", "b"])]


def test_with_a_pinned_value_the_schedule_fits_and_computes_it_once():
    g = skip_graph()
    for budget in range(int(memory_floor(g).amount), baseline(g).peak + 1):
        result, sim = solve(g, budget)
        if sim is not None:
            assert fits(sim, budget)
            computed = [int(v) for k, v in zip(result.schedule.kinds, result.schedule.nodes) if k == 0]
            assert computed.count(g.index["a"]) == 1


@pytest.mark.parametrize("budget", [0.4, 0.5, 0.6, 0.8, 1.0])
def test_on_a_recurrent_graph_every_schedule_fits(budget):
    g = recurrent()
    amount = int(budget * baseline(g).peak)
    result, sim = solve(g, amount)
    assert result.solution_status is SolutionStatus.FEASIBLE and fits(sim, amount)
    if budget == 1.0:
        assert sim.duration == baseline(g).duration == 457  # every stage keeps its activations: nothing again


def test_through_the_evaluation_path_on_a_transformer():
    g = transformer(layers=3, width=32, seq=8, batch=2, heads=2, vocab=50)
    for budget in ("0.9", "0.75", "min"):
        # No limit and no bound: the any-order bound found in a share of a limit could call it optimal.
        r = run(g, "rotor", budget, time_limit=None, bound=False)
        assert r.status.value == "feasible", r.message
        assert r.simulation.valid and (r.budget is None or r.peak <= r.budget)


# ---------------------------------------------------------------------- applicability and limits


def test_skip_says_why_in_one_sentence():
    assert "no backward nodes" in Rotor.skip(make_graph({"a": [], "b": ["a"]}), 2)
    assert "fewer than 2 stages" in Rotor.skip(chain(1), 3)
    # A forward output stays resident to the end: it is pinned in every decomposition.
    nodes = [replace(node, memory=100) if node.id == "layer1" else node for node in chain(3).nodes]
    big = Graph(nodes, name="big-output", outputs=["layer1", "layer1_grad"])
    assert "exceed the budget" in Rotor.skip(big, 99)
    assert Rotor.skip(big, 120) is None and Rotor.skip(chain(3), 4) is None


def test_the_time_limit_is_honoured():
    result, sim = solve(recurrent(), 100, time_limit=0.0)
    assert result.termination is Termination.TIME_LIMIT and sim is None and result.message


def test_auto_runs_it_as_a_fast_member_after_the_millisecond_ones():
    assert Rotor.member is not None and Rotor.member.role is Role.FAST and Rotor.member.rank > 3
