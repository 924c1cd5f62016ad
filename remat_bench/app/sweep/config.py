"""Sweep configs (docs/design.md section 8): read one YAML file, check all of it, expand it into runs.

A config names graphs, methods with parameter grids, budgets, a per-run time
limit, repeats and seeds, the executor and the output folder::

    name: smoke
    output: ../results/smoke          # relative paths are relative to this file
    time_limit: 20                    # seconds per run, enforced by killing the run
    memory_limit: 4GiB                # address-space cap per run (optional)
    graphs:
      - ../graphs/chain-16-train.json
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
environment variable, a missing graph file or a glob matching none, an
unknown or unavailable method, an unknown or mistyped parameter, a budget that
does not parse against one of the graphs. Line numbers come from the YAML node
tree (`yaml.compose`), which keeps every node's position.

Each run is keyed by (graph sha256, method, parameters, budget text, seed,
repeat, time limit): the journal uses the key to skip finished runs on
``--resume``, and the results table to drop duplicates.
"""

from __future__ import annotations

import difflib
import glob as globbing
import hashlib
import itertools
import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from remat_bench.app import datasets
from remat_bench.app.pipeline import PIPELINE_PARAMS, parse_method_params
from remat_bench.core.budget import memory_floor, parse_budget
from remat_bench.core.errors import BudgetError, ConfigError, GraphError, MethodError, RematBenchError
from remat_bench.core.graph import Graph
from remat_bench.core.simulate import baseline

TOP_KEYS = ("name", "description", "output", "graphs", "methods", "budgets", "time_limit", "grace",
            "memory_limit", "repeats", "seeds", "executor", "address", "workers")
METHOD_KEYS = ("name", "params")
GRAPH_KEYS = ("path", "glob", "generate", "torch")
# Keys of a ``torch:`` graph entry: a PyTorch model traced into a training graph (`import_model`).
TORCH_KEYS = ("model", "batch", "input_shape", "task", "input_dtype", "vocab", "durations", "kwargs")
EXECUTORS = ("local", "dask")
DEFAULT_TIME_LIMIT = 300.0
_SIZE_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
               "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z]*)\s*$")
_VARIABLE = re.compile(r"\$(?:\{([^}]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


def default_grace(time_limit: float) -> float:
    """Seconds a run may overstay its limit before it is killed: process start-up, clean-up, simulation."""
    return 5.0 + 0.05 * time_limit


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
        return asdict(self)


def params_text(params: Mapping[str, Any] | str | None) -> str:
    """Canonical JSON text of a parameter set (sorted keys): the ``params`` column and part of the key."""
    if isinstance(params, str):
        params = json.loads(params) if params else {}
    return json.dumps(dict(params or {}), sort_keys=True, separators=(",", ":"))


def run_key(graph_sha256: str, method: str, params: Mapping[str, Any] | str | None, budget_text: str,
            seed: int | None, repeat: int, time_limit: float) -> tuple:
    """The identity of a run: two runs with the same key are the same measurement."""
    seed = None if seed is None or seed != seed else int(seed)  # NaN from a table is "no seed"
    return (str(graph_sha256), str(method), params_text(params), str(budget_text), seed, int(repeat),
            float(time_limit))


def row_key(row: dict[str, Any]) -> tuple:
    return run_key(row["graph_sha256"], row["method"], row["params"], row["budget_text"], row.get("seed"),
                   row["repeat"], row["time_limit"])


def run_id(key: tuple) -> str:
    """A short stable name for a run (its schedule file and log are named after it)."""
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


def floor_notes(config: SweepConfig) -> list[str]:
    """One sentence per graph with budgets below its memory floor: runs that can only answer infeasible."""
    notes = []
    for source in config.graphs:
        if not source.below_floor:
            continue
        runs = [r for r in config.runs if r.graph_sha256 == source.sha256]
        doomed = sum(r.budget_text in source.below_floor for r in runs)
        floor = f"{source.floor}"
        if source.baseline_peak:
            floor += f" ({100 * source.floor / source.baseline_peak:.1f}% of its baseline peak {source.baseline_peak})"
        if doomed == len(runs):
            notes.append(f"graph {source.name}: every budget is below its memory floor {floor}; all {doomed} "
                         "runs will answer infeasible")
        else:
            several = len(source.below_floor) > 1
            notes.append(f"graph {source.name}: budget{'s' if several else ''} {', '.join(source.below_floor)} "
                         f"{'are' if several else 'is'} below its memory floor {floor}; those {doomed} runs will "
                         "answer infeasible")
    return notes


def parse_size(text: Any) -> int:
    """``4GiB``, ``500MB``, ``2e9`` -> bytes; raises ValueError."""
    match = _SIZE.match(str(text))
    if not match or match.group(2).lower() not in _SIZE_UNITS:
        raise ValueError(text)
    value = float(match.group(1)) * _SIZE_UNITS[match.group(2).lower()]
    if value <= 0:
        raise ValueError(text)
    return int(value)


class _Document:
    """The YAML node tree of one config file, and errors that name its lines."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ConfigError(f"{path}: no such config file") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path}: cannot be read ({exc})") from None
        self.loader = yaml.SafeLoader(text)
        try:
            self.root = self.loader.get_single_node()
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            where = f", line {mark.line + 1}" if mark is not None else ""
            raise ConfigError(f"{path}{where}: not valid YAML: {exc.problem or exc.context}") from None
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: not valid YAML: {exc}") from None
        if self.root is None:
            raise ConfigError(f"{path}: the config is empty; it needs at least graphs, methods and budgets")

    def error(self, node: yaml.Node, message: str) -> ConfigError:
        return ConfigError(f"{self.path}, line {node.start_mark.line + 1}: {message}")

    def value(self, node: yaml.Node) -> Any:
        try:
            return self.loader.construct_object(node, deep=True)
        except yaml.YAMLError as exc:
            raise self.error(node, f"cannot read this value ({exc})") from None

    def mapping(self, node: yaml.Node, what: str, allowed: tuple[str, ...]) -> dict[str, tuple[yaml.Node, yaml.Node]]:
        """``{key: (key_node, value_node)}``, refusing unknown and repeated keys."""
        if not isinstance(node, yaml.MappingNode):
            raise self.error(node, f"{what} must be a mapping of keys to values")
        out: dict[str, tuple[yaml.Node, yaml.Node]] = {}
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            if key not in allowed:
                close = difflib.get_close_matches(str(key), allowed, n=1)
                hint = f" (did you mean '{close[0]}'?)" if close else ""
                raise self.error(key_node, f"unknown key '{key}' in {what}{hint}; the keys are "
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
            raise self.error(node, f"'{what}' must be {kind} {relation} {minimum:g}, not {node.value!r}")
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
                raise self.error(node, f"environment variable {name} is not set (used in '{text}'); "
                                       f"set it, e.g. `export {name}=...`")
        expanded = _VARIABLE.sub(lambda m: env[m.group(1) if m.group(1) is not None else m.group(2)], text)
        expanded = os.path.expanduser(expanded)
        if not os.path.isabs(expanded):
            expanded = os.path.join(self.path.parent, expanded)
        # Absolute: runs and results read it from other folders (a config named by a relative path
        # gave paths relative to where the sweep started, which charts then read against the results).
        return os.path.abspath(expanded)


def load_config(path: str | Path, *, output: str | Path | None = None,
                env: Mapping[str, str] | None = None) -> SweepConfig:
    """Read and check a sweep config; expand it into runs. Raises `ConfigError` naming the line.

    ``output`` (the ``--output`` option) overrides the config's own; without
    either, the output is ``results/<config name>`` under the current folder.
    """
    env = os.environ if env is None else env
    doc = _Document(Path(path))
    top = doc.mapping(doc.root, "the config", TOP_KEYS)
    for required in ("graphs", "methods", "budgets"):
        if required not in top:
            raise doc.error(doc.root, f"the config has no '{required}'; a sweep needs graphs, methods and budgets")
    settings = _settings(doc, top)
    out_dir = _output_folder(doc, top, output, settings.name, env)
    loaded = _graphs(doc, top["graphs"][1], env, out_dir / "graphs")
    methods = _methods(doc, top["methods"][1], seeds_given="seeds" in top)
    budget_nodes = doc.items(top["budgets"][1], "budgets")
    budgets = [_budget_text(doc, node) for node in budget_nodes]
    graphs = _with_floors(doc, loaded, budget_nodes, budgets)
    return SweepConfig(
        path=doc.path, name=settings.name, description=settings.description, output=out_dir, graphs=graphs,
        runs=_expand_runs(graphs, budgets, methods, settings), time_limit=settings.time_limit,
        grace=settings.grace, memory_limit=settings.memory_limit, repeats=settings.repeats, seeds=settings.seeds,
        executor=settings.executor, address=settings.address, workers=settings.workers,
        methods=list(dict.fromkeys(m for m, _ in methods)),
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

    name = scalar("name", doc.path.stem, lambda n: doc.text(n, "name"))
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
        raise doc.error(top["executor"][1], f"executor '{executor}' is not known; use local or dask")
    address = scalar("address", None, lambda n: doc.text(n, "address"))
    if address and "executor" in top and executor != "dask":
        raise doc.error(top["address"][1], "'address' names a Dask scheduler; it needs 'executor: dask'")
    if address:
        executor = "dask"  # a scheduler's address implies Dask, as --address does on the command line
    return _Settings(name=name, description=description, time_limit=time_limit, grace=grace, repeats=repeats,
                     workers=workers, memory_limit=memory_limit, seeds=seeds, executor=executor, address=address)


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


def _with_floors(doc: _Document, loaded: list[tuple[GraphSource, Graph]], budget_nodes: list[yaml.Node],
                 budgets: list[str]) -> list[GraphSource]:
    """Each graph with its memory floor, its baseline peak and the budgets below its floor; refuses a
    budget that does not parse against one of the graphs."""
    floors = {source.sha256: memory_floor(graph).amount for source, graph in loaded}
    below: dict[str, list[str]] = {source.sha256: [] for source, _ in loaded}
    for node, text in zip(budget_nodes, budgets):
        for source, graph in loaded:
            try:
                budget = parse_budget(text, graph)
            except BudgetError as exc:
                raise doc.error(node, f"{exc} (for graph '{source.name}')") from None
            if budget.amount is not None and budget.amount < floors[source.sha256] and text not in below[source.sha256]:
                below[source.sha256].append(text)
    return [replace(source, floor=floors[source.sha256], baseline_peak=baseline(graph).peak,
                    below_floor=tuple(below[source.sha256])) for source, graph in loaded]


def _expand_runs(graphs: list[GraphSource], budgets: list[str], methods: list[tuple[str, Any]],
                 settings: _Settings) -> list[RunSpec]:
    """Every graph x budget x method parameters x seed x repeat, each key once (in that order)."""
    runs: dict[tuple, RunSpec] = {}
    for source in graphs:
        for budget in budgets:
            for method, grid in methods:
                for params, seed in grid(settings.seeds):
                    for repeat in range(settings.repeats):
                        key = run_key(source.sha256, method, params, budget, seed, repeat, settings.time_limit)
                        runs.setdefault(key, RunSpec(
                            run_id=run_id(key), graph=source.name, graph_sha256=source.sha256,
                            graph_path=str(source.path), nodes=source.nodes, edges=source.edges,
                            method=method, params=params, budget_text=budget, seed=seed, repeat=repeat,
                            time_limit=settings.time_limit, grace=settings.grace,
                            memory_limit=settings.memory_limit))
    return list(runs.values())


def _memory_limit(doc: _Document, node: yaml.Node) -> int:
    try:
        return parse_size(doc.value(node))
    except ValueError:
        raise doc.error(node, f"memory_limit '{node.value}' is not a size; write it like 4GiB, 500MB "
                              "or a number of bytes") from None


def _budget_text(doc: _Document, node: yaml.Node) -> str:
    # The text as written (0.90 stays 0.90): it is what the user reads in the table, and part of the key.
    if not isinstance(node, yaml.ScalarNode) or node.value.strip() == "":
        raise doc.error(node, "a budget must be a single value such as 0.8, 80%, 12GiB or min")
    return node.value.strip()


# ---------------------------------------------------------------------- graphs


def _graphs(doc: _Document, node: yaml.Node, env: Mapping[str, str],
            generated_dir: Path) -> list[tuple[GraphSource, Graph]]:
    """Every graph once (by hash), in config order, with the loaded graph for the budget checks.

    A generated graph is to be written under ``generated_dir`` (by the runner,
    once the whole config is checked) so that every run reads a file.
    """
    from remat_bench.core.graph import load_graph

    found: dict[str, tuple[GraphSource, Graph]] = {}

    def add(graph: Graph, path: Path, item: yaml.Node, generated: bool) -> None:
        found.setdefault(graph.sha256, (GraphSource(
            name=graph.name, path=path, sha256=graph.sha256, nodes=graph.n, edges=graph.num_edges,
            line=item.start_mark.line + 1, generated=graph if generated else None), graph))

    def published(item: yaml.Node, text: str, pattern: bool = False) -> list[str] | None:
        """``paper:<name>`` (or a pattern of names) -> the paths; None when ``text`` names no published graph."""
        if not text.startswith(datasets.PREFIX):
            return None
        name = text[len(datasets.PREFIX):]
        try:
            return [str(p) for p in (datasets.matching(name) if pattern else [datasets.locate(name)])]
        except datasets.DatasetError as exc:
            raise doc.error(item, str(exc)) from None

    def read(item: yaml.Node, path: str) -> None:
        if not os.path.isfile(path):
            why = "is a folder; use 'glob: <folder>/*.json' for its graphs" if os.path.isdir(path) else "does not exist"
            raise doc.error(item, f"graph file {path} {why}")
        try:
            add(load_graph(path), Path(path), item, generated=False)
        except GraphError as exc:
            raise doc.error(item, str(exc)) from None

    for item in doc.items(node, "graphs"):
        if isinstance(item, yaml.ScalarNode):
            text = doc.text(item, "graphs")
            for path in published(item, text) or [doc.expand_path(item, text, env)]:
                read(item, path)
            continue
        entry = doc.mapping(item, "a graph entry", GRAPH_KEYS)
        if len(entry) != 1:
            raise doc.error(item, "a graph entry is a path, or a mapping with exactly one of path, glob, generate, "
                                  "torch")
        key, (_, value) = next(iter(entry.items()))
        if key == "path":
            text = doc.text(value, "path")
            for path in published(value, text) or [doc.expand_path(value, text, env)]:
                read(value, path)
        elif key == "glob":
            text = doc.text(value, "glob")
            matches = published(value, text, pattern=True)
            pattern = text
            if matches is None:
                pattern = doc.expand_path(value, text, env)
                matches = sorted(p for p in globbing.glob(pattern, recursive=True) if os.path.isfile(p))
            if not matches:
                raise doc.error(value, f"the pattern {pattern} matches no graph file")
            for match in matches:
                read(value, match)
        else:
            for graph in _generate(doc, value) if key == "generate" else _import_torch(doc, value):
                add(graph, generated_dir / f"{graph.name}-{graph.sha256[:8]}.json", value, generated=True)
    return list(found.values())


def _import_torch(doc: _Document, node: yaml.Node) -> list[Graph]:
    """A ``torch:`` spec: a zoo model or ``module:factory`` (looked up beside the config first) traced
    into a training graph, as `remat-bench graphs import-torch` does; a list in ``batch`` or in a
    ``kwargs`` value is a grid axis (one graph per combination)."""
    import sys

    spec = doc.mapping(node, "a torch spec", TORCH_KEYS)
    if "model" not in spec:
        raise doc.error(node, "a torch spec needs a 'model': a zoo name (gpt, resnet50, unet, ...) or "
                              "module:factory")
    try:
        from remat_bench.torch.importer import import_model
    except ImportError:
        raise doc.error(node, "a torch graph needs PyTorch: install it with `pip install torch==2.13.0` "
                              "(or remat-bench[torch])") from None
    model = doc.text(spec["model"][1], "model")
    fixed = {k: doc.value(v) for k, (_, v) in spec.items() if k not in ("model", "batch", "kwargs")}
    if "input_shape" in fixed:
        fixed["input_shape"] = tuple(fixed["input_shape"])
    if "vocab" in fixed:
        fixed["input_range"] = fixed.pop("vocab")
    axes: dict[str, list[Any]] = {}
    if "batch" in spec:
        axes["batch"] = [doc.value(n) for n in doc.items(spec["batch"][1], "batch")]
    kwargs_node = spec["kwargs"][1] if "kwargs" in spec else None
    kwargs = doc.value(kwargs_node) if kwargs_node is not None else {}
    if not isinstance(kwargs, dict):
        raise doc.error(kwargs_node or node, "'kwargs' must be a mapping of the model's arguments")
    for key, value in kwargs.items():
        axes[f"kwargs.{key}"] = value if isinstance(value, list) else [value]
    folder = str(doc.path.parent)
    if folder not in sys.path:  # a factory written beside the config imports as `module:factory`
        sys.path.insert(0, folder)
    graphs = []
    for values in itertools.product(*axes.values()):
        chosen = dict(zip(axes, values))
        model_kwargs = {k[len("kwargs."):]: v for k, v in chosen.items() if k.startswith("kwargs.")}
        # Named by model, batch and arguments: GPTs of 12 and 48 layers must not share a name.
        label = model.replace(":", "-").replace(".", "-")
        name = "-".join([f"torch-{label}", f"b{chosen.get('batch') or 'default'}",
                         *(f"{k}{v}" for k, v in model_kwargs.items())])
        try:
            graphs.append(import_model(model, batch=chosen.get("batch"), model_kwargs=model_kwargs, name=name,
                                       **fixed))
        except RematBenchError as exc:
            raise doc.error(node, str(exc)) from None
        except TypeError as exc:  # a key of the wrong type reached the importer
            raise doc.error(node, f"{model}: {exc}") from None
    return graphs


def _generate(doc: _Document, node: yaml.Node) -> list[Graph]:
    """A ``generate:`` spec: ``kind`` plus options of `remat_bench.generators.generate`; lists are grid axes."""
    from remat_bench.generators import GENERATORS, generate

    spec = doc.mapping(node, "a generate spec", ("kind", "batch", "layers", "nodes", "seed", "resolution",
                                                 "width", "seq"))
    if "kind" not in spec:
        raise doc.error(node, f"a generate spec needs a 'kind' ({', '.join(GENERATORS)})")
    kind = doc.text(spec["kind"][1], "kind")
    if kind not in GENERATORS:
        raise doc.error(spec["kind"][1], f"unknown graph kind '{kind}'; choose one of {', '.join(GENERATORS)}")
    axes = {k: [doc.value(n) for n in doc.items(v, k)] for k, (_, v) in spec.items() if k != "kind"}
    graphs = []
    for values in itertools.product(*axes.values()):
        options = dict(zip(axes, values))
        try:
            graphs.append(generate(kind, **options))
        except GraphError as exc:
            raise doc.error(node, str(exc)) from None
        except TypeError as exc:  # a value of the wrong type reached the generator
            raise doc.error(node, f"{kind}: {exc}") from None
    return graphs


# ---------------------------------------------------------------------- methods


def _methods(doc: _Document, node: yaml.Node, seeds_given: bool) -> list[tuple[str, Any]]:
    """``[(method name, grid)]`` where ``grid(seeds)`` yields ``(parsed params, seed)`` pairs."""
    from remat_bench.methods import get_method

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
        out.append((name, _grid(cls, axes, takes_seed)))
    return out


def _grid(cls: Any, axes: dict[str, list[Any]], takes_seed: bool) -> Any:
    def expand(seeds: list[int]) -> Any:
        for values in itertools.product(*axes.values()):
            given = dict(zip(axes, values))
            # A method without a `seed` parameter is deterministic here: it runs once, with no seed.
            for seed in (seeds if takes_seed else [None]):
                params = parse_method_params(cls, {**given, **({"seed": seed} if seed is not None else {})})
                yield params, seed
    return expand
