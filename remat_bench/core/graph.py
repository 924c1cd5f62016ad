"""The computation graph: nodes, their inputs, sizes and costs, and its canonical hash.

A node is both an operator and the one value it produces (docs/design.md section 2):
it produces ``memory`` units, costs ``duration`` to compute, and holds
``workspace`` units of scratch memory while it computes. Nodes are listed in a
topological order, the *input order* that stage-based formulations follow.

`Graph` keeps the nodes as written and, beside them, integer-indexed arrays
(sizes as numpy arrays, inputs as tuples of indices) that the simulator and the
methods work on. Node *i* is ``graph.ids[i]``; the position in the file is the
index.

Implementations (MONeT) are alternative ways to compute a node. Every node has
at least one *op*: a node without declared implementations has a single op,
its own duration, workspace and inputs. Ops are numbered globally:
``op_start[v] + k`` is implementation *k* of node *v*.

Graph files are read and written by `remat_bench.core.graph_io`.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from remat_bench.core.errors import GraphError

FORMAT = "remat-bench-graph"
VERSION = 1
KINDS = ("forward", "backward")

Number = int | float


@dataclass(frozen=True, slots=True)
class Implementation:
    """One way to compute a node: its duration, workspace and (optionally) its own inputs."""

    name: str
    duration: Number
    workspace: Number = 0
    inputs: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class Node:
    """A node of the graph: an operator and the value it produces."""

    id: str
    inputs: tuple[str, ...]
    memory: Number
    duration: Number
    workspace: Number = 0
    op: str = ""
    kind: str = "forward"
    grad_of: str | None = None
    implementations: tuple[Implementation, ...] = ()
    metadata: dict[str, Any] | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class Link:
    """One direction of the host link: ``bandwidth`` memory units per duration unit, and a fixed ``latency``.

    A copy of a value of ``m`` units takes ``latency + m / bandwidth`` (docs/design.md section 3, "Offload").
    """

    bandwidth: float
    latency: float = 0.0

    def copy_time(self, memory: Number) -> float:
        """The time one copy of ``memory`` units takes over this direction.

        Parameters
        ----------
        memory : Number
            The copied value's size, in the graph's memory units.

        Returns
        -------
        float
            ``latency + memory / bandwidth``, in the graph's duration units.
        """
        return self.latency + memory / self.bandwidth


@dataclass(frozen=True, slots=True)
class Transfer:
    """The device's host link, one `Link` per direction, and where its figures come from."""

    device_to_host: Link
    host_to_device: Link
    source: str = ""

    def to_dict(self) -> dict[str, Any]:
        """As the graph file's ``transfer`` field writes it.

        Returns
        -------
        dict
            ``device_to_host`` and ``host_to_device`` (``bandwidth``, ``latency``), and ``source`` when there is one.
        """
        out: dict[str, Any] = {
            "device_to_host": {"bandwidth": _as_number(self.device_to_host.bandwidth),
                               "latency": _as_number(self.device_to_host.latency)},
            "host_to_device": {"bandwidth": _as_number(self.host_to_device.bandwidth),
                               "latency": _as_number(self.host_to_device.latency)},
        }
        if self.source:
            out["source"] = self.source
        return out

    def scaled(self, factor: float) -> Transfer:
        """Both directions' bandwidth times ``factor`` (latencies kept): a sweep's "8x lower / higher".

        Parameters
        ----------
        factor : float
            Positive.

        Returns
        -------
        Transfer
            Its source says the factor (``device profile h100-pcie x8``).
        """
        return Transfer(Link(self.device_to_host.bandwidth * factor, self.device_to_host.latency),
                        Link(self.host_to_device.bandwidth * factor, self.host_to_device.latency),
                        f"{self.source} x{factor:g}" if self.source else f"x{factor:g}")


# The largest total of memory or of duration a graph may have (see Graph._check_totals).
MAX_TOTAL = 2**53


def _as_number(value: Number) -> Number:
    """Integral floats become ints, so that 1.0 and 1 hash and print alike."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
        return int(value)
    return value


def _number_array(values: Sequence[Number]) -> np.ndarray:
    """int64 when every value is integral and sums stay exact, float64 otherwise."""
    if all(isinstance(v, int) for v in values) and sum(values) < 2**62:
        return np.asarray(values, dtype=np.int64)
    return np.asarray(values, dtype=np.float64)


class Graph:
    """A validated computation graph (docs/design.md section 2).

    Raises `GraphError` with one sentence naming ``source`` and the offending
    node or field when the nodes do not describe a valid graph.
    """

    def __init__(
        self,
        nodes: Iterable[Node],
        *,
        name: str = "",
        outputs: Sequence[str] | None = None,
        fixed_memory: Number = 0,
        units: dict[str, str] | None = None,
        metadata: dict[str, Any] | None = None,
        source: str = "graph",
        transfer: Transfer | None = None,
    ) -> None:
        self.nodes: tuple[Node, ...] = tuple(nodes)
        self.transfer = transfer
        self.name = name
        self.fixed_memory: Number = _as_number(fixed_memory)
        self.units = dict(units or {"memory": "bytes", "duration": "flops"})
        self.metadata = dict(metadata or {})
        self.source = source
        self._build_index(outputs)

    # ------------------------------------------------------------------ building

    def _fail(self, message: str) -> GraphError:
        return GraphError(f"{self.source}: {message}")

    def _build_index(self, outputs: Sequence[str] | None) -> None:
        """Check the nodes and build the integer-indexed tables the simulator and the methods read.

        Each step refuses what it checks in one sentence; a graph with several faults gets the
        first step's, so the order of the steps is part of what users see.
        """
        self._index_ids()
        self._check_node_values()
        self.inputs: list[tuple[int, ...]] = [self._resolve(node, node.inputs, "input") for node in self.nodes]
        self._check_acyclic_and_ordered()
        self._build_ops()
        self._build_sizes()
        self._check_totals()
        self._build_consumers()
        self._build_outputs(outputs)
        self.is_forward = np.array([node.kind == "forward" for node in self.nodes], dtype=bool)
        self._check_grad_of()

    def _index_ids(self) -> None:
        """``ids`` and ``index`` (id -> position); refuses an empty graph and a repeated id."""
        if not self.nodes:
            raise self._fail("the graph has no nodes")
        self.ids: list[str] = [node.id for node in self.nodes]
        self.index: dict[str, int] = {}
        for i, node in enumerate(self.nodes):
            if node.id in self.index:
                raise self._fail(
                    f"node id '{node.id}' appears twice (nodes[{self.index[node.id]}] and nodes[{i}])"
                )
            self.index[node.id] = i
        self.n = len(self.nodes)

    def _check_node_values(self) -> None:
        """Every size and cost a finite number >= 0, every kind known, and the fixed memory too."""
        for node in self.nodes:
            for label, value in (
                ("memory", node.memory),
                ("duration", node.duration),
                ("workspace", node.workspace),
            ):
                self._check_amount(node, label, value)
            if node.kind not in KINDS:
                raise self._fail(f"node '{node.id}' has kind '{node.kind}'; use 'forward' or 'backward'")
            for impl in node.implementations:
                self._check_amount(node, f"duration of implementation '{impl.name}'", impl.duration)
                self._check_amount(node, f"workspace of implementation '{impl.name}'", impl.workspace)
        if not math.isfinite(self.fixed_memory) or self.fixed_memory < 0:
            raise self._fail(f"fixed_memory is {self.fixed_memory}; it must be a non-negative finite number")

    def _resolve(self, node: Node, names: Sequence[str], what: str) -> tuple[int, ...]:
        """Indices of the nodes ``names`` lists, each once (a value is resident or not); refuses an unknown id."""
        seen: dict[int, None] = {}
        for name in names:
            j = self.index.get(name)
            if j is None:
                raise self._fail(f"node '{node.id}' lists {what} '{name}', which is not a node of the graph")
            seen[j] = None
        return tuple(seen)

    def _build_ops(self) -> None:
        """The op tables: one op per implementation, or one for a node without implementations."""
        op_start = [0]
        op_node: list[int] = []
        op_names: list[str] = []
        op_duration: list[Number] = []
        op_workspace: list[Number] = []
        op_inputs: list[tuple[int, ...]] = []
        for i, node in enumerate(self.nodes):
            if node.implementations:
                names = [impl.name for impl in node.implementations]
                if len(set(names)) != len(names):
                    raise self._fail(f"node '{node.id}' names an implementation twice")
                for impl in node.implementations:
                    op_node.append(i)
                    op_names.append(impl.name)
                    op_duration.append(_as_number(impl.duration))
                    op_workspace.append(_as_number(impl.workspace))
                    op_inputs.append(self._implementation_inputs(i, impl))
            else:
                op_node.append(i)
                op_names.append("default")
                op_duration.append(_as_number(node.duration))
                op_workspace.append(_as_number(node.workspace))
                op_inputs.append(self.inputs[i])
            op_start.append(len(op_node))
        self.op_start = np.asarray(op_start, dtype=np.int64)
        self.op_node = np.asarray(op_node, dtype=np.int64)
        self.op_names = op_names
        self.op_inputs = op_inputs
        self.n_ops = len(op_node)
        self.op_in_ptr = np.zeros(self.n_ops + 1, dtype=np.int64)
        self.op_in_ptr[1:] = np.cumsum([len(ins) for ins in op_inputs])
        self.op_in_idx = np.fromiter(
            (j for ins in op_inputs for j in ins), dtype=np.int64, count=int(self.op_in_ptr[-1])
        )
        self.op_duration = _number_array(op_duration)
        self.op_workspace = _number_array(op_workspace)

    def _implementation_inputs(self, i: int, impl: Implementation) -> tuple[int, ...]:
        """What implementation ``impl`` of node i reads: its own inputs, else the node's."""
        if impl.inputs is None:
            return self.inputs[i]
        node = self.nodes[i]
        ins = self._resolve(node, impl.inputs, f"input of implementation '{impl.name}'")
        for j in ins:
            if j >= i:
                raise self._fail(
                    f"implementation '{impl.name}' of node '{node.id}' uses "
                    f"'{self.ids[j]}', which is not listed before it; nodes must "
                    "appear in a topological order"
                )
        return ins

    def _build_sizes(self) -> None:
        """Node sizes as arrays: memory, and a node's own duration and workspace (those of its first op)."""
        self.memory = _number_array([_as_number(node.memory) for node in self.nodes])
        self.duration = self.op_duration[self.op_start[:-1]]
        self.workspace = self.op_workspace[self.op_start[:-1]]

    def _build_consumers(self) -> None:
        """``consumers[v]``: the nodes that read v, in node order."""
        consumers: list[list[int]] = [[] for _ in self.nodes]
        for v, ins in enumerate(self.inputs):
            for u in ins:
                consumers[u].append(v)
        self.consumers: list[tuple[int, ...]] = [tuple(c) for c in consumers]

    def _build_outputs(self, outputs: Sequence[str] | None) -> None:
        """The outputs named (each once), or by default every node nothing consumes."""
        if outputs is None:
            self.output_indices: tuple[int, ...] = tuple(
                v for v in range(self.n) if not self.consumers[v]
            )
        else:
            out: dict[int, None] = {}
            for name in outputs:
                j = self.index.get(name)
                if j is None:
                    raise self._fail(f"'outputs' names '{name}', which is not a node of the graph")
                out[j] = None
            self.output_indices = tuple(out)
        self.outputs_given = outputs is not None
        self.is_output = np.zeros(self.n, dtype=bool)
        self.is_output[list(self.output_indices)] = True

    def _check_grad_of(self) -> None:
        """Every ``grad_of`` names a node of the graph."""
        for node in self.nodes:
            if node.grad_of is not None and node.grad_of not in self.index:
                raise self._fail(
                    f"node '{node.id}' has grad_of '{node.grad_of}', which is not a node of the graph"
                )

    def _check_totals(self) -> None:
        """Refuse sizes whose sums no method can represent exactly (MAX_TOTAL).

        A step's memory adds the fixed memory, resident values and a workspace; a
        schedule's duration adds node durations. HiGHS computes in doubles (integers
        exact to 2**53) and CP-SAT in int64; a graph within these totals is solved and
        simulated exactly by every method, one beyond them overflows or is rounded.
        """
        with np.errstate(over="ignore"):  # an overflow to inf is what the check below refuses
            memory_total = float(self.fixed_memory) + float(np.sum(self.memory, dtype=np.float64)) + \
                float(np.max(self.op_workspace))
            largest = np.maximum.reduceat(self.op_duration.astype(np.float64), self.op_start[:-1])
            duration_total = float(np.sum(largest))
        for what, total, hint in (
            ("memory (fixed memory, every node's value and the largest workspace)", memory_total,
             "give memory in a larger unit (KiB, MiB)"),
            ("duration (every node computed once, each at its slowest implementation)", duration_total,
             "give durations in a larger unit"),
        ):
            if not total <= MAX_TOTAL:
                amount = f"{total:.6g}" if math.isfinite(total) else "more than a double holds (1.8e308)"
                raise self._fail(f"its {what} adds up to {amount}, above 2**53 = {MAX_TOTAL:,}, the largest "
                                 f"total every method represents exactly; {hint}")

    def _check_amount(self, node: Node, label: str, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self._fail(f"node '{node.id}' has {label} {value!r}; it must be a number")
        if not math.isfinite(value):
            raise self._fail(f"node '{node.id}' has {label} {value}; it must be finite")
        if value < 0:
            raise self._fail(f"node '{node.id}' has negative {label} ({value}); sizes and costs must be >= 0")

    def _check_acyclic_and_ordered(self) -> None:
        late = None
        for v, ins in enumerate(self.inputs):
            for u in ins:
                if u >= v:
                    late = (v, u)
                    break
            if late:
                break
        if late is None:
            return
        # Something points forward (or at itself): a cycle, or merely a bad order.
        cycle = self._find_cycle()
        if cycle:
            names = " -> ".join(f"'{self.ids[v]}'" for v in [*cycle, cycle[0]])
            raise self._fail(f"the graph has a cycle: {names}")
        v, u = late
        raise self._fail(
            f"node '{self.ids[v]}' (nodes[{v}]) uses '{self.ids[u]}', which is listed after it; "
            "nodes must appear in a topological order"
        )

    def _find_cycle(self) -> list[int]:
        import networkx as nx

        g = nx.DiGraph()
        g.add_nodes_from(range(self.n))
        g.add_edges_from((u, v) for v, ins in enumerate(self.inputs) for u in ins)
        try:
            edges = nx.find_cycle(g)
        except nx.NetworkXNoCycle:
            return []
        return [u for u, _ in edges]

    # ------------------------------------------------------------------ queries

    @property
    def outputs(self) -> list[str]:
        return [self.ids[v] for v in self.output_indices]

    @property
    def num_edges(self) -> int:
        return sum(len(ins) for ins in self.inputs)

    @property
    def has_backward(self) -> bool:
        return not bool(self.is_forward.all())

    @property
    def has_implementations(self) -> bool:
        return self.n_ops > self.n

    def ops_of(self, v: int) -> range:
        """Global op indices of node v (one per implementation).

        Parameters
        ----------
        v : int
            A node index.

        Returns
        -------
        range
            ``op_start[v]`` up to, not including, ``op_start[v + 1]``.
        """
        return range(int(self.op_start[v]), int(self.op_start[v + 1]))

    def implementation_index(self, v: int, name: str) -> int | None:
        """Position of implementation ``name`` among node v's ops, or None.

        Parameters
        ----------
        v : int
            A node index.
        name : str
            An implementation's name (``default`` for a node without declared implementations).

        Returns
        -------
        int or None
            ``k`` such that op ``op_start[v] + k`` is ``name``; None when node v has no such implementation.
        """
        for k, op in enumerate(self.ops_of(v)):
            if self.op_names[op] == name:
                return k
        return None

    @cached_property
    def forward_indices(self) -> list[int]:
        return [v for v in range(self.n) if self.is_forward[v]]

    @cached_property
    def backward_indices(self) -> list[int]:
        return [v for v in range(self.n) if not self.is_forward[v]]

    @property
    def total_duration(self) -> Number:
        """Duration of computing every node once with its first implementation."""
        return self.duration.sum().item()

    @property
    def min_total_duration(self) -> Number:
        """Every node computed once, each with its fastest implementation: a bound for every schedule."""
        fastest = np.minimum.reduceat(self.op_duration, self.op_start[:-1])
        return fastest.sum().item()

    def in_order(self, order: Sequence[int]) -> Graph:
        """The same graph with its nodes listed in ``order`` (a topological order of indices).

        Methods that follow the input order (staged Checkmate and Moccasin) can
        then follow another one; node ``i`` of the result is node ``order[i]`` here.

        Parameters
        ----------
        order : Sequence of int
            Every node index once, each node after its inputs.

        Returns
        -------
        Graph
            With this graph's name, outputs, fixed memory, units, metadata and source.

        Raises
        ------
        ValueError
            ``order`` does not list every node index exactly once.
        GraphError
            ``order`` lists a node before one of its inputs.
        """
        if sorted(order) != list(range(self.n)):
            raise ValueError("order must list every node index once")
        return Graph([self.nodes[v] for v in order], name=self.name, outputs=self.outputs,
                     fixed_memory=self.fixed_memory, units=self.units, metadata=self.metadata,
                     source=self.source, transfer=self.transfer)

    def with_transfer(self, transfer: Transfer | None) -> Graph:
        """The same graph with another host link (None: none, so that nothing can be offloaded).

        Parameters
        ----------
        transfer : Transfer or None

        Returns
        -------
        Graph
            With this graph's nodes, name, outputs, fixed memory, units, metadata and source.
        """
        return Graph(self.nodes, name=self.name, outputs=self.outputs, fixed_memory=self.fixed_memory,
                     units=self.units, metadata=self.metadata, source=self.source, transfer=transfer)

    # ------------------------------------------------------------------ serialisation

    def to_dict(self) -> dict[str, Any]:
        """The graph in remat-bench JSON form, every default written out.

        Returns
        -------
        dict
            A document `remat_bench.core.graph_io.graph_from_dict` reads back as the same graph; integral
            floats are written as ints.
        """
        nodes = []
        for node in self.nodes:
            d: dict[str, Any] = {
                "id": node.id,
                "op": node.op,
                "kind": node.kind,
                "inputs": list(node.inputs),
                "memory": _as_number(node.memory),
                "duration": _as_number(node.duration),
                "workspace": _as_number(node.workspace),
            }
            if node.grad_of is not None:
                d["grad_of"] = node.grad_of
            if node.implementations:
                d["implementations"] = []
                for impl in node.implementations:
                    di: dict[str, Any] = {
                        "name": impl.name,
                        "duration": _as_number(impl.duration),
                        "workspace": _as_number(impl.workspace),
                    }
                    if impl.inputs is not None:
                        di["inputs"] = list(impl.inputs)
                    d["implementations"].append(di)
            if node.metadata:
                d["metadata"] = node.metadata
            nodes.append(d)
        out: dict[str, Any] = {
            "format": FORMAT,
            "version": VERSION,
            "name": self.name,
            "units": self.units,
            "fixed_memory": self.fixed_memory,
            "outputs": self.outputs,
            "nodes": nodes,
        }
        if self.transfer is not None:
            out["transfer"] = self.transfer.to_dict()
        if self.metadata:
            out["metadata"] = self.metadata
        return out

    @cached_property
    def sha256(self) -> str:
        """Hash of the canonical form: everything that affects scheduling.

        The name and free-form metadata are left out, so renaming a graph or
        converting it from node-link JSON does not orphan its schedules.
        """
        d = self.to_dict()
        d.pop("name", None)
        d.pop("metadata", None)
        if "transfer" in d:
            d["transfer"].pop("source", None)
        for node in d["nodes"]:
            node.pop("metadata", None)
        text = json.dumps(d, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(text.encode()).hexdigest()

    def __repr__(self) -> str:
        return f"Graph({self.name!r}, {self.n} nodes, {self.num_edges} edges)"
