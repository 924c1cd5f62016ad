"""Why every solver stopped, as `remat-bench solve --json` reports it (docs/design.md section 6).

Every method says its termination from what its solver said (CP-SAT's status, HiGHS's model
status, a heuristic's end, a refusal): never ``unknown``, and never guessed from the wall time.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from remat_bench.app.catalog import method_names
from remat_bench.app.cli import main

SMALL = "chain-16-train"  # 33 nodes, training: every method but policy and torch-budget applies
HARD = "torch-resnet50-b4"  # 619 nodes: the exact methods cannot even build their models in a second
NOT_APPLICABLE = {"policy", "torch-budget"}  # no aten operators or PyTorch model behind the chain
# The chain has no host link ('transfer') to offload over.
NOT_APPLICABLE |= {"offload-hide", "offload-all", "rotor-offload", "checkmate-offload"}

# At a limit long enough for every method to end on its own on the small graph at 0.8.
LONG = {
    "none": "proven",  # the baseline is its one schedule: it does not fit, proven in its space
    "reorder": "proven",  # the any-order bound proves that no order fits
    "checkmate": "proven", "moccasin": "proven", "monet": "proven", "auto": "proven",
    **dict.fromkeys(("greedy", "chen", "dtr", "kusumoto", "fenghuang", "twremat", "knapsack", "checkmate-lp",
                     "shave"), "converged"),
    "rotor": "proven",  # its schedule meets the any-order bound: the pipeline proves it optimal
    **dict.fromkeys(NOT_APPLICABLE, "not_applicable"),
}
# At 0.05 s (the any-order bound takes its half second first): what each may say, by what it does.
SHORT = {
    "none": frozenset({"proven"}),
    "greedy": frozenset({"converged"}),  # one eviction pass, which polls no deadline at a budget
    **dict.fromkeys(("chen", "dtr", "kusumoto", "fenghuang", "twremat", "knapsack", "checkmate-lp", "shave"),
                    frozenset({"converged", "time_limit"})),
    "rotor": frozenset({"proven", "converged", "time_limit"}),
    **dict.fromkeys(("reorder", "checkmate", "moccasin", "monet", "auto"), frozenset({"proven", "time_limit"})),
    **dict.fromkeys(NOT_APPLICABLE, frozenset({"not_applicable"})),
}


def solve(graph: str, method: str, budget: str, limit: float) -> dict:
    r = CliRunner().invoke(main, ["solve", graph, "-m", method, "-b", budget, "-t", str(limit), "--json"])
    assert r.exit_code in (0, 1), r.output
    return json.loads(r.output)


def test_every_solver_is_in_the_tables():
    assert set(LONG) == set(SHORT) == set(method_names())


@pytest.mark.parametrize("name", method_names())
def test_with_a_long_limit_every_solver_says_how_it_ended(name):
    run = solve(SMALL, name, "0.8", 30)
    assert run["termination"] == LONG[name], run["message"]
    if run["termination"] == "proven":
        assert run["status"] in ("optimal", "infeasible")
    if run["termination"] == "not_applicable":
        assert run["status"] == "unsupported"


@pytest.mark.parametrize("name", method_names())
def test_with_a_short_limit_every_solver_still_says_why_it_stopped(name):
    run = solve(SMALL, name, "0.8", 0.05)
    assert run["termination"] in SHORT[name], (run["status"], run["message"])


@pytest.mark.parametrize("name, expected", [
    ("checkmate", "time_limit"),  # too little time to build its MILP: stopped before it began
    ("checkmate-lp", "time_limit"),
    ("moccasin", "time_limit"),  # CP-SAT's model not built in time: the best candidate, cut short
    ("monet", "time_limit"),
    ("auto", "time_limit"),
    ("kusumoto", "resource_limit"),  # more lower sets than max_lower_sets: a refusal for size
    ("policy", "converged"),  # a rule, applied: nothing to search
])
def test_a_very_short_limit_on_a_harder_graph(name, expected):
    run = solve(HARD, name, "0.6", 1)
    assert run["termination"] == expected, (run["status"], run["message"])
