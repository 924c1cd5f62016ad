"""Schedules: sequences of ``compute``, ``free``, ``offload`` and ``reload`` steps, and their JSON file format.

In memory a schedule is three parallel integer arrays over the graph's node
indices (step kind, node, implementation position), so that long schedules
cost a few bytes per step and the simulator can work on them with numpy. On
disk it is the ``remat-bench-schedule`` JSON of docs/design.md section 4, with node
ids and implementation names.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from remat_bench.core.errors import ScheduleError
from remat_bench.core.files import atomic_write_text
from remat_bench.core.graph import Graph, Number
from remat_bench.core.json_files import describe_schema_error, parse_json, read_text, schema

FORMAT = "remat-bench-schedule"
VERSION = 2  # the newest; a schedule without offload or reload steps is written as version 1
COMPUTE = 0
FREE = 1
OFFLOAD = 2
RELOAD = 3
_KIND_WORD = {COMPUTE: "compute", FREE: "free", OFFLOAD: "offload", RELOAD: "reload"}
_WORD_CODE = {word: code for code, word in _KIND_WORD.items()}


@dataclass
class Schedule:
    """A schedule over one graph's node indices.

    ``kinds[s]`` is `COMPUTE`, `FREE`, `OFFLOAD` or `RELOAD`, ``nodes[s]`` the node index and
    ``impls[s]`` the position of the implementation used (0 for the node's
    first, and for every step that is not a compute).
    """

    kinds: np.ndarray
    nodes: np.ndarray
    impls: np.ndarray
    method: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    budget: Number | None = None
    solver: dict[str, Any] = field(default_factory=dict)
    cleanup: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        self.kinds = np.asarray(self.kinds, dtype=np.int8)
        self.nodes = np.asarray(self.nodes, dtype=np.int64)
        self.impls = np.asarray(self.impls, dtype=np.int64)
        if not (len(self.kinds) == len(self.nodes) == len(self.impls)):
            raise ValueError("kinds, nodes and impls must have one entry per step")

    def __len__(self) -> int:
        return len(self.kinds)

    @property
    def moves(self) -> bool:
        """Whether the schedule has offload or reload steps (a version 2 schedule)."""
        return bool((self.kinds >= OFFLOAD).any())

    @classmethod
    def from_steps(cls, steps: Iterable[tuple], **meta: Any) -> Schedule:
        """From ``("compute", v[, impl])``, ``("free", v)``, ``("offload", v)`` and ``("reload", v)`` tuples.

        Parameters
        ----------
        steps : Iterable of tuple
            The steps in order; ``impl`` is an implementation's position (0, the node's first, when left out).
        **meta : Any
            The schedule's other fields (``method``, ``params``, ``budget``, ``solver``, ``cleanup``).

        Returns
        -------
        Schedule
        """
        kinds, nodes, impls = [], [], []
        for step in steps:
            kinds.append(_WORD_CODE[step[0]])
            nodes.append(step[1])
            impls.append(step[2] if len(step) > 2 else 0)
        return cls(np.array(kinds, dtype=np.int8), np.array(nodes, dtype=np.int64),
                   np.array(impls, dtype=np.int64), **meta)

    def ops(self, graph: Graph) -> np.ndarray:
        """Global op index of every step (meaningful on compute steps).

        Parameters
        ----------
        graph : Graph
            The graph the schedule is over.

        Returns
        -------
        np.ndarray
            One int64 per step: ``op_start[node] + impl``.
        """
        return graph.op_start[self.nodes] + self.impls

    def steps(self, graph: Graph) -> Iterator[tuple[str, str] | tuple[str, str, str]]:
        """Steps with node ids and implementation names, as written to JSON.

        Parameters
        ----------
        graph : Graph
            The graph the schedule is over.

        Yields
        ------
        tuple of str
            ``("compute", id)``, ``("compute", id, implementation)`` for a node that declares
            implementations, ``("free", id)``, ``("offload", id)`` or ``("reload", id)``.
        """
        for kind, v, k in zip(self.kinds.tolist(), self.nodes.tolist(), self.impls.tolist()):
            if kind == COMPUTE and graph.nodes[v].implementations:
                yield ("compute", graph.ids[v], graph.op_names[graph.op_start[v] + k])
            else:
                yield (_KIND_WORD[kind], graph.ids[v])

    def with_meta(self, **meta: Any) -> Schedule:
        """A copy with some of its metadata replaced; the step arrays are shared, not copied.

        Parameters
        ----------
        **meta : Any
            New values of ``method``, ``params``, ``budget``, ``solver`` or ``cleanup``.

        Returns
        -------
        Schedule
        """
        fields: dict[str, Any] = {
            "method": self.method, "params": self.params, "budget": self.budget,
            "solver": self.solver, "cleanup": self.cleanup,
        }
        fields.update(meta)
        return Schedule(self.kinds, self.nodes, self.impls, **fields)


class ScheduleBuilder:
    """Append steps one at a time (methods use it to emit schedules)."""

    def __init__(self) -> None:
        self._kinds: list[int] = []
        self._nodes: list[int] = []
        self._impls: list[int] = []

    def compute(self, v: int, impl: int = 0) -> None:
        """Append a compute step.

        Parameters
        ----------
        v : int
            A node index.
        impl : int
            The position of the implementation used among node v's (0, its first).
        """
        self._kinds.append(COMPUTE)
        self._nodes.append(v)
        self._impls.append(impl)

    def free(self, v: int) -> None:
        """Append a free step.

        Parameters
        ----------
        v : int
            A node index.
        """
        self._kinds.append(FREE)
        self._nodes.append(v)
        self._impls.append(0)

    def offload(self, v: int) -> None:
        """Append an offload step: v's copy to host memory starts; its device memory is released when it ends.

        Parameters
        ----------
        v : int
            A node index.
        """
        self._kinds.append(OFFLOAD)
        self._nodes.append(v)
        self._impls.append(0)

    def reload(self, v: int) -> None:
        """Append a reload step: v's copy back from host memory starts; its readers wait for it to end.

        Parameters
        ----------
        v : int
            A node index.
        """
        self._kinds.append(RELOAD)
        self._nodes.append(v)
        self._impls.append(0)

    def __len__(self) -> int:
        return len(self._kinds)

    def build(self, **meta: Any) -> Schedule:
        """The schedule of the steps appended so far.

        Parameters
        ----------
        **meta : Any
            The schedule's other fields (``method``, ``params``, ``budget``, ``solver``, ``cleanup``).

        Returns
        -------
        Schedule
        """
        return Schedule(np.array(self._kinds, dtype=np.int8), np.array(self._nodes, dtype=np.int64),
                        np.array(self._impls, dtype=np.int64), **meta)


# ---------------------------------------------------------------------- JSON


def _json_number(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    return value


def schedule_to_dict(schedule: Schedule, graph: Graph) -> dict[str, Any]:
    """The schedule in ``remat-bench-schedule`` JSON form (docs/design.md section 4).

    Parameters
    ----------
    schedule : Schedule
    graph : Graph
        The graph the schedule is over: its name and sha256 are written, and its ids name the nodes.

    Returns
    -------
    dict
        A document `schedule_from_dict` reads back; ``cleanup`` only when the schedule has one.
    """
    out: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION if schedule.moves else 1,
        "graph": {"name": graph.name, "sha256": graph.sha256},
        "method": schedule.method,
        "params": schedule.params,
        "budget": _json_number(schedule.budget),
        "steps": [list(step) for step in schedule.steps(graph)],
        "solver": schedule.solver,
    }
    if schedule.cleanup is not None:
        out["cleanup"] = schedule.cleanup
    return out


def save_schedule(schedule: Schedule, graph: Graph, path: str | Path) -> None:
    """Write the schedule file atomically: one step per line, so diffs stay readable.

    Parameters
    ----------
    schedule : Schedule
    graph : Graph
        The graph the schedule is over.
    path : str or Path
        The output file; a symbolic link is written through.

    Raises
    ------
    OutputError
        ``path`` cannot be written (`remat_bench.core.files.atomic_write_bytes`).
    """
    d = schedule_to_dict(schedule, graph)
    steps = d.pop("steps")
    head = json.dumps(d, indent=1, default=_json_number)
    body = ",\n  ".join(json.dumps(s, ensure_ascii=False) for s in steps)
    text = head[:-2] + ',\n "steps": [\n  ' + body + "\n ]\n}\n" if steps else head[:-2] + ',\n "steps": []\n}\n'
    atomic_write_text(path, text)


def load_schedule(path: str | Path, graph: Graph, force: bool = False) -> Schedule:
    """Read a schedule file and resolve it against ``graph``.

    Parameters
    ----------
    path : str or Path
        The schedule file.
    graph : Graph
        The graph it is meant for.
    force : bool
        Read it even when it was written for another graph (another sha256); its steps must still name
        nodes and implementations of ``graph``.

    Returns
    -------
    Schedule

    Raises
    ------
    ScheduleError
        The file cannot be read or is not JSON, or `schedule_from_dict` refuses it.
    """
    path = Path(path)
    data = parse_json(read_text(path, ScheduleError), str(path), ScheduleError)
    return schedule_from_dict(data, graph, str(path), force=force)


Decoded = tuple[np.ndarray, np.ndarray, np.ndarray]  # kinds, node indices, implementation positions


def _decode_steps(steps: list[Any], graph: Graph) -> Decoded | None:
    """Steps -> arrays in bulk; None for anything unusual.

    Handles the common file: every step a list [word, known node id] (a word of `_WORD_CODE`), some
    ["compute", id, implementation] with an implementation the node has. Anything else
    (a wrong type, an unknown id, a bad word) returns None, and the caller's step-by-step
    decoder finds and words the problem. Comprehensions and dict lookups, not a loop
    with per-step checks (docs/benchmarks.md, "Reading a schedule file").
    """
    n = len(steps)
    word_code = _WORD_CODE
    try:
        if any(type(step) is not list for step in steps):
            return None
        lengths = np.fromiter(map(len, steps), dtype=np.int64, count=n)
        if n and (lengths.min() < 2 or lengths.max() > 3):
            return None
        words = np.fromiter((word_code[step[0]] for step in steps), dtype=np.int8, count=n)
        index = graph.index
        nodes = np.fromiter((index[step[1]] for step in steps), dtype=np.int64, count=n)
    except (KeyError, TypeError):  # a bad word, an unknown or unhashable id
        return None
    kinds = words
    impls = np.zeros(n, dtype=np.int64)
    for s in np.flatnonzero(lengths == 3).tolist():
        name = steps[s][2]
        k = graph.implementation_index(int(nodes[s]), name) if type(name) is str and words[s] == COMPUTE else None
        if k is None:
            return None
        impls[s] = k
    return kinds, nodes, impls


def _decode_steps_one_by_one(steps: list[Any], graph: Graph, source: str) -> Decoded:
    """The reference decoder: one step at a time, with a sentence for the first problem."""
    kinds = np.empty(len(steps), dtype=np.int8)
    nodes = np.empty(len(steps), dtype=np.int64)
    impls = np.zeros(len(steps), dtype=np.int64)
    index = graph.index
    for s, step in enumerate(steps):
        word, node_id = step[0], step[1]
        v = index.get(node_id)
        if v is None:
            raise ScheduleError(
                f"{source}: step {s} ({word} '{node_id}') names a node that is not in graph '{graph.name}'"
            )
        kinds[s] = _WORD_CODE[word]
        nodes[s] = v
        if len(step) > 2:
            if word != "compute":
                raise ScheduleError(
                    f"{source}: step {s} ({word} '{node_id}') names an implementation; only compute steps do")
            k = graph.implementation_index(v, step[2])
            if k is None:
                names = ", ".join(graph.op_names[op] for op in graph.ops_of(v))
                raise ScheduleError(
                    f"{source}: step {s} computes '{node_id}' with implementation '{step[2]}', "
                    f"which it does not have (it has: {names})"
                )
            impls[s] = k
    return kinds, nodes, impls


def _check_budget(budget: Any, graph: Graph, source: str) -> None:
    """Refuse a budget no run has: not a number, or not a positive, finite one (``null`` is ``min``).

    A schedule's budget is the line its peak is judged against (``replay``, ``train``, ``plot``): a
    budget of -5 made every schedule "over budget", and nan none. Zero is taken only on a graph
    whose every size is zero: there a fraction of the baseline peak resolves to 0, which every
    schedule meets.
    """
    if budget is None:
        return
    if isinstance(budget, bool) or not isinstance(budget, int | float | np.integer | np.floating):
        raise ScheduleError(f"{source}: field budget must be a number or null, not {json.dumps(budget)[:40]}; "
                            "give the budget in the graph's memory units, or null for 'min'")
    all_zero = not graph.fixed_memory and not graph.memory.any() and not graph.op_workspace.any()
    if not math.isfinite(budget) or budget < 0 or (budget == 0 and not all_zero):
        raise ScheduleError(f"{source}: field budget is {budget}; a budget is a positive, finite amount in the "
                            "graph's memory units (null for 'min')")


def schedule_from_dict(data: Any, graph: Graph, source: str = "schedule", force: bool = False) -> Schedule:
    """Resolve a schedule document against ``graph``; refuse one written for another graph.

    Parameters
    ----------
    data : Any
        The parsed document.
    graph : Graph
        The graph it is meant for.
    source : str
        What the document is called in an error (its path).
    force : bool
        Accept a document written for another graph (another sha256).

    Returns
    -------
    Schedule
        With the document's ``method``, ``params``, ``budget``, ``solver`` and ``cleanup``.

    Raises
    ------
    ScheduleError
        The document is not an object or not a schedule (a graph file, another format), its budget is not
        a positive, finite number or null (0 only on a graph whose sizes are all zero), the schema refuses
        it, it was written for another graph (without ``force``), or a step names a node ``graph`` does not
        have, an implementation its node does not have, or an implementation on a free step.
    """
    import jsonschema

    if not isinstance(data, dict):
        raise ScheduleError(f"{source}: expected a JSON object at the top level")
    if data.get("format") != FORMAT:
        found = data.get("format")
        if found == "remat-bench-graph" or (found is None and "nodes" in data):
            raise ScheduleError(f"{source}: is a graph file, not a schedule; give the graph first and the "
                                "schedule second")
        what = "has no 'format' field" if found is None else f"has format {found!r}"
        raise ScheduleError(f"{source}: is not a remat-bench schedule file (it {what}; a schedule file "
                            f"has format '{FORMAT}', as `remat-bench solve -o` writes)")
    _check_budget(data.get("budget"), graph, source)
    # jsonschema takes far longer than the simulation to walk the steps (docs/benchmarks.md, "Reading
    # a schedule file"): the steps are decoded in bulk here
    # (`_decode_steps`), and the schema checks the rest of the document. A file whose steps
    # the bulk decoder refuses is walked in full, step by step, to word its first problem.
    steps = data.get("steps")
    decoded = _decode_steps(steps, graph) if isinstance(steps, list) else None
    head = {**{k: v for k, v in data.items() if k != "steps"}, "steps": []} if decoded is not None else data
    error = jsonschema.exceptions.best_match(
        jsonschema.Draft202012Validator(schema("schedule")).iter_errors(head)
    )
    if error is not None:
        raise ScheduleError(f"{source}: {describe_schema_error(error, data, 'step')}")
    want = (data.get("graph") or {}).get("sha256")
    if want and want != graph.sha256 and not force:
        written_for = (data.get("graph") or {}).get("name") or "another graph"
        raise ScheduleError(
            f"{source} was written for graph '{written_for}' (sha256 {want[:12]}), not for "
            f"'{graph.name}' (sha256 {graph.sha256[:12]}); pass --force to score it anyway"
        )

    if decoded is None:
        decoded = _decode_steps_one_by_one(data["steps"], graph, source)
    kinds, nodes, impls = decoded
    if data.get("version") == 1 and bool((kinds >= OFFLOAD).any()):
        s = int(np.flatnonzero(kinds >= OFFLOAD)[0])
        raise ScheduleError(f"{source}: step {s} is an {_KIND_WORD[int(kinds[s])]} step, which a version 1 schedule "
                            "cannot have; write version 2 (offload and reload steps came with it)")
    return Schedule(
        kinds, nodes, impls,
        method=data.get("method", ""),
        params=data.get("params") or {},
        budget=data.get("budget"),
        solver=data.get("solver") or {},
        cleanup=data.get("cleanup"),
    )
