"""The bound cache under edited entries: a cached bound is a claim, believed only as far as it can be
checked (`remat_bench.toolkit.bound_cache.checked_bound` on reading it, greedy's schedule before a run
uses it: `remat_bench.app.evaluate.checked_any_order`), and computed again otherwise."""

from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner

from remat_bench.app import evaluate, pipeline
from remat_bench.app.cli import main
from remat_bench.core.budget import memory_floor, peak_lower_bound
from remat_bench.core.graph_io import load_graph
from remat_bench.core.outcome import Termination
from remat_bench.toolkit.bound import any_order_bound
from remat_bench.toolkit.bound_cache import BoundCache
from tests.helpers import SHIPPED, make_graph

CHAIN = SHIPPED / "chain-16-train.json"
BUDGET = 14  # 77.8% of the baseline peak: the bound is 53 (49 computed once, 4 more), chen takes 57, greedy 53


@pytest.fixture(scope="module")
def chain():
    return load_graph(CHAIN)


@pytest.fixture(scope="module")
def genuine(chain, tmp_path_factory):
    """The folder of a cache holding the real bound of the chain at `BUDGET`, and its entry."""
    folder = tmp_path_factory.mktemp("bounds")
    bound, from_cache = BoundCache(str(folder)).get(chain, BUDGET, 30.0)
    assert bound.value == 53 and not from_cache
    (entry,) = folder.glob("*.json")
    return folder, json.loads(entry.read_text())


def forged(genuine, tmp_path, edit) -> str:
    """A copy of the genuine cache with its entry passed through ``edit`` (it changes the dict in place)."""
    folder, entry = genuine
    shutil.copytree(folder, tmp_path / "bounds")
    data = json.loads(json.dumps(entry))
    edit(data)
    (path,) = (tmp_path / "bounds").glob("*.json")
    path.write_text(json.dumps(data))
    return str(tmp_path / "bounds")


def set_value(value):
    def edit(data):
        data["bound"]["value"] = value
    return edit


def set_field(field, value):
    def edit(data):
        data["bound"][field] = value
    return edit


def set_entry(field, value):
    def edit(data):
        data[field] = value
    return edit


# ---------------------------------------------------------------------- what the cache checks on reading


def test_the_genuine_entry_is_believed(chain, genuine, tmp_path):
    folder = forged(genuine, tmp_path, lambda data: None)
    bound, from_cache = BoundCache(folder).get(chain, BUDGET, 30.0)
    assert from_cache and bound == BoundCache(folder).peek(chain, BUDGET)
    assert (bound.value, bound.termination) == (53, Termination.PROVEN)
    assert list(bound.recomputed) == genuine[1]["bound"]["recomputed"] == ["layer3", "layer4", "layer6", "layer11"]


@pytest.mark.parametrize("value", ["57", [57], {"v": 57}, True, 10**400, 1e9, -1e9, 48, 99, 53.0, None],
                         ids=repr)
def test_a_value_no_bound_of_this_graph_takes_is_not_believed(chain, genuine, tmp_path, value):
    # 49 is the durations' sum, so every bound lies in 49..98 and is an integer; None (no schedule fits)
    # is believed only below a peak no schedule goes under, and greedy fits 14.
    assert chain.min_total_duration == 49 and BUDGET >= peak_lower_bound(chain).amount
    folder = forged(genuine, tmp_path, set_value(value))
    assert BoundCache(folder).peek(chain, BUDGET) is None


@pytest.mark.parametrize("text", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_a_value_that_is_not_finite_is_not_believed(chain, genuine, tmp_path, text):
    folder = forged(genuine, tmp_path, set_value(12345))
    (path,) = (tmp_path / "bounds").glob("*.json")
    path.write_text(path.read_text().replace("12345", text))
    assert BoundCache(folder).peek(chain, BUDGET) is None


@pytest.mark.parametrize("edit", [
    set_field("value", 57),  # 49 + the durations of the 4 values it says are recomputed is 53
    set_field("termination", "bogus"), set_field("termination", ["proven"]), set_field("termination", None),
    set_field("termination", "converged"),  # the trivial bound, at a budget: only above bound.MAX_NODES
    set_field("recomputed", ["no such node"]), set_field("recomputed", [1, 2]), set_field("recomputed", "layer3"),
    set_field("recomputed", ["layer3", "layer3", "layer4", "layer6"]),
    set_field("prefix_sizes", [0]), set_field("prefix_sizes", [10**6]), set_field("prefix_sizes", ["3"]),
    set_field("cuts", -1), set_field("cuts", "5"), set_field("cuts", 5.5), set_field("cuts", True),
    set_field("recompute_cuts", None), set_field("solve_time_s", -1.0), set_field("solve_time_s", "1.3"),
    set_field("order_peak_at_least", "15"), set_field("order_peak_at_least", -15),
    set_field("no_order_fits", "yes"), set_field("no_order_fits", 1),
    set_entry("effort", "30"), set_entry("effort", -1), set_entry("effort", None), set_entry("budget", 15),
    set_entry("graph", "0" * 64), set_entry("bound", [53]), set_entry("bound", None),
], ids=lambda edit: "-".join(str(c.cell_contents) for c in edit.__closure__))
def test_a_field_of_the_wrong_kind_or_range_is_not_believed(chain, genuine, tmp_path, edit):
    folder = forged(genuine, tmp_path, edit)
    assert BoundCache(folder).peek(chain, BUDGET) is None


@pytest.mark.parametrize("text", ["[" * 100_000, "\x00\xff", "", "[]", "null"])
def test_an_entry_that_is_not_an_entry_is_not_believed(chain, genuine, tmp_path, text):
    forged(genuine, tmp_path, lambda data: None)
    (path,) = (tmp_path / "bounds").glob("*.json")
    path.write_bytes(text.encode("latin-1"))
    assert BoundCache(str(tmp_path / "bounds")).peek(chain, BUDGET) is None


def test_an_entry_not_believed_is_computed_again_and_overwritten(chain, genuine, tmp_path):
    folder = forged(genuine, tmp_path, set_value("57"))
    bound, from_cache = BoundCache(folder).get(chain, BUDGET, 30.0)
    assert bound.value == 53 and not from_cache
    assert BoundCache(folder).peek(chain, BUDGET) == bound


def test_no_schedule_fits_is_believed_where_it_can_be_checked(chain, tmp_path):
    below = memory_floor(chain).amount - 1
    cache = BoundCache(str(tmp_path))
    none_fits, _ = cache.get(chain, below, 30.0)
    assert none_fits.value is None and none_fits.termination is Termination.PROVEN
    assert BoundCache(str(tmp_path)).get(chain, below, 30.0) == (none_fits, True)


def test_the_trivial_bound_and_float_bounds_are_believed(tmp_path):
    g = make_graph({"a": [], "b": ["a"], "c": ["b"], "d": ["a", "c"]}, memory={"a": 4, "b": 2, "c": 2, "d": 1},
                   duration={"a": 1.5, "b": 0.25, "c": 0.75, "d": 1.0})
    cache = BoundCache(str(tmp_path))
    for budget in (None, 7, 9):
        bound, _ = cache.get(g, budget, 30.0)
        assert BoundCache(str(tmp_path)).get(g, budget, 30.0) == (bound, True)
    assert BoundCache(str(tmp_path)).peek(g, None).value == g.min_total_duration == 3.5
    assert BoundCache(str(tmp_path)).peek(g, 7).value == any_order_bound(g, 7).value


def test_no_entry_is_written_through_a_symbolic_link(chain, genuine, tmp_path):
    folder = forged(genuine, tmp_path, set_value("57"))
    (path,) = (tmp_path / "bounds").glob("*.json")
    target = tmp_path / "target.txt"
    target.write_text("precious\n")
    path.unlink()
    path.symlink_to(target)
    bound, from_cache = BoundCache(folder).get(chain, BUDGET, 30.0)
    assert bound.value == 53 and not from_cache
    assert target.read_text() == "precious\n" and path.is_symlink()


# ---------------------------------------------------------------------- on the command line


@pytest.mark.parametrize("value", ["57", [57], 10**400, 1e9, -1e9, None])
def test_bound_and_solve_say_the_real_bound_whatever_the_entry_says(genuine, tmp_path, monkeypatch, value):
    monkeypatch.setenv("REMAT_BENCH_BOUND_CACHE", forged(genuine, tmp_path, set_value(value)))
    r = CliRunner().invoke(main, ["bound", str(CHAIN), "-b", str(BUDGET), "--json"])
    assert r.exit_code == 0, r.output
    said = json.loads(r.stdout)
    assert said["lower_bound"] == 53 and said["status"] == "optimal" and said["cached_bound_discarded"] is None
    monkeypatch.setenv("REMAT_BENCH_BOUND_CACHE", forged(genuine, tmp_path / "again", set_value(value)))
    r = CliRunner().invoke(main, ["solve", str(CHAIN), "-m", "chen", "-b", str(BUDGET), "--json"])
    assert r.exit_code == 0 and "Traceback" not in r.output, r.output
    run = json.loads(r.stdout)
    assert run["lower_bound_any_order"] == 53 and run["duration"] == 57 and not run["proven_optimal"]


def test_a_sweep_over_a_forged_entry_runs_as_with_a_genuine_one(genuine, tmp_path, monkeypatch):
    from remat_bench.app.sweep import load_config, load_table, run_sweep

    monkeypatch.setenv("REMAT_BENCH_BOUND_CACHE", forged(genuine, tmp_path, set_value("57")))
    config = tmp_path / "sweep.yaml"
    config.write_text(f"name: forged\ngraphs:\n  - {CHAIN}\nmethods: [chen, greedy]\nbudgets: [{BUDGET}]\n"
                      "time_limit: 10\n")
    run_sweep(load_config(config, output=tmp_path / "out"), workers=1)
    table = load_table(tmp_path / "out")
    assert sorted(table["status"]) == ["feasible", "feasible"]
    assert set(table["lower_bound_any_order"]) == {53}


# ---------------------------------------------------------------------- a plausible poisoned entry


def poisoned(data):
    """Chen's duration at the budget, as if it were the bound, naming no recomputed value: it passes every
    check that needs no schedule (49 <= 57 <= 98, the baseline does not fit 14)."""
    data["bound"]["value"], data["bound"]["recomputed"] = 57, []


def test_a_cached_bound_a_greedy_schedule_beats_is_recomputed_and_said(chain, genuine, tmp_path, monkeypatch):
    folder = forged(genuine, tmp_path, poisoned)
    assert BoundCache(folder).peek(chain, BUDGET).value == 57  # believed on reading: no schedule in hand
    monkeypatch.setenv("REMAT_BENCH_BOUND_CACHE", folder)
    r = CliRunner().invoke(main, ["solve", str(CHAIN), "-m", "chen", "-b", str(BUDGET)])
    assert r.exit_code == 0, r.output
    text = " ".join(r.stdout.split())
    assert "proven optimal" not in text
    assert ("bound, any order 53; gap 7.547% (computed in" in text and "the cached bound was discarded: a greedy "
            "schedule within the budget takes 53, below the bound 57; recomputed)" in text)
    assert BoundCache(folder).peek(chain, BUDGET).value == 53  # the cache holds the fresh bound
    # `bound` checks the same, and says so.
    forged(genuine, tmp_path / "again", poisoned)
    monkeypatch.setenv("REMAT_BENCH_BOUND_CACHE", str(tmp_path / "again" / "bounds"))
    r = CliRunner().invoke(main, ["bound", str(CHAIN), "-b", str(BUDGET)])
    assert r.exit_code == 0, r.output
    text = " ".join(r.stdout.split())
    assert "bound 53: no schedule within the budget" in text
    assert "cached bound discarded: a greedy schedule within the budget takes 53, below the bound 57; recomputed" \
        in text


def test_a_genuine_cached_bound_passes_the_check(chain, genuine, tmp_path):
    folder = forged(genuine, tmp_path, lambda data: None)
    bound, from_cache, discarded = evaluate.checked_any_order(chain, BUDGET, 30.0, BoundCache(folder))
    assert (bound.value, from_cache, discarded) == (53, True, None)
    result = pipeline.run(chain, "greedy", str(BUDGET), 10, bounds=BoundCache(folder))
    assert result.proven_optimal and result.stats_bound["from_cache"] and "discarded" not in result.stats_bound


def test_a_cached_bound_greedy_cannot_check_is_still_held_to_the_methods_schedule(chain, genuine, tmp_path,
                                                                                   monkeypatch):
    # Where greedy finds nothing (here: made to give up), the run's own schedule still refutes the bound.
    def gives_up(self):
        raise evaluate.Stuck(0, 0)

    monkeypatch.setattr(evaluate.GreedyPass, "run", gives_up)
    folder = forged(genuine, tmp_path, poisoned)
    result = pipeline.run(chain, "dtr", str(BUDGET), 10, bounds=BoundCache(folder))
    assert result.duration == 53 and result.lower_bound_any_order == 53 and result.proven_optimal
    assert result.stats_bound["discarded"] == "a schedule within the budget takes 53, below the bound 57"
