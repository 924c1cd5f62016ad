"""rotor-offload (Beaumont, Eyraud-Dubois and Shilova 2021): rotor's chain DP with offloading, against rotor on a
link too slow to hide a copy, against the baseline on one fast enough to hide them all, and against a brute
force over every schedule of its space, each simulated."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remat_bench.core.baseline import baseline
from remat_bench.core.budget import memory_floor
from remat_bench.core.graph import Graph, Link, Transfer
from remat_bench.core.outcome import SolutionStatus, Termination
from remat_bench.core.schedule import COMPUTE, OFFLOAD, RELOAD
from remat_bench.core.simulate import Simulation, simulate
from remat_bench.generators import chain
from remat_bench.methods import get_method
from remat_bench.methods.rotor import Rotor
from remat_bench.methods.rotor_dp import ChainDP, decompositions
from remat_bench.methods.rotor_offload import OffloadModel, RotorOffload, offload_model, place_moves
from tests.helpers import make_graph
from tests.methods.test_rotor import recurrent

# chain(n): layer_j (1 unit, 1 long) reads layer_{j-1}; layer_j_grad (1 unit, 2 long) reads layer_j, layer_{j+1}
# and layer_{j+1}_grad. Rotor's stage j computes layer_{j+1} and layer_j_grad. Copying a layer out takes 1 at
# bandwidth 1 (one forward computation hides it) and back 2 at bandwidth 0.5 (one gradient hides it).
HIDES = Transfer(Link(1.0), Link(0.5))


def solve(graph: Graph, budget: int | None, time_limit: float | None = None, method: type[ChainDP] = RotorOffload,
          ) -> tuple:
    """The method's result and its schedule's simulation (None without a schedule)."""
    result = method().solve(graph, budget, time_limit, **method.parse_params({}))
    return result, None if result.schedule is None else simulate(graph, result.schedule)


def fits(sim: Simulation | None, budget: int) -> bool:
    return sim is not None and sim.valid and sim.peak <= budget


def words(graph: Graph, schedule) -> list[str]:
    return [" ".join(step) for step in schedule.steps(graph)]


# ---------------------------------------------------------------------- a brute force over the space


def _schedules(model: OffloadModel, p: int, x: int, s: int, t: int) -> Iterator[list[tuple]]:
    """Every schedule of subproblem (s, t) in rotor-offload's space (module docstring of rotor_offload),
    enumerated choice by choice: steps (kind, node), ("B", j) for stage j's backward and ("R", j, values)
    for values reloaded just before it."""
    f = int(t == model.K - 1)

    def forward(mode: str, j: int) -> list[tuple]:
        return [(COMPUTE, v) for v in model.nodes[mode][f][j]]

    def hidden(first: str) -> bool:  # with p, O_{s-1} leaves behind the first forward computation
        return not p or model.cost[first][f, s] >= model.out_all[s - 1]

    if p and not (model.moved_all[s - 1] and model.in_all[s - 1] <= model.u_back[s]):
        return
    if s == t:
        mode = "tail" if x else "leaf"
        if hidden(mode):
            yield [*forward(mode, t), ("B", t)]
        return
    if hidden("all"):
        for inner in _schedules(model, 0, x, s + 1, t):
            yield [*forward("all", s), *inner, ("B", s)]
        if model.moved_all[s]:
            moves = [(OFFLOAD, v) for v in model.moved_all[s]] + [("R", s + 1, model.moved_all[s])]
            for inner in _schedules(model, 1, x, s + 1, t):
                yield [*forward("all", s), *moves, *inner, ("B", s)]
    if hidden("sweep"):
        for c in range(s + 1, t + 1):
            rest = [step for j in range(s + 1, c) for step in forward("sweep", j)]
            heads = [[*forward("sweep", s), *rest]]
            window = float(sum(model.cost["sweep"][f, j] for j in range(s + 1, c)))
            if (c >= s + 2 and model.moved_ck[s] and window >= model.out_ck[s]
                    and model.in_ck[s] <= model.u_back[c]):
                moves = [(OFFLOAD, v) for v in model.moved_ck[s]] + [("R", c, model.moved_ck[s])]
                heads.append([*forward("sweep", s), *moves, *rest])
            for head in heads:
                for right in _schedules(model, 0, x, c, t):
                    for y in (0, 1):
                        for left in _schedules(model, 0, y, s, c - 1):
                            yield [*head, *right, *left]


def _steps(model: OffloadModel, schedule: list[tuple]) -> list[tuple[int, int]]:
    pending: dict[int, tuple[int, ...]] = {}
    steps: list[tuple[int, int]] = []
    for step in schedule:
        if step[0] == "R":
            pending[step[1]] = step[2]
        elif step[0] == "B":
            steps += [(RELOAD, v) for v in pending.pop(step[1], ())]
            steps += [(COMPUTE, v) for v in model.backward[step[1]]]
        else:
            steps.append(step)
    return steps


def brute_force(graph: Graph, budget: int) -> dict[tuple[bool, bool], int | float]:
    """The least simulated duration within ``budget`` over rotor-offload's space on the finest decomposition,
    by (offloads anything, recomputes anything); every schedule of the space is simulated and must be valid
    and never wait."""
    model = offload_model(graph, decompositions(graph, 100)[0])
    best: dict[tuple[bool, bool], int | float] = {}
    for schedule in _schedules(model, 0, 0, 0, model.K - 1):
        sim = simulate(graph, place_moves(graph, _steps(model, schedule)))
        assert sim.valid and sim.wait == 0, sim.violation
        key = (sim.offloads > 0, sim.recomputations > 0)
        if sim.peak <= budget and sim.duration < best.get(key, float("inf")):
            best[key] = sim.duration
    return best


def optimum(graph: Graph, budget: int) -> int | float | None:
    return min(brute_force(graph, budget).values(), default=None)


# ---------------------------------------------------------------------- rotor, the baseline, and in between


@pytest.mark.parametrize("n, seed", [(4, None), (6, None), (5, 1), (6, 2)])
def test_with_a_link_too_slow_to_hide_a_copy_it_is_rotor(n, seed):
    g = chain(n, seed=seed).with_transfer(Transfer(Link(0.001), Link(0.001)))
    for budget in range(int(memory_floor(g).amount), baseline(g).peak + 1):
        result, sim = solve(g, budget)
        rotor, rotor_sim = solve(g, budget, method=Rotor)
        if rotor.schedule is None:
            assert result.schedule is None and result.message
            continue
        assert words(g, result.schedule) == words(g, rotor.schedule)
        assert sim.duration == rotor_sim.duration and sim.offloads == 0


def test_with_a_link_that_hides_every_copy_it_runs_at_the_baselines_duration():
    g = chain(6).with_transfer(HIDES)
    assert (baseline(g).peak, baseline(g).duration) == (8, 19)
    result, sim = solve(g, 5)
    # layer1..layer3 leave behind the next forward computation and come back behind the gradient before
    # their readers'. Each gradient holds its two layers, the next gradient, the layer coming back and
    # itself: 5, the peak (layer_j_grad at j = 2, 3, 4, and layer5_grad with layer4 still held).
    assert words(g, result.schedule) == [
        "compute layer1", "compute layer2", "offload layer1", "compute layer3", "offload layer2", "compute layer4",
        "offload layer3", "compute layer5", "compute layer6", "compute loss", "compute layer6_grad", "free loss",
        "compute layer5_grad", "free layer6", "free layer6_grad", "reload layer3", "compute layer4_grad",
        "free layer5", "free layer5_grad", "reload layer2", "compute layer3_grad", "free layer4", "free layer4_grad",
        "reload layer1", "compute layer2_grad", "free layer3", "free layer3_grad", "compute layer1_grad",
        "free layer2", "free layer1", "free layer2_grad"]
    assert fits(sim, 5) and sim.duration == 19 == result.objective
    assert (sim.recomputations, sim.wait, sim.offloads, sim.reloads, sim.host_peak) == (0, 0, 3, 3, 3)
    assert optimum(g, 5) == 19
    # Rotor recomputes at 5 (22); at 4 a gradient with a layer coming back does not fit: rotor's 29.
    assert solve(g, 5, method=Rotor)[1].duration == 22
    assert solve(g, 4)[1].duration == solve(g, 4, method=Rotor)[1].duration == 29


@pytest.mark.parametrize("transfer", [Transfer(Link(0.99), Link(0.5)), Transfer(Link(1.0), Link(0.49))])
def test_a_copy_a_hair_too_long_for_its_window_is_not_taken(transfer):
    # layer1's copy out ends within layer3 only at bandwidth 1; its copy back within layer2_grad only at 0.5.
    g = chain(6).with_transfer(transfer)
    _, sim = solve(g, 5)
    assert sim.duration == 22 == solve(g, 5, method=Rotor)[1].duration and sim.wait == 0


def test_an_optimum_that_offloads_one_layer_and_recomputes_another():
    # chain(5, seed=5): layer1..layer5 of 7, 9, 1, 9, 5 units and 6, 7, 3, 10, 1 long; gradients as long as
    # 12, 14, 6, 20, 2. At 32 rotor recomputes layer1..layer3 (95). With copies at 2 units per time unit,
    # layer2 (9 units: 4.5 each way) leaves behind layer4 (10) and comes back behind layer3_grad (6), and only
    # layer1 is computed again (6): 82 + 6 = 88. layer1 cannot leave: the one forward computation after
    # layer2, layer3 (3), is shorter than its copy (3.5); kept, it would make layer4_grad's step 36.
    g = chain(5, seed=5).with_transfer(Transfer(Link(2.0), Link(2.0)))
    assert baseline(g).duration == 82
    result, sim = solve(g, 32)
    steps = words(g, result.schedule)
    assert steps[:5] == ["compute layer1", "compute layer2", "free layer1", "compute layer3", "offload layer2"]
    assert steps.index("reload layer2") == steps.index("compute layer3_grad") - 1
    assert steps.count("compute layer1") == 2 and sim.recomputations == 1 and sim.offloads == 1
    assert fits(sim, 32) and sim.duration == 88 == result.objective and sim.wait == 0
    assert solve(g, 32, method=Rotor)[1].duration == 95
    # Over the whole space: 95 without a copy, 88 with one and a recomputation, nothing without recomputing.
    assert brute_force(g, 32) == {(False, True): 95, (True, True): 88}


@settings(max_examples=30, deadline=None)
@given(n=st.integers(2, 4), seed=st.integers(0, 10**6), out=st.sampled_from([0.3, 0.5, 1, 2, 8]),
       back=st.sampled_from([0.3, 0.5, 1, 2, 8]), latency=st.sampled_from([0, 0.5, 2]), fraction=st.floats(0, 1))
def test_on_small_chains_it_reaches_the_brute_force_optimum_of_its_space(n, seed, out, back, latency, fraction):
    g = chain(n, seed=seed).with_transfer(Transfer(Link(out, latency), Link(back, latency)))
    floor, peak = memory_floor(g).amount, baseline(g).peak
    budget = int(floor + fraction * (peak - floor))
    result, sim = solve(g, budget)
    assert (sim.duration if fits(sim, budget) else None) == optimum(g, budget)
    if sim is not None:
        assert sim.wait == 0 and sim.duration == result.objective


@settings(max_examples=25, deadline=None)
@given(n=st.integers(2, 12), seed=st.integers(0, 10**6), bandwidth=st.floats(0.05, 50),
       latency=st.floats(0, 3), fraction=st.floats(0, 1))
def test_every_schedule_it_finds_is_valid_within_budget_and_never_slower_than_rotor(n, seed, bandwidth, latency,
                                                                                     fraction):
    g = chain(n, seed=seed).with_transfer(Transfer(Link(bandwidth, latency), Link(bandwidth / 2, latency)))
    floor, peak = memory_floor(g).amount, baseline(g).peak
    budget = int(floor + fraction * (peak - floor))
    result, sim = solve(g, budget)
    if result.schedule is not None:
        assert result.solution_status is SolutionStatus.FEASIBLE and fits(sim, budget) and sim.wait == 0
    rotor, rotor_sim = solve(g, budget, method=Rotor)
    if rotor.schedule is not None:
        assert sim is not None and sim.duration <= rotor_sim.duration


@pytest.mark.parametrize("budget", [0.5, 0.8])
def test_on_a_recurrent_graph_it_offloads_and_fits(budget):
    g = recurrent()
    g = g.with_transfer(Transfer(Link(float(g.memory.sum() / g.duration.sum())), Link(1.0)))
    amount = int(budget * baseline(g).peak)
    _, sim = solve(g, amount)
    _, rotor_sim = solve(g, amount, method=Rotor)
    assert fits(sim, amount) and sim.offloads and sim.wait == 0 and sim.duration < rotor_sim.duration


# ---------------------------------------------------------------------- applicability


def test_it_offloads_and_is_registered():
    assert get_method("rotor-offload") is RotorOffload and RotorOffload.offloads
    # A fast member of auto (it runs where the graph has a host link), weighing as rotor does.
    assert RotorOffload.member is not None and RotorOffload.member.weight == Rotor.member.weight == 3.0


def test_without_a_host_link_or_a_chain_it_says_why_in_one_sentence():
    why = RotorOffload.skip(chain(4), 5)
    assert why.startswith("method 'rotor-offload' copies activations to host memory and back, and graph 'chain-4' "
                          "has no host link")
    result, _ = solve(chain(4), 5)
    assert result.termination is Termination.NOT_APPLICABLE and result.message == why
    assert "no backward nodes" in RotorOffload.skip(make_graph({"a": [], "b": ["a"]}, transfer=HIDES), 2)
    assert RotorOffload.skip(chain(1).with_transfer(HIDES), 3).startswith(
        "method 'rotor-offload' plans a chain of stages")
    assert RotorOffload.skip(chain(3).with_transfer(HIDES), 4) is None


def test_the_time_limit_is_honoured():
    g = recurrent().with_transfer(HIDES)
    result, sim = solve(g, 100, time_limit=0.0)
    assert result.termination is Termination.TIME_LIMIT and sim is None and result.message
