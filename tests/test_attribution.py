"""Where the time goes (remat_bench.torch.attribution): every step timed in place beside its modelled duration.

The clock is replaced by one that charges each operator what the graph says it costs, times a factor per
operator kind, so every figure of the attribution is known by hand.
"""

from __future__ import annotations

from tests.needs_torch import torch  # first: torch, or a failure saying how to install it

# isort: split

import json

import pytest
from click.testing import CliRunner

from remat_bench.app.cli import main
from remat_bench.app.pipeline import run
from remat_bench.core.baseline import baseline_schedule
from remat_bench.core.graph_io import load_graph, save_graph
from remat_bench.core.schedule import COMPUTE, save_schedule
from remat_bench.core.simulate import overhead_pct, simulate
from remat_bench.methods import Status
from remat_bench.torch import attribution as attribution_module
from remat_bench.torch.attribution import attribute
from remat_bench.torch.importer import import_model
from tests.helpers import graph_path


@pytest.fixture(scope="module")
def mlp():
    """An MLP (FLOPs durations) and a greedy schedule with recomputations at 0.8 of its peak."""
    g = import_model("mlp", batch=512, input_shape=(32,), in_features=32, hidden=64, depth=3, durations="flops",
                     workspace="none")
    result = run(g, "greedy", 0.8)
    assert result.status in (Status.FEASIBLE, Status.OPTIMAL) and simulate(g, result.schedule).recomputations > 0
    return g, result.schedule


def test_every_step_is_set_beside_its_modelled_duration(mlp, monkeypatch):
    g, schedule = mlp
    # An addmm's step costs 2x its model, any other op exactly its model; a whole run 1,000 ns beyond its steps.
    factor = {"aten.addmm.default": 2.0}
    current: list[int] = []

    def fake_op_ns(device, fn):
        fn()
        v = fn.args[0]
        took = round(float(g.duration[v]) * factor.get(g.nodes[v].op, 1.0))
        current.append(took)
        return took

    def fake_run_ns(device, fn):
        current.clear()
        fn()
        return sum(current) + 1000

    monkeypatch.setattr(attribution_module, "op_ns", fake_op_ns)
    monkeypatch.setattr(attribution_module, "run_ns", fake_run_ns)
    found = attribute(g, schedule, torch.device("cpu"), passes=2, threads=1)
    data = found.to_json(top=100)

    def by_hand(sched):
        steps = [(k, v) for k, v in zip(sched.kinds.tolist(), sched.nodes.tolist()) if k == COMPUTE]
        return sum(round(float(g.duration[v]) * factor.get(g.nodes[v].op, 1.0)) for _, v in steps)

    assert data["schedule"]["steps_ns"] == by_hand(schedule)
    assert data["baseline"]["steps_ns"] == by_hand(baseline_schedule(g))
    assert data["schedule"]["outside_ns"] == data["baseline"]["outside_ns"] == 1000
    assert data["schedule"]["modelled_ns"] == simulate(g, schedule).duration
    measured = overhead_pct(by_hand(schedule) + 1000, by_hand(baseline_schedule(g)) + 1000)
    assert data["measured_overhead_pct"] == pytest.approx(measured)
    assert data["overhead_error_pts"] == pytest.approx(data["recomputations_error_pts"] + data["rest_error_pts"])
    # Each node: its computations counted; its recomputations' error is what the factor adds to them.
    counts: dict[int, int] = {}
    for k, v in zip(schedule.kinds.tolist(), schedule.nodes.tolist()):
        if k == COMPUTE:
            counts[v] = counts.get(v, 0) + 1
    rows = {r["id"]: r for r in found.node_rows()}
    for v, n in counts.items():
        row = rows[g.ids[v]]
        extra = (factor.get(g.nodes[v].op, 1.0) - 1.0) * float(g.duration[v]) * (n - 1)
        assert row["computations"] == n and row["error_ns"] == pytest.approx(extra, abs=n)
    recomputed_addmm = sum(n - 1 for v, n in counts.items() if g.nodes[v].op == "aten.addmm.default")
    ops = {r["op"]: r for r in data["ops"]}
    if recomputed_addmm:
        assert ops["aten.addmm.default"]["recomputations"] == recomputed_addmm
        assert ops["aten.addmm.default"]["error_ns"] > 0
        assert data["ops"][0]["op"] == "aten.addmm.default"  # the only kind with an error comes first
    assert all(r["error_ns"] == 0 for r in data["ops"] if r["op"] != "aten.addmm.default")


def test_replay_steps_prints_where_the_time_goes(mlp, tmp_path):
    g, schedule = mlp
    save_graph(g, tmp_path / "g.json")
    save_schedule(schedule, g, tmp_path / "s.json")
    r = CliRunner().invoke(main, ["replay", str(tmp_path / "g.json"), str(tmp_path / "s.json"), "--json",
                                  "--device", "cpu", "--repeats", "6", "--precision", "0", "--steps", "2"])
    assert r.exit_code == 0, r.output
    a = json.loads(r.stdout)["attribution"]
    assert a["passes"] == 2 and a["threads"] == 1 and a["clock"] == "thread CPU time"
    assert a["recomputations"]["count"] == simulate(g, schedule).recomputations
    assert a["schedule"]["run_ns"] == pytest.approx(a["schedule"]["steps_ns"] + a["schedule"]["outside_ns"])
    text = CliRunner().invoke(main, ["replay", str(tmp_path / "g.json"), str(tmp_path / "s.json"),
                                     "--device", "cpu", "--repeats", "6", "--precision", "0", "--steps", "1"])
    assert text.exit_code == 0, text.output
    assert "steps in place" in text.output and "recomputations" in text.output


def test_a_graph_not_imported_from_pytorch_has_no_operators_to_time():
    g = load_graph(graph_path("chain-16-train.json"))
    with pytest.raises(ValueError, match="was not imported from PyTorch"):
        attribute(g, baseline_schedule(g), torch.device("cpu"))
