"""Sweep configs (docs/design.md section 8): read one YAML file, check all of it, expand it into runs.

A config names graphs, methods with parameter grids, budgets, a per-run time
limit, repeats and seeds, the executor and the output folder::

    name: smoke
    output: ../results/smoke          # relative paths are relative to this file
    time_limit: 20                    # seconds per run, enforced by killing the run
    memory_limit: 4GiB                # address-space cap per run (optional)
    graphs:
      - ../graphs/chain-16-train.json   # a file, relative to this config
      - kumar-figure1                   # a graph by name, as on the command line (remat-bench graphs list)
      - paper:checkmate_vgg16_train     # a published graph (remat-bench graphs fetch paper)
      - glob: paper:random_layered_n*   # published graphs by pattern, or a pattern of files
      - generate: {kind: random-layered, nodes: [50, 100], seed: 0}
    methods:
      - none
      - name: chen
        params: {variant: [greedy, sqrt]}   # a list is a grid axis
    budgets: [0.9, 0.8, 70%, min]
    seeds: [0, 1]                     # passed to methods that declare a `seed` parameter
    repeats: 1

Everything is checked before any run starts, and each problem is one
`ConfigError` sentence naming the file and the line: an unknown key, an unset
environment variable, a missing graph file, an unknown graph name or a glob
matching none, an unknown or unavailable method, an unknown or mistyped
parameter, a budget that does not parse against one of the graphs. Line
numbers come from the YAML node tree (`yaml.compose`), which keeps every
node's position.

A config is data: reading it imports and calls nothing it names. Its size is
checked before anything is built: a YAML tag other than plain values, aliases
expanding beyond `MAX_VALUES` values, more than `MAX_RUNS` runs or generated
graphs of more than `MAX_SWEEP_NODES` nodes together are refused. A ``torch:``
entry's model is only located (`remat_bench.torch.zoo.locate_factory`); it is
traced, which runs its code, when the sweep starts (`trace_torch_graphs`), in a
child process stopped after its time limit (`trace_model`).

Each run is keyed by (graph sha256, method, parameters, budget text, seed,
repeat, time limit): the journal uses the key to skip finished runs on
``--resume``, and the results table to drop duplicates.
"""

from __future__ import annotations

import difflib
import hashlib
import itertools
import json
import math
import os
import re
import stat
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from remat_bench.app import datasets
from remat_bench.app.evaluate import PIPELINE_PARAMS, parse_method_params
from remat_bench.app.graphs import graph_named
from remat_bench.core.baseline import baseline
from remat_bench.core.budget import format_amount, lowest_fraction, memory_floor, parse_budget, parse_size
from remat_bench.core.errors import BudgetError, ConfigError, GraphError, MethodError, RematBenchError
from remat_bench.core.files import bounded_glob, safe_name
from remat_bench.core.graph import Graph
from remat_bench.core.provenance import CostWarning
from remat_bench.torch.isolated import TRACE_TIME_LIMIT, trace_model

TOP_KEYS = ("name", "description", "output", "graphs", "methods", "budgets", "time_limit", "grace",
            "memory_limit", "repeats", "seeds", "executor", "address", "workers", "replay")
METHOD_KEYS = ("name", "params")
GRAPH_KEYS = ("path", "glob", "generate", "torch")
# Keys of a ``torch:`` graph entry: a PyTorch model traced into a training graph (`import_model`).
TORCH_KEYS = ("model", "batch", "input_shape", "task", "input_dtype", "vocab", "durations", "workspace", "repeats",
              "kwargs", "time_limit")
EXECUTORS = ("local", "dask")
DEFAULT_TIME_LIMIT = 300.0
# Keys of ``replay:`` (`ReplaySettings`): how the schedules of PyTorch graphs are replayed after the runs.
REPLAY_KEYS = ("repeats", "device", "time_limit")
REPLAY_DEVICES = ("cpu", "cuda")
# What a config may hold, checked before anything is built: the project aims at sweeps of thousands of
# runs on graphs of ~10,000 nodes, and these leave two orders of magnitude above that.
MAX_CONFIG_BYTES = 2**20
MAX_VALUES = 1_000_000  # YAML values after aliases are expanded ("billion laughs")
MAX_RUNS = 1_000_000
MAX_SWEEP_NODES = 2_000_000  # every generated graph of a sweep is held in memory until the sweep writes it
# An error message quotes at most this much of a value, and is at most MESSAGE_CHARS long.
QUOTE_CHARS = 60
MESSAGE_CHARS = 1000
# Tags of plain values: what yaml.safe_load builds, and merge keys. Any other tag (!!python/object/apply:...)
# is refused by name, rather than in PyYAML's four lines.
_PLAIN_TAGS = {tag for tag in yaml.SafeLoader.yaml_constructors if tag is not None} | {"tag:yaml.org,2002:merge"}
_YAML_TAG = "tag:yaml.org,2002:"
_VARIABLE = re.compile(r"\$(?:\{([^}]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


def default_grace(time_limit: float) -> float:
    """Seconds a run may overstay its limit before it is killed: `remat_bench.core.control.grace_s`.

    Parameters
    ----------
    time_limit : float
        The run's time limit, in s.

    Returns
    -------
    float
        The grace, in s: a config's ``grace`` when it sets none.
    """
    from remat_bench.core.control import grace_s

    return grace_s(time_limit)


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


def params_text(params: Mapping[str, Any] | str | None) -> str:
    """Canonical JSON text of a parameter set (sorted keys): the ``params`` column and part of the key.

    Parameters
    ----------
    params : Mapping, str or None
        The parameters: a mapping, or JSON text of one (as a table holds it); an empty text or None for none.

    Returns
    -------
    str
        Compact JSON (no spaces); ``{}`` for no parameters.
    """
    if isinstance(params, str):
        params = json.loads(params) if params else {}
    return json.dumps(dict(params or {}), sort_keys=True, separators=(",", ":"))


def run_key(graph_sha256: str, method: str, params: Mapping[str, Any] | str | None, budget_text: str,
            seed: int | None, repeat: int, time_limit: float) -> tuple:
    """The identity of a run: two runs with the same key are the same measurement.

    Parameters
    ----------
    graph_sha256 : str
        The graph's digest (`Graph.sha256`).
    method : str
        The method's name.
    params : Mapping, str or None
        Its parameters, as `params_text` takes them.
    budget_text : str
        The budget as the config wrote it (``0.8``, ``70%``, ``min``).
    seed : int or None
        The seed; None, or NaN as a table holds a missing one, for none.
    repeat : int
        Which repetition.
    time_limit : float
        The run's time limit, in s.

    Returns
    -------
    tuple
        (graph_sha256, method, params text, budget text, seed or None, repeat, time limit), each normalized.
    """
    seed = None if seed is None or seed != seed else int(seed)  # NaN from a table is "no seed"
    return (str(graph_sha256), str(method), params_text(params), str(budget_text), seed, int(repeat),
            float(time_limit))


def row_key(row: dict[str, Any]) -> tuple:
    """The `run_key` of a results row or journal entry.

    Parameters
    ----------
    row : dict
        The row; ``seed`` may be missing.

    Returns
    -------
    tuple
    """
    return run_key(row["graph_sha256"], row["method"], row["params"], row["budget_text"], row.get("seed"),
                   row["repeat"], row["time_limit"])


def run_id(key: tuple) -> str:
    """A short stable name for a run (its schedule file and log are named after it).

    Parameters
    ----------
    key : tuple
        The run's key (`run_key`).

    Returns
    -------
    str
        16 hexadecimal digits of the SHA-256 of the key's JSON.
    """
    return hashlib.sha256(json.dumps(list(key)).encode()).hexdigest()[:16]


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

    @property
    def planned_runs(self) -> int:
        """Every run of the sweep, those of the ``torch:`` graphs still to be traced included."""
        return len(self.runs) + len(self.pending) * self.runs_per_graph


@dataclass(frozen=True)
class ReplaySettings:
    """How a sweep replays the schedules of its PyTorch graphs (``replay:``, `remat_bench.app.sweep.replays`)."""

    repeats: int = 5  # timed pairs per schedule, as `remat-bench replay --repeats`
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


class _Document:
    """The YAML node tree of one config file, and errors that name its lines."""

    def __init__(self, path: Path) -> None:
        self.path = path
        text = _read_config(path)
        self.loader = yaml.SafeLoader(text)
        try:
            self.root = self.loader.get_single_node()
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            where = f", line {mark.line + 1}" if mark is not None else ""
            raise ConfigError(_capped(f"{path}{where}: not valid YAML: {exc.problem or exc.context}")) from None
        except yaml.YAMLError as exc:
            raise ConfigError(_capped(f"{path}: not valid YAML: {exc}")) from None
        except RecursionError:
            raise ConfigError(f"{path}: its lists or mappings are nested too deeply to read") from None
        if self.root is None:
            raise ConfigError(f"{path}: the config is empty; it needs at least graphs, methods and budgets")
        self._check_tree()

    def _check_tree(self) -> None:
        """Refuse tags that are not plain values, values that hold themselves, and aliases that expand
        beyond `MAX_VALUES` values, before any value is built. Iterative: a deep tree must not overflow
        Python's stack; each node's expanded size is counted once (an alias shares its anchor's node)."""
        size: dict[int, int] = {}
        open_nodes: set[int] = set()
        stack: list[tuple[yaml.Node, bool]] = [(self.root, False)]
        while stack:
            node, closing = stack.pop()
            key = id(node)
            if closing:
                open_nodes.discard(key)
                size[key] = 1 + sum(size[id(child)] for child in _children(node))
                if size[key] > MAX_VALUES:
                    raise self.error(node, f"this value expands to more than {MAX_VALUES:,} values through its "
                                           "aliases (*name); a config that large is refused")
                continue
            if key in size:
                continue
            if key in open_nodes:
                raise self.error(node, "this value contains itself through an alias (*name); a config must be "
                                       "finite")
            if node.tag not in _PLAIN_TAGS:
                tag = "!!" + node.tag[len(_YAML_TAG):] if node.tag.startswith(_YAML_TAG) else node.tag
                raise self.error(node, f"the tag {_quote(tag)} is not allowed; a config holds plain values "
                                       "(text, numbers, lists and mappings)")
            open_nodes.add(key)
            stack.append((node, True))
            stack.extend((child, False) for child in _children(node))

    def error(self, node: yaml.Node, message: str) -> ConfigError:
        return _error_at(self.path, node.start_mark.line + 1, message)

    def value(self, node: yaml.Node) -> Any:
        try:
            return self.loader.construct_object(node, deep=True)
        except yaml.YAMLError as exc:
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            raise self.error(node, f"cannot read this value ({problem})") from None
        except ValueError as exc:  # an integer of more digits than Python converts
            raise self.error(node, f"cannot read this value ({exc})") from None

    def shown(self, node: yaml.Node) -> str:
        """A value as an error message quotes it: a scalar's text (cut short), else what kind of value it is."""
        if isinstance(node, yaml.ScalarNode):
            return _quote(str(node.value))
        return "a list" if isinstance(node, yaml.SequenceNode) else "a mapping"

    def mapping(self, node: yaml.Node, what: str, allowed: tuple[str, ...]) -> dict[str, tuple[yaml.Node, yaml.Node]]:
        """``{key: (key_node, value_node)}``, refusing unknown and repeated keys."""
        if not isinstance(node, yaml.MappingNode):
            raise self.error(node, f"{what} must be a mapping of keys to values")
        out: dict[str, tuple[yaml.Node, yaml.Node]] = {}
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            if key not in allowed:
                close = difflib.get_close_matches(str(key)[:QUOTE_CHARS], allowed, n=1)
                hint = f" (did you mean '{close[0]}'?)" if close else ""
                raise self.error(key_node, f"unknown key {self.shown(key_node)} in {what}{hint}; the keys are "
                                           f"{', '.join(allowed)}")
            if key in out:
                raise self.error(key_node, f"key '{key}' appears twice in {what}")
            out[key] = (key_node, value_node)
        return out

    def items(self, node: yaml.Node, what: str) -> list[yaml.Node]:
        """A list's item nodes; a single scalar counts as a list of one."""
        if isinstance(node, yaml.SequenceNode):
            if not node.value:
                raise self.error(node, f"'{what}' is empty; give at least one")
            return list(node.value)
        if isinstance(node, yaml.ScalarNode) and node.value != "":
            return [node]
        raise self.error(node, f"'{what}' must be a list")

    def number(self, node: yaml.Node, what: str, minimum: float, integer: bool = False,
               strict: bool = True) -> float:
        value = self.value(node)
        kind = "a whole number" if integer else "a number"
        ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and (
            value > minimum if strict else value >= minimum)
        if not ok or (integer and isinstance(value, float) and not value.is_integer()):
            relation = "above" if strict else "at least"
            raise self.error(node, f"'{what}' must be {kind} {relation} {minimum:g}, not {self.shown(node)}")
        return int(value) if integer else float(value)

    def text(self, node: yaml.Node, what: str) -> str:
        if not isinstance(node, yaml.ScalarNode) or node.value == "":
            raise self.error(node, f"'{what}' must be a text value")
        return str(node.value)

    def expand_path(self, node: yaml.Node, text: str, env: Mapping[str, str]) -> str:
        """``${VAR}``/``$VAR`` and ``~`` expanded, relative to the config file's folder."""
        for match in _VARIABLE.finditer(text):
            name = match.group(1) if match.group(1) is not None else match.group(2)
            if name not in env:
                raise self.error(node, f"environment variable {_quote(name)[1:-1]} is not set (used in "
                                       f"{_quote(text)}); set it, e.g. `export {_quote(name)[1:-1]}=...`")
        expanded = _VARIABLE.sub(lambda m: env[m.group(1) if m.group(1) is not None else m.group(2)], text)
        expanded = os.path.expanduser(expanded)
        if not os.path.isabs(expanded):
            expanded = os.path.join(self.path.parent, expanded)
        # Absolute: runs and results read it from other folders (a config named by a relative path
        # gave paths relative to where the sweep started, which charts then read against the results).
        return os.path.abspath(expanded)


def _read_config(path: Path) -> str:
    """The config's text; refuses what is not a regular file (a device never ends) or is over the size cap."""
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            what = "a folder" if stat.S_ISDIR(info.st_mode) else "a device, pipe or socket"
            raise ConfigError(f"{path}: is not a config file ({what}); give a YAML file")
        if info.st_size > MAX_CONFIG_BYTES:
            raise ConfigError(f"{path}: is {info.st_size:,} bytes, more than the {MAX_CONFIG_BYTES:,} a config may "
                              "be; split it into several sweeps")
        with open(path, "rb") as fh:
            data = fh.read(MAX_CONFIG_BYTES + 1)
        return data.decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such config file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot be read ({exc})") from None


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [item for pair in node.value for item in pair]
    return []


def _counted(n: int, one: str, many: str) -> str:
    return f"{n:,} {one if n == 1 else many}"


def _quote(text: str) -> str:
    """``'text'``, cut to `QUOTE_CHARS` characters: an error message names a value, it does not repeat it."""
    return repr(text if len(text) <= QUOTE_CHARS else text[:QUOTE_CHARS - 3] + "...")


def _capped(message: str) -> str:
    """At most `MESSAGE_CHARS` characters, keeping the start (where) and the end (what to do)."""
    if len(message) <= MESSAGE_CHARS:
        return message
    half = MESSAGE_CHARS // 2 - 3
    return f"{message[:half]} ... {message[-half:]}"


def _error_at(path: Path, line: int, message: str) -> ConfigError:
    return ConfigError(_capped(f"{path}, line {line}: {message}"))


def load_config(path: str | Path, *, output: str | Path | None = None,
                env: Mapping[str, str] | None = None) -> SweepConfig:
    """Read and check a sweep config; expand it into runs. Raises `ConfigError` naming the line.

    ``output`` (the ``--output`` option) overrides the config's own; without
    either, the output is ``results/<config name>`` under the current folder.

    Parameters
    ----------
    path : str or Path
        The YAML file; relative paths inside it are relative to its folder.
    output : str, Path or None
        The output folder, overriding the config's (None: the config's, else the default above).
    env : Mapping or None
        The variables ``$NAME`` in paths expand to (None: `os.environ`).

    Returns
    -------
    SweepConfig
        Its runs expanded; ``torch:`` graphs are left pending, untraced (`trace_torch_graphs`).

    Raises
    ------
    ConfigError
        One sentence naming the file and the line, for anything the module's docstring lists.
    """
    env = os.environ if env is None else env
    doc = _Document(Path(path))
    top = doc.mapping(doc.root, "the config", TOP_KEYS)
    for required in ("graphs", "methods", "budgets"):
        if required not in top:
            raise doc.error(doc.root, f"the config has no '{required}'; a sweep needs graphs, methods and budgets")
    settings = _settings(doc, top)
    out_dir = _output_folder(doc, top, output, settings.name, env)
    grids = _methods(doc, top["methods"][1], seeds_given="seeds" in top)
    budget_nodes = doc.items(top["budgets"][1], "budgets")
    budgets = [_budget_text(doc, node) for node in budget_nodes]
    entries = _graph_entries(doc, top["graphs"][1], env)
    _check_size(doc, top, entries, budgets, grids, settings)
    loaded, pending = _build_graphs(doc, entries, out_dir / "graphs")
    graphs = _with_floors(doc.path, loaded, [n.start_mark.line + 1 for n in budget_nodes], budgets)

    def expand(sources: list[GraphSource]) -> list[RunSpec]:
        return _expand_runs(sources, budgets=budgets, grids=grids, seeds=settings.seeds, repeats=settings.repeats,
                            time_limit=settings.time_limit, grace=settings.grace,
                            memory_limit=settings.memory_limit)

    return SweepConfig(
        path=doc.path, name=settings.name, description=settings.description, output=out_dir, graphs=graphs,
        runs=expand(graphs), time_limit=settings.time_limit,
        grace=settings.grace, memory_limit=settings.memory_limit, repeats=settings.repeats, seeds=settings.seeds,
        executor=settings.executor, address=settings.address, workers=settings.workers,
        methods=list(dict.fromkeys(grid.name for grid in grids)), pending=pending, budgets=budgets,
        budget_lines=[n.start_mark.line + 1 for n in budget_nodes], grids=grids,
        runs_per_graph=len(expand([_PLACEHOLDER])),
        replay=_replay_settings(doc, top["replay"][1]) if "replay" in top else None,
    )


@dataclass
class _Settings:
    """The config's single-valued keys, checked, with their defaults."""

    name: str
    description: str
    time_limit: float
    grace: float
    repeats: int
    workers: int | None
    memory_limit: int | None
    seeds: list[int]
    executor: str
    address: str | None


def _settings(doc: _Document, top: dict[str, tuple[yaml.Node, yaml.Node]]) -> _Settings:
    def scalar(key: str, default: Any, read: Any) -> Any:
        return read(top[key][1]) if key in top and doc.value(top[key][1]) is not None else default

    name = scalar("name", None, lambda n: _plain_name(doc, n, doc.text(n, "name")))
    if name is None:
        name = _plain_name(doc, doc.root, doc.path.stem)
    description = scalar("description", "", lambda n: doc.text(n, "description"))
    time_limit = scalar("time_limit", DEFAULT_TIME_LIMIT, lambda n: doc.number(n, "time_limit", 0))
    grace = scalar("grace", default_grace(time_limit),
                   lambda n: doc.number(n, "grace", 0, strict=False))
    repeats = scalar("repeats", 1, lambda n: doc.number(n, "repeats", 1, integer=True, strict=False))
    workers = scalar("workers", None, lambda n: doc.number(n, "workers", 1, integer=True, strict=False))
    memory_limit = scalar("memory_limit", None, lambda n: _memory_limit(doc, n))
    seeds = scalar("seeds", [0], lambda n: [
        int(doc.number(item, "seeds", 0, integer=True, strict=False)) for item in doc.items(n, "seeds")])
    executor = scalar("executor", "local", lambda n: doc.text(n, "executor"))
    if executor not in EXECUTORS:
        raise doc.error(top["executor"][1], f"executor {_quote(executor)} is not known; use local or dask")
    address = scalar("address", None, lambda n: doc.text(n, "address"))
    if address and "executor" in top and executor != "dask":
        raise doc.error(top["address"][1], "'address' names a Dask scheduler; it needs 'executor: dask'")
    if address:
        executor = "dask"  # a scheduler's address implies Dask, as --address does on the command line
    return _Settings(name=name, description=description, time_limit=time_limit, grace=grace, repeats=repeats,
                     workers=workers, memory_limit=memory_limit, seeds=seeds, executor=executor, address=address)


def _replay_settings(doc: _Document, node: yaml.Node) -> ReplaySettings | None:
    """``replay: true`` (the defaults), ``false`` (none), or a mapping of `REPLAY_KEYS`; PyTorch must be there."""
    value = doc.value(node)
    if isinstance(value, bool):
        settings = ReplaySettings() if value else None
    elif isinstance(node, yaml.MappingNode):
        keys = doc.mapping(node, "replay", REPLAY_KEYS)
        settings = ReplaySettings()
        if "repeats" in keys:
            settings = replace(settings, repeats=int(doc.number(keys["repeats"][1], "repeats", 1, integer=True,
                                                                strict=False)))
        if "time_limit" in keys:
            settings = replace(settings, time_limit=doc.number(keys["time_limit"][1], "time_limit", 0))
        if "device" in keys:
            device = doc.text(keys["device"][1], "device")
            if device not in REPLAY_DEVICES:
                raise doc.error(keys["device"][1], f"replay device {_quote(device)} is not known; use cpu or cuda")
            settings = replace(settings, device=device)
    else:
        raise doc.error(node, "'replay' must be true, false, or a mapping of repeats, device and time_limit")
    if settings is not None:
        from remat_bench.torch import torch_available

        if not torch_available():
            raise doc.error(node, "replaying schedules needs PyTorch: install it with `pip install "
                                  "remat-bench[torch]` (`make install` does), or remove 'replay'")
    return settings


def _plain_name(doc: _Document, node: yaml.Node, name: str) -> str:
    """The sweep's name, which names its results folder (``results/<name>``): one plain name, not a path."""
    if "/" in name or "\\" in name or "\0" in name or name.strip() in ("", ".", ".."):
        raise doc.error(node, f"the sweep's name {_quote(name)} must be a plain name, not a path (no '/', not "
                              "'.' or '..'): it names the results folder results/<name>; choose another folder "
                              "with 'output' or --output")
    return name


def _output_folder(doc: _Document, top: dict[str, tuple[yaml.Node, yaml.Node]], output: str | Path | None,
                   name: str, env: Mapping[str, str]) -> Path:
    """``output`` if given, else the config's own, else ``results/<name>``; made absolute."""
    if output is not None:
        out_dir = Path(output)
    elif "output" in top:
        node = top["output"][1]
        out_dir = Path(doc.expand_path(node, doc.text(node, "output"), env))
    else:
        out_dir = Path("results") / name
    return Path(os.path.abspath(out_dir))  # runs may start in another folder, or on another machine


def _with_floors(path: Path, loaded: list[tuple[GraphSource, Graph]], budget_lines: list[int],
                 budgets: list[str]) -> list[GraphSource]:
    """Each graph with its memory floor, its baseline peak and the budgets below its floor; refuses a
    budget that does not parse against one of the graphs."""
    floors = {source.sha256: memory_floor(graph).amount for source, graph in loaded}
    below: dict[str, list[str]] = {source.sha256: [] for source, _ in loaded}
    for line, text in zip(budget_lines, budgets):
        for source, graph in loaded:
            try:
                budget = parse_budget(text, graph)
            except BudgetError as exc:
                raise _error_at(path, line, f"{exc} (for graph '{source.name}')") from None
            if budget.amount is not None and budget.amount < floors[source.sha256] and text not in below[source.sha256]:
                below[source.sha256].append(text)
    return [replace(source, floor=floors[source.sha256], baseline_peak=baseline(graph).peak,
                    below_floor=tuple(below[source.sha256]), memory_unit=graph.units.get("memory", ""))
            for source, graph in loaded]


# Stands for a graph not yet traced when counting the runs each graph gets.
_PLACEHOLDER = GraphSource(name="", path=Path(), sha256="", nodes=0, edges=0, line=0)


def _expand_runs(graphs: list[GraphSource], *, budgets: list[str], grids: list[MethodGrid], seeds: list[int],
                 repeats: int, time_limit: float, grace: float, memory_limit: int | None) -> list[RunSpec]:
    """Every graph x budget x method parameters x seed x repeat, each key once (in that order)."""
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
                            time_limit=time_limit, grace=grace, memory_limit=memory_limit))
    return list(runs.values())


def _check_size(doc: _Document, top: dict[str, tuple[yaml.Node, yaml.Node]], entries: list[_Entry],
                budgets: list[str], grids: list[MethodGrid], settings: _Settings) -> None:
    """Refuse, before any graph is built or run listed, a sweep of more than `MAX_RUNS` runs, or generated
    graphs of more than `MAX_SWEEP_NODES` nodes together (each generator refuses a graph above its own cap)."""
    graphs = sum(entry.count for entry in entries)
    cells = sum(grid.count(settings.seeds) for grid in grids)
    factors = {"graphs": graphs, "budgets": len(set(budgets)), "methods": cells, "repeats": settings.repeats}
    runs = math.prod(factors.values())
    if runs > MAX_RUNS:
        largest = max((key for key in factors if key in top), key=lambda key: factors[key], default="graphs")
        counts = " x ".join((_counted(graphs, "graph", "graphs"), _counted(factors["budgets"], "budget", "budgets"),
                             _counted(cells, "method setting", "method settings and seeds"),
                             _counted(settings.repeats, "repeat", "repeats")))
        raise doc.error(top[largest][1], f"the sweep has {runs:,} runs ({counts}), more than the {MAX_RUNS:,} one "
                                         "sweep may have; split it into several sweeps")
    nodes = 0
    for entry in entries:
        for kind, options in entry.generated():
            nodes += _generated_size(doc, entry.node, kind, options)[0]
            if nodes > MAX_SWEEP_NODES:
                raise doc.error(entry.node, f"the generated graphs add up to more than {MAX_SWEEP_NODES:,} nodes, "
                                            "more than one sweep holds in memory; split it into several sweeps")


def _memory_limit(doc: _Document, node: yaml.Node) -> int:
    try:
        return parse_size(doc.value(node))
    except ValueError:
        raise doc.error(node, f"memory_limit {doc.shown(node)} is not a size; write it like 4GiB, 500MB "
                              "or a number of bytes") from None


def _budget_text(doc: _Document, node: yaml.Node) -> str:
    # The text as written (0.90 stays 0.90): it is what the user reads in the table, and part of the key.
    if not isinstance(node, yaml.ScalarNode) or node.value.strip() == "":
        raise doc.error(node, "a budget must be a single value such as 0.8, 80%, 12GiB or min")
    return node.value.strip()


# ---------------------------------------------------------------------- graphs


@dataclass
class _Entry:
    """One graph entry of the config, read and checked but not built: files found, or the combinations
    of a ``generate:`` or ``torch:`` spec, counted before any is built."""

    node: yaml.Node
    paths: list[str] = field(default_factory=list)
    kind: str = ""  # a generator's kind, or "torch"
    axes: dict[str, list[Any]] = field(default_factory=dict)
    torch: Callable[[dict[str, Any]], TorchGraph] | None = None

    @property
    def count(self) -> int:
        return len(self.paths) if not self.kind else math.prod(len(values) for values in self.axes.values())

    def combinations(self) -> Iterator[dict[str, Any]]:
        for values in itertools.product(*self.axes.values()):
            yield dict(zip(self.axes, values))

    def generated(self) -> Iterator[tuple[str, dict[str, Any]]]:
        if self.kind and self.torch is None:
            for options in self.combinations():
                yield self.kind, options


def _graph_entries(doc: _Document, node: yaml.Node, env: Mapping[str, str]) -> list[_Entry]:
    """Every graph entry read and checked: files found, generator and model options checked; nothing built."""
    entries: list[_Entry] = []

    def published(item: yaml.Node, pattern: str) -> list[str] | None:
        """``paper:<pattern>`` -> the paths of the published graphs it matches; None for any other pattern."""
        if not pattern.startswith(datasets.PREFIX):
            return None
        try:
            return [str(p) for p in datasets.matching(pattern[len(datasets.PREFIX):])]
        except datasets.DatasetError as exc:
            raise doc.error(item, str(exc)) from None

    def files(item: yaml.Node, paths: list[str]) -> _Entry:
        for path in paths:
            if not os.path.isfile(path):
                why = ("is a folder; use 'glob: <folder>/*.json' for its graphs" if os.path.isdir(path)
                       else "does not exist")
                raise doc.error(item, f"graph file {path} {why}")
        return _Entry(item, paths=paths)

    def named(item: yaml.Node, text: str) -> _Entry:
        """A string or ``path:`` entry: a file relative to the config; else, when ``text`` is a plain name
        (no folder, nothing to expand), the graph it names on the command line as well (`graph_named`:
        ``paper:<name>``, a shipped graph's file name or the name inside it)."""
        if not text.startswith(datasets.PREFIX):
            path = doc.expand_path(item, text, env)
            if os.path.exists(path) or not _plain_graph_name(text):
                return files(item, [path])
        try:
            # Absolute, as every path of a config: $REMAT_BENCH_GRAPHS or $PAPER_GRAPHS may be relative.
            return files(item, [os.path.abspath(graph_named(text))])
        except RematBenchError as exc:
            raise doc.error(item, str(exc)) from None

    for item in doc.items(node, "graphs"):
        if isinstance(item, yaml.ScalarNode):
            entries.append(named(item, doc.text(item, "graphs")))
            continue
        entry = doc.mapping(item, "a graph entry", GRAPH_KEYS)
        if len(entry) != 1:
            raise doc.error(item, "a graph entry is a path, or a mapping with exactly one of path, glob, generate, "
                                  "torch")
        key, (_, value) = next(iter(entry.items()))
        if key == "path":
            entries.append(named(value, doc.text(value, "path")))
        elif key == "glob":
            text = doc.text(value, "glob")
            matches = published(value, text)
            pattern = text
            if matches is None:
                pattern = doc.expand_path(value, text, env)
                try:
                    matches = bounded_glob(pattern)
                except RematBenchError as exc:
                    raise doc.error(value, str(exc)) from None
            if not matches:
                raise doc.error(value, f"the pattern {pattern} matches no graph file")
            entries.append(files(value, matches))
        elif key == "generate":
            entries.append(_generate_entry(doc, value))
        else:
            entries.append(_torch_entry(doc, value))
    return entries


def _plain_graph_name(text: str) -> bool:
    """A text with no folder in it and nothing to expand (``chain-16-train``), which may name a graph rather
    than a file beside the config."""
    return "/" not in text and os.sep not in text and "$" not in text and not text.startswith("~")


def _build_graphs(doc: _Document, entries: list[_Entry],
                  generated_dir: Path) -> tuple[list[tuple[GraphSource, Graph]], list[TorchGraph]]:
    """Every graph once (by hash), in config order, with the loaded graph for the budget checks; and the
    ``torch:`` graphs, which are traced when the sweep starts.

    A generated graph is to be written under ``generated_dir`` (by the runner,
    once the whole config is checked) so that every run reads a file.
    """
    from remat_bench.core.graph_io import load_graph

    found: dict[str, tuple[GraphSource, Graph]] = {}
    pending: list[TorchGraph] = []
    for entry in entries:
        line = entry.node.start_mark.line + 1
        if entry.torch is not None:
            pending.extend(entry.torch(options) for options in entry.combinations())
            continue
        for path in entry.paths:
            try:
                graph = load_graph(path)
            except GraphError as exc:
                raise doc.error(entry.node, str(exc)) from None
            found.setdefault(graph.sha256, (_source(graph, Path(path), line), graph))
        for kind, options in entry.generated():
            graph = _generate(doc, entry.node, kind, options)
            written = generated_dir / f"{safe_name(graph.name)}-{graph.sha256[:8]}.json"
            found.setdefault(graph.sha256, (_source(graph, written, line, generated=True), graph))
    return list(found.values()), pending


def _source(graph: Graph, path: Path, line: int, generated: bool = False) -> GraphSource:
    return GraphSource(name=graph.name, path=path, sha256=graph.sha256, nodes=graph.n, edges=graph.num_edges,
                       line=line, generated=graph if generated else None)


def _torch_entry(doc: _Document, node: yaml.Node) -> _Entry:
    """A ``torch:`` spec, checked as data: its keys and values, and where its model would come from
    (`locate_factory`, which imports nothing and refuses the standard library). A list in ``batch`` or in
    a ``kwargs`` value is a grid axis (one graph per combination)."""
    spec = doc.mapping(node, "a torch spec", TORCH_KEYS)
    if "model" not in spec:
        raise doc.error(node, "a torch spec needs a 'model': a zoo name (gpt, resnet50, unet, ...) or "
                              "module:factory")
    try:
        from remat_bench.torch.importer import DURATIONS, WORKSPACES
        from remat_bench.torch.spec import INPUT_DTYPES
        from remat_bench.torch.zoo import TASKS, locate_factory
    except ImportError:
        raise doc.error(node, "a torch graph needs PyTorch: install it with `pip install remat-bench[torch]` "
                              "(`make install` does)") from None
    model_node = spec["model"][1]
    model = doc.text(model_node, "model")
    search = (str(doc.path.parent),)  # a factory written beside the config imports as `module:factory`
    try:
        locate_factory(model, search)
    except RematBenchError as exc:
        raise doc.error(model_node, str(exc)) from None

    def whole(n: yaml.Node, what: str) -> int:
        return int(doc.number(n, what, 1, integer=True, strict=False))

    def choice(key: str, allowed: tuple[str, ...]) -> str:
        text = doc.text(spec[key][1], key)
        if text not in allowed:
            raise doc.error(spec[key][1], f"'{key}' must be one of {', '.join(allowed)}, not {_quote(text)}")
        return text

    fixed: dict[str, Any] = {}
    if "input_shape" in spec:
        shape_node = spec["input_shape"][1]
        if not isinstance(shape_node, yaml.SequenceNode) or not shape_node.value:
            raise doc.error(shape_node, "'input_shape' must be a list of sizes per sample, such as [3, 32, 32]")
        fixed["input_shape"] = tuple(whole(n, "input_shape") for n in shape_node.value)
    for key, allowed in (("task", TASKS), ("input_dtype", INPUT_DTYPES), ("durations", DURATIONS),
                         ("workspace", WORKSPACES)):
        if key in spec:
            fixed[key] = choice(key, allowed)
    if "repeats" in spec:
        fixed["repeats"] = whole(spec["repeats"][1], "repeats")
    if "vocab" in spec:
        fixed["input_range"] = whole(spec["vocab"][1], "vocab")
    limit = doc.number(spec["time_limit"][1], "time_limit", 0) if "time_limit" in spec else TRACE_TIME_LIMIT
    axes: dict[str, list[Any]] = {}
    if "batch" in spec:
        axes["batch"] = [whole(n, "batch") for n in doc.items(spec["batch"][1], "batch")]
    if "kwargs" in spec:
        kwargs_node = spec["kwargs"][1]
        if not isinstance(kwargs_node, yaml.MappingNode):
            raise doc.error(kwargs_node, "'kwargs' must be a mapping of the model's arguments")
        for key_node, value_node in kwargs_node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else ""
            if not str(key).isidentifier() or f"kwargs.{key}" in axes:
                raise doc.error(key_node, f"{doc.shown(key_node)} is not a Python argument name, or is given twice")
            value = doc.value(value_node)
            axes[f"kwargs.{key}"] = value if isinstance(value, list) else [value]
    line = node.start_mark.line + 1
    label = model.replace(":", "-").replace(".", "-")

    def pending(chosen: dict[str, Any]) -> TorchGraph:
        model_kwargs = {k[len("kwargs."):]: v for k, v in chosen.items() if k.startswith("kwargs.")}
        # Named by model, batch and arguments: GPTs of 12 and 48 layers must not share a name.
        name = "-".join([f"torch-{label}", f"b{chosen.get('batch') or 'default'}",
                         *(f"{k}{v}" for k, v in model_kwargs.items())])
        options = dict(model=model, batch=chosen.get("batch"), model_kwargs=model_kwargs, name=name, **fixed)
        return TorchGraph(name=name, model=model, options=options, line=line, search=search, time_limit=limit)

    return _Entry(node, kind="torch", axes=axes, torch=pending)


def _generate_entry(doc: _Document, node: yaml.Node) -> _Entry:
    """A ``generate:`` spec: ``kind`` plus options of `remat_bench.generators.generate`; lists are grid axes."""
    from remat_bench.generators import GENERATORS

    spec = doc.mapping(node, "a generate spec", ("kind", "batch", "layers", "nodes", "seed", "resolution",
                                                 "width", "seq"))
    if "kind" not in spec:
        raise doc.error(node, f"a generate spec needs a 'kind' ({', '.join(GENERATORS)})")
    kind = doc.text(spec["kind"][1], "kind")
    if kind not in GENERATORS:
        raise doc.error(spec["kind"][1], f"unknown graph kind {_quote(kind)}; choose one of {', '.join(GENERATORS)}")
    axes = {k: [doc.value(n) for n in doc.items(v, k)] for k, (_, v) in spec.items() if k != "kind"}
    return _Entry(node, kind=kind, axes=axes)


def _generated_size(doc: _Document, node: yaml.Node, kind: str, options: dict[str, Any]) -> tuple[int, int]:
    """(nodes, edges) a ``generate:`` combination would have; its options checked as `generate` checks them."""
    from remat_bench.generators import generated_size

    return _generating(doc, node, kind, lambda: generated_size(kind, **options))


def _generate(doc: _Document, node: yaml.Node, kind: str, options: dict[str, Any]) -> Graph:
    from remat_bench.generators import generate

    return _generating(doc, node, kind, lambda: generate(kind, **options))


def _generating(doc: _Document, node: yaml.Node, kind: str, call: Callable[[], Any]) -> Any:
    try:
        return call()
    except GraphError as exc:
        raise doc.error(node, str(exc)) from None
    except TypeError as exc:  # a value of the wrong type reached the generator
        raise doc.error(node, f"{kind}: {exc}") from None


# ---------------------------------------------------------------------- PyTorch graphs


def trace_torch_graphs(config: SweepConfig, note: Callable[[str], None] | None = None) -> SweepConfig:
    """The config with its ``torch:`` graphs traced (`trace_model`) and their runs added.

    Runs the code of each model: a sweep calls it when it starts, never when a config is only read or
    checked (``--dry-run``). Refuses, as a `ConfigError` naming the config's line, a model that cannot
    be traced, and a budget that does not parse against a traced graph.

    Parameters
    ----------
    config : SweepConfig
        A loaded config; it is not changed.
    note : callable or None
        Told, in one line, of each model as its tracing begins, and of costs it could not measure as asked
        (None: nothing is told).

    Returns
    -------
    SweepConfig
        A copy with the traced graphs and their runs added and nothing pending (a traced graph identical to
        one already in the sweep is not added again); ``config`` itself when nothing was pending.

    Raises
    ------
    ConfigError
        A model that cannot be traced, or a budget that does not parse against its graph, naming the line.
    """
    if not config.pending:
        return config
    known = {source.sha256 for source in config.graphs}
    traced: list[tuple[GraphSource, Graph]] = []
    for i, pending in enumerate(config.pending, 1):
        if note is not None:
            note(f"tracing {pending.name} ({i}/{len(config.pending)}): {pending.model}")
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", CostWarning)
                graph = trace_model(pending.options, pending.time_limit, pending.search)
        except RematBenchError as exc:
            raise _error_at(config.path, pending.line, str(exc)) from None
        for w in caught:  # costs not measured as asked (the step does not fit here)
            if note is not None and issubclass(w.category, CostWarning):
                note(f"warning: {w.message}")
        if graph.sha256 in known:
            continue
        known.add(graph.sha256)
        path = config.output / "graphs" / f"{safe_name(graph.name)}-{graph.sha256[:8]}.json"
        traced.append((_source(graph, path, pending.line, generated=True), graph))
    added = _with_floors(config.path, traced, config.budget_lines, config.budgets)
    runs = _expand_runs(added, budgets=config.budgets, grids=config.grids, seeds=config.seeds,
                        repeats=config.repeats, time_limit=config.time_limit, grace=config.grace,
                        memory_limit=config.memory_limit)
    return replace(config, graphs=[*config.graphs, *added], runs=[*config.runs, *runs], pending=[])


# ---------------------------------------------------------------------- methods


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


def _methods(doc: _Document, node: yaml.Node, seeds_given: bool) -> list[MethodGrid]:
    """Each method entry with its parameter grid, every value checked."""
    from remat_bench.app.catalog import get_method

    out = []
    for item in doc.items(node, "methods"):
        if isinstance(item, yaml.ScalarNode):
            name_node, params_node = item, None
        else:
            entry = doc.mapping(item, "a method entry", METHOD_KEYS)
            if "name" not in entry:
                raise doc.error(item, "a method entry needs a 'name'")
            name_node = entry["name"][1]
            params_node = entry["params"][1] if "params" in entry else None
        name = doc.text(name_node, "name")
        try:
            cls = get_method(name)
        except MethodError as exc:
            raise doc.error(name_node, str(exc)) from None
        ok, why = cls.available()
        if not ok:
            raise doc.error(name_node, f"{why}, or remove the method from the config")

        axes: dict[str, list[Any]] = {}
        if params_node is not None and doc.value(params_node) is not None:
            if not isinstance(params_node, yaml.MappingNode):
                raise doc.error(params_node, f"the params of '{name}' must be a mapping of names to values")
            for key_node, value_node in params_node.value:
                key = str(key_node.value)
                declared = {p.name for p in cls.params} | set(PIPELINE_PARAMS)
                if key not in declared:
                    try:
                        cls.parse_params({key: None})  # the method's own sentence for an unknown parameter
                    except MethodError as exc:
                        raise doc.error(key_node, str(exc)) from None
                if key in axes:
                    raise doc.error(key_node, f"parameter '{key}' of '{name}' appears twice")
                if key == "seed" and seeds_given:
                    raise doc.error(key_node, f"method '{name}' gets 'seed' both in its params and from "
                                              "'seeds'; keep one of them")
                axes[key] = []
                for value_item in doc.items(value_node, key):
                    value = doc.value(value_item)
                    try:
                        axes[key].append(parse_method_params(cls, {key: value})[key])
                    except MethodError as exc:
                        raise doc.error(value_item, str(exc)) from None
        takes_seed = any(p.name == "seed" for p in cls.params) and "seed" not in axes
        out.append(MethodGrid(name, cls, axes, takes_seed))
    return out
