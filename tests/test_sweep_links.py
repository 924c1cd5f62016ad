"""A sweep's ``links:`` (`remat_bench.app.sweep.links`): every graph once per host link, and the ``link`` column."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from remat_bench.app.cli import main
from remat_bench.app.sweep import load_config, run_sweep
from remat_bench.app.sweep.results import load_table
from remat_bench.core.errors import ConfigError
from remat_bench.core.graph import Graph, Link, Transfer
from remat_bench.core.graph_io import load_graph, save_graph
from tests.helpers import make_graph

BY_HAND = Transfer(Link(10.0, 1.0), Link(5.0, 2.0), "by hand")
UNNAMED = Transfer(Link(6.0), Link(3.0))  # a link whose figures say nothing of where they come from


def chain(name: str, transfer: Transfer | None, memory: int = 4) -> Graph:
    """a (``memory`` units) -> b (2) -> c (1): the baseline holds a and b at once."""
    return make_graph({"a": [], "b": ["a"], "c": ["b"]}, memory={"a": memory, "b": 2, "c": 1},
                      duration={"a": 3, "b": 2, "c": 1}, outputs=["c"], name=name, transfer=transfer)


def write(tmp_path: Path, body: str) -> Path:
    save_graph(chain("a", BY_HAND), tmp_path / "a.json")
    save_graph(chain("b", UNNAMED, memory=8), tmp_path / "b.json")
    path = tmp_path / "sweep.yaml"
    path.write_text(body, encoding="utf-8")
    return path


TWO_GRAPHS = """\
output: out
graphs: [a.json, b.json]
methods: [none]
budgets: [1.0]
"""


def test_each_graph_runs_once_per_link_named_by_it(tmp_path):
    cfg = load_config(write(tmp_path, TWO_GRAPHS + 'links: [x8, /8, "10,5"]\n'))
    a, b = chain("a", BY_HAND), chain("b", UNNAMED, memory=8)
    expected = [  # name, the graph with the link, file name before the hash, the link column
        ("a@x8", a.with_transfer(Transfer(Link(80.0, 1.0), Link(40.0, 2.0), "by hand x8")), "a@x8", "by hand x8"),
        ("a@/8", a.with_transfer(Transfer(Link(1.25, 1.0), Link(0.625, 2.0), "by hand x0.125")), "a@div8",
         "by hand x0.125"),
        ("a@10,5", a.with_transfer(Transfer(Link(10.0), Link(5.0), "link 10,5")), "a@10_5", "link 10,5"),
        ("b@x8", b.with_transfer(Transfer(Link(48.0), Link(24.0), "x8")), "b@x8", "x8"),
        ("b@/8", b.with_transfer(Transfer(Link(0.75), Link(0.375), "x0.125")), "b@div8", "x0.125"),
        ("b@10,5", b.with_transfer(Transfer(Link(10.0), Link(5.0), "link 10,5")), "b@10_5", "link 10,5"),
    ]
    assert len({graph.sha256 for _, graph, _, _ in expected} | {a.sha256, b.sha256}) == 8
    assert cfg.links == ["x8", "/8", "10,5"] and cfg.link_lines == [5, 5, 5] and cfg.planned_graphs == 6
    assert [s.name for s in cfg.graphs] == [name for name, _, _, _ in expected]
    for source, (name, graph, stem, link) in zip(cfg.graphs, expected):
        assert (source.name, source.sha256, source.link) == (name, graph.sha256, link)
        assert source.generated is not None and source.generated.transfer == graph.transfer
        assert source.path == cfg.output / "graphs" / f"{stem}-{graph.sha256[:8]}.json"
    assert [(r.graph, r.graph_sha256, r.link, r.graph_path) for r in cfg.runs] == [
        (s.name, s.sha256, s.link, str(s.path)) for s in cfg.graphs]
    # Without links each graph keeps its own: the column says where the figures come from, else the bandwidths.
    plain = load_config(write(tmp_path, TWO_GRAPHS))
    assert [(s.name, s.sha256, s.link, s.generated) for s in plain.graphs] == [
        ("a", a.sha256, "by hand", None), ("b", b.sha256, "6,3", None)]


def test_a_dry_run_names_the_graphs_with_their_links(tmp_path):
    path = write(tmp_path, TWO_GRAPHS + 'links: [x8, /8, "10,5"]\n')
    result = CliRunner().invoke(main, ["sweep", str(path), "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "ok; 6 runs (6 graphs, 1 methods)" in result.output
    assert ("links 'x8', '/8', '10,5': each graph once per link, 6 graphs: a@x8, a@/8, a@10,5, b@x8, b@/8, "
            "b@10,5") in result.output
    assert not (tmp_path / "out").exists()


BAD = """\
output: out
graphs:
  - a.json
  - generate: {kind: chain, layers: 3}
methods: [none]
budgets: [1.0]
links:
  - "10,5"
  - LINK
"""


@pytest.mark.parametrize(("link", "line", "sentence"), [
    ("x8", 9, "link x8 scales the graph's own host link, and graph 'chain-3' has none; give a device profile or a "
              "bandwidth instead"),
    ("h100-pcie", 9, "link h100-pcie: a device profile's link is in bytes per ns, and graph 'a' counts memory in "
                     "bytes and duration in flops; give the bandwidth in its units instead (link 64)"),
    ("fast", 9, "link fast is none of a device profile (h100-pcie), 'x8' or '/8'"),
    ("0", 9, "link 0: a bandwidth is a positive, finite number; give a device profile"),
    ('"10,5"', 9, "link '10,5' appears twice in 'links'"),
    ("{x: 8}", 9, "a link must be a single value such as x8, /8, h100-pcie, '64,32' or none"),
])
def test_a_link_that_does_not_apply_is_one_sentence_naming_its_line(tmp_path, link, line, sentence):
    path = write(tmp_path, BAD.replace("LINK", link))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value).startswith(f"{path}, line {line}: {sentence}")
    assert "\n" not in str(info.value)


def test_links_on_graphs_without_one_and_none_on_graphs_with_one(tmp_path):
    cfg = load_config(write(tmp_path, BAD.replace("LINK", "none")))
    assert [(s.name, s.link) for s in cfg.graphs] == [("a@10,5", "link 10,5"), ("a@none", ""),
                                                      ("chain-3@10,5", "link 10,5"), ("chain-3@none", "")]
    assert cfg.graphs[1].sha256 == chain("a", None).sha256 and cfg.graphs[1].generated.transfer is None
    empty = write(tmp_path, TWO_GRAPHS + "links: []\n")
    with pytest.raises(ConfigError, match=r"line 5: 'links' is empty; give at least one"):
        load_config(empty)


def test_torch_graphs_get_their_links_once_traced(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    import remat_bench.app.sweep.tracing as tracing

    path = write(tmp_path, """\
output: out
graphs:
  - torch: {model: mlp, batch: 2}
methods: [none]
budgets: [1.0]
links: ["10,5", x8]
""")
    cfg = load_config(path)
    assert cfg.graphs == [] and len(cfg.pending) == 1 and (cfg.planned_graphs, cfg.planned_runs) == (2, 2)
    # The tracing itself is `trace_model`'s (tests/test_sweep.py); here it gives a graph of the test's.
    monkeypatch.setattr(tracing, "trace_model", lambda options, limit, search: chain(options["name"], BY_HAND))
    traced = tracing.trace_torch_graphs(cfg)
    own = chain("torch-mlp-b2", BY_HAND)
    assert [(s.name, s.sha256, s.link) for s in traced.graphs] == [
        ("torch-mlp-b2@10,5", own.with_transfer(Transfer(Link(10.0), Link(5.0))).sha256, "link 10,5"),
        ("torch-mlp-b2@x8", own.with_transfer(BY_HAND.scaled(8)).sha256, "by hand x8")]
    assert [(r.graph, r.link) for r in traced.runs] == [(s.name, s.link) for s in traced.graphs]
    monkeypatch.setattr(tracing, "trace_model", lambda options, limit, search: chain(options["name"], None))
    with pytest.raises(ConfigError) as info:
        tracing.trace_torch_graphs(cfg)
    assert str(info.value) == (f"{path}, line 6: link x8 scales the graph's own host link, and graph 'torch-mlp-b2' "
                               "has none; give a device profile or a bandwidth instead")


def test_a_sweep_with_links_writes_the_link_column(tmp_path):
    path = write(tmp_path, """\
output: out
time_limit: 30
graphs: [a.json]
methods: [none]
budgets: [1.0]
links: [x8, none]
""")
    result = run_sweep(load_config(path), workers=1)
    assert not result.failure and not result.lost
    table = load_table(tmp_path / "out").sort_values("graph").reset_index(drop=True)
    assert table["graph"].tolist() == ["a@none", "a@x8"]
    assert table["link"].tolist() == ["", "by hand x8"]
    assert table["graph_path"].str.startswith("graphs/a@").all()
    # Keeping everything: a and b held at once, 4 + 2 (the link changes no peak of a schedule that moves nothing).
    assert table["peak"].tolist() == table["baseline_peak"].tolist() == [6, 6]
    for row in table.itertuples():
        graph = load_graph(tmp_path / "out" / row.graph_path)
        assert graph.name == row.graph and graph.sha256 == row.graph_sha256
        assert graph.transfer == (None if row.link == "" else BY_HAND.scaled(8))
