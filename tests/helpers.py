"""Shared test helpers: hypothesis strategies for small graphs, and a naive reference simulator."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import strategies as st

from remat_bench.app import datasets
from remat_bench.core.graph import Graph, Node
from remat_bench.core.schedule import COMPUTE, Schedule

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "graphs"
PAPER_NAMES = tuple(f.name.removesuffix(".json") for f in datasets.PAPER.files)
# The reason every test that needs a published graph gives when it is skipped (tests/conftest.py
# counts them, and fails the run instead under CI=true).
PAPER_MISSING = f"the published graphs are not on this machine: {datasets.FETCH_HINT}"


def paper_graph(name: str) -> Path:
    """The path of a published graph (``random_layered_n100``); the test is skipped if it is not here."""
    path = datasets.find(name)
    if path is None:
        pytest.skip(PAPER_MISSING)
    return path


def graph_path(name: str) -> Path:
    """``paper:<name>`` (skipped when not here, as `paper_graph`) or a shipped graph's file name."""
    if name.startswith(datasets.PREFIX):
        return paper_graph(name[len(datasets.PREFIX):])
    return SHIPPED / name


def make_graph(edges: dict[str, list[str]], memory: dict[str, int] | int = 1,
               duration: dict[str, int] | int = 1, **kw) -> Graph:
    """A graph from {node: inputs} in insertion order, with per-node or uniform sizes."""
    nodes = []
    for v, ins in edges.items():
        m = memory[v] if isinstance(memory, dict) else memory
        d = duration[v] if isinstance(duration, dict) else duration
        nodes.append(Node(id=v, inputs=tuple(ins), memory=m, duration=d))
    return Graph(nodes, name=kw.pop("name", "test"), **kw)


def needs_reordering() -> Graph:
    """x (4 units, 5 s) read by a and c; y's chain (y, 4 units; b) read by c; outputs a and c; budget 7.

    In input order x is freed for y's chain and computed again for c (dtr's schedule: 14 s); computing
    y's chain first leaves room to hold x (y, b, x, a, c: 9 s, peak 7), the brute-force optimum. Holding
    x without reordering needs 4 + 1 + 4 + 1 > 7."""
    return make_graph({"x": [], "a": ["x"], "y": [], "b": ["y"], "c": ["x", "b"]},
                      memory={"x": 4, "a": 1, "y": 4, "b": 1, "c": 1},
                      duration={"x": 5, "a": 1, "y": 1, "b": 1, "c": 1}, outputs=["a", "c"])


@st.composite
def dags(draw, min_nodes: int = 1, max_nodes: int = 9, max_memory: int = 10,
         max_duration: int = 10, training: bool | None = False, workspace: bool = False) -> Graph:
    """Random DAGs in topological order; ``training`` adds kinds (forward prefix, backward suffix)."""
    n = draw(st.integers(min_nodes, max_nodes))
    nodes = []
    n_forward = n if not training else draw(st.integers(1, max(1, n - 1)))
    for i in range(n):
        candidates = list(range(i))
        ins = draw(st.lists(st.sampled_from(candidates), max_size=min(3, i), unique=True)) if i else []
        kind = "forward" if i < n_forward else "backward"
        if kind == "forward":
            ins = [j for j in ins if j < n_forward]
        nodes.append(Node(
            id=f"v{i}",
            inputs=tuple(f"v{j}" for j in ins),
            memory=draw(st.integers(0, max_memory)),
            duration=draw(st.integers(0, max_duration)),
            workspace=draw(st.integers(0, 3)) if workspace else 0,
            kind=kind,
        ))
    return Graph(nodes, name="hypothesis")


def naive_simulate(graph: Graph, schedule: Schedule) -> tuple[bool, int, int]:
    """Deliberately plain walk of docs/design.md section 3: (valid, peak, duration)."""
    resident: set[int] = set()
    peak = 0
    duration = 0
    computed: set[int] = set()
    for kind, v, k in zip(schedule.kinds.tolist(), schedule.nodes.tolist(), schedule.impls.tolist()):
        op = int(graph.op_start[v]) + k
        if kind == COMPUTE:
            if v in resident or any(u not in resident for u in graph.op_inputs[op]):
                return False, peak, duration
            step = graph.fixed_memory + sum(int(graph.memory[u]) for u in resident)
            step += int(graph.memory[v]) + int(graph.op_workspace[op])
            peak = max(peak, step)
            resident.add(v)
            computed.add(v)
            duration += int(graph.op_duration[op])
        else:
            if v not in resident:
                return False, peak, duration
            resident.discard(v)
    valid = len(computed) == graph.n and all(o in resident for o in graph.output_indices)
    return valid, peak, duration


def with_runner(method):
    """``method`` with the evaluation path's runner for candidate schedules, as
    `remat_bench.app.evaluate.evaluate` gives every method it calls (a method called directly has none)."""
    from dataclasses import replace

    from remat_bench.app.evaluate import run_source

    method.context = replace(method.context, runner=run_source)
    return method
