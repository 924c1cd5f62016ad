"""For every shipped graph and every method at 0.8: the file `solve -o` writes, simulated again by
`remat-bench simulate`, gives exactly the peak and duration `solve` printed."""

from __future__ import annotations

import glob
import json

import pytest
from click.testing import CliRunner

from remat_bench.app.catalog import method_names
from remat_bench.app.cli import main
from tests.helpers import SHIPPED

GRAPHS = sorted(glob.glob(str(SHIPPED / "*.json")))
METHODS = method_names()


@pytest.mark.parametrize("graph", GRAPHS, ids=lambda p: p.rsplit("/", 1)[-1])
def test_solve_output_resimulates_to_the_same_numbers(graph, tmp_path):
    from remat_bench.core.baseline import baseline
    from remat_bench.core.budget import memory_floor
    from remat_bench.core.graph_io import load_graph

    g = load_graph(graph)
    # 0.8 as the issue asks; where 0.8 is below the memory floor nothing could be checked there, so
    # halfway between the floor and the baseline peak, as an absolute amount.
    floor, peak = memory_floor(g).amount, baseline(g).peak
    budget = "0.8" if floor <= 0.8 * peak else str(int((floor + peak) // 2))
    runner = CliRunner()
    checked = 0
    for method in METHODS:
        out = tmp_path / f"{method}.json"
        # 1 s each: what a method finds does not matter here, only that its file says what solve printed.
        r = runner.invoke(main, ["solve", graph, "-m", method, "-b", budget, "-t", "1", "--json", "-o", str(out)])
        assert r.exit_code in (0, 1), f"{method}: {r.output}"
        solved = json.loads(r.output)
        if solved["peak"] is None:
            assert not out.exists()
            continue
        s = runner.invoke(main, ["simulate", graph, str(out), "--json"])
        assert s.exit_code == 0, f"{method}: {s.output}"
        simulated = json.loads(s.output)
        assert (simulated["peak"], simulated["duration"], simulated["steps"]) == (
            solved["peak"], solved["duration"], solved["schedule_steps"]), method
        checked += 1
    assert checked >= 3  # most methods answer on every graph; 'none' alone always writes a schedule
