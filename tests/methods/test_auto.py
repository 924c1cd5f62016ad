"""auto: the portfolio against the brute force, its members' failures, and exact methods given hints."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from remat_bench.app import evaluate as evaluate_module
from remat_bench.app import portfolio as auto_module
from remat_bench.app.evaluate import run_source
from remat_bench.app.portfolio import Auto
from remat_bench.core.cleanup import clean_up, place_frees
from remat_bench.core.errors import MethodError
from remat_bench.core.graph import Graph, Node
from remat_bench.core.simulate import simulate
from remat_bench.methods.base import Membership, Method, MethodResult, Role, SolveContext, Status
from remat_bench.methods.checkmate import Checkmate
from remat_bench.methods.moccasin import Moccasin
from tests.bruteforce import any_order_optimum, staged_optimum
from tests.helpers import with_runner
from tests.methods.test_checkmate import budgets, random_graph


def solve_auto(g: Graph, budget, time_limit: float = 10.0, **params) -> MethodResult:
    method = Auto()
    return method.solve(g, budget, time_limit, **method.parse_params({"jobs": 1, **params}))


def cleaned_duration(g: Graph, schedule) -> int:
    return simulate(g, clean_up(g, schedule)[0]).duration


CASES = [(seed, b) for seed in range(6) for b in budgets(random_graph(seed))]


@pytest.mark.parametrize("seed, budget", CASES)
def test_auto_is_the_fastest_member_and_meets_the_brute_force_where_it_is_proven(seed, budget):
    g = random_graph(seed)
    best = any_order_optimum(g, budget)
    staged = staged_optimum(g, budget)
    r = solve_auto(g, budget)
    members = {m["method"]: m for m in r.stats["members"]}
    if best is None:  # no schedule at all fits: the any-order bound proves it, or nothing is found
        assert r.status in (Status.INFEASIBLE, Status.NO_SOLUTION) and r.schedule is None
        return
    assert r.status.found_schedule, r.message
    sim = simulate(g, r.schedule)
    assert sim.valid and sim.peak <= budget
    duration = cleaned_duration(g, r.schedule)
    assert duration >= best  # nothing beats the brute force over every schedule
    found = [m["duration"] for m in members.values() if m["status"] in ("optimal", "feasible")]
    assert duration == min(found)
    if members["checkmate"]["status"] == "optimal":  # proven in the staged space: auto is at least as fast
        assert staged is not None and members["checkmate"]["duration"] == staged and duration <= staged
    if r.status is Status.OPTIMAL:  # proven by the any-order bound: the brute force's value
        assert duration == best
    bounds = {b["source"]: b for b in r.stats["bounds"]}
    assert bounds["any-order bound"]["holds_for"] == "every schedule"
    assert bounds["any-order bound"]["value"] <= best


def test_the_exact_members_side_by_side_in_child_processes_give_the_same_answer():
    from remat_bench.core.baseline import baseline
    from remat_bench.generators import chain

    g = chain(5)  # a training graph: checkmate runs beside moccasin (see the next test)
    b = int(0.8 * baseline(g).peak)
    alone = solve_auto(g, b, jobs=1, members="moccasin,checkmate")
    side_by_side = solve_auto(g, b, jobs=2, members="moccasin,checkmate")
    assert side_by_side.status == alone.status
    assert cleaned_duration(g, side_by_side.schedule) == cleaned_duration(g, alone.schedule)
    # Both optimal, or (once one meets the any-order bound) the other stopped for it: nothing is faster.
    for run in (alone, side_by_side):
        exact = {m["method"]: m for m in run.stats["members"] if m["role"] == "exact"}
        ran = [m for m in exact.values() if m["status"] != "not_run"]
        assert ran and all(m["status"] == "optimal" for m in ran), exact
        first = ran[0]["method"]
        assert all(m["message"].endswith(f"{first}'s schedule is proven optimal")
                   for m in exact.values() if m["status"] == "not_run"), exact


def test_without_backward_nodes_checkmate_leaves_the_cores_to_moccasin_order_free():
    g = random_graph(3)
    r = solve_auto(g, budgets(g)[2], jobs=2, members="moccasin,checkmate")
    exact = {m["method"]: m for m in r.stats["members"] if m["role"] == "exact"}
    assert exact["checkmate"]["status"] == "not_run" and "no backward nodes" in exact["checkmate"]["message"]
    assert exact["moccasin"]["status"] in ("optimal", "feasible", "infeasible")
    assert exact["moccasin"]["space"] == "any order, at most 3 retention intervals per node and 2n events"


class Crash(Method):
    name = "crash"
    description = "a member that fails"

    def solve(self, graph, budget, time_limit, **params):
        raise RuntimeError("boom")


def test_a_member_that_crashes_is_recorded_and_the_others_best_stands(monkeypatch):
    from remat_bench import methods

    monkeypatch.setitem(methods.BUILTIN, "crash", f"{__name__}:Crash")
    g = random_graph(1)
    b = budgets(g)[-1]
    r = solve_auto(g, b, members="crash,moccasin")
    members = {m["method"]: m for m in r.stats["members"]}
    assert members["crash"]["status"] == "error" and members["crash"]["message"] == \
        "method 'crash' failed: RuntimeError: boom"  # the evaluation path's wording, as solve's
    assert r.status.found_schedule and r.stats["winner"] == "moccasin"
    assert cleaned_duration(g, r.schedule) == members["moccasin"]["duration"]


class Sleepy(Method):
    name = "sleepy"
    description = "an exact member that overruns its time limit"
    member = Membership(Role.EXACT)

    def solve(self, graph, budget, time_limit, **params):
        import time

        time.sleep(60)
        raise AssertionError("never reached: the child is stopped first")


def test_a_member_past_its_time_is_stopped_and_recorded(monkeypatch):
    import time

    from remat_bench import methods

    monkeypatch.setitem(methods.BUILTIN, "sleepy", f"{__name__}:Sleepy")  # the child loads it by its place
    monkeypatch.setattr(evaluate_module, "grace_s", lambda limit: 0.5)  # the one grace rule, shortened
    # No goal: moccasin's optimum would otherwise stop sleepy as soon as it is found.
    monkeypatch.setattr(Auto, "_goals", lambda self, graph, budget: self.context)
    g = random_graph(2)
    b = budgets(g)[-1]
    start = time.perf_counter()
    r = solve_auto(g, b, time_limit=3.0, members="moccasin,sleepy", jobs=2)
    assert time.perf_counter() - start < 45  # it ended: stopped past its limit, not after its 60 s (load aside)
    members = {m["method"]: m for m in r.stats["members"]}
    assert members["sleepy"]["status"] == "error"
    # The evaluation path's own sentence (no exception is raised to say it any more).
    assert members["sleepy"]["message"] == "still running 0.5 s past its time limit; stopped"
    assert members["moccasin"]["status"] == "optimal"
    assert r.status.found_schedule


def test_members_are_checked_before_anything_runs():
    with pytest.raises(MethodError, match="did you mean 'greedy'"):
        Auto.parse_params({"members": "greedyy,moccasin"})
    with pytest.raises(MethodError, match="cannot name 'auto'"):
        Auto.parse_params({"members": "auto"})


def test_budget_min_gives_the_least_peak_any_member_reaches():
    g = random_graph(4)
    r = solve_auto(g, None)
    peaks = [m["peak"] for m in r.stats["members"] if "peak" in m and m["status"] in ("optimal", "feasible")]
    assert r.status.found_schedule and simulate(g, r.schedule).peak == min(peaks)


def _unstaged_graph() -> tuple[Graph, int]:
    """A graph and budget where some order beats every input-order staged schedule."""
    for seed in range(200):
        g = random_graph(seed)
        for b in budgets(g):
            best, staged = any_order_optimum(g, b), staged_optimum(g, b)
            if best is not None and (staged is None or staged > best):
                return g, b
    raise AssertionError("no such graph among the seeds")


def _best_schedule(g: Graph, budget: int):
    """A schedule at the brute-force optimum over every schedule, rebuilt by trying every order's
    compute sequence through reorder's search is costly: here, the order-free Moccasin finds it."""
    m = with_runner(Moccasin())
    r = m.solve(g, budget, 30, **m.parse_params({"order": "free", "max_intervals": 4, "threads": 1}))
    assert r.status.found_schedule
    return r.schedule


@pytest.mark.parametrize("cls", [Moccasin, Checkmate])
def test_an_exact_method_returns_an_offered_schedule_faster_than_its_own_space_allows(cls):
    g, b = _unstaged_graph()
    offered = _best_schedule(g, b)
    fast = cleaned_duration(g, offered)
    staged = staged_optimum(g, b)
    assert staged is None or fast < staged
    method = cls()
    method.context = SolveContext(runner=run_source, hints=[("outside", offered)])
    r = method.solve(g, b, 30, **method.parse_params({"threads": 1}))
    assert r.status is Status.FEASIBLE and r.stats["returned"] == "hint:outside"
    assert cleaned_duration(g, r.schedule) == fast
    assert r.stats["search_status"] == ("infeasible" if staged is None else "optimal")
    # keep_best off: the formulation's own answer, as the staged brute force has it.
    own = method.solve(g, b, 30, **method.parse_params({"threads": 1, "keep_best": False}))
    assert (own.status is Status.INFEASIBLE) if staged is None else (own.objective == staged)


def test_moccasin_phase_2_starts_from_the_fastest_hint_that_fits():
    g = random_graph(5)
    b = budgets(g)[-2]
    nodes = np.arange(g.n, dtype=np.int64)
    baseline_like = place_frees(g, nodes, np.zeros(g.n, dtype=np.int64))
    method = with_runner(Moccasin())
    method.context = SolveContext(runner=run_source, hints=[("offered", baseline_like)])
    r = method.solve(g, b, 30, **method.parse_params({"threads": 1, "hints": "all"}))
    if simulate(g, baseline_like).peak <= b:
        assert r.stats["phase1_time_s"] == 0.0 and r.stats["phase2_hint"] in r.stats["hints"]
    assert r.status.found_schedule


def test_auto_is_registered_and_listed_with_its_parameters():
    from remat_bench.app.catalog import get_method, method_names

    assert "auto" in method_names() and get_method("auto") is Auto
    assert {p.name for p in Auto.params} == {"members", "jobs", "fast_share", "polish", "model_memory"}


def test_a_tiny_graph_with_one_node():
    g = Graph([Node(id="a", inputs=(), memory=3, duration=2)], name="one")
    r = solve_auto(g, 3)
    assert r.status is Status.OPTIMAL and cleaned_duration(g, r.schedule) == 2


def test_the_exact_members_do_not_run_when_a_fast_one_meets_the_any_order_bound():
    from remat_bench.generators import chain

    g = chain(8)
    b = simulate(g, place_frees(g, np.arange(g.n, dtype=np.int64), np.zeros(g.n, dtype=np.int64))).peak
    r = solve_auto(g, b)  # the baseline's peak: an order fits, reorder (or greedy) is optimal at once
    members = {m["method"]: m for m in r.stats["members"]}
    assert r.status is Status.OPTIMAL and cleaned_duration(g, r.schedule) == g.total_duration
    assert members["moccasin"]["status"] == members["checkmate"]["status"] == "not_run"


@pytest.mark.parametrize("seed, budget", [(s + 400, b) for s in range(4) for b in budgets(random_graph(s + 400, n=6))])
def test_moccasin_free_starts_from_an_offered_order_and_still_meets_the_brute_force(seed, budget, monkeypatch):
    from remat_bench.methods import moccasin as moccasin_module
    from remat_bench.toolkit import order_search

    g = random_graph(seed, n=6)
    want = any_order_optimum(g, budget)
    order = order_search.best_order(g, None, order_search.Deadline(5.0)).order
    offered = place_frees(g, np.asarray(order, dtype=np.int64), np.zeros(g.n, dtype=np.int64))

    def no_search(*args, **kwargs):
        raise AssertionError("the order was offered: no search for one")

    monkeypatch.setattr(order_search, "best_order", no_search)
    method = with_runner(Moccasin())
    method.context = SolveContext(runner=run_source, hints=[("reorder", offered)])
    r = method.solve(g, budget, 30, **method.parse_params({"order": "free", "max_intervals": 3, "threads": 1}))
    assert moccasin_module._offered_order(g, [("reorder", offered)]).order == [int(v) for v in order]
    if want is None:
        assert not r.status.found_schedule
        return
    assert r.status.found_schedule, r.message
    sim = simulate(g, r.schedule)
    assert sim.valid and sim.peak <= budget and cleaned_duration(g, r.schedule) == want
    if simulate(g, offered).peak > budget:
        assert r.stats["order_from"] == "hint:reorder"


def test_an_offered_schedule_with_recomputation_is_not_an_order():
    from remat_bench.methods.moccasin import _offered_order

    g = random_graph(1)
    from remat_bench.core.schedule import Schedule

    steps = [("compute", v) for v in range(g.n)] + [("free", 0), ("compute", 0)]  # node 0 twice
    twice = Schedule.from_steps(steps)
    assert simulate(g, twice).valid
    once = place_frees(g, np.arange(g.n, dtype=np.int64), np.zeros(g.n, dtype=np.int64))
    assert _offered_order(g, [("twice", twice)]) is None
    answer = _offered_order(g, [("twice", twice), ("once", once)])
    assert answer is not None and answer.stats["from"] == "hint:once" and answer.peak == simulate(g, once).peak


def test_moccasin_in_auto_takes_the_order_free_path_without_backward_nodes_or_when_reorder_lowered_the_peak():
    from remat_bench.core.baseline import baseline
    from remat_bench.generators import chain

    assert Moccasin.member_params(random_graph(2), None) == {"order": "free"}  # no backward nodes
    g = chain(6)  # a training graph: forward, then backward
    assert len(g.backward_indices)
    peak = baseline(g).peak
    schedule = place_frees(g, np.arange(g.n, dtype=np.int64), np.zeros(g.n, dtype=np.int64))
    lower = auto_module.Member("reorder", "fast", peak=peak - 1, schedule=schedule)
    same = auto_module.Member("reorder", "fast", peak=peak, schedule=schedule)
    unfound = auto_module.Member("reorder", "fast", peak=peak - 1)  # no schedule: nothing to start from
    assert Moccasin.member_params(g, auto_module._any_order_peak([lower])) == {"order": "free"}
    assert Moccasin.member_params(g, auto_module._any_order_peak([same])) == {}
    assert Moccasin.member_params(g, auto_module._any_order_peak([unfound])) == {}
    # Checkmate keeps its stages' order (the deferred one only where the input order's backward cannot fit).
    assert Checkmate.member_params(g, auto_module._any_order_peak([lower])) == {"order": "auto"}
    assert Moccasin.member_params(g, None) == {}
    # Only members that may leave the input order count: greedy's lower peak keeps the staged model.
    assert auto_module._any_order_peak([auto_module.Member("greedy", "fast", peak=peak - 1, schedule=schedule)]) is None


def test_the_polish_undoes_a_members_recomputation_by_reordering_and_names_whose_schedule_it_was():
    """dtr frees x for y's chain and computes x again for c (+55.6% after clean-up); computing y's
    chain first leaves room to hold x: the brute-force optimum, with no recomputation."""
    from tests.helpers import needs_reordering

    g = needs_reordering()
    method = Auto()
    method.context = SolveContext()
    plain = method.solve(g, 7, 10, **method.parse_params({"members": "dtr", "polish": 0}))
    assert simulate(g, plain.schedule).duration == 14 and plain.stats["winner"] == "dtr"
    r = method.solve(g, 7, 10, **method.parse_params({"members": "dtr"}))
    sim = simulate(g, r.schedule)
    assert sim.valid and sim.peak <= 7 and sim.duration == any_order_optimum(g, 7) == 9
    assert r.status is Status.OPTIMAL and r.stats["winner"] == "polish (dtr)"
    polish = next(m for m in r.stats["members"] if m["method"] == "polish")
    assert polish["duration"] == 9 and polish["returned"] == "dtr" and polish["message"].startswith("1 recomputation")


def test_a_polish_that_fails_is_recorded_and_the_members_answer_stands(monkeypatch):
    from tests.helpers import needs_reordering

    def boom(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(auto_module, "drop_with_reorder", boom)
    g = needs_reordering()
    method = Auto()
    method.context = SolveContext()
    r = method.solve(g, 7, 10, **method.parse_params({"members": "dtr"}))
    assert simulate(g, r.schedule).duration == 14 and r.stats["winner"] == "dtr"
    polish = next(m for m in r.stats["members"] if m["method"] == "polish")
    # The polish runs through the evaluation path, which words every method's failure alike.
    assert polish["status"] == "error" and polish["message"].startswith("method 'polish' failed: RuntimeError: boom")


def test_a_member_s_status_is_the_status_of_its_run_and_not_run_is_said_so():
    from remat_bench.app.portfolio import Member

    g = random_graph(1)
    run = run_source("greedy", g, budgets(g)[-1], 10, {})
    member = Member.of_run(run, "fast", 0.1)
    assert member.status is run.status and member.as_dict()["status"] == run.status.value
    waiting = Member("moccasin", "exact", message="greedy's schedule is proven optimal")
    assert waiting.status is None
    assert waiting.as_dict() == {"method": "moccasin", "role": "exact", "status": "not_run", "seconds": 0.0,
                                 "message": "greedy's schedule is proven optimal"}


def test_torch_budget_is_a_member_on_a_graph_imported_from_pytorch_and_says_why_not_elsewhere():
    """Issue 33: PyTorch's own planner among the members, in a child process beside the others, its schedule
    offered to the exact members when it ends first; on a graph not imported from PyTorch it is recorded with
    the reason it does not apply."""
    from pathlib import Path

    from remat_bench.app import pipeline
    from remat_bench.core.graph_io import load_graph
    from remat_bench.toolkit.bound_cache import BoundCache
    from tests.needs_torch import torch  # noqa: F401 (torch, or a failure saying how to install it)

    shipped = Path(__file__).resolve().parents[2] / "graphs"
    gpt = load_graph(shipped / "torch-gpt-b8.json")  # PyTorch's partitioner fits it at 0.7
    # Only it and greedy: with every member, knapsack proves its schedule optimal first and the rest stop.
    run = pipeline.run(gpt, "auto", "0.7", 40, {"jobs": 1, "members": "torch-budget,greedy"}, bounds=BoundCache())
    member = next(m for m in run.stats["members"] if m["method"] == "torch-budget")
    # What holds whatever the machine's load lets the member reach in its share of the 40 s (a busy machine's
    # run ended no_solution after 34.6 s): it ran beside greedy, and said how it ended.
    assert (member["status"] in ("feasible", "optimal")
            or (member["status"], member["termination"]) == ("no_solution", "time_limit")), member
    assert run.status.found_schedule  # greedy's schedule at least
    if member["status"] in ("feasible", "optimal"):
        # Its search run to its end alone (no time limit: the same answer on any machine) is never behind the
        # same search on a share of the time, and auto is never behind the member.
        alone = pipeline.run(gpt, "torch-budget", "0.7", None, bounds=BoundCache())
        assert member["overhead_pct"] >= alone.overhead_pct - 1e-9
        assert run.duration <= member["duration"]
    chain = load_graph(shipped / "chain-16-train.json")
    other = pipeline.run(chain, "auto", "0.8", 10, {"jobs": 1}, bounds=BoundCache())
    refused = next(m for m in other.stats["members"] if m["method"] == "torch-budget")
    assert refused["status"] == "unsupported" and "was not imported from PyTorch" in refused["message"]


def test_torch_budget_beside_the_others_is_stopped_when_the_members_time_is_up(monkeypatch):
    """torch-budget runs beside the other members from the start; one that has not ended when the members'
    time is up is stopped there and recorded as cut short by the time limit, without holding the answer."""
    import time
    from pathlib import Path

    from remat_bench.app import pipeline
    from remat_bench.core.graph_io import load_graph
    from remat_bench.methods.torch_budget import TorchBudget
    from remat_bench.toolkit.bound_cache import BoundCache
    from tests.needs_torch import torch  # noqa: F401

    def endless(self, graph, budget, time_limit, **params):
        time.sleep(3600)

    monkeypatch.setattr(TorchBudget, "solve", endless)
    monkeypatch.setattr(TorchBudget, "member", dataclasses.replace(TorchBudget.member, beside_s=1.0))
    gpt = load_graph(Path(__file__).resolve().parents[2] / "graphs" / "torch-gpt-b8.json")
    start = time.perf_counter()
    run = pipeline.run(gpt, "auto", "0.7", 6, {"jobs": 1, "members": "greedy,torch-budget"}, bounds=BoundCache())
    assert time.perf_counter() - start < 60  # it ended: the sleeping member was stopped (not its 3,600 s)
    member = next(m for m in run.stats["members"] if m["method"] == "torch-budget")
    assert member["status"] == "no_solution" and member["termination"] == "time_limit", member
    assert member["message"] == "stopped: the members' time ran out"
    assert run.stats["winner"] == "greedy" and run.status.found_schedule


def test_a_solver_model_above_the_memory_auto_allows_is_refused_and_said_so():
    """Checkmate's MILP grows with the square of the nodes (12.8 GiB on a 3,486-node decoder): auto refuses a
    member's model above ``model_memory`` before building it, and the member's message says why."""
    from pathlib import Path

    from remat_bench.app import pipeline
    from remat_bench.core.graph_io import load_graph
    from remat_bench.methods.checkmate_model import check_fits
    from remat_bench.toolkit.bound_cache import BoundCache

    g = load_graph(Path(__file__).resolve().parents[2] / "graphs" / "chain-16-train.json")
    need = check_fits(g.n, g.num_edges, "Checkmate")["est_bytes"]
    small = f"{need // 2}B"
    run = pipeline.run(g, "auto", "0.5", 10, {"jobs": 1, "members": "checkmate", "model_memory": small},
                       bounds=BoundCache())
    member = next(m for m in run.stats["members"] if m["method"] == "checkmate")
    assert member["status"] == "unsupported" and "a model may take in this run" in member["message"], member
    assert member["termination"] == "resource_limit"
    roomy = pipeline.run(g, "auto", "0.5", 10, {"jobs": 1, "members": "checkmate", "model_memory": "none"},
                         bounds=BoundCache())
    member = next(m for m in roomy.stats["members"] if m["method"] == "checkmate")
    assert member["status"] in ("feasible", "optimal"), member
    with pytest.raises(MethodError, match="must be a size such as 2GiB"):
        Auto.parse_params({"model_memory": "lots"})


def test_torch_budget_does_not_run_when_the_members_time_is_too_short_for_it():
    from pathlib import Path

    from remat_bench.app import pipeline
    from remat_bench.core.graph_io import load_graph
    from remat_bench.toolkit.bound_cache import BoundCache

    gpt = load_graph(Path(__file__).resolve().parents[2] / "graphs" / "torch-gpt-b8.json")
    run = pipeline.run(gpt, "auto", "0.7", 5, {"jobs": 1, "members": "greedy,torch-budget"}, bounds=BoundCache())
    member = next(m for m in run.stats["members"] if m["method"] == "torch-budget")
    assert member["status"] == "not_run", member
    assert re.match(r"not run: the members' 4\.[0-5] s are less than the 30 s PyTorch's planner", member["message"])


class Late(Method):
    """A fast member whose first run is cut short by its share and whose second finds the baseline."""

    name = "late"
    description = "a fast member that needs a second run"
    member = Membership(Role.FAST)
    runs = 0
    cut_short_runs = 1  # how many of its runs end with the time limit

    def solve(self, graph, budget, time_limit, **params):
        from remat_bench.core.baseline import baseline_schedule
        from remat_bench.core.outcome import SolutionStatus, Termination

        Late.runs += 1
        if Late.runs <= Late.cut_short_runs:
            return MethodResult(SolutionStatus.NO_SOLUTION, solve_time_s=0.0, termination=Termination.TIME_LIMIT,
                                message="the time limit ran out first")
        return MethodResult(SolutionStatus.FEASIBLE, baseline_schedule(graph), solve_time_s=0.0,
                            termination=Termination.CONVERGED)


def test_a_fast_member_cut_short_runs_again_with_the_time_left_and_its_second_answer_counts(monkeypatch):
    from remat_bench import methods

    monkeypatch.setitem(methods.BUILTIN, "late", f"{__name__}:Late")
    monkeypatch.setattr(Late, "runs", 0)
    g = random_graph(1)
    peak = simulate(g, place_frees(g, np.arange(g.n), np.zeros(g.n, dtype=np.int64))).peak
    r = solve_auto(g, peak, members="late")
    members = {m["method"]: m for m in r.stats["members"]}
    assert Late.runs == 2 and members["late"]["runs"] == 2 and members["late"]["status"] == "feasible"
    assert r.status.found_schedule and r.stats["cut_short"] == [] and r.stats["winner"] == "late"
    assert r.message == "the fastest schedule is late's"


def test_the_cut_short_members_are_named_in_the_answer(monkeypatch):
    from remat_bench import methods

    monkeypatch.setitem(methods.BUILTIN, "late", f"{__name__}:Late")
    monkeypatch.setattr(Late, "runs", 0)
    monkeypatch.setattr(Late, "cut_short_runs", 2)  # in both rounds
    g = random_graph(1)
    r = solve_auto(g, budgets(g)[-1], members="late")
    assert Late.runs == 2 and r.stats["cut_short"] == ["late"]
    assert r.message.endswith("; cut short by their time: late")


@pytest.mark.parametrize("fraction", [0.8, 0.7])
def test_on_a_recurrent_network_auto_is_never_behind_a_fast_member_run_alone(fraction):
    # Every fast member ends in well under a second here, far from the limit, alone and inside auto: auto's
    # answer is at least as fast as each one's. Left out: the exact members and reorder (CP-SAT: what they
    # find at a limit depends on the machine) and the polish (it stops at its share of the limit only).
    from remat_bench.app.evaluate import evaluate
    from remat_bench.core.budget import parse_budget
    from remat_bench.generators import generate
    from remat_bench.methods import get_method

    g = generate("recurrent", seq=6, layers=2, batch=16, width=64)
    budget = parse_budget(str(fraction), g)
    fast = [name for name, member in auto_module._roster() if member.role is Role.FAST and member.share is None
            and member.beside_s is None and get_method(name).skip(g, budget.amount) is None]
    assert {"greedy", "dtr", "shave", "rotor", "chen", "twremat", "knapsack", "kusumoto", "fenghuang"} <= set(fast)
    auto = evaluate(g, Auto, budget, 600, {"members": ",".join(fast), "polish": 0}, bound=False)
    assert auto.status.found_schedule and auto.stats["cut_short"] == []
    found = 0
    for name in fast:
        method = get_method(name)
        alone = evaluate(g, method, budget, 600, dict(method.member.params), bound=False)
        if alone.status.found_schedule:
            found += 1
            assert auto.duration <= alone.duration, name
    assert found >= 3
