"""One graph lookup (`remat_bench.app.graphs`) for every place a graph is named: the command line, sweep
configs and `plot --graph` (issue 31)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from remat_bench.app.cli import main
from remat_bench.app.graphs import LISTED, find_graph, graph_named
from remat_bench.app.sweep import load_config
from remat_bench.app.sweep.results import load_table
from remat_bench.core.errors import ConfigError, GraphError
from tests.helpers import PAPER_NAMES, SHIPPED, paper_graph

CHAIN = SHIPPED / "chain-16-train.json"
KUMAR = SHIPPED / "kumar-figure1.json"


@pytest.fixture(autouse=True)
def shipped_graphs_only(monkeypatch):
    """The search path is the shipped graphs/ alone, whatever the environment says."""
    monkeypatch.delenv("REMAT_BENCH_GRAPHS", raising=False)


def unknown_name(text: str, hint: str = "") -> str:
    """The sentence for a name that names no graph, built from what is on the search path."""
    stems = ", ".join(path.stem for path in sorted(SHIPPED.glob("*.json")))
    published = ", ".join(f"paper:{name}" for name in PAPER_NAMES)
    return (f"{text}: no such file, and no shipped graph of that name{hint}; a graph is named by its file on the "
            f"search path ({stems}), by the name inside that file, or as a published graph ({published})")


def test_a_graph_is_a_path_its_file_name_or_the_name_inside_it(tmp_path, monkeypatch):
    assert find_graph(str(CHAIN)) == CHAIN
    assert graph_named("chain-16-train") == graph_named("chain-16-train.json") == graph_named("chain-16") == CHAIN
    # $REMAT_BENCH_GRAPHS comes before the shipped graphs; a file that exists comes before any name.
    (tmp_path / "chain-16-train.json").write_text(KUMAR.read_text())
    monkeypatch.setenv("REMAT_BENCH_GRAPHS", str(tmp_path))
    assert graph_named("chain-16-train") == tmp_path / "chain-16-train.json"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "kumar-figure1").write_text("{}")
    assert find_graph("kumar-figure1") == Path("kumar-figure1")


def test_an_unknown_name_is_one_sentence_listing_the_known_names():
    sentence = unknown_name("chain-17", " (did you mean 'chain-16-train'?)")
    with pytest.raises(GraphError) as info:
        find_graph("chain-17")
    assert str(info.value) == sentence
    r = CliRunner().invoke(main, ["graphs", "show", "chain-17"])
    assert (r.exit_code, r.output) == (2, f"error: {sentence}\n")


def test_a_long_search_path_is_listed_in_part(tmp_path, monkeypatch):
    for i in range(LISTED + 5):
        (tmp_path / f"g{i:02d}.json").write_text("{}")
    monkeypatch.setenv("REMAT_BENCH_GRAPHS", str(tmp_path))
    shipped = len(list(SHIPPED.glob("*.json")))
    with pytest.raises(GraphError) as info:
        graph_named("nothing-like-it")
    listed = ", ".join(f"g{i:02d}" for i in range(LISTED))
    assert (f"its file on the search path ({listed} and {5 + shipped} more (`remat-bench graphs list` shows them "
            "all)), by the name inside that file") in str(info.value)


# ---------------------------------------------------------------------- sweep configs


def test_a_sweep_config_names_graphs_as_the_command_line_does(tmp_path):
    """`graphs: [chain-16-train]` failed with 'graph file .../chain-16-train does not exist'."""
    config = tmp_path / "named.yaml"
    config.write_text("output: out\ntime_limit: 20\ngraphs:\n  - chain-16-train\n  - path: kumar-figure1\n"
                      "methods: [none]\nbudgets: [0.9]\n")
    r = CliRunner().invoke(main, ["sweep", str(config), "--workers", "1"])
    assert r.exit_code == 0, r.output
    table = load_table(tmp_path / "out")
    rows = sorted(zip(table["graph"], table["graph_path"], table["method"], table["budget_text"], table["status"]))
    assert rows == [("chain-16", str(CHAIN), "none", "0.9", "infeasible"),
                    ("kumar-figure1", str(KUMAR), "none", "0.9", "infeasible")]


def test_a_sweep_config_keeps_files_beside_it_first_and_paths_as_paths(tmp_path):
    # A file beside the config wins over a shipped graph of the same name.
    (tmp_path / "chain-16-train").write_text(KUMAR.read_text())
    config = tmp_path / "beside.yaml"
    config.write_text("graphs: [chain-16-train, chain-16]\nmethods: [none]\nbudgets: [0.9]\n")
    assert [(g.name, g.path) for g in load_config(config).graphs] == [
        ("kumar-figure1", tmp_path / "chain-16-train"), ("chain-16", CHAIN)]
    # A text with a folder in it is a path: not there, it is a missing file, not a name.
    config.write_text("graphs: [graphs/chain-16-train]\nmethods: [none]\nbudgets: [0.9]\n")
    with pytest.raises(ConfigError) as info:
        load_config(config)
    assert str(info.value) == f"{config}, line 1: graph file {tmp_path / 'graphs' / 'chain-16-train'} does not exist"


def test_a_sweep_config_names_an_unknown_graph_and_the_known_ones_at_its_line(tmp_path):
    config = tmp_path / "unknown.yaml"
    config.write_text("graphs:\n  - chain-16-train\n  - path: chain-17\nmethods: [none]\nbudgets: [0.9]\n")
    with pytest.raises(ConfigError) as info:
        load_config(config)
    assert str(info.value) == f"{config}, line 3: " + unknown_name("chain-17", " (did you mean 'chain-16-train'?)")


def test_a_sweep_config_names_a_published_graph_by_paper_name_or_by_its_own(tmp_path):
    path = paper_graph("random_layered_n100")  # skipped when the published graphs are not here
    config = tmp_path / "paper.yaml"
    config.write_text("graphs:\n  - paper:random_layered_n100\n"
                      "  - path: random_layered_n250_w0.43_nlv0.75_ed0.2_scd0.14\n"  # the name inside its file
                      "methods: [none]\nbudgets: [0.9]\n")
    assert [g.path for g in load_config(config).graphs] == [path, paper_graph("random_layered_n250")]


# ---------------------------------------------------------------------- plot


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    folder = tmp_path_factory.mktemp("lookup")
    config = folder / "sweep.yaml"
    config.write_text(f"graphs: [{CHAIN}]\nmethods: [greedy]\nbudgets: [0.7]\ntime_limit: 20\n")
    assert CliRunner().invoke(main, ["sweep", str(config), "-o", str(folder / "out"), "-j", "1"]).exit_code == 0
    return folder / "out"


@pytest.mark.parametrize("kind", ["timeline", "intervals"])
def test_plot_from_results_takes_the_graph_by_any_of_its_names(tmp_path, results, kind):
    """`--graph chain-16-train` picked the runs, then the schedules were looked for under that name: 'no graph
    named 'chain-16-train' in the results'."""
    for name in ("chain-16", "chain-16-train", str(CHAIN)):
        r = CliRunner().invoke(main, ["plot", str(results), "--kind", kind, "-g", name, "-o", str(tmp_path / "x.png")])
        assert r.exit_code == 0, r.output
        assert r.output == f"wrote {tmp_path / 'x.png'}: {kind} of chain-16 at budget 0.7 (greedy)\n"


def test_graphs_list_shows_every_name_the_lookup_knows():
    rows = json.loads(CliRunner().invoke(main, ["graphs", "list", "--json"]).output)
    assert [r["graph"] for r in rows] == [*(path.stem for path in sorted(SHIPPED.glob("*.json"))),
                                          *(f"paper:{name}" for name in PAPER_NAMES)]
