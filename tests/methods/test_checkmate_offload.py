"""checkmate-offload, the offload bound and the offload floor, against hand-worked chains and brute force."""

from __future__ import annotations

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from remat_bench.core.baseline import baseline
from remat_bench.core.budget import memory_floor
from remat_bench.core.graph import Graph, Link, Node, Transfer
from remat_bench.core.simulate import simulate
from remat_bench.methods import get_method
from remat_bench.methods.checkmate import Checkmate
from remat_bench.methods.checkmate_offload import CheckmateOffload, OffloadModel
from remat_bench.toolkit.bound import any_order_bound
from remat_bench.toolkit.offload_bound import offload_bound, offload_floor
from tests.bruteforce import staged_optimum
from tests.helpers import dags, make_graph
from tests.offload_bruteforce import TooLarge, offload_least_peak, offload_optimum, staged_offload_optimum

FAST = Transfer(Link(1.0), Link(1.0))  # a copy of m units takes m
SLOW = Transfer(Link(1.0, 3.0), Link(1.0, 3.0))  # m + 3
CRAWL = Transfer(Link(0.1), Link(0.1))  # 10 m


def seven(link: Transfer | None) -> Graph:
    """a (10 units, 5 s) read by b and, at the end, by g; d (10 units) in between; c and f take 10 s.

    Budget 12 is the floor (g with a, f and itself; c's stage with a and b): a cannot stay through d's
    and e's stages (a + c + d = 21, a + d + e = 21). Computed again before g it costs 5 s (34 s, the
    any-order bound). With a link of 1 unit per second it goes out at c's start (10 s, hidden by c) and
    comes back at f's start (10 s, hidden by f): 29 s, every node computed once."""
    return make_graph({"a": [], "b": ["a"], "c": ["b"], "d": ["c"], "e": ["d"], "f": ["e"], "g": ["a", "f"]},
                      memory={"a": 10, "b": 1, "c": 1, "d": 10, "e": 1, "f": 1, "g": 1},
                      duration={"a": 5, "b": 1, "c": 10, "d": 1, "e": 1, "f": 10, "g": 1},
                      outputs=["g"], transfer=link)


def solve(graph: Graph, budget: int):
    method = CheckmateOffload()
    return method.solve(graph, budget, None, **method.parse_params({}))


def steps_of(graph: Graph, schedule, node: str) -> list[str]:
    return [word for word, v, *_ in schedule.steps(graph) if v == node]


def test_offloading_beats_recomputation_on_a_hand_worked_chain():
    g = seven(FAST)
    assert offload_floor(g) == memory_floor(g).amount == 12
    assert any_order_bound(g, 12).value == 34 == staged_optimum(g.with_transfer(None), 12)
    r = solve(g, 12)
    assert r.status.value == "optimal" and r.objective == 29
    sim = simulate(g, r.schedule)
    assert sim.valid, sim.violation
    # a [0,5], b [5,6]; a's copy out at c's start [6,16] while c runs [6,16]; d [16,17], e [17,18]; a's copy
    # back at f's start [18,28] while f runs [18,28]; g [28,29]. No computation waits.
    assert (sim.duration, sim.peak, sim.wait, sim.recomputations) == (29, 12, 0, 0)
    assert steps_of(g, r.schedule, "a") == ["compute", "offload", "reload", "free"]
    kinds = [word for word, *_ in r.schedule.steps(g)]
    out, back = kinds.index("offload"), kinds.index("reload")
    assert (sim.step_start[out], sim.step_end[out], sim.step_start[back], sim.step_end[back]) == (6, 16, 18, 28)
    # Every node once: no schedule is faster, and the bound says so.
    assert offload_bound(g, 12)[0] == 29


def test_a_link_too_slow_for_the_stage_windows_recomputes():
    g = seven(SLOW)  # a's copy takes 13 s each way: longer than c's and f's 10 s
    r = solve(g, 12)
    assert r.status.value == "optimal" and r.objective == 34
    sim = simulate(g, r.schedule)
    assert (sim.valid, sim.duration, sim.peak, sim.recomputations, sim.reloads) == (True, 34, 12, 1, 0)
    assert steps_of(g, r.schedule, "a") == ["compute", "free", "compute", "free"]
    # Outside the stages a could still go out and back: 5 + 13 + 13 = 31 s for its computation and the two
    # copies, above the 29 s of computing every node once, below the 34 s of computing a twice.
    value, why = offload_bound(g, 12)
    assert value == 31 and "copied out and back" in why
    # The same in bytes and seconds (a GB for a unit, 1/1024 s for a second; the link alike): the bound's
    # program holds both, scaled for HiGHS.
    big = Graph([Node(v.id, v.inputs, v.memory * 10**9, v.duration / 1024) for v in g.nodes], name="bytes",
                outputs=g.outputs, transfer=Transfer(Link(1024e9, 3 / 1024), Link(1024e9, 3 / 1024)))
    assert offload_bound(big, 12 * 10**9)[0] == 31 / 1024
    # Slower still (100 s each way), moving a loses to computing it again, and the bound proves 34 optimal.
    crawl = seven(CRAWL)
    r = solve(crawl, 12)
    assert r.objective == 34 and simulate(crawl, r.schedule).duration == 34
    assert offload_bound(crawl, 12)[0] == 34


def test_without_a_host_link_it_does_not_apply_and_is_registered():
    g = seven(None)
    assert CheckmateOffload.skip(g, 12) == (
        "method 'checkmate-offload' copies values to the host and back, and graph 'test' has no host link; give it "
        "one (solve --link, or a graph with a 'transfer')")
    assert CheckmateOffload.skip(seven(FAST), 12) is None
    assert get_method("checkmate-offload") is CheckmateOffload
    assert CheckmateOffload.offloads
    assert offload_bound(g, 12)[0] == 34  # nothing can be copied: the any-order bound
    value, why = offload_bound(g, 11)
    assert value is None and why.startswith("the budget is below the offload floor 12")


def test_a_model_too_large_for_the_run_is_refused_before_it_is_built():
    import pytest

    from remat_bench.core.errors import ModelTooLargeError
    from remat_bench.methods.base import SolveContext

    method = CheckmateOffload()
    method.context = SolveContext(model_memory=2**16)  # 64 KiB: the model needs about 116 KiB
    with pytest.raises(ModelTooLargeError, match=r"the checkmate-offload model of this graph \(7 nodes, 7 edges\)"):
        method.solve(seven(FAST), 12, None, **method.parse_params({}))


def test_the_floor_is_below_what_recomputation_reaches_and_brute_force_reaches_it():
    """Outputs a (10) and c (1) read x (5) and b (5): without copies the last output computed has its input
    beside both outputs (16); a can wait on the host while b and c are computed, so 15, a's computation
    with x, is the least peak, and the floor."""
    nodes = [Node("x", (), 5, 1), Node("a", ("x",), 10, 1), Node("b", (), 5, 10), Node("c", ("b",), 1, 1)]
    g = Graph(nodes, name="two-outputs", outputs=["a", "c"], transfer=Transfer(Link(10.0), Link(10.0)))
    assert offload_floor(g) == 15
    peak, schedule = offload_least_peak(g, 10)
    assert peak == 15 and simulate(g, schedule).reloads == 1
    assert offload_least_peak(g.with_transfer(None), 10)[0] == 16


@st.composite
def linked(draw, min_nodes: int = 3, max_nodes: int = 5) -> Graph:
    """A chain whose last node also reads the first (a value held across it), with at most one more edge
    back per node, sizes and durations 1..10, and a link of 0.5 to 4 units per time unit each way."""
    n = draw(st.integers(min_nodes, max_nodes))
    nodes = []
    for i in range(n):
        ins = {i - 1} if i else set()
        if i == n - 1:
            ins.add(0)
        elif i >= 2:
            ins |= set(draw(st.lists(st.integers(0, i - 2), max_size=1)))
        nodes.append(Node(id=f"v{i}", inputs=tuple(f"v{j}" for j in sorted(ins)), memory=draw(st.integers(1, 10)),
                          duration=draw(st.integers(1, 10))))
    links = [Link(draw(st.sampled_from([0.5, 1.0, 2.0, 4.0])), draw(st.sampled_from([0.0, 1.0]))) for _ in range(2)]
    return Graph(nodes, name="linked", transfer=Transfer(*links))


@st.composite
def offload_graphs(draw) -> Graph:
    """`linked`, or any small DAG (`tests.helpers.dags`) with a link."""
    if draw(st.booleans()):
        return draw(linked())
    g = draw(dags(min_nodes=3, max_nodes=5, training=None))
    links = [Link(draw(st.sampled_from([0.5, 1.0, 2.0, 4.0])), draw(st.sampled_from([0.0, 1.0]))) for _ in range(2)]
    return g.with_transfer(Transfer(*links))


def brute_force(search, *args):
    """``search(*args)``; an example whose search space is too large to walk is left out."""
    try:
        return search(*args)
    except TooLarge:
        assume(False)


def budget_of(g: Graph, share: float) -> int:
    """A budget ``share`` of the way from the offload floor to the baseline peak."""
    low, high = offload_floor(g), baseline(g).peak
    return low + int(share * max(0, high - low))


@settings(max_examples=120, deadline=None)
@given(offload_graphs(), st.floats(0.0, 0.4))
def test_the_bound_never_exceeds_the_brute_force_optimum(g, share):
    budget = budget_of(g, share)
    max_steps = 2 * g.n + 2
    best = brute_force(offload_optimum, g, budget, max_steps)
    value, why = offload_bound(g, budget)
    assert value is not None, why  # at or above the floor
    if best is not None:  # the least duration over schedules of max_steps steps: at least the true optimum
        assert value <= best[0], (why, best[1])


@settings(max_examples=120, deadline=None)
@given(offload_graphs(), st.floats(0.0, 0.4))
def test_the_milp_is_the_staged_optimum_its_schedule_does_what_it_says_and_never_beats_the_bound(g, share):
    budget = budget_of(g, share)
    want = staged_offload_optimum(g, budget)
    r = solve(g, budget)  # no time limit: the solver proves its answer
    if want is None:
        assert r.status.value == "infeasible", r.message
        return
    assert r.status.value == "optimal", r.message
    assert r.objective == want
    sim = simulate(g, r.schedule)
    assert sim.valid, sim.violation
    assert (sim.duration, sim.wait) == (r.objective, 0)
    assert sim.peak <= budget
    value, _ = offload_bound(g, budget)
    assert value is not None and sim.duration >= value
    max_steps = 2 * g.n + 2
    if len(r.schedule) <= max_steps:  # within the brute force's space
        best = brute_force(offload_optimum, g, budget, max_steps)
        assert best is not None and sim.duration >= best[0]


@settings(max_examples=60, deadline=None)
@given(offload_graphs())
def test_the_floor_never_exceeds_the_least_peak_of_any_schedule(g):
    found = brute_force(offload_least_peak, g, 2 * g.n + 2)
    assert found is not None  # every node once, each freed after its last reader
    assert offload_floor(g) <= found[0]


@settings(max_examples=40, deadline=None)
@given(offload_graphs(), st.floats(0.0, 0.4))
def test_a_schedule_that_copies_nothing_is_a_point_of_the_model_at_its_duration(g, share):
    """Checkmate's optimum, encoded (the warm start's path): a feasible point whose cost is its duration, so the
    model's optimum is never above it."""
    budget = budget_of(g, share)
    method = Checkmate()
    r = method.solve(g, budget, None, **method.parse_params({"warm_start": "false"}))
    assume(r.status.value == "optimal")
    om = OffloadModel.build(g, budget)
    x = om.encode(r.schedule)
    assert x is not None
    assert om.model.violation(x) <= 1e-9
    assert om.objective(x) == r.objective
    assert abs(float(om.model.cost @ x) * om.dur_scale - r.objective) <= 1e-9 * max(1, r.objective)
    assert solve(g, budget).objective <= r.objective
