"""Charts: every kind writes a non-blank PNG or an SVG; styles are stable; retention intervals are exact."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from matplotlib.image import imread

from remat_bench.app.charts.common import ChartError, method_style, save
from remat_bench.app.charts.intervals import intervals_figure, retention_intervals
from remat_bench.app.charts.kinds import KINDS
from remat_bench.app.charts.prediction import prediction_figure
from remat_bench.app.charts.profile import profile_figure
from remat_bench.app.charts.progress import progress_figure
from remat_bench.app.charts.scaling import graph_family, scaling_figure
from remat_bench.app.charts.selection import select_runs
from remat_bench.app.charts.time_to_best import best_held_at, time_to_best_figure
from remat_bench.app.charts.timeline import LINE_GAP_PT, timeline_figure
from remat_bench.app.charts.tradeoff import outlier_cap, tradeoff_figure
from remat_bench.app.cli import main
from remat_bench.app.pipeline import run
from remat_bench.app.sweep import load_config, run_sweep
from remat_bench.app.sweep.results import build_table
from remat_bench.core.graph_io import load_graph
from remat_bench.core.schedule import Schedule, save_schedule
from remat_bench.core.simulate import simulate
from tests.helpers import SHIPPED, make_graph

CHAIN = SHIPPED / "chain-16-train.json"


def non_blank(path) -> float:
    """Pixel standard deviation of the image read back: zero for a blank (one-colour) image."""
    pixels = imread(path)
    return float(np.asarray(pixels, dtype=float).std())


# The any-order bound at each budget, in overhead % (below moccasin's optimal runs).
BOUND_PCT = {1.0: 0.0, 0.8: 3.0, 0.6: 8.0, 0.4: 18.0}


def row(graph: str, nodes: int, method: str, fraction: float, status: str, overhead: float | None,
        time_s: float | None, params: dict | None = None, time_limit: float = 10.0) -> dict:
    return {"graph": graph, "graph_sha256": graph, "nodes": nodes, "edges": 2 * nodes, "method": method,
            "params": json.dumps(params or {}), "budget_text": str(fraction), "budget_fraction": fraction,
            "seed": None, "repeat": 0, "time_limit": time_limit, "status": status, "overhead_pct": overhead,
            "solve_time_s": time_s, "baseline_duration": 1000,
            "lower_bound_any_order": 1000 * (1 + BOUND_PCT.get(fraction, 0.0) / 100)}


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
    path = save(tradeoff_figure(table), tmp_path / f"tradeoff{suffix}")
    if suffix == ".png":
        assert non_blank(path) > 0.05
    else:
        text = path.read_text()
        assert "<svg" in text and text.count("<path") > 20


def test_scaling_chart_is_written(tmp_path, table):
    assert non_blank(save(scaling_figure(table), tmp_path / "scaling.png")) > 0.05


def test_timeline_chart_overlays_schedules(tmp_path, schedules):
    g, scheds = schedules
    path = save(timeline_figure(g, [(m, s) for m, s in scheds if s is not None], budget=12), tmp_path / "timeline.png")
    assert non_blank(path) > 0.05


def test_intervals_chart_is_written(tmp_path, schedules):
    g, scheds = schedules
    path = save(intervals_figure(g, dict(scheds)["chen"]), tmp_path / "intervals.png")
    assert non_blank(path) > 0.05


def test_retention_intervals_pair_each_computation_with_its_free():
    g = make_graph({"a": [], "b": ["a"], "c": ["b"]})
    s = Schedule.from_steps([("compute", 0), ("compute", 1), ("free", 0), ("compute", 2), ("free", 1),
                             ("compute", 0), ("free", 0)])
    nodes, start, end, again = retention_intervals(g, s)
    stays = sorted(zip(nodes.tolist(), start.tolist(), end.tolist(), again.tolist()))
    assert stays == [(0, 0, 2, False), (0, 5, 6, True), (1, 1, 4, False), (2, 3, 7, False)]


def test_each_method_keeps_one_style_and_styles_differ():
    from remat_bench.app.catalog import method_names

    names = method_names()
    styles = [method_style(m) for m in names]
    assert styles == [method_style(m) for m in names]
    assert len({s["color"] for s in styles}) == len(names)
    assert method_style("someone-elses-method") == method_style("someone-elses-method")


def test_an_unknown_image_suffix_and_nothing_to_draw_are_clear_errors(tmp_path, table):
    with pytest.raises(ChartError, match=r"\.png, \.svg, \.pdf"):
        save(tradeoff_figure(table), tmp_path / "t.jpg")
    failed = table.assign(status="no_solution")
    with pytest.raises(ChartError, match="no run found a schedule"):
        save(tradeoff_figure(failed), tmp_path / "t.png")


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    folder = tmp_path_factory.mktemp("results")
    config = folder / "sweep.yaml"
    config.write_text(f"graphs: [{CHAIN}]\nmethods: [none, chen, greedy]\nbudgets: [0.9, 0.8, 0.7]\n"
                      "time_limit: 20\n")
    run_sweep(load_config(config, output=folder / "out"), workers=2)
    return folder / "out"


# A prediction chart needs replays, which this sweep has not: test_plot_draws_the_prediction_chart_of_replays.
@pytest.mark.parametrize("kind", [kind for kind in KINDS if kind != "prediction"])
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


# ---------------------------------------------------------------------- bad input to `plot` (defect 17)


def refusal(r) -> str:
    """The one error line of a refused `plot`: exit status 2, no traceback, the sentence on a single line."""
    assert r.exit_code == 2, r.output
    assert isinstance(r.exception, SystemExit) and "Traceback" not in r.output, r.output
    lines = [line for line in r.output.splitlines() if line.lower().startswith("error:")]
    assert len(lines) == 1, r.output
    return lines[0]


def test_plot_says_a_missing_or_wrong_source_is_missing_or_wrong(tmp_path, results):
    out = str(tmp_path / "x.png")
    line = refusal(CliRunner().invoke(main, ["plot", str(tmp_path / "nowhere"), "--kind", "tradeoff", "-o", out]))
    assert "nowhere: no such folder" in line and "drawn from one results folder" not in line
    line = refusal(CliRunner().invoke(main, ["plot", str(results / "results.parquet"), "--kind", "scaling", "-o", out]))
    assert "results.parquet is a file" in line and "results folder" in line
    line = refusal(CliRunner().invoke(main, ["plot", str(results), str(results), "--kind", "tradeoff", "-o", out]))
    assert "one results folder" in line and "2 were given" in line
    # A schedule file that is not there is named as such, before the missing --graph.
    line = refusal(CliRunner().invoke(main, ["plot", str(tmp_path / "gone.json"), "--kind", "timeline", "-o", out]))
    assert "gone.json: no such file or folder" in line and "--graph" not in line


@pytest.mark.parametrize("kind", KINDS)
def test_plot_names_an_unknown_method_or_graph_with_a_suggestion(tmp_path, results, kind):
    out = str(tmp_path / "x.png")
    line = refusal(CliRunner().invoke(main, ["plot", str(results), "--kind", kind, "-m", "greedyy", "-o", out]))
    assert "'greedyy'" in line and "did you mean 'greedy'?" in line and "--graph" not in line
    assert "no runs left" not in line and "none, chen, greedy" in line
    line = refusal(CliRunner().invoke(main, ["plot", str(results), "--kind", kind, "-m", "moccasin", "-o", out]))
    assert "'moccasin'" in line and "did you mean" not in line and "none, chen, greedy" in line
    line = refusal(CliRunner().invoke(main, ["plot", str(results), "--kind", kind, "-g", "chain-61", "-o", out]))
    assert "no graph named 'chain-61'" in line and "did you mean 'chain-16'?" in line


def test_plot_names_a_chosen_method_without_schedules_and_a_budget_it_would_ignore(tmp_path, results):
    out = str(tmp_path / "x.png")
    # `none` fits none of the budgets 0.9, 0.8, 0.7 of chain-16: say so, naming it and what its runs ended as.
    line = refusal(CliRunner().invoke(main, ["plot", str(results), "--kind", "timeline", "-m", "none", "-o", out]))
    assert "no run of none saved a schedule within its budget" in line and "infeasible" in line
    line = refusal(CliRunner().invoke(main, ["plot", str(results), "--kind", "tradeoff", "-b", "0.8", "-o", out]))
    assert "--budget" in line and "every budget" in line


# ---------------------------------------------------------------------- chart design (defect 18)


def rendered(fig, dpi: float = 200) -> np.ndarray:
    """Draw ``fig`` with Agg (as `save` does) and return its RGB pixels, top row first."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig.set_dpi(dpi)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())[..., :3].astype(float)


def colours_along(fig, line, x, y, colours: dict[str, str]) -> dict[str, int]:
    """How many midpoints of the flat parts of a post-step line over (x, y), placed as ``line`` places its
    data, show each named colour."""
    from matplotlib.colors import to_rgb

    pixels = rendered(fig)
    mid = np.column_stack([(np.asarray(x[:-1]) + np.asarray(x[1:])) / 2, y[:-1]])
    points = line.get_transform().transform(mid)
    counts = dict.fromkeys([*colours, "other"], 0)
    targets = {name: np.array(to_rgb(c)) * 255 for name, c in colours.items()}
    for px, py in points:
        pixel = pixels[round(pixels.shape[0] - py), round(px)]
        name, distance = min(((n, np.abs(pixel - t).max()) for n, t in targets.items()), key=lambda p: p[1])
        counts[name if distance < 60 else "other"] += 1
    return counts


def test_identical_timelines_show_both_methods(schedules):
    import dataclasses

    from matplotlib.colors import to_hex

    g, scheds = schedules
    greedy = dict(scheds)["greedy"]
    twin = dataclasses.replace(greedy, method="checkmate")  # checkmate finds exactly greedy's schedule on chain-16
    fig = timeline_figure(g, [("greedy", greedy), ("checkmate", twin), ("chen", dict(scheds)["chen"])])
    ax = fig.axes[0]
    sim = simulate(g, greedy)
    steps = np.arange(sim.num_steps + 1)
    memory = np.append(sim.step_memory, sim.step_memory[-1])
    colours = {m: method_style(m)["color"] for m in ("greedy", "checkmate")}
    [line, *_] = [ln for ln in ax.get_lines() if to_hex(ln.get_color()) == colours["greedy"]]
    counts = colours_along(fig, line, steps, memory, colours)
    # Both colours along the one path (before: checkmate's line covered greedy's everywhere).
    total = sum(counts.values())
    assert counts["greedy"] >= 0.2 * total and counts["checkmate"] >= 0.2 * total, counts
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any(lab.startswith("greedy = checkmate") and "identical" in lab for lab in labels), labels
    assert any(lab.startswith("chen:") for lab in labels)


def test_coinciding_tradeoff_points_are_spread_and_identical_series_named(table):
    twins = table[table["method"] == "moccasin"].assign(method="checkmate")
    frame = pd.concat([table, twins.assign(method="greedy"), twins], ignore_index=True)
    fig = tradeoff_figure(frame)
    rendered(fig, dpi=100)
    from matplotlib.collections import PathCollection
    from matplotlib.colors import to_hex

    for ax in fig.axes:
        if not ax.get_visible():
            continue
        shown: dict[str, list] = {}
        for coll in ax.collections:
            if isinstance(coll, PathCollection):
                where = coll.get_offset_transform().transform(coll.get_offsets())
                shown.setdefault(to_hex(coll.get_facecolor()[0]), []).extend(map(tuple, where))
        greedy, checkmate = (sorted(shown[method_style(m)["color"]]) for m in ("greedy", "checkmate"))
        assert len(greedy) == len(checkmate) >= 3  # moccasin's run at 0.4 on "large" timed out
        for (gx, gy), (cx, cy) in zip(greedy, checkmate):
            # Same point in the data, a few pixels apart on the page.
            assert gy == pytest.approx(cy) and 2 <= abs(gx - cx) <= 20
        assert "greedy = checkmate = moccasin: identical" in ax.get_title()
    assert "points at one budget that would cover one another are set side by side" in \
        fig.legends[0].get_title().get_text()


def test_scaling_chart_ticks_read_as_plain_numbers(table):
    frame = pd.concat([table.assign(nodes=n, graph=f"g{n}") for n in (50, 120, 500, 2000)], ignore_index=True)
    fig = scaling_figure(frame)
    rendered(fig, dpi=80)
    ax = fig.axes[0]
    x = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    y = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
    assert x == ["50", "100", "200", "500", "1000", "2000"], x
    assert y and all(label.replace(".", "").isdigit() for label in y), y
    # Less than a decade: still a few labels, none of them written as powers.
    narrow = scaling_figure(
        pd.concat([table.assign(nodes=n, graph=f"g{n}") for n in (80, 90, 100)], ignore_index=True))
    rendered(narrow, dpi=80)
    x = [t.get_text() for t in narrow.axes[0].get_xticklabels() if t.get_text()]
    assert x == ["80", "90", "100"], x
    # Minor ticks (matplotlib's "8x10^1 9x10^1" before) stay unlabelled grid lines.
    for axes in (ax, narrow.axes[0]):
        assert not [t.get_text() for t in [*axes.get_xticklabels(minor=True), *axes.get_yticklabels(minor=True)]
                    if t.get_text()]


def test_the_budget_line_is_neutral_and_labelled(schedules):
    from matplotlib.colors import to_hex

    from remat_bench.app.catalog import method_names

    g, scheds = schedules
    fig = timeline_figure(g, [("chen", dict(scheds)["chen"])], budget=12)
    [line] = [ln for ln in fig.axes[0].get_lines() if ln.get_label().startswith("budget")]
    colour = to_hex(line.get_color())
    assert line.is_dashed() and colour == "#000000"
    method_colours = {method_style(m)["color"] for m in method_names()}
    assert colour not in method_colours


def test_a_panel_without_any_schedule_says_so(table):
    failed = table[table["graph"] == "small"].assign(graph="hard", graph_sha256="hard", nodes=60)
    failed = failed.assign(status=np.where(failed["method"] == "moccasin", "timeout", "no_solution"),
                           overhead_pct=None)
    fig = tradeoff_figure(pd.concat([table, failed], ignore_index=True))
    [hard] = [ax for ax in fig.axes if ax.get_title().startswith("hard")]
    notes = " ".join(t.get_text() for t in hard.texts)
    assert "no schedule within budget" in notes
    assert "chen: 8 no_solution" in notes and "moccasin: 4 timeout" in notes and "none: 4 no_solution" in notes
    [small] = [ax for ax in fig.axes if ax.get_title().startswith("small")]
    assert not any("no schedule" in t.get_text() for t in small.texts)


def test_plot_graph_accepts_the_graph_file_stem_as_well_as_its_name(tmp_path):
    frame = pd.DataFrame({"graph": ["chain-16", "other"], "graph_path": ["/x/chain-16-train.json", "/x/o.json"],
                          "method": ["none", "none"], "params": ["{}", "{}"]})
    assert list(select_runs(frame, tmp_path, graph="chain-16-train")["graph"]) == ["chain-16"]
    assert list(select_runs(frame, tmp_path, graph="chain-16")["graph"]) == ["chain-16"]


BOUND_ENTRY = "any-order lower bound (dotted): no schedule can be in the grey band below it"


def test_the_tradeoff_chart_shades_the_overheads_below_the_bound(table):
    fig = tradeoff_figure(table)
    # The dotted line and its band have a legend entry of their own (before: only a note in the legend's title).
    assert BOUND_ENTRY in [t.get_text() for t in fig.legends[0].get_texts()]
    # The band's upper edge is the highest bound the runs computed at each budget (in overhead %).
    ax = fig.axes[0]
    edges = [line for line in ax.get_lines() if line.get_linestyle() == ":"]
    assert edges
    graph = ax.get_title().split(" (")[0]
    assert graph in set(table["graph"])
    y = edges[0].get_ydata()
    assert max(y) == pytest.approx(max(BOUND_PCT.values())) and min(y) == pytest.approx(min(BOUND_PCT.values()))
    without = table.assign(lower_bound_any_order=None)
    assert BOUND_ENTRY not in [t.get_text() for t in tradeoff_figure(without).legends[0].get_texts()]


# ---------------------------------------------------------------------- chart design (issue 30, item 17)


def test_one_far_outlier_is_marked_at_the_top_instead_of_flattening_the_panel(table):
    greedy = table[table["method"] == "moccasin"].assign(method="greedy", status="feasible", overhead_pct=6.0)
    greedy.loc[greedy["budget_fraction"] == 0.6, "overhead_pct"] = 422.0
    fig = tradeoff_figure(pd.concat([table, greedy], ignore_index=True))
    for ax in (a for a in fig.axes if a.get_visible()):
        low, high = ax.get_ylim()
        # The axis ends a margin above the largest ordinary value (chen (variant=sqrt) at 0.4: 55%), not at 422.
        assert 55 < high < 80 and -5 < low <= 0, (low, high)
        marks = [t for t in ax.texts if t.get_text() == "+422%"]
        assert len(marks) == 1 and marks[0].xy == pytest.approx((0.6, high))
        assert marks[0].get_color() == method_style("greedy")["color"]
    assert "marked at the top edge with its number" in fig.legends[0].get_title().get_text()
    # Values that are merely spread out keep their whole axis.
    assert outlier_cap(np.array([0.0, 4.0, 9.0, 20.0, 30.0, 55.0])) is None
    assert outlier_cap(np.array([0.0, 1.0, 2.0, 3.0, 5.0, 8.0, 9.0, 422.0])) == pytest.approx(9 + 0.3 * 9)
    assert outlier_cap(np.array([0.5, 1.0, 4.0])) is None  # small values are not outliers of one another
    plain = tradeoff_figure(table)
    assert not [t for ax in plain.axes for t in ax.texts if t.get_text().startswith("+")]


def test_a_budget_where_no_method_found_a_schedule_says_so(table):
    nothing = table[table["budget_fraction"] == 0.4].assign(budget_fraction=0.2, budget_text="0.2",
                                                            status="infeasible", overhead_pct=None)
    fig = tradeoff_figure(pd.concat([table, nothing], ignore_index=True))
    for ax in (a for a in fig.axes if a.get_visible()):
        notes = [t for t in ax.texts if t.get_text() == "no schedule found"]
        assert [t.xy[0] for t in notes] == [0.2]
    assert not [t for ax in tradeoff_figure(table).axes for t in ax.texts if "no schedule" in t.get_text()]


def test_panel_titles_stay_over_their_own_panel():
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    twins = ("greedy", "checkmate", "moccasin", "kusumoto", "auto", "dtr", "knapsack", "checkmate-lp")
    rows = [row(graph, nodes, method, fraction, "feasible", 5.0, 1.0)
            for graph, nodes in (("chain-16", 33), ("random-layered-n60-seed7", 60), ("unet-train-b2-r64-d3", 77))
            for method in twins for fraction in (0.9, 0.8)]
    fig = tradeoff_figure(build_table(rows))
    FigureCanvasAgg(fig).draw()
    boxes = [ax.title.get_window_extent() for ax in fig.axes if ax.get_visible()]
    assert len(boxes) == 3 and " ".join(fig.axes[0].get_title().split()) == (
        "chain-16 (33 nodes) greedy = dtr = checkmate = checkmate-lp = moccasin = kusumoto = knapsack = auto: "
        "identical")
    for left, right in itertools.pairwise(boxes):
        assert left.x1 < right.x0, (left, right)  # before: the first panel's one-line note ran into the second's


def test_the_scaling_chart_joins_points_only_within_a_graph_family(table):
    # chain-8 (30 nodes), chain-64 (300), tree-9 (60), tree-81 (600): two families of two sizes each.
    chains = table.assign(graph=table["graph"].map({"small": "chain-8", "large": "chain-64"}))
    trees = table.assign(graph=table["graph"].map({"small": "tree-9", "large": "tree-81"}), nodes=2 * table["nodes"])
    ax = scaling_figure(pd.concat([chains, trees], ignore_index=True)).axes[0]
    time_limit = "#555555"
    joined = [set(line.get_xdata()) for line in ax.get_lines() if line.get_color() != time_limit]
    assert joined and all(x in ({30, 300}, {60, 600}) for x in joined), joined  # before: 30-60-300-600 in one line
    assert "a line joins the graphs of one family" in ax.get_legend().get_title().get_text()
    assert graph_family("random_layered_n100_w0.27_nlv0.75_ed0.2_scd0.14") == \
        graph_family("random_layered_n250_w0.43_nlv0.75_ed0.2_scd0.14") != graph_family("chain-16")


def test_the_timeline_nudge_is_stated_in_memory_units(schedules):
    g, scheds = schedules
    fig = timeline_figure(g, [(m, s) for m, s in scheds if s is not None], budget=12)
    ax = fig.axes[0]
    note = ax.get_legend().get_title().get_text()
    low, high = ax.get_ylim()
    groups = len({tuple(simulate(g, s).step_memory) for _, s in scheds if s is not None})
    per_point = (high - low) / (ax.get_window_extent().height * 72 / fig.dpi)
    amount = (groups - 1) / 2 * LINE_GAP_PT * per_point
    assert note == ("lines that would cover one another are drawn side by side,\n"
                    f"at most {amount:.2g} units above or below their value")  # before: "1.2 pt apart"
    assert " pt" not in note


def test_schedule_files_are_drawn_one_colour_and_budget_each_named_by_file(tmp_path, schedules):
    import dataclasses

    from matplotlib.colors import to_hex

    g, _ = schedules
    tight, loose = run(g, "checkmate", "0.7", 10).schedule, run(g, "checkmate", "0.9", 10).schedule
    # A long schedule: the loose one after 300 recomputations of the first node (valid, 600 steps longer).
    steps = [("compute", 0), ("free", 0)] * 300 + list(zip(["compute" if k == 0 else "free" for k in loose.kinds],
                                                            map(int, loose.nodes)))
    long = dataclasses.replace(Schedule.from_steps(steps), method="checkmate", budget=loose.budget)
    save_schedule(tight, g, tmp_path / "a.json")
    save_schedule(long, g, tmp_path / "b.json")
    r = CliRunner().invoke(main, ["plot", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--graph", str(CHAIN),
                                  "--kind", "timeline", "-o", str(tmp_path / "t.png")])
    assert r.exit_code == 0, r.output
    assert non_blank(tmp_path / "t.png") > 0.05
    fig = timeline_figure(g, [("a.json (checkmate)", tight), ("b.json (checkmate)", long)],
                                 budgets=[tight.budget, long.budget], colour_each=True)
    ax = fig.axes[0]
    lines = {ln.get_label(): ln for ln in ax.get_lines()}
    a = next(ln for label, ln in lines.items() if label.startswith("a.json (checkmate): peak"))
    b = next(ln for label, ln in lines.items() if label.startswith("b.json (checkmate): peak"))
    assert to_hex(a.get_color()) == method_style("checkmate")["color"] != to_hex(b.get_color())
    budget_a = lines[f"budget {tight.budget} of a.json (checkmate)"]
    budget_b = lines[f"budget {loose.budget} of b.json (checkmate)"]
    assert budget_a.get_color() == a.get_color() and budget_b.get_color() == b.get_color()
    assert budget_a.is_dashed() and budget_b.is_dashed()
    # 77 and 669 steps: each drawn across the whole axis, against its own progress.
    assert ax.get_xlabel() == "progress through each schedule (% of its steps)"
    for line in (a, b):
        assert line.get_xdata()[0] == 0 and line.get_xdata()[-1] == pytest.approx(100)
    # Results of one budget keep the one neutral budget line and the step axis.
    same = timeline_figure(g, [("a", tight), ("b", tight)], budgets=[tight.budget, tight.budget])
    assert same.axes[0].get_xlabel() == "step"
    assert [ln.get_label() for ln in same.axes[0].get_lines() if ln.get_label().startswith("budget")] == \
        [f"budget {tight.budget}"]


def progress_tables():
    """The hand-made sweep of tests/test_profiles.py, with what the charts read besides."""
    from tests.test_profiles import hand_made_sweep

    results, points = hand_made_sweep()
    results = results.assign(budget_fraction=results["budget_text"].astype(float), lower_bound_any_order=99.0,
                             baseline_duration=90.0, overhead_pct=100 * (results["duration"] / 90.0 - 1))
    points = points.assign(overhead_pct=100 * (points["duration"] / 90.0 - 1))
    return results, points


def test_the_progress_chart_draws_each_run_to_its_end_and_the_bound(tmp_path):
    results, points = progress_tables()
    fig = progress_figure(results, points)
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert len(axes) == 2  # one graph at two budgets
    at_08 = next(ax for ax in axes if ax.get_title().endswith("at 0.8"))
    steps = [ln for ln in at_08.get_lines() if ln.get_drawstyle() == "steps-post"]
    assert [list(ln.get_xdata()) for ln in steps] == [[1.0, 5.0, 5.0], [2.0, 8.0, 8.0]]  # A, then B, to their ends
    assert at_08.get_xscale() == "log"
    bound = [ln for ln in at_08.get_lines() if ln.get_linestyle() == "--"]
    assert len(bound) == 1 and bound[0].get_ydata()[0] == pytest.approx(100 * (99 / 90 - 1))
    save(progress_figure(results, points), tmp_path / "p.png")
    assert (tmp_path / "p.png").stat().st_size > 0


def test_the_progress_chart_dots_a_methods_own_bound_and_skips_bound_only_points():
    results, points = progress_tables()
    first = points["run_id"].iloc[0]
    # As a recorder writes them: each point carries the best bound so far.
    # The any-order bound of these runs is 99: an own bound below it is drawn at it.
    points = points.assign(bound=[(95.0 if t < 3 else 102.6) if run == first else None
                                  for run, t in zip(points["run_id"], points["time_s"], strict=True)])
    bound_only = pd.DataFrame([{"run_id": first, "time_s": 3.0, "duration": None, "peak": None,
                                "overhead_pct": None, "source": "A", "bound": 102.6}])
    points = pd.concat([points, bound_only], ignore_index=True)
    fig = progress_figure(results, points)
    dotted = [ln for ax in fig.axes for ln in ax.get_lines() if ln.get_linestyle() == ":"]
    assert len(dotted) == 1
    # 95 (drawn at the any-order bound, 99) until 3 s, then 102.6 (the bound-only point), to the run's end;
    # as overheads over 90.
    assert list(dotted[0].get_ydata()) == pytest.approx([100 * (99 / 90 - 1)] + [100 * (102.6 / 90 - 1)] * 3)
    steps = [ln for ax in fig.axes for ln in ax.get_lines() if ln.get_drawstyle() == "steps-post"
             and ln.get_linestyle() == "-"]
    assert all(not np.isnan(ln.get_ydata()).any() for ln in steps)


def test_time_to_best_takes_the_first_time_the_best_was_held():
    points = pd.DataFrame({"run_id": ["r"] * 4, "time_s": [1.0, 2.0, 3.0, 9.0], "duration": [120.0, 100.0, None, 100.0],
                           "bound": [None, None, 90.0, None]})
    assert best_held_at(points).to_dict() == {"r": 2.0}


def test_the_profile_chart_steps_through_the_hand_computed_shares():
    results, points = progress_tables()
    fig = profile_figure(results, points, within_pct=10.0)
    left = fig.axes[0]
    lines = {ln.get_label(): ln for ln in left.get_lines()}
    # Within 10% (110): A at 5 s and 3 s, B at 8 s and never: at tau 1, A is fastest on both; B on none.
    assert lines["A"].get_ydata()[0] == pytest.approx(1.0)
    assert lines["B"].get_ydata()[0] == pytest.approx(0.0)
    tau = lines["B"].get_xdata()
    assert lines["B"].get_ydata()[np.searchsorted(tau, 1.6)] == pytest.approx(0.5)  # 8 s is 1.6 x A's 5 s


def test_the_time_to_best_chart_puts_each_run_at_its_last_improvement():
    results, points = progress_tables()
    fig = time_to_best_figure(results, points)
    ax = fig.axes[0]
    lines = {ln.get_label(): ln for ln in ax.get_lines()}
    # A's runs held their best at 5 s (0.8) and 3 s (0.9): the median 4 s; B's one run at 8 s.
    assert list(lines["A"].get_ydata()) == [4.0] and list(lines["B"].get_ydata()) == [8.0]
    assert ax.get_xscale() == ax.get_yscale() == "log"


# ---------------------------------------------------------------------- prediction against measurement


def replayed(graph: str, method: str, fraction: float, modelled: float, measured: float | None,
             interval: tuple[float, float] | None = None, replay: str = "measured",
             params: dict | None = None) -> dict:
    """A run of `row` replayed: its measured overhead, with a 95% interval or (without one) a range of -1..+2."""
    return {**row(graph, 30, method, fraction, "feasible", modelled, 0.1, params), "replay_status": replay,
            "modelled_overhead_pct": modelled, "measured_overhead_pct": measured,
            "measured_overhead_min_pct": None if measured is None else measured - 1,
            "measured_overhead_max_pct": None if measured is None else measured + 2,
            "measured_overhead_low_pct": None if interval is None else interval[0],
            "measured_overhead_high_pct": None if interval is None else interval[1],
            "timing_clock": "thread CPU time", "replay_pairs": 20}


@pytest.fixture(scope="module")
def replays():
    return build_table([
        replayed("small", "chen", 0.8, 12.0, 13.0, (12.2, 13.9), params={"variant": "greedy"}),
        replayed("small", "chen", 0.8, 17.0, 16.5, params={"variant": "sqrt"}),  # no interval: its range
        replayed("small", "moccasin", 0.8, 4.0, 4.6, (4.1, 5.0)),
        replayed("small", "greedy", 0.8, 4.0, 4.4, (4.0, 4.9)),  # moccasin's schedule too: set beside it
        replayed("small", "moccasin", 0.6, 9.0, 8.0, (7.5, 8.6)),
        replayed("small", "chen", 0.6, 30.0, None, replay="failed", params={"variant": "greedy"}),
        replayed("small", "none", 1.0, 0.0, None),  # replayed without a baseline: no overhead measured
        row("small", 30, "moccasin", 1.0, "optimal", 0.0, 0.1),  # not replayed
    ])


def test_the_prediction_chart_draws_a_point_and_a_bar_per_replayed_run(tmp_path, replays):
    fig = prediction_figure(replays)
    assert non_blank(save(fig, tmp_path / "prediction.png")) > 0.05
    ax = fig.axes[0]
    bars = [c for c in ax.containers if c.has_yerr]
    points = sorted((x, y) for c in bars for x, y in zip(c.lines[0].get_xdata(), c.lines[0].get_ydata()))
    assert points == [(4.0, 4.4), (4.0, 4.6), (9.0, 8.0), (12.0, 13.0), (17.0, 16.5)]  # not the failed, nor none
    segments = {alpha: sorted((float(s[0][1]), float(s[1][1])) for c in bars for coll in c.lines[2]
                              if coll.get_alpha() == alpha for s in coll.get_segments())
                for alpha in {coll.get_alpha() for c in bars for coll in c.lines[2]}}
    # Four 95% intervals at full strength; chen (sqrt)'s range, min to max, lighter.
    assert segments == {1.0: [(4.0, 4.9), (4.1, 5.0), (7.5, 8.6), (12.2, 13.9)], 0.3: [(15.5, 18.5)]}
    # |errors| 0.4, 0.6, 1.0, 1.0, 0.5: median 0.6.
    assert ax.get_title() == ("Measured against modelled overhead\nmedian |measured - modelled| 0.60 points over 5 "
                              "replayed runs")
    legend = ax.get_legend()
    texts = [t.get_text() for t in legend.get_texts()]
    assert "bar: 95% interval of the measured overhead" in texts
    assert "light bar: min to max of the pairs\n(no 95% interval)" in texts
    title = legend.get_title().get_text()
    assert "times: thread CPU time" in title and "1 replay failed: not drawn" in title
    assert "1 replayed without a baseline" in title and "set side by side" in title
    # y = x across the (shared) range, and the two points at modelled 4.0 set apart by the dodge, in page points.
    assert ax.get_xlim() == ax.get_ylim()
    assert any(list(line.get_xdata()) == list(line.get_ydata()) == list(ax.get_xlim()) for line in ax.get_lines())
    at_four = [c.lines[0] for c in bars if list(c.lines[0].get_xdata()) == [4.0]]
    pixels = sorted(line.get_transform().transform((4.0, 4.5))[0] for line in at_four)
    assert pixels[1] - pixels[0] == pytest.approx(4.5 * fig.dpi / 72)


def test_the_prediction_chart_of_old_results_draws_ranges_and_refuses_without_replays(replays):
    old = replays.drop(columns=["measured_overhead_low_pct", "measured_overhead_high_pct", "timing_clock",
                                "replay_pairs"])
    ax = prediction_figure(old).axes[0]
    alphas = [coll.get_alpha() for c in ax.containers for coll in c.lines[2]]
    assert len(alphas) == 5 and set(alphas) == {0.3}  # every bar a range, lighter
    texts = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "bar: 95% interval of the measured overhead" not in texts
    with pytest.raises(ChartError, match="no run was replayed with its overhead measured"):
        prediction_figure(replays.assign(replay_status=None))


def test_plot_draws_the_prediction_chart_of_replays(tmp_path, replays, results):
    folder = tmp_path / "replayed"
    folder.mkdir()
    replays.to_parquet(folder / "results.parquet")
    out = tmp_path / "prediction.png"
    r = CliRunner().invoke(main, ["plot", str(folder), "--kind", "prediction", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert non_blank(out) > 0.05 and "prediction of 8 runs" in r.output
    line = refusal(CliRunner().invoke(main, ["plot", str(results), "--kind", "prediction", "-o", str(out)]))
    assert "no run was replayed with its overhead measured" in line and "replay:" in line


def test_a_timeline_of_a_schedule_that_moves_values_shows_its_streams_over_time(tmp_path):
    from remat_bench.core.graph import Link, Transfer

    g = make_graph({"a": [], "b": ["a"], "c": ["b"], "d": ["a", "c"]}, memory={"a": 100, "b": 50, "c": 10, "d": 10},
                   duration={"a": 10, "b": 20, "c": 5, "d": 30}, outputs=["d"],
                   transfer=Transfer(Link(10.0, 1.0), Link(5.0, 2.0)))
    s = Schedule.from_steps([(word, g.index[v]) for word, v in (
        ("compute", "a"), ("compute", "b"), ("offload", "a"), ("compute", "c"), ("free", "b"), ("reload", "a"),
        ("compute", "d"), ("free", "a"), ("free", "c"))])
    fig = timeline_figure(g, [("by hand", s)])
    streams, memory = fig.axes
    # tests/test_offload.py's times: computations a [0,10], b [10,30], c [30,35], d [63,93]; a's copy out
    # [30,41] and back [41,63].
    bars = [[tuple(p.get_extents().bounds[::2]) for p in c.get_paths()] for c in streams.collections]
    assert bars == [[(0.0, 10.0), (10.0, 20.0), (30.0, 5.0), (63.0, 30.0)], [(30.0, 11.0)], [(41.0, 22.0)]]
    assert [t.get_text() for t in streams.get_yticklabels()] == ["compute (4)", "device to host (1)",
                                                                 "host to device (1)"]
    assert "waits for copies 28" in streams.get_title() and "host peak 100" in streams.get_title()
    assert memory.get_xlabel() == "step"
    assert non_blank(save(fig, tmp_path / "timeline.png")) > 0.05
