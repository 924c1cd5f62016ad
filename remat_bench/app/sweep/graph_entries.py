"""The graph entries of a sweep config: files, globs, published and shipped graphs by name,
``generate:`` specs and ``torch:`` models.

Each entry is read and checked before anything is built (`read_graph_entries`):
files found, generator and model options checked, combinations counted
(`GraphEntry.count`). Then the files are loaded and the generated graphs built,
each graph once by hash (`build_graphs`); a ``torch:`` model is only located
(`remat_bench.torch.zoo.locate_factory`, which imports nothing), and left
pending until the sweep starts (`remat_bench.app.sweep.tracing`).
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from remat_bench.app import datasets
from remat_bench.app.graphs import graph_named
from remat_bench.app.sweep.document import Document, quote
from remat_bench.app.sweep.runs import GraphSource, TorchGraph
from remat_bench.core.errors import GraphError, RematBenchError
from remat_bench.core.files import bounded_glob, safe_name
from remat_bench.core.graph import Graph
from remat_bench.torch.isolated import TRACE_TIME_LIMIT

GRAPH_KEYS = ("path", "glob", "generate", "torch")
# Every generated graph of a sweep is held in memory until the sweep writes it: at most this many nodes
# together (the project aims at graphs of ~10,000 nodes; this leaves two orders of magnitude above that).
MAX_SWEEP_NODES = 2_000_000
# Keys of a ``torch:`` graph entry: a PyTorch model traced into a training graph (`import_model`).
TORCH_KEYS = ("model", "batch", "input_shape", "task", "input_dtype", "vocab", "durations", "workspace", "repeats",
              "kwargs", "time_limit", "device_profile")


@dataclass
class GraphEntry:
    """One graph entry of the config, read and checked but not built: files found, or the combinations
    of a ``generate:`` or ``torch:`` spec, counted before any is built."""

    node: yaml.Node
    paths: list[str] = field(default_factory=list)
    kind: str = ""  # a generator's kind, or "torch"
    axes: dict[str, list[Any]] = field(default_factory=dict)
    torch: Callable[[dict[str, Any]], TorchGraph] | None = None

    @property
    def count(self) -> int:
        """Graphs the entry stands for: its files, or its combinations."""
        return len(self.paths) if not self.kind else math.prod(len(values) for values in self.axes.values())

    def combinations(self) -> Iterator[dict[str, Any]]:
        """Each combination of the spec's grid axes, as ``{axis: value}``.

        Yields
        ------
        dict
        """
        for values in itertools.product(*self.axes.values()):
            yield dict(zip(self.axes, values))

    def generated(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """``(kind, options)`` of each graph a ``generate:`` spec makes; nothing for other entries.

        Yields
        ------
        tuple of (str, dict)
        """
        if self.kind and self.torch is None:
            for options in self.combinations():
                yield self.kind, options


def read_graph_entries(doc: Document, node: yaml.Node, env: Mapping[str, str]) -> list[GraphEntry]:
    """Every graph entry read and checked: files found, generator and model options checked; nothing built.

    Parameters
    ----------
    doc : Document
        The config.
    node : yaml.Node
        Its ``graphs`` list.
    env : Mapping
        The variables ``$NAME`` in paths expand to.

    Returns
    -------
    list of GraphEntry
        In the config's order.

    Raises
    ------
    ConfigError
        A missing file, an unknown graph name, a glob matching none, or a bad ``generate:`` or ``torch:``
        spec, naming the line.
    """
    entries: list[GraphEntry] = []

    def published(item: yaml.Node, pattern: str) -> list[str] | None:
        """``paper:<pattern>`` -> the paths of the published graphs it matches; None for any other pattern."""
        if not pattern.startswith(datasets.PREFIX):
            return None
        try:
            return [str(p) for p in datasets.matching(pattern[len(datasets.PREFIX):])]
        except datasets.DatasetError as exc:
            raise doc.error(item, str(exc)) from None

    def files(item: yaml.Node, paths: list[str]) -> GraphEntry:
        for path in paths:
            if not os.path.isfile(path):
                why = ("is a folder; use 'glob: <folder>/*.json' for its graphs" if os.path.isdir(path)
                       else "does not exist")
                raise doc.error(item, f"graph file {path} {why}")
        return GraphEntry(item, paths=paths)

    def named(item: yaml.Node, text: str) -> GraphEntry:
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


def check_generated_nodes(doc: Document, entries: list[GraphEntry]) -> None:
    """Refuse, before any is built, generated graphs of more than `MAX_SWEEP_NODES` nodes together (each
    generator refuses a graph above its own cap).

    Parameters
    ----------
    doc : Document
        The config.
    entries : list of GraphEntry
        Its graph entries (`read_graph_entries`).

    Raises
    ------
    ConfigError
        Naming the entry at which the count passes the cap, or a generator's options it refuses.
    """
    nodes = 0
    for entry in entries:
        for kind, options in entry.generated():
            nodes += _generated_size(doc, entry.node, kind, options)[0]
            if nodes > MAX_SWEEP_NODES:
                raise doc.error(entry.node, f"the generated graphs add up to more than {MAX_SWEEP_NODES:,} nodes, "
                                            "more than one sweep holds in memory; split it into several sweeps")


def build_graphs(doc: Document, entries: list[GraphEntry],
                 generated_dir: Path) -> tuple[list[tuple[GraphSource, Graph]], list[TorchGraph]]:
    """Every graph once (by hash), in config order, with the loaded graph for the budget checks; and the
    ``torch:`` graphs, which are traced when the sweep starts.

    A generated graph is to be written under ``generated_dir`` (by the runner,
    once the whole config is checked) so that every run reads a file.

    Parameters
    ----------
    doc : Document
        The config.
    entries : list of GraphEntry
        Its graph entries (`read_graph_entries`).
    generated_dir : Path
        The folder generated graphs are to be written to.

    Returns
    -------
    loaded : list of (GraphSource, Graph)
        Each file and generated graph once.
    pending : list of TorchGraph
        The ``torch:`` graphs, not traced.

    Raises
    ------
    ConfigError
        A graph file that does not load, or a generator that refuses its options, naming the line.
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
            found.setdefault(graph.sha256, (GraphSource.of(graph, Path(path), line), graph))
        for kind, options in entry.generated():
            graph = _generate(doc, entry.node, kind, options)
            written = generated_dir / f"{safe_name(graph.name)}-{graph.sha256[:8]}.json"
            found.setdefault(graph.sha256, (GraphSource.of(graph, written, line, generated=True), graph))
    return list(found.values()), pending


def _torch_entry(doc: Document, node: yaml.Node) -> GraphEntry:
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
            raise doc.error(spec[key][1], f"'{key}' must be one of {', '.join(allowed)}, not {quote(text)}")
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
    if "device_profile" in spec:
        fixed["device_profile"] = _device_profile(doc, spec)
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
                         *(f"{k}{v}" for k, v in model_kwargs.items()),
                         *([fixed["device_profile"].name] if "device_profile" in fixed else [])])
        options = dict(model=model, batch=chosen.get("batch"), model_kwargs=model_kwargs, name=name, **fixed)
        return TorchGraph(name=name, model=model, options=options, line=line, search=search, time_limit=limit)

    return GraphEntry(node, kind="torch", axes=axes, torch=pending)


def _device_profile(doc: Document, spec: dict[str, tuple[yaml.Node, yaml.Node]]) -> Any:
    """A torch spec's ``device_profile``, loaded: a shipped profile's name, or a file's path (relative to the
    config's folder); refused beside ``durations``, which the profile's roofline replaces."""
    from remat_bench.core.device_profile import load_device_profile, shipped_aliases, shipped_profiles

    node = spec["device_profile"][1]
    if "durations" in spec:
        raise doc.error(spec["durations"][1], "a device profile gives the durations (its roofline estimates), so "
                                              "'durations' cannot be given with 'device_profile'")
    text = doc.text(node, "device_profile")
    shipped = text.lower() in {*shipped_profiles(), *shipped_aliases()}
    try:
        return load_device_profile(text if shipped else doc.path.parent / text)
    except RematBenchError as exc:
        raise doc.error(node, str(exc)) from None


def _generate_entry(doc: Document, node: yaml.Node) -> GraphEntry:
    """A ``generate:`` spec: ``kind`` plus options of `remat_bench.generators.generate`; lists are grid axes."""
    from remat_bench.generators import GENERATORS

    spec = doc.mapping(node, "a generate spec", ("kind", "batch", "layers", "nodes", "seed", "resolution",
                                                 "width", "seq"))
    if "kind" not in spec:
        raise doc.error(node, f"a generate spec needs a 'kind' ({', '.join(GENERATORS)})")
    kind = doc.text(spec["kind"][1], "kind")
    if kind not in GENERATORS:
        raise doc.error(spec["kind"][1], f"unknown graph kind {quote(kind)}; choose one of {', '.join(GENERATORS)}")
    axes = {k: [doc.value(n) for n in doc.items(v, k)] for k, (_, v) in spec.items() if k != "kind"}
    return GraphEntry(node, kind=kind, axes=axes)


def _generated_size(doc: Document, node: yaml.Node, kind: str, options: dict[str, Any]) -> tuple[int, int]:
    """(nodes, edges) a ``generate:`` combination would have; its options checked as `generate` checks them."""
    from remat_bench.generators import generated_size

    return _generating(doc, node, kind, lambda: generated_size(kind, **options))


def _generate(doc: Document, node: yaml.Node, kind: str, options: dict[str, Any]) -> Graph:
    from remat_bench.generators import generate

    return _generating(doc, node, kind, lambda: generate(kind, **options))


def _generating(doc: Document, node: yaml.Node, kind: str, call: Callable[[], Any]) -> Any:
    try:
        return call()
    except GraphError as exc:
        raise doc.error(node, str(exc)) from None
    except TypeError as exc:  # a value of the wrong type reached the generator
        raise doc.error(node, f"{kind}: {exc}") from None
