"""What a sweep config expands to: its graphs, its methods' parameter grids and its runs.

`remat_bench.app.sweep.config` reads a YAML file into these; nothing here reads
YAML. A run (`RunSpec`) is every graph x budget x method parameters x seed x
repeat (`expand_runs`), each key (`remat_bench.app.sweep.keys`) once. Each graph
carries its memory floor and the budgets below it (`with_floors`), whose runs
can only answer infeasible (`floor_notes`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from remat_bench.app.evaluate import parse_method_params
from remat_bench.app.sweep.document import error_at
from remat_bench.app.sweep.keys import run_id, run_key
from remat_bench.core.baseline import baseline
from remat_bench.core.budget import format_amount, lowest_fraction, memory_floor, parse_budget
from remat_bench.core.errors import BudgetError
from remat_bench.core.graph import Graph
from remat_bench.torch import DEFAULT_MAX_PAIRS, DEFAULT_PRECISION, DEFAULT_REPEATS


@dataclass(frozen=True)
class GraphSource:
    """One graph of a sweep. ``generated`` holds a generated graph until the runner writes it to ``path``."""

    name: str
    path: Path
    sha256: str
    nodes: int
    edges: int
    line: int
    generated: Graph | None = field(default=None, compare=False, repr=False)
    # The memory floor (docs/design.md section 5) and the config's budgets that fall below it on this
    # graph: their runs can only answer `infeasible`, which `--dry-run` says before anything runs.
    floor: Any = field(default=None, compare=False)
    baseline_peak: Any = field(default=None, compare=False)
    below_floor: tuple[str, ...] = field(default=(), compare=False)
    memory_unit: str = field(default="", compare=False)  # the graph's, for sizes in messages
    link: str = field(default="", compare=False)  # the results table's `link` column (`link_text`)

    @classmethod
    def of(cls, graph: Graph, path: Path, line: int, generated: bool = False) -> GraphSource:
        """The source of ``graph``, read from (or, when ``generated``, to be written to) ``path``.

        Parameters
        ----------
        graph : Graph
            The loaded, generated or traced graph.
        path : Path
            Its file.
        line : int
            The config's line that names it.
        generated : bool
            Whether the graph is held (``generated``) until the runner writes it to ``path``.

        Returns
        -------
        GraphSource
        """
        return cls(name=graph.name, path=path, sha256=graph.sha256, nodes=graph.n, edges=graph.num_edges,
                   line=line, generated=graph if generated else None, link=link_text(graph))


def link_text(graph: Graph) -> str:
    """What the results table's ``link`` column says of a graph's host link: where its figures come from (the
    transfer's ``source``), else its bandwidth each way (``10,5``); empty for a graph without one.

    Parameters
    ----------
    graph : Graph

    Returns
    -------
    str
    """
    transfer = graph.transfer
    if transfer is None:
        return ""
    return transfer.source or f"{transfer.device_to_host.bandwidth:g},{transfer.host_to_device.bandwidth:g}"


@dataclass(frozen=True)
class RunSpec:
    """Everything a worker process needs for one run; JSON-able (it crosses process and machine borders)."""

    run_id: str
    graph: str
    graph_sha256: str
    graph_path: str
    nodes: int
    edges: int
    method: str
    params: dict[str, Any]
    budget_text: str
    seed: int | None
    repeat: int
    time_limit: float
    grace: float
    memory_limit: int | None
    link: str = ""  # the graph's host link, as the results table's `link` column says it (`link_text`)

    @property
    def key(self) -> tuple:
        return run_key(self.graph_sha256, self.method, self.params, self.budget_text, self.seed,
                       self.repeat, self.time_limit)

    def to_json(self) -> dict[str, Any]:
        """The run as a dict of plain values, its fields by name (`dataclasses.asdict`).

        Returns
        -------
        dict
        """
        return asdict(self)


@dataclass
class SweepConfig:
    """A checked config and the runs it expands to."""

    path: Path
    name: str
    description: str
    output: Path
    graphs: list[GraphSource]
    runs: list[RunSpec]
    time_limit: float
    grace: float
    memory_limit: int | None
    repeats: int
    seeds: list[int]
    executor: str
    address: str | None
    workers: int | None
    methods: list[str]
    # ``torch:`` graphs, read but not traced: tracing runs the model's code, which waits for the sweep
    # to start (`trace_torch_graphs`), and their runs are added then.
    pending: list[TorchGraph] = field(default_factory=list)
    budgets: list[str] = field(default_factory=list)
    budget_lines: list[int] = field(default_factory=list)
    grids: list[MethodGrid] = field(default_factory=list, repr=False)
    # Runs each graph gets (budgets x method settings x seeds x repeats): what a pending graph will add.
    runs_per_graph: int = 0
    # Replay the schedules of graphs imported from PyTorch once the runs are done (``replay:``); None: do not.
    replay: ReplaySettings | None = None
    # ``links:`` as written, and the config's line of each (`remat_bench.app.sweep.links`): every graph runs
    # once per link; empty: each graph with the link it has.
    links: list[str] = field(default_factory=list)
    link_lines: list[int] = field(default_factory=list)

    @property
    def planned_graphs(self) -> int:
        """Every graph of the sweep, those the ``torch:`` graphs still to be traced will make included."""
        return len(self.graphs) + len(self.pending) * max(1, len(self.links))

    @property
    def planned_runs(self) -> int:
        """Every run of the sweep, those of the ``torch:`` graphs still to be traced included."""
        return len(self.runs) + len(self.pending) * max(1, len(self.links)) * self.runs_per_graph


@dataclass(frozen=True)
class ReplaySettings:
    """How a sweep replays the schedules of its PyTorch graphs (``replay:``, `remat_bench.app.sweep.replays`)."""

    repeats: int = DEFAULT_REPEATS  # timed pairs per schedule at least, as `remat-bench replay --repeats`
    precision: float = DEFAULT_PRECISION  # then more until the 95% interval is within +-this (points)
    max_pairs: int = DEFAULT_MAX_PAIRS  # timed pairs at most
    steps: int = 0  # passes timing every step in place (`remat-bench replay --steps`): the attribution column
    device: str | None = None  # None: CUDA when present, else the CPU
    time_limit: float = 600.0  # s per replay; a replay that takes longer is stopped and recorded as failed


@dataclass
class TorchGraph:
    """A ``torch:`` graph of a config, read but not traced: `import_model` keywords and where it was written."""

    name: str
    model: str
    options: dict[str, Any]
    line: int
    search: tuple[str, ...]
    time_limit: float


def floor_notes(config: SweepConfig) -> list[str]:
    """One sentence per graph with budgets below its memory floor: runs that can only answer infeasible.

    Parameters
    ----------
    config : SweepConfig
        A loaded config.

    Returns
    -------
    list of str
        In the order of the config's graphs; empty when every budget is at or above every floor.
    """
    notes = []
    for source in config.graphs:
        if not source.below_floor:
            continue
        runs = [r for r in config.runs if r.graph_sha256 == source.sha256]
        doomed = sum(r.budget_text in source.below_floor for r in runs)
        floor = format_amount(source.floor, source.memory_unit, short=True)
        if source.baseline_peak:
            floor += (f" ({100 * source.floor / source.baseline_peak:.1f}% of its baseline peak "
                      f"{format_amount(source.baseline_peak, source.memory_unit, short=True)}; no budget below "
                      f"{lowest_fraction(source.floor, source.baseline_peak):.2f} can fit)")
        if doomed == len(runs):
            notes.append(f"graph {source.name}: every budget is below its memory floor {floor}; all {doomed} "
                         "runs will answer infeasible")
        else:
            several = len(source.below_floor) > 1
            notes.append(f"graph {source.name}: budget{'s' if several else ''} {', '.join(source.below_floor)} "
                         f"{'are' if several else 'is'} below its memory floor {floor}; those {doomed} runs will "
                         "answer infeasible")
    return notes


@dataclass
class MethodGrid:
    """A method of the config and its parameter grid: each axis a list of parsed values."""

    name: str
    cls: Any
    axes: dict[str, list[Any]]
    takes_seed: bool

    def count(self, seeds: list[int]) -> int:
        """Parameter sets x seeds, counted without listing them.

        Parameters
        ----------
        seeds : list of int
            The config's seeds; they multiply the count only for a method that takes a seed.

        Returns
        -------
        int
        """
        return math.prod(len(values) for values in self.axes.values()) * (len(seeds) if self.takes_seed else 1)

    def expand(self, seeds: list[int]) -> Iterator[tuple[dict[str, Any], int | None]]:
        """``(parsed params, seed)`` of every grid point and seed.

        Parameters
        ----------
        seeds : list of int
            The config's seeds; a method that takes no seed gets one point per parameter set, with seed None.

        Yields
        ------
        tuple of (dict, int or None)
            The parameters parsed by the method (the seed among them when there is one), and the seed.
        """
        for values in itertools.product(*self.axes.values()):
            given = dict(zip(self.axes, values))
            # A method without a `seed` parameter is deterministic here: it runs once, with no seed.
            for seed in (seeds if self.takes_seed else [None]):
                params = parse_method_params(self.cls, {**given, **({"seed": seed} if seed is not None else {})})
                yield params, seed


def with_floors(path: Path, loaded: list[tuple[GraphSource, Graph]], budget_lines: list[int],
                budgets: list[str]) -> list[GraphSource]:
    """Each graph with its memory floor, its baseline peak and the budgets below its floor.

    Parameters
    ----------
    path : Path
        The config file, for errors.
    loaded : list of (GraphSource, Graph)
        Each graph's source and the graph itself.
    budget_lines : list of int
        The config's line of each budget, for errors.
    budgets : list of str
        The budgets as the config wrote them.

    Returns
    -------
    list of GraphSource
        The sources with ``floor``, ``baseline_peak``, ``below_floor`` and ``memory_unit`` set.

    Raises
    ------
    ConfigError
        A budget that does not parse against one of the graphs, naming its line.
    """
    floors = {source.sha256: memory_floor(graph).amount for source, graph in loaded}
    below: dict[str, list[str]] = {source.sha256: [] for source, _ in loaded}
    for line, text in zip(budget_lines, budgets):
        for source, graph in loaded:
            try:
                budget = parse_budget(text, graph)
            except BudgetError as exc:
                raise error_at(path, line, f"{exc} (for graph '{source.name}')") from None
            if budget.amount is not None and budget.amount < floors[source.sha256] and text not in below[source.sha256]:
                below[source.sha256].append(text)
    return [replace(source, floor=floors[source.sha256], baseline_peak=baseline(graph).peak,
                    below_floor=tuple(below[source.sha256]), memory_unit=graph.units.get("memory", ""))
            for source, graph in loaded]


# Stands for a graph not yet traced when counting the runs each graph gets.
PLACEHOLDER = GraphSource(name="", path=Path(), sha256="", nodes=0, edges=0, line=0)


def expand_runs(graphs: list[GraphSource], *, budgets: list[str], grids: list[MethodGrid], seeds: list[int],
                repeats: int, time_limit: float, grace: float, memory_limit: int | None) -> list[RunSpec]:
    """Every graph x budget x method parameters x seed x repeat, each key once (in that order).

    Parameters
    ----------
    graphs : list of GraphSource
        The graphs.
    budgets : list of str
        The budgets as the config wrote them.
    grids : list of MethodGrid
        The methods and their parameter grids.
    seeds : list of int
        The config's seeds (for the methods that take one).
    repeats : int
        Runs of each setting.
    time_limit, grace : float
        Each run's time limit and grace, in s.
    memory_limit : int or None
        Each run's address-space cap, in bytes (None: none).

    Returns
    -------
    list of RunSpec
    """
    runs: dict[tuple, RunSpec] = {}
    for source in graphs:
        for budget in budgets:
            for grid in grids:
                for params, seed in grid.expand(seeds):
                    for repeat in range(repeats):
                        key = run_key(source.sha256, grid.name, params, budget, seed, repeat, time_limit)
                        runs.setdefault(key, RunSpec(
                            run_id=run_id(key), graph=source.name, graph_sha256=source.sha256,
                            graph_path=str(source.path), nodes=source.nodes, edges=source.edges,
                            method=grid.name, params=params, budget_text=budget, seed=seed, repeat=repeat,
                            time_limit=time_limit, grace=grace, memory_limit=memory_limit, link=source.link))
    return list(runs.values())
