"""The host link a run plans with (``--link``, `remat_bench.core.link`) and the copies ``simulate`` reports."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from remat_bench.app.cli import main
from remat_bench.core.errors import GraphError
from remat_bench.core.graph import Link, Transfer
from remat_bench.core.graph_io import save_graph
from remat_bench.core.link import parse_link, with_link
from tests.helpers import make_graph

LINK = Transfer(Link(10.0, 1.0), Link(5.0, 2.0), "by hand")


def four(transfer=LINK, **kw):
    return make_graph({"a": [], "b": ["a"], "c": ["b"], "d": ["a", "c"]},
                      memory={"a": 100, "b": 50, "c": 10, "d": 10}, duration={"a": 10, "b": 20, "c": 5, "d": 30},
                      outputs=["d"], transfer=transfer, name="four", **kw)


def test_the_forms_of_a_link():
    g = four()
    assert parse_link("none", g) is None
    assert parse_link("x8", g) == Transfer(Link(80.0, 1.0), Link(40.0, 2.0), "by hand x8")
    assert parse_link("/8", g).device_to_host.bandwidth == 1.25
    assert parse_link("64", g) == Transfer(Link(64.0), Link(64.0), "--link 64")
    assert parse_link("64,32", g) == Transfer(Link(64.0), Link(32.0), "--link 64,32")
    timed = four(units={"memory": "bytes", "duration": "ns"})
    assert parse_link("h100-pcie", timed) == Transfer(Link(64.0, 5000.0), Link(64.0, 5000.0),
                                                       "device profile h100-pcie")
    assert with_link(g, None) is g and with_link(g, "x1").transfer == LINK.scaled(1)
    assert with_link(g, "x2").sha256 != g.sha256


@pytest.mark.parametrize(("text", "graph", "sentence"), [
    ("x8", four(None), "--link x8 scales the graph's own host link, and graph 'four' has none"),
    ("h100-pcie", four(), "--link h100-pcie: a device profile's link is in bytes per ns, and graph 'four' counts "
                          "memory in bytes and duration in flops"),
    ("0", four(), "--link 0: a bandwidth is a positive, finite number"),
    ("foo", four(), "--link foo is none of a device profile"),
])
def test_a_link_that_does_not_apply_is_one_sentence(text, graph, sentence):
    with pytest.raises(GraphError) as info:
        parse_link(text, graph)
    assert str(info.value).startswith(sentence)


def test_simulate_reports_the_copies_and_takes_a_link(tmp_path):
    save_graph(four(None), tmp_path / "g.json")
    (tmp_path / "s.json").write_text(json.dumps({"format": "remat-bench-schedule", "version": 2, "steps": [
        ["compute", "a"], ["compute", "b"], ["offload", "a"], ["compute", "c"], ["free", "b"], ["reload", "a"],
        ["compute", "d"], ["free", "a"], ["free", "c"]]}))
    runner = CliRunner()
    r = runner.invoke(main, ["simulate", str(tmp_path / "g.json"), str(tmp_path / "s.json")])
    assert r.exit_code == 2 and "graph 'four' has no host link to copy over" in r.output
    r = runner.invoke(main, ["simulate", str(tmp_path / "g.json"), str(tmp_path / "s.json"), "--link", "10,5",
                             "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    # As tests/test_offload.py's first schedule with no latency: the copy out [30, 40], back [40, 60], d [60, 90].
    assert (data["peak"], data["duration"], data["wait"], data["host_peak"], data["to_host"], data["to_device"]) == (
        210, 90, 25, 100, 100, 100)
    r = runner.invoke(main, ["simulate", str(tmp_path / "g.json"), str(tmp_path / "s.json"), "--link", "10,5"])
    assert "1 offloads (100), 1 reloads (100); host peak 100; compute waited 25" in " ".join(r.stdout.split())


def test_measure_link_takes_the_latency_from_a_small_copy_and_the_bandwidth_from_a_large_one(monkeypatch):
    """The CUDA measurement with CPU stand-ins: each copy 'takes' 10 us plus its bytes at 40 bytes per ns out
    and 20 back; the measured link is those figures."""
    torch = pytest.importorskip("torch")
    from remat_bench.torch import measure

    copies: list[tuple[int, str]] = []

    class Event:
        def __init__(self, enable_timing=False):
            self.at = 0.0

        def record(self, stream=None):
            self.at = float(len(copies))  # the start event sees no copy yet, the end event the copy

        def synchronize(self):
            pass

        def elapsed_time(self, end):
            size, direction = copies[-1]
            per_ns = 40.0 if direction == "out" else 20.0
            return (10_000 + size / per_ns) / 1e6  # in ms

    real_empty = torch.empty

    def empty(size, dtype=None, pin_memory=False, device=None):
        t = real_empty(size, dtype=dtype)
        t.on_device = device is not None  # type: ignore[attr-defined]
        return t

    def copy_(dst, src, non_blocking=False):
        copies.append((src.numel(), "out" if getattr(src, "on_device", False) else "back"))
        return dst

    monkeypatch.setattr(torch.cuda, "Stream", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "stream", lambda s: __import__("contextlib").nullcontext())
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Stand-in GPU")
    monkeypatch.setattr(measure.torch, "empty", empty)
    monkeypatch.setattr(torch.Tensor, "copy_", copy_)
    link = measure.measure_link(torch.device("cuda"), nbytes=4_000_000, repeats=3)
    assert link.device_to_host.latency == pytest.approx(10_000 + 4096 / 40)
    assert link.device_to_host.bandwidth == pytest.approx(4_000_000 / (4_000_000 / 40 - 4096 / 40))
    assert link.host_to_device.latency == pytest.approx(10_000 + 4096 / 20)
    assert link.source == "measured on Stand-in GPU: pinned copies of 4000000 bytes, median of 3"
    assert len(copies) == 2 * 2 * 4  # two sizes each way, one untimed and three timed copies each
