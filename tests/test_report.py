"""The Markdown report: summary per method, best method per budget, charts linked relatively, per-graph tables."""

from __future__ import annotations

import re
import shutil

import pytest
from click.testing import CliRunner

from remat_bench.app.cli import main
from remat_bench.app.report.write import write_report
from remat_bench.app.sweep import load_config, load_table, run_sweep
from tests.helpers import SHIPPED

CHAIN = SHIPPED / "chain-16-train.json"


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    folder = tmp_path_factory.mktemp("report")
    config = folder / "sweep.yaml"
    config.write_text(f"""
name: report-test
graphs:
  - {CHAIN}
  - generate: {{kind: chain, layers: 6}}
methods:
  - none
  - name: chen
    params: {{variant: [greedy, sqrt]}}
  - greedy
budgets: [0.9, 0.6]
time_limit: 20
""")
    run_sweep(load_config(config, output=folder / "out"), workers=2)
    return folder / "out"


@pytest.fixture(scope="module")
def report(results, tmp_path_factory):
    return write_report(results, tmp_path_factory.mktemp("docs") / "report.md")


def table_rows(text: str, heading: str) -> list[list[str]]:
    """The cells of the first Markdown table after ``heading``."""
    section = text.split(heading, 1)[1]
    rows = []
    for line in section.splitlines():
        if line.startswith("|"):
            if set(line) <= {"|", " ", "-"}:
                continue
            rows.append([c.strip() for c in line.strip("|").split("|")])
        elif rows:
            break
    return rows


def test_report_holds_summary_best_methods_charts_and_per_graph_tables(report, results):
    path = report
    text = path.read_text()
    assert text.startswith("# Sweep report: report-test\n")
    assert "16 runs of 3 methods on 2 graphs" in text

    summary = table_rows(text, "## Summary per method")
    assert summary[0] == ["method", "runs", "success rate", "timeouts", "failures", "overhead % (sgm)",
                          "solve time s (sgm)"]
    by_method = {r[0]: r for r in summary[1:]}
    assert set(by_method) == {"none", "chen (variant=greedy)", "chen (variant=sqrt)", "greedy"}
    assert by_method["none"][2] == "0% (0/4)"  # the baseline fits no budget below 1
    assert "shift" in text and "s = 1 percentage point" in text and "s = 1 s" in text

    best = table_rows(text, "## Best method at each budget")
    assert best[0] == ["graph", "budget 0.9", "budget 0.6"]
    assert [r[0] for r in best[1:]] == ["chain-6", "chain-16", "**most often best**"]

    table = load_table(results)
    chain16 = table_rows(text, "## chain-16")
    assert chain16[0][:7] == ["method", "budget", "status", "overhead %", "peak (% of baseline)", "solve time s",
                              "gap %"]
    assert "any-order bound (overhead %)" in chain16[0]  # every run here carries the any-order bound
    assert len(chain16) - 1 == (table["graph"] == "chain-16").sum()
    greedy = table[(table["graph"] == "chain-16") & (table["method"] == "greedy")].set_index("budget_text")
    cells = {r[1]: r for r in chain16[1:] if r[0] == "greedy"}
    for budget in ("0.9", "0.6"):
        assert cells[budget][2].split()[0] == greedy.loc[budget, "status"]
        if greedy.loc[budget, "status"] in ("optimal", "feasible"):
            assert cells[budget][3] == f"{greedy.loc[budget, 'overhead_pct']:+.2f}"

    # Charts exist beside the report and are linked relatively.
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert "report-figures/tradeoff.png" in links
    assert any(link.endswith("-timeline.png") for link in links)
    assert any(link.endswith("-intervals.png") for link in links)
    for link in links:
        assert not link.startswith("/") and (path.parent / link).is_file()


def test_best_method_picks_the_least_overhead_and_lists_ties(report, results):
    text = report.read_text()
    table = load_table(results)
    ok = table[table["status"].isin(["optimal", "feasible"]) & (table["graph"] == "chain-16")
               & (table["budget_text"] == "0.6")]
    best = ok["overhead_pct"].min()
    row = {r[0]: r for r in table_rows(text, "## Best method at each budget")}["chain-16"]
    assert not ok.empty
    assert row[2].endswith(f"({best:+.2f}%)")
    winners = set(ok.loc[ok["overhead_pct"] <= best + 1e-9, "method"])
    assert all(any(w in row[2] for w in winners) for w in winners)


def test_report_command_and_a_folder_with_only_the_table(tmp_path, results):
    copy = tmp_path / "copy"
    shutil.copytree(results, copy)
    (copy / "journal.jsonl").unlink()  # e.g. reference results kept as Parquet only
    r = CliRunner().invoke(main, ["report", str(copy), "-o", str(tmp_path / "out.md")])
    assert r.exit_code == 0, r.output
    assert "## chain-6" in (tmp_path / "out.md").read_text()
    bad = CliRunner().invoke(main, ["report", str(copy), "-o", str(tmp_path / "out.html")])
    assert bad.exit_code == 2 and "ending in .md" in bad.output
    empty = tmp_path / "empty"
    empty.mkdir()
    none = CliRunner().invoke(main, ["report", str(empty), "-o", str(tmp_path / "e.md")])
    assert none.exit_code == 2 and "holds no results" in none.output


def test_finding_section_states_whether_rematerialization_is_needed():
    import pandas as pd

    from remat_bench.app.report.sections import finding_section

    def row(method, budget, status, overhead, bound, params="{}"):
        return {"graph": "g", "budget_text": budget, "budget_fraction": float(budget), "method": method,
                "params": params, "status": status, "ok": status in ("optimal", "feasible"),
                "overhead_pct": overhead, "lower_bound_any_order": bound, "baseline_duration": 100.0}

    frame = pd.DataFrame([
        row("moccasin", "0.9", "optimal", 2.0, 100.0, '{"order":"staged"}'),
        row("reorder", "0.9", "optimal", 0.0, 100.0),
        row("moccasin", "0.8", "optimal", 3.0, 103.0, '{"order":"staged"}'),
        row("reorder", "0.8", "infeasible", None, 103.0),
        row("checkmate", "0.7", "feasible", 6.0, 104.0),
    ])
    text = finding_section(frame)
    assert text.startswith("On 1 of 3 graph-budget pairs another topological order fits")
    assert "| g | 0.9 | +2.000 | +0.000 | +0.000 | no rematerialization needed: an order fits at 0% |" in text
    assert "on 1 it is proven that none does, so rematerialization is needed; 2 of 3 are proven optimal" in text
    assert ("| g | 0.8 | +3.000 | +3.000 | +3.000 | rematerialization needed (no order fits, proven); "
            "proven optimal (best = bound) |") in text
    assert "| g | 0.7 | +6.000 | +6.000 | +4.000 | open: gap 2.000 points |" in text


def test_the_gap_section_sets_the_best_schedule_beside_the_best_bound(report, results):
    text = report.read_text()
    table = load_table(results)
    rows = {(r[0], r[1]): r for r in table_rows(text, "## Best schedule, best bound and the gap")}
    for (graph, budget), runs in table.groupby(["graph", "budget_text"]):
        ok = runs[runs["status"].isin(["optimal", "feasible"])]
        row = rows[(graph, budget)]
        base = float(runs["baseline_duration"].iloc[0])
        bound = 100 * (float(runs["lower_bound_any_order"].max()) / base - 1)
        assert row[3] == f"{bound:+.3f}%"
        if ok.empty:
            assert row[2] == "-" and row[6] == "none found"
            continue
        best = float(ok["overhead_pct"].min())
        assert row[2] == f"{best:+.3f}%" and row[4] == f"{best - bound:.3f}"
        assert (row[5] == "yes") == (best - bound <= 1e-9)
    # chain-16 at 0.9: greedy reaches the any-order bound, so it is proven optimal there.
    assert rows[("chain-16", "0.9")][5] == "yes"


def test_the_production_section_sets_each_planner_beside_the_best_and_the_bound():
    import pandas as pd

    from remat_bench.app.report.sections import production_section

    def row(method, status, overhead, peak, params="{}", budget="0.5"):
        return {"graph": "g", "budget_text": budget, "budget_fraction": float(budget), "method": method,
                "params": params, "status": status, "ok": status in ("optimal", "feasible"),
                "overhead_pct": overhead, "peak": peak, "budget": 200.0 if budget == "0.5" else 320.0,
                "lower_bound_any_order": 102.0, "baseline_duration": 100.0, "label": method}

    frame = pd.DataFrame([
        row("checkmate", "feasible", 4.0, 190.0),
        row("auto", "feasible", 3.0, 195.0),  # a portfolio: not "the best of the others"
        row("knapsack", "feasible", 9.5, 199.0),
        row("policy", "no_solution", 1.0, 250.0),
        row("dtr", "no_solution", None, None),
        row("torch-budget", "unsupported", None, None),
        row("checkmate", "optimal", 0.0, 300.0, budget="0.8"),
    ])
    assert production_section(frame[frame["method"] == "checkmate"]) is None
    text = production_section(frame)
    rows = {r[2]: r for r in table_rows("## x\n" + text, "## x")}
    assert rows["knapsack"] == ["g", "0.5", "knapsack", "feasible", "+9.500%", "fits (99.5% of it)", "+6.500",
                                "+3.000% (auto)", "+2.000%"]
    assert rows["policy"][4:7] == ["+1.000%", "**over by 25.0%**", ""]
    assert rows["dtr"][3:7] == ["no_solution", "", "", ""]
    assert "torch-budget" not in rows and "Left out: 1 runs answered `unsupported`" in text
    assert "0.8" not in {r[1] for r in rows.values()}  # no planner ran at 0.8


def test_rows_that_cannot_be_read_are_left_out_with_a_count(tmp_path, results):
    copy = tmp_path / "copy"
    shutil.copytree(results, copy)
    (copy / "results.parquet").unlink()
    runs = len(load_table(copy))
    with (copy / "journal.jsonl").open("a") as fh:
        # A row edited by hand, one whose run key cannot be built, and the partial line of a killed write.
        fh.write('{"run_id": 5}\n{"graph": "g", "graph_sha256": "x", "method": "none", "params": "{}", '
                 '"budget_text": "0.9", "status": "feasible", "repeat": "twice", "time_limit": 20}\n{"graph": 5')
    table = load_table(copy)
    assert len(table) == runs and table.attrs["skipped_rows"] == 3
    note = (f"3 rows of {copy / 'journal.jsonl'} could not be read (cut short, or without the columns that name "
            "a run) and are left out")
    r = CliRunner().invoke(main, ["report", str(copy), "-o", str(tmp_path / "r.md")])
    assert r.exit_code == 0, r.output
    assert "Traceback" not in r.output and f"note: {note}" in " ".join(r.output.split())
    assert f"Note: {note}." in (tmp_path / "r.md").read_text()
    r = CliRunner().invoke(main, ["plot", str(copy), "-o", str(tmp_path / "t.png")])
    assert r.exit_code == 0, r.output
    assert f"note: {note}" in " ".join(r.output.split()) and (tmp_path / "t.png").stat().st_size > 0
    # Nothing readable at all: the one sentence says why.
    only = tmp_path / "only"
    only.mkdir()
    (only / "journal.jsonl").write_text('{"run_id": 5}\n')
    r = CliRunner().invoke(main, ["report", str(only), "-o", str(tmp_path / "o.md")])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert " ".join(r.output.split()) == (f"error: {only}: the results hold no runs yet that can be read: 1 row of "
                                          f"{only / 'journal.jsonl'} could not be read (cut short, or without the "
                                          "columns that name a run) and is left out")


def test_a_graph_name_longer_than_a_file_name_still_gets_its_charts(tmp_path):
    """A chart's file name comes from the graph's name: one of 300 characters was 'File name too long'."""
    import json

    data = json.loads(CHAIN.read_text())
    data["name"] = "a-very-long-graph-name-" * 13
    graph = tmp_path / "long.json"
    graph.write_text(json.dumps(data))
    config = tmp_path / "sweep.yaml"
    config.write_text(f"name: long\ngraphs: [{graph}]\nmethods: [none, chen]\nbudgets: [0.9]\ntime_limit: 20\n")
    run_sweep(load_config(config, output=tmp_path / "out"), workers=1)
    report = tmp_path / "report.md"
    r = CliRunner().invoke(main, ["report", str(tmp_path / "out"), "-o", str(report)])
    assert r.exit_code == 0, r.output
    figures = sorted(p.name for p in (tmp_path / "report-figures").iterdir())
    assert any(name.endswith("-timeline.png") for name in figures)
    assert max(len(name) for name in figures) <= 120


def test_the_speed_section_reads_the_progress_table():
    from remat_bench.app.report.sections import speed_section
    from tests.test_charts import progress_tables

    results, points = progress_tables()
    frame = results.assign(label=results["method"])
    text = speed_section(frame, points)
    rows = {line.split(" | ")[0].strip("| "): line for line in text.splitlines() if line.startswith("| A")
            or line.startswith("| B")}
    assert rows["A"] == "| A | 2 | 100% | 1.00 | 0.269 | 2.00 |"
    assert rows["B"] == "| B | 2 | 50% | 1.47 | 0.650 | 2.00 |"
