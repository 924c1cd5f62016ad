"""`remat-bench solve`, `methods` and `graphs`: outputs and exit statuses (docs/design.md section 7)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from remat_bench.cli import main
from remat_bench.graph import load_graph
from remat_bench.schedule import load_schedule
from remat_bench.simulate import simulate
from tests.helpers import SHIPPED, paper_graph

CHAIN = str(SHIPPED / "chain-16-train.json")
SOLVE_KEYS = {"graph", "method", "params", "status", "budget", "peak", "duration", "baseline_peak",
              "baseline_duration", "overhead_pct", "objective", "lower_bound", "lower_bound_any_order",
              "gap_pct", "solve_time_s", "schedule_steps"}


def invoke(*args):
    return CliRunner().invoke(main, list(args))


def test_solve_json_has_the_design_keys_and_writes_the_cleaned_schedule(tmp_path):
    out = tmp_path / "s.json"
    r = invoke("solve", CHAIN, "--method", "chen", "--budget", "0.7", "--json", "-o", str(out))
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert set(data) >= SOLVE_KEYS
    assert data["status"] == "feasible"
    assert data["peak"] <= data["budget"] == 12
    g = load_graph(CHAIN)
    sim = simulate(g, load_schedule(out, g))
    assert (sim.peak, sim.duration, sim.num_steps) == (data["peak"], data["duration"], data["schedule_steps"])


def test_solve_human_table():
    r = invoke("solve", CHAIN, "--method", "none", "--budget", "1")
    assert r.exit_code == 0
    assert "optimal" in r.output and "overhead +0.000%" in r.output


def test_solve_exit_1_when_no_schedule_fits():
    r = invoke("solve", str(paper_graph("checkmate_vgg16_train")), "-m", "chen", "-b", "0.8")
    assert r.exit_code == 1
    assert "infeasible" in r.output and "memory floor" in r.output
    r = invoke("solve", CHAIN, "-m", "none", "-b", "0.5", "--json")
    assert r.exit_code == 1
    assert json.loads(r.output)["status"] == "infeasible"


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["-m", "nosuch", "-b", "0.8"], "unknown method 'nosuch'; known methods: none, chen, greedy"),
        (["-m", "chen", "-b", "0.8", "-p", "colour=red"], "method 'chen' has no parameter 'colour'"),
        (["-m", "chen", "-b", "0.8", "-p", "grid=many"], "parameter 'grid' of method 'chen' must be int"),
        (["-m", "chen", "-b", "0.8", "-p", "variant=cube"], "must be one of greedy, sqrt"),
        (["-m", "chen", "-b", "lots"], "budget 'lots' is not understood"),
        (["-m", "chen", "-b", "0.8", "-p", "novalue"], "not of the form key=value"),
    ],
)
def test_usage_errors_exit_2(args, fragment):
    r = invoke("solve", CHAIN, *args)
    assert r.exit_code == 2
    assert fragment in r.output
    assert "Traceback" not in r.output


def test_solve_refuses_to_overwrite_its_input(tmp_path):
    r = invoke("solve", CHAIN, "-m", "none", "-b", "1", "-o", CHAIN)
    assert r.exit_code == 2
    assert "is one of the inputs" in r.output


def test_methods_lists_availability_and_params():
    r = invoke("methods", "--json")
    assert r.exit_code == 0
    rows = {m["name"]: m for m in json.loads(r.output)}
    assert rows["chen"]["available"] is True
    assert [p["name"] for p in rows["chen"]["params"]] == ["variant", "grid"]


def test_graph_names_resolve_on_the_search_path():
    r = invoke("graphs", "show", "chain-16-train", "--json")
    assert r.exit_code == 0
    assert json.loads(r.output)["nodes"] == 33


def test_generate_writes_a_valid_graph(tmp_path):
    out = tmp_path / "rl.json"
    r = invoke("graphs", "generate", "random-layered", "--nodes", "40", "--seed", "3", "-o", str(out))
    assert r.exit_code == 0, r.output
    assert load_graph(out).n == 40
    r = invoke("graphs", "generate", "vgg16", "--nodes", "40", "-o", str(tmp_path / "x.json"))
    assert r.exit_code == 2


def test_third_party_methods_come_from_the_entry_point_group(monkeypatch):
    from importlib.metadata import EntryPoint

    import remat_bench.methods as registry

    fake = EntryPoint(name="plugin-none", value="remat_bench.methods.none:NoRemat", group="remat_bench.methods")
    monkeypatch.setattr(registry, "entry_points", lambda group: [fake] if group == "remat_bench.methods" else [])
    assert registry.get_method("plugin-none").name == "none"
    assert any(cls.name == "none" for cls in registry.all_methods())
    r = invoke("solve", CHAIN, "-m", "plugin-none", "-b", "1", "--json")
    assert r.exit_code == 0, r.output
    listed = [m["name"] for m in json.loads(invoke("methods", "--json").output)]
    assert "plugin-none" in listed and "none" in listed


def test_bound_command_prints_the_any_order_bound_and_exit_status():
    r = invoke("bound", str(paper_graph("checkmate_fcn8_vgg_train")), "-b", "0.8", "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["status"] == "optimal"
    assert round(data["lower_bound_overhead_pct"], 4) == 0.1361
    r = invoke("bound", str(paper_graph("checkmate_vgg16_train")), "-b", "0.8")
    assert r.exit_code == 1
    assert "no schedule fits" in r.output
    assert invoke("bound", CHAIN, "-b", "min").exit_code == 2
