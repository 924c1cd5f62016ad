"""The production offload rules, ``offload-hide`` and ``offload-all``, and the gaps and moves they are built from
(remat_bench.toolkit.offload), on a training chain whose plans are worked out by hand."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remat_bench.core.baseline import baseline, baseline_schedule
from remat_bench.core.budget import memory_floor
from remat_bench.core.graph import Graph, Link, Node, Transfer
from remat_bench.core.simulate import simulate
from remat_bench.methods import get_method
from remat_bench.methods.base import SolutionStatus
from remat_bench.methods.offload_all import OffloadAll
from remat_bench.methods.offload_hide import OffloadHide
from remat_bench.toolkit.offload import Gap, Move, OffloadPlan, held_gaps, insert_moves
from tests.helpers import dags, make_graph

# Copies of 100 units: 1 time unit each way (every gap of two computations or more hides them) ...
FAST = Transfer(Link(100.0), Link(100.0))
# ... or 10 out and 50 in: 60 in all, more than the longest gap's 50 (nothing hides).
SLOW = Transfer(Link(10.0), Link(2.0))


def chain(transfer: Transfer | None = FAST) -> Graph:
    """Four forward values f1..f4 (100 units each), a loss L and gradients g4, g3, g2 (1 unit each), every
    computation 10 long; g4 reads f3, g3 reads f2, g2 reads f1.

    The baseline (f1 f2 f3 f4 L g4 g3 g2) peaks at L, 401 (every f and L), and takes 80; f1 is held from f2
    to g2 (50 of computations between), f2 from f3 to g3 (30), f3 from f4 to g4 (10).
    """
    spec = [("f1", [], 100, "forward"), ("f2", ["f1"], 100, "forward"), ("f3", ["f2"], 100, "forward"),
            ("f4", ["f3"], 100, "forward"), ("L", ["f4"], 1, "backward"), ("g4", ["L", "f3"], 1, "backward"),
            ("g3", ["g4", "f2"], 1, "backward"), ("g2", ["g3", "f1"], 1, "backward")]
    return Graph([Node(v, tuple(ins), m, 10, kind=kind) for v, ins, m, kind in spec], name="chain",
                 transfer=transfer)


def words(graph: Graph, schedule) -> list[str]:
    return [" ".join(step) for step in schedule.steps(graph)]


# Both rules at 300 with fast copies: f1 out after f2, back before g3; f2 out after f3, back before g4.
HIDDEN = ["compute f1", "compute f2", "offload f1", "compute f3", "offload f2", "compute f4", "compute L",
          "free f4", "reload f2", "compute g4", "free f3", "free L", "reload f1", "compute g3", "free f2",
          "free g4", "compute g2", "free f1", "free g3"]


def test_the_gaps_of_the_baseline_and_a_move_written_into_it():
    g = chain()
    base = baseline_schedule(g)
    assert (baseline(g).peak, baseline(g).duration) == (401, 80)
    # steps: 0 f1, 1 f2, 2 f3, 3 f4, 4 L, 5 free f4, 6 g4, ...; f4 and L are read by the next computation.
    assert held_gaps(g, base) == [Gap(2, 3, 6, 100, 10), Gap(1, 2, 9, 100, 30), Gap(0, 1, 12, 100, 50)]
    moved = insert_moves(base, [Move(Gap(0, 1, 12, 100, 50), 9), Move(Gap(1, 2, 9, 100, 30), 6)])
    assert words(g, moved) == HIDDEN
    with pytest.raises(ValueError, match="moves nothing"):
        held_gaps(g, moved)


def test_a_hidden_reload_is_the_latest_one_the_computations_hide():
    plan = OffloadPlan.of(chain(), baseline_schedule(chain()))
    f1, f2, f3 = Gap(0, 1, 12, 100, 50), Gap(1, 2, 9, 100, 30), Gap(2, 3, 6, 100, 10)
    # f1 out [20, 21]; back before g2 (issued at 70) would end at 71, after g2's start; before g3 (60) it ends at 61.
    assert plan.copy_out_end(f1) == 21
    assert plan.hidden_reload(f1) == 9
    assert plan.hidden_reload(f2) == 6
    # f3's gap holds one computation (L), which starts as f3's copy out starts: nothing to take it from.
    assert plan.hidden_reload(f3) is None
    assert OffloadPlan.of(chain(SLOW), baseline_schedule(chain(SLOW))).hidden_reload(f1) is None


def test_offload_hide_with_fast_copies_reaches_the_budget_without_overhead():
    g = chain()
    result = OffloadHide().solve(g, 300, None)
    assert result.solution_status is SolutionStatus.FEASIBLE
    sim = simulate(g, result.schedule)
    # f1 is away from f4, L and g4, f2 from L; the peak is f3's and f4's step (three f's, one of them leaving).
    assert sim.valid and (sim.peak, sim.duration, sim.wait, sim.recomputations) == (300, 80, 0, 0)
    assert words(g, result.schedule) == HIDDEN
    assert result.stats["level"] == 401  # the baseline itself, no recomputation


def test_offload_all_with_fast_copies_brings_back_f3():
    g = chain()
    result = OffloadAll().solve(g, 300, None)
    assert result.solution_status is SolutionStatus.FEASIBLE
    sim = simulate(g, result.schedule)
    assert sim.valid and (sim.peak, sim.duration, sim.wait, sim.offloads) == (300, 80, 0, 2)
    assert words(g, result.schedule) == HIDDEN
    assert result.stats["offloaded_first"] == 3  # f3 too, brought back: without it L still fits (f3 f4 L, 201)


def test_offload_hide_with_slow_copies_recomputes_instead():
    """Nothing hides, so the answer is recompute-only. At 300 at most one of f1, f2, f3 may be held at L
    (f4 and L take 101), so two of them are freed and computed again, 10 each: 100 is the least
    duration, which the schedule meets."""
    g = chain(SLOW)
    result = OffloadHide().solve(g, 300, None)
    assert result.solution_status is SolutionStatus.FEASIBLE
    sim = simulate(g, result.schedule)
    assert sim.valid and sim.peak <= 300
    assert (sim.duration, sim.offloads, sim.recomputations) == (100, 0, 2)


def test_offload_all_with_slow_copies_pays_waits():
    """Offload all three (peak 300 at f3 and f4), bring back f3 (L holds f3 f4 L, 201); f2 and f1 cannot be
    brought back (L: 301). The reloads are then moved as early as the budget allows: f2's before g4 (before L
    it would join f3 f4 L: 301), f1's before g3 (before g4 with f2's: f3 L f2 f1 g4, 302).

    f1 out [20, 30], f2 out [30, 40]; f2 back [50, 100], f1 back behind it [100, 150]; g4 [50, 60], g3 waits
    for f2 until 100 [100, 110], g2 for f1 until 150 [150, 160]: 80 of waits."""
    g = chain(SLOW)
    result = OffloadAll().solve(g, 300, None)
    assert result.solution_status is SolutionStatus.FEASIBLE
    sim = simulate(g, result.schedule)
    assert sim.valid and (sim.peak, sim.duration, sim.wait, sim.recomputations) == (300, 160, 80, 0)
    assert (sim.host_peak, sim.to_host, sim.to_device) == (200, 200, 200)
    assert words(g, result.schedule) == [
        "compute f1", "compute f2", "offload f1", "compute f3", "offload f2", "compute f4", "compute L", "free f4",
        "reload f2", "compute g4", "free f3", "free L", "reload f1", "compute g3", "free f2", "free g4",
        "compute g2", "free f1", "free g3"]


def test_offload_all_says_what_peak_offloading_everything_reached():
    result = OffloadAll().solve(chain(), 250, None)
    assert result.solution_status is SolutionStatus.NO_SOLUTION and result.schedule is None
    assert result.message == "offloading every activation (3) reached a peak of 300, above the budget 250"


@pytest.mark.parametrize("name", ["offload-hide", "offload-all"])
def test_registered_and_skipped_without_a_host_link(name):
    cls = get_method(name)
    assert cls.offloads and cls.production and not cls.supports_min
    assert cls.skip(chain(), 300) is None
    assert cls.skip(chain(None), 300) == ("graph 'chain' has no host link ('transfer'); import it with "
                                          "--device-profile or give --link")


def test_without_backward_nodes_every_held_value_is_offloaded():
    """a (100) is held from b to d; x, c, e, h run between, 10 each. The baseline peaks at e: a c e, 160.
    a out after b [20, 21]; back before h (issued at 50, ends 51, before d at 60): away from c and e; h's
    step is then the peak: a e h, 120."""
    g = make_graph({"a": [], "b": ["a"], "x": ["b"], "c": ["x"], "e": ["c"], "h": ["e"], "d": ["a", "h"]},
                   memory={"a": 100, "b": 1, "x": 1, "c": 50, "e": 10, "h": 10, "d": 1}, duration=10, transfer=FAST)
    assert baseline(g).peak == 160
    assert held_gaps(g, baseline_schedule(g)) == [Gap(0, 1, 10, 100, 40)]
    for cls in (OffloadAll, OffloadHide):
        result = cls().solve(g, 120, None)
        sim = simulate(g, result.schedule)
        assert sim.valid and (sim.peak, sim.duration, sim.wait, sim.offloads) == (120, 70, 0, 1)
        assert words(g, result.schedule) == [
            "compute a", "compute b", "offload a", "compute x", "free b", "compute c", "free x", "compute e",
            "free c", "reload a", "compute h", "free e", "compute d", "free a", "free h"]


@st.composite
def training_chains(draw, max_depth: int = 6) -> Graph:
    """A forward chain f0..f(k-1), a loss, and gradients g(k-1)..g0, each reading the gradient before it, the
    forward value before f_i (f0 for g0) and perhaps one more forward value: every forward value is held
    from the forward pass into the backward one, across gaps of several computations."""
    k = draw(st.integers(2, max_depth))
    size, time = st.integers(1, 10), st.integers(1, 10)
    nodes = [Node(f"f{i}", (f"f{i - 1}",) if i else (), draw(size), draw(time)) for i in range(k)]
    nodes.append(Node("loss", (f"f{k - 1}",), 1, draw(time), kind="backward"))
    grad = "loss"
    for i in reversed(range(k)):
        extra = draw(st.lists(st.sampled_from([f"f{j}" for j in range(k)]), max_size=1))
        reads = {grad, f"f{max(i - 1, 0)}", *extra}
        nodes.append(Node(f"g{i}", tuple(sorted(reads)), draw(size), draw(time), kind="backward"))
        grad = f"g{i}"
    return Graph(nodes, name="training-chain")


LINKS = st.sampled_from([FAST, SLOW, Transfer(Link(20.0), Link(20.0)), Transfer(Link(2.0, 0.5), Link(1.0, 0.5)),
                         Transfer(Link(3.0, 1.0), Link(1.5, 2.0))])


def found_valid_within(g: Graph, budget: int) -> None:
    """Each method's schedule, whenever it says it found one, is valid and within ``budget``; offload-hide's
    computations never wait."""
    for cls in (OffloadHide, OffloadAll):
        result = cls().solve(g, budget, None)
        if result.solution_status.found_schedule:
            sim = simulate(g, result.schedule)
            assert sim.valid, sim.violation
            assert sim.peak <= budget
            assert result.objective == sim.duration
            if cls is OffloadHide:  # it keeps only the copies the computations hide
                assert sim.wait <= 1e-9 * sim.duration
        else:
            assert result.schedule is None and result.message


def budgets(g: Graph) -> st.SearchStrategy[int]:
    """From the memory floor (no schedule that keeps or recomputes goes below it) to the baseline peak."""
    peak = baseline(g).peak
    return st.integers(min(memory_floor(g).amount, peak), peak)


@settings(max_examples=60, deadline=None)
@given(dags(min_nodes=2, max_nodes=10, training=True, workspace=True), st.data(), LINKS)
def test_on_random_training_graphs_a_schedule_found_is_valid_and_within_the_budget(g, data, transfer):
    g = g.with_transfer(transfer)
    found_valid_within(g, data.draw(budgets(g)))


@settings(max_examples=60, deadline=None)
@given(training_chains(), st.data(), LINKS)
def test_on_random_training_chains_a_schedule_found_is_valid_and_within_the_budget(g, data, transfer):
    g = g.with_transfer(transfer)
    found_valid_within(g, data.draw(budgets(g)))
