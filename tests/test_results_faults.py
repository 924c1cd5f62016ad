"""Bad input to what reads a results folder and to the options of plot and sweep (docs/sweeps.md): a corrupt
table, a journal naming a device or a pipe, a non-finite --within, more workers than cores, a replay with
nothing to replay. Each is one sentence and an exit status, never a traceback or a hang; each test here
failed before the fix it covers.

The results folder is one tiny sweep (none, chen and greedy on the shipped chain at two budgets), copied
and spoiled by each test.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from remat_bench.app.cli import main
from tests.helpers import SHIPPED

CHAIN = SHIPPED / "chain-16-train.json"


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    folder = tmp_path_factory.mktemp("results")
    config = folder / "sweep.yaml"
    config.write_text(f"graphs: [{CHAIN}]\nmethods: [none, chen, greedy]\nbudgets: [0.9, 0.8]\ntime_limit: 20\n")
    result = CliRunner().invoke(main, ["sweep", str(config), "--output", str(folder / "out"), "--workers", "2"])
    assert result.exit_code == 0, result.output
    return folder / "out"


def refused(result, *words: str) -> str:
    """The one line a refused command printed, checked: no traceback, exit status 1 or 2, ``words`` in it."""
    assert result.exit_code in (1, 2), result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


# ---------------------------------------------------------------------- plot --within


@pytest.mark.parametrize("within", ["nan", "inf", "-inf", "1e400", "-1", "many"])
def test_within_refuses_what_is_not_a_finite_number_of_at_least_0(results, tmp_path, within):
    result = CliRunner().invoke(main, ["plot", str(results), "--kind", "profile", "--within", within,
                                       "-o", str(tmp_path / "p.png")])
    line = refused(result, "--within", within, "give a finite number of at least 0")
    assert result.exit_code == 2, line
    assert not (tmp_path / "p.png").exists()


def test_within_takes_a_finite_percentage(results, tmp_path):
    result = CliRunner().invoke(main, ["plot", str(results), "--kind", "profile", "--within", "0.5",
                                       "-o", str(tmp_path / "p.png")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "p.png").is_file()
