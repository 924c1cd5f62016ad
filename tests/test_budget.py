"""Budget parsing and the memory floor (docs/design.md section 5)."""

from __future__ import annotations

import pytest

from remat_bench.app.pipeline import run
from remat_bench.core.budget import memory_floor, parse_budget
from remat_bench.core.errors import BudgetError
from remat_bench.core.graph_io import load_graph
from tests.helpers import make_graph, paper_graph


@pytest.fixture(scope="module")
def vgg():
    return load_graph(paper_graph("checkmate_vgg16_train"))


@pytest.mark.parametrize(
    "text, amount",
    [
        ("0.8", 12660087193),
        ("80%", 12660087193),
        ("80 %", 12660087193),
        ("1", 15825108992),
        ("12GiB", 12 * 2**30),
        ("12GB", 12 * 10**9),
        ("12 gib", 12 * 2**30),
        ("1.2e10", 12_000_000_000),
        ("15825108992", 15825108992),
        ("1.5KiB", 1536),
    ],
)
def test_budget_forms(vgg, text, amount):
    assert parse_budget(text, vgg).amount == amount


def test_min_budget(vgg):
    b = parse_budget("min", vgg)
    assert b.is_min and b.amount is None


@pytest.mark.parametrize("text", ["abc", "0", "-1", "12XB", "%", "1e", ""])
def test_bad_budgets(vgg, text):
    with pytest.raises(BudgetError):
        parse_budget(text, vgg)


def test_floor_of_vgg16_is_0_831_of_baseline(vgg):
    floor = memory_floor(vgg)
    assert floor.node == "block1_conv1_backward"
    assert floor.amount == 13153337344
    assert round(floor.amount / 15825108992, 3) == 0.831


def test_floor_counts_workspace_and_fixed_memory():
    g = make_graph({"a": [], "b": ["a"]}, memory={"a": 5, "b": 7}, fixed_memory=3)
    assert memory_floor(g).amount == 15


def test_below_floor_is_infeasible_at_once(vgg):
    r = run(vgg, "greedy", "0.8")
    assert r.status.value == "infeasible"
    assert r.exit_code == 1
    assert "block1_conv1_backward" in r.message and "memory floor (83.1%, 12.25 GiB)" in r.message
    assert "no budget below 0.84 of the baseline peak can fit" in r.message
    assert r.solve_time_s == 0.0


def test_the_peak_bound_is_the_floor_or_every_output_held_beside_the_last_ones_inputs():
    from remat_bench.core.budget import peak_lower_bound
    from remat_bench.core.graph import Graph, Node

    # Three outputs of 5 from one input of 4 (not an output): at the last output's computation the
    # other two are resident (10), with its input (4) and itself (5): 19, above the floor (4 + 5 = 9).
    g = Graph([Node(id="x", inputs=(), memory=4, duration=1),
               *[Node(id=f"o{i}", inputs=("x",), memory=5, duration=1) for i in range(3)]],
              name="outputs", outputs=["o0", "o1", "o2"])
    bound = peak_lower_bound(g)
    assert bound.amount == 19 and "outputs at the end" in bound.reason
    assert memory_floor(g).amount == 9
    # And no schedule goes below it: the brute force over every schedule finds none at 18.
    from tests.bruteforce import any_order_optimum

    assert any_order_optimum(g, 18) is None and any_order_optimum(g, 19) is not None
