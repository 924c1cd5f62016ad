"""Charts: every kind writes a non-blank PNG or an SVG; styles are stable; retention intervals are exact."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from matplotlib.image import imread

from remat_bench import charts
from remat_bench.cli import main
from remat_bench.graph import load_graph
from remat_bench.pipeline import run
from remat_bench.schedule import Schedule, save_schedule
from remat_bench.sweep import load_config, run_sweep
from remat_bench.sweep.results import build_table
from tests.helpers import SHIPPED, make_graph

CHAIN = SHIPPED / "chain-16-train.json"


def non_blank(path) -> float:
    """Pixel standard deviation of the image read back: zero for a blank (one-colour) image."""
    pixels = imread(path)
    return float(np.asarray(pixels, dtype=float).std())


def row(graph: str, nodes: int, method: str, fraction: float, status: str, overhead: float | None,
        time_s: float | None, params: dict | None = None, time_limit: float = 10.0) -> dict:
    return {"graph": graph, "graph_sha256": graph, "nodes": nodes, "edges": 2 * nodes, "method": method,
            "params": json.dumps(params or {}), "budget_text": str(fraction), "budget_fraction": fraction,
            "seed": None, "repeat": 0, "time_limit": time_limit, "status": status, "overhead_pct": overhead,
            "solve_time_s": time_s}


@pytest.fixture(scope="module")
def table():
    rows = []
    for graph, nodes in (("small", 30), ("large", 300)):
        for fraction, chen, moccasin in ((1.0, 0.0, 0.0), (0.8, 12.0, 4.0), (0.6, 30.0, 9.0), (0.4, None, 20.0)):
            rows.append(row(graph, nodes, "chen", fraction, "feasible" if chen is not None else "no_solution",
                            chen, 0.01 * nodes / 30, {"variant": "greedy"}))
            rows.append(row(graph, nodes, "chen", fraction, "feasible", (chen or 50.0) + 5, 0.005 * nodes / 30,
                            {"variant": "sqrt"}))
            timeout = graph == "large" and fraction == 0.4
            rows.append(row(graph, nodes, "moccasin", fraction, "timeout" if timeout else "optimal",
                            None if timeout else moccasin, None if timeout else nodes / 100))
            rows.append(row(graph, nodes, "none", fraction, "feasible" if fraction == 1.0 else "infeasible",
                            0.0, 0.0))
    return build_table(rows)


@pytest.fixture(scope="module")
def schedules():
    g = load_graph(CHAIN)
    return g, [(m, run(g, m, "0.7", 10).schedule) for m in ("chen", "greedy", "none")]


@pytest.mark.parametrize("suffix", [".png", ".svg"])
def test_tradeoff_chart_is_written(tmp_path, table, suffix):
    path = charts.tradeoff(table, tmp_path / f"tradeoff{suffix}")
    if suffix == ".png":
        assert non_blank(path) > 0.05
    else:
        text = path.read_text()
        assert "<svg" in text and text.count("<path") > 20


def test_scaling_chart_is_written(tmp_path, table):
    assert non_blank(charts.scaling(table, tmp_path / "scaling.png")) > 0.05


def test_timeline_chart_overlays_schedules(tmp_path, schedules):
    g, scheds = schedules
    path = charts.timeline(g, [(m, s) for m, s in scheds if s is not None], tmp_path / "timeline.png", budget=12)
    assert non_blank(path) > 0.05


def test_intervals_chart_is_written(tmp_path, schedules):
    g, scheds = schedules
    path = charts.intervals(g, dict(scheds)["chen"], tmp_path / "intervals.png")
    assert non_blank(path) > 0.05


def test_retention_intervals_pair_each_computation_with_its_free():
    g = make_graph({"a": [], "b": ["a"], "c": ["b"]})
    s = Schedule.from_steps([("compute", 0), ("compute", 1), ("free", 0), ("compute", 2), ("free", 1),
                             ("compute", 0), ("free", 0)])
    nodes, start, end, again = charts.retention_intervals(g, s)
    stays = sorted(zip(nodes.tolist(), start.tolist(), end.tolist(), again.tolist()))
    assert stays == [(0, 0, 2, False), (0, 5, 6, True), (1, 1, 4, False), (2, 3, 7, False)]


def test_each_method_keeps_one_style_and_styles_differ():
    names = ["none", "chen", "greedy", "checkmate", "checkmate-lp", "moccasin", "kusumoto", "twremat", "fenghuang"]
    styles = [charts.method_style(m) for m in names]
    assert styles == [charts.method_style(m) for m in names]
    assert len({s["color"] for s in styles}) == len(names)
    assert charts.method_style("someone-elses-method") == charts.method_style("someone-elses-method")


def test_an_unknown_image_suffix_and_nothing_to_draw_are_clear_errors(tmp_path, table):
    with pytest.raises(charts.ChartError, match=r"\.png, \.svg, \.pdf"):
        charts.tradeoff(table, tmp_path / "t.jpg")
    failed = table.assign(status="no_solution")
    with pytest.raises(charts.ChartError, match="no run found a schedule"):
        charts.tradeoff(failed, tmp_path / "t.png")


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    folder = tmp_path_factory.mktemp("results")
    config = folder / "sweep.yaml"
    config.write_text(f"graphs: [{CHAIN}]\nmethods: [none, chen, greedy]\nbudgets: [0.9, 0.8, 0.7]\n"
                      "time_limit: 20\n")
    run_sweep(load_config(config, output=folder / "out"), workers=2)
    return folder / "out"


@pytest.mark.parametrize("kind", charts.KINDS)
def test_plot_command_draws_every_kind_from_a_results_folder(tmp_path, results, kind):
    out = tmp_path / f"{kind}.png"
    r = CliRunner().invoke(main, ["plot", str(results), "--kind", kind, "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert non_blank(out) > 0.05
    if kind in ("timeline", "intervals"):
        assert "of chain-16 at budget 0.7" in r.output  # the tightest budget every method but none met


def test_plot_command_draws_schedule_files_and_refuses_unknown_budgets(tmp_path, results, schedules):
    g, scheds = schedules
    files = []
    for method, s in scheds:
        save_schedule(s, g, tmp_path / f"{method}.json")
        files.append(str(tmp_path / f"{method}.json"))
    out = tmp_path / "t.svg"
    r = CliRunner().invoke(main, ["plot", *files, "--graph", str(CHAIN), "--kind", "timeline", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert "<svg" in out.read_text()
    r = CliRunner().invoke(main, ["plot", str(results), "--kind", "timeline", "--budget", "0.5", "-o",
                                  str(tmp_path / "x.png")])
    assert r.exit_code == 2 and "has no runs at budget '0.5'; its budgets are 0.9, 0.8, 0.7" in r.output


def test_simulate_timeline_uses_the_same_chart(tmp_path, schedules):
    g, scheds = schedules
    save_schedule(dict(scheds)["greedy"], g, tmp_path / "s.json")
    out = tmp_path / "timeline.png"
    r = CliRunner().invoke(main, ["simulate", str(CHAIN), str(tmp_path / "s.json"), "--timeline", str(out),
                                  "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["peak"] <= 12
    assert non_blank(out) > 0.05
