"""Schedule files (docs/design.md section 4) and `remat-bench simulate`."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from remat_bench.app.cli import main
from remat_bench.core.baseline import baseline_schedule
from remat_bench.core.errors import ScheduleError
from remat_bench.core.graph_io import save_graph
from remat_bench.core.schedule import load_schedule, save_schedule
from remat_bench.core.simulate import simulate
from tests.helpers import make_graph


@pytest.fixture()
def files(tmp_path):
    g = make_graph({"A": [], "B": ["A"], "C": ["B"], "D": ["B", "C"], "E": ["A", "D"]}, name="kumar")
    gp, sp = tmp_path / "g.json", tmp_path / "s.json"
    save_graph(g, gp)
    save_schedule(baseline_schedule(g).with_meta(method="none"), g, sp)
    return g, gp, sp


def test_round_trip(files):
    g, _, sp = files
    s = load_schedule(sp, g)
    assert s.method == "none"
    assert simulate(g, s).peak == 4
    data = json.loads(sp.read_text())
    assert data["graph"]["sha256"] == g.sha256
    assert data["steps"][:3] == [["compute", "A"], ["compute", "B"], ["compute", "C"]]


def test_simulate_cli_json(files):
    _, gp, sp = files
    result = CliRunner().invoke(main, ["simulate", str(gp), str(sp), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    keys = ("peak", "duration", "baseline_peak", "baseline_duration", "overhead_pct", "steps")
    assert {k: data[k] for k in keys} == {
        "peak": 4, "duration": 5, "baseline_peak": 4, "baseline_duration": 5, "overhead_pct": 0.0, "steps": 9}


def test_hash_mismatch_refused_unless_forced(files, tmp_path):
    _g, _, sp = files
    other = make_graph({"A": [], "B": ["A"], "C": ["B"], "D": ["B", "C"], "E": ["A", "D"]},
                       memory=2, name="other")
    op = tmp_path / "other.json"
    save_graph(other, op)
    result = CliRunner().invoke(main, ["simulate", str(op), str(sp)])
    assert result.exit_code == 2
    assert "was written for graph 'kumar'" in result.output and "--force" in result.output
    result = CliRunner().invoke(main, ["simulate", str(op), str(sp), "--force", "--json"])
    assert result.exit_code == 0
    assert json.loads(result.output)["peak"] == 8


@pytest.mark.parametrize(
    "steps, fragment",
    [
        ([["compute", "B"]], "step 0 (compute 'B'): input 'A' is not resident"),
        ([["compute", "A"], ["compute", "A"]], "step 1 (compute 'A'): 'A' is already resident"),
        ([["free", "A"]], "step 0 (free 'A'): 'A' is not resident"),
        ([["compute", "A"]], "node 'B' (and 3 other nodes) is never computed"),
        ([["compute", "Z"]], "step 0 (compute 'Z') names a node that is not in graph 'kumar'"),
        ([["compute", "A", "fft"]], "implementation 'fft', which it does not have"),
        ([["explode", "A"]], "step steps[0], field [0] is \"explode\""),
        ([["compute"]], "step steps[0]"),
    ],
)
def test_bad_schedules_exit_2_naming_the_step(files, tmp_path, steps, fragment):
    _, gp, _ = files
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "remat-bench-schedule", "version": 1, "steps": steps}))
    result = CliRunner().invoke(main, ["simulate", str(gp), str(bad)])
    assert result.exit_code == 2
    assert fragment in result.output, result.output
    assert "Traceback" not in result.output


def test_schedule_that_is_not_json(files, tmp_path):
    g, _, _ = files
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "remat-bench-schedule", "steps": [')
    with pytest.raises(ScheduleError, match="not valid JSON at line 1"):
        load_schedule(bad, g)
