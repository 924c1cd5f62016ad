"""Sweep configs (docs/design.md section 8): read one YAML file, check all of it, expand it into runs.

This module reads the config's keys; the YAML node tree and its line-numbered
errors are `remat_bench.app.sweep.document`, the graph entries
`remat_bench.app.sweep.graph_entries`, and what the config expands to (graphs,
method grids, runs) `remat_bench.app.sweep.runs`.

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
    links: [x8, /8]                   # each graph once per host link (optional; as --link takes them)

``links:`` runs every graph (files, generated graphs, ``torch:`` graphs once
traced) once per host link, as ``--link`` gives it: a device profile, ``x8`` or
``/8`` (the graph's own link 8 times faster or slower), a bandwidth in the
graph's units (``"10,5"``: device-to-host, host-to-device), or ``none``. Each is
a graph of its own, named ``<graph>@<link>`` and written with the generated
graphs (`remat_bench.app.sweep.links`); without ``links:`` each graph keeps
the link it has.

Everything is checked before any run starts, and each problem is one
`ConfigError` sentence naming the file and the line: an unknown key, an unset
environment variable, a missing graph file, an unknown graph name or a glob
matching none, an unknown or unavailable method, an unknown or mistyped
parameter, a budget that does not parse against one of the graphs, a link
that does not apply to one of them (``torch:`` graphs: once traced). Line
numbers come from the YAML node tree (`yaml.compose`), which keeps every
node's position.

A config is data: reading it imports and calls nothing it names. Its size is
checked before anything is built: a YAML tag other than plain values, aliases
expanding beyond `MAX_VALUES` values, more than `MAX_RUNS` runs or generated
graphs of more than `MAX_SWEEP_NODES` nodes together are refused. A ``torch:``
entry's model is only located (`remat_bench.torch.zoo.locate_factory`); it is
traced, which runs its code, when the sweep starts
(`remat_bench.app.sweep.tracing.trace_torch_graphs`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from remat_bench.app.evaluate import PIPELINE_PARAMS, parse_method_params
from remat_bench.app.sweep.document import Document, quote
from remat_bench.app.sweep.graph_entries import GraphEntry, build_graphs, check_generated_nodes, read_graph_entries
from remat_bench.app.sweep.links import check_link_texts, with_links
from remat_bench.app.sweep.runs import (
    PLACEHOLDER,
    GraphSource,
    MethodGrid,
    ReplaySettings,
    RunSpec,
    SweepConfig,
    expand_runs,
    with_floors,
)
from remat_bench.core.budget import parse_size
from remat_bench.core.errors import MethodError

TOP_KEYS = ("name", "description", "output", "graphs", "methods", "budgets", "time_limit", "grace",
            "memory_limit", "repeats", "seeds", "executor", "address", "workers", "replay", "links")
METHOD_KEYS = ("name", "params")
EXECUTORS = ("local", "dask")
DEFAULT_TIME_LIMIT = 300.0
# Keys of ``replay:`` (`ReplaySettings`): how the schedules of PyTorch graphs are replayed after the runs.
REPLAY_KEYS = ("repeats", "precision", "max_pairs", "steps", "device", "time_limit")
REPLAY_DEVICES = ("cpu", "cuda")
# Runs one sweep may have: the project aims at sweeps of thousands of runs, and this leaves two orders of
# magnitude above that.
MAX_RUNS = 1_000_000


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
        Its runs expanded; ``torch:`` graphs are left pending, untraced
        (`remat_bench.app.sweep.tracing.trace_torch_graphs`).

    Raises
    ------
    ConfigError
        One sentence naming the file and the line, for anything the module's docstring lists.
    """
    env = os.environ if env is None else env
    doc = Document(Path(path))
    top = doc.mapping(doc.root, "the config", TOP_KEYS)
    for required in ("graphs", "methods", "budgets"):
        if required not in top:
            raise doc.error(doc.root, f"the config has no '{required}'; a sweep needs graphs, methods and budgets")
    settings = _settings(doc, top)
    out_dir = _output_folder(doc, top, output, settings.name, env)
    grids = _methods(doc, top["methods"][1], seeds_given="seeds" in top)
    budget_nodes = doc.items(top["budgets"][1], "budgets")
    budgets = [_budget_text(doc, node) for node in budget_nodes]
    entries = read_graph_entries(doc, top["graphs"][1], env)
    links, link_lines = _links(doc, top)
    _check_size(doc, top, entries, budgets, grids, settings, len(links))
    loaded, pending = build_graphs(doc, entries, out_dir / "graphs")
    loaded = with_links(doc.path, loaded, links, link_lines, out_dir / "graphs")
    graphs = with_floors(doc.path, loaded, [n.start_mark.line + 1 for n in budget_nodes], budgets)

    def expand(sources: list[GraphSource]) -> list[RunSpec]:
        return expand_runs(sources, budgets=budgets, grids=grids, seeds=settings.seeds, repeats=settings.repeats,
                           time_limit=settings.time_limit, grace=settings.grace,
                           memory_limit=settings.memory_limit)

    return SweepConfig(
        path=doc.path, name=settings.name, description=settings.description, output=out_dir, graphs=graphs,
        runs=expand(graphs), time_limit=settings.time_limit,
        grace=settings.grace, memory_limit=settings.memory_limit, repeats=settings.repeats, seeds=settings.seeds,
        executor=settings.executor, address=settings.address, workers=settings.workers,
        methods=list(dict.fromkeys(grid.name for grid in grids)), pending=pending, budgets=budgets,
        budget_lines=[n.start_mark.line + 1 for n in budget_nodes], grids=grids,
        runs_per_graph=len(expand([PLACEHOLDER])),
        replay=_replay_settings(doc, top["replay"][1]) if "replay" in top else None,
        links=links, link_lines=link_lines,
    )


def _links(doc: Document, top: dict[str, tuple[yaml.Node, yaml.Node]]) -> tuple[list[str], list[int]]:
    """``links:`` as written (none: no key, or no value), each item's line; texts no graph takes refused."""
    if "links" not in top or doc.value(top["links"][1]) is None:
        return [], []
    links: list[str] = []
    lines: list[int] = []
    for node in doc.items(top["links"][1], "links"):
        if not isinstance(node, yaml.ScalarNode) or node.value.strip() == "":
            raise doc.error(node, "a link must be a single value such as x8, /8, h100-pcie, '64,32' or none")
        text = node.value.strip()  # as written, as budgets are: it names the graph (<graph>@<link>)
        if text in links:
            raise doc.error(node, f"link {quote(text)} appears twice in 'links'")
        links.append(text)
        lines.append(node.start_mark.line + 1)
    check_link_texts(doc.path, links, lines)
    return links, lines


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


def _settings(doc: Document, top: dict[str, tuple[yaml.Node, yaml.Node]]) -> _Settings:
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
        raise doc.error(top["executor"][1], f"executor {quote(executor)} is not known; use local or dask")
    address = scalar("address", None, lambda n: doc.text(n, "address"))
    if address and "executor" in top and executor != "dask":
        raise doc.error(top["address"][1], "'address' names a Dask scheduler; it needs 'executor: dask'")
    if address:
        executor = "dask"  # a scheduler's address implies Dask, as --address does on the command line
    return _Settings(name=name, description=description, time_limit=time_limit, grace=grace, repeats=repeats,
                     workers=workers, memory_limit=memory_limit, seeds=seeds, executor=executor, address=address)


def _replay_settings(doc: Document, node: yaml.Node) -> ReplaySettings | None:
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
        if "precision" in keys:
            settings = replace(settings, precision=doc.number(keys["precision"][1], "precision", 0, strict=False))
        if "max_pairs" in keys:
            settings = replace(settings, max_pairs=int(doc.number(keys["max_pairs"][1], "max_pairs", 1, integer=True,
                                                                  strict=False)))
        if "steps" in keys:
            settings = replace(settings, steps=int(doc.number(keys["steps"][1], "steps", 0, integer=True,
                                                              strict=False)))
        if "time_limit" in keys:
            settings = replace(settings, time_limit=doc.number(keys["time_limit"][1], "time_limit", 0))
        if "device" in keys:
            device = doc.text(keys["device"][1], "device")
            if device not in REPLAY_DEVICES:
                raise doc.error(keys["device"][1], f"replay device {quote(device)} is not known; use cpu or cuda")
            settings = replace(settings, device=device)
    else:
        raise doc.error(node, "'replay' must be true, false, or a mapping of repeats, precision, max_pairs, steps, "
                              "device and time_limit")
    if settings is not None:
        from remat_bench.torch import torch_available

        if not torch_available():
            raise doc.error(node, "replaying schedules needs PyTorch: install it with `pip install "
                                  "remat-bench[torch]` (`make install` does), or remove 'replay'")
    return settings


def _plain_name(doc: Document, node: yaml.Node, name: str) -> str:
    """The sweep's name, which names its results folder (``results/<name>``): one plain name, not a path."""
    if "/" in name or "\\" in name or "\0" in name or name.strip() in ("", ".", ".."):
        raise doc.error(node, f"the sweep's name {quote(name)} must be a plain name, not a path (no '/', not "
                              "'.' or '..'): it names the results folder results/<name>; choose another folder "
                              "with 'output' or --output")
    return name


def _output_folder(doc: Document, top: dict[str, tuple[yaml.Node, yaml.Node]], output: str | Path | None,
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


def _check_size(doc: Document, top: dict[str, tuple[yaml.Node, yaml.Node]], entries: list[GraphEntry],
                budgets: list[str], grids: list[MethodGrid], settings: _Settings, links: int) -> None:
    """Refuse, before any graph is built or run listed, a sweep of more than `MAX_RUNS` runs, or generated
    graphs of more than `MAX_SWEEP_NODES` nodes together (`check_generated_nodes`); ``links`` graphs of
    each entry's (one when 0)."""
    graphs = sum(entry.count for entry in entries) * max(1, links)
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
    check_generated_nodes(doc, entries)


def _counted(n: int, one: str, many: str) -> str:
    return f"{n:,} {one if n == 1 else many}"


def _memory_limit(doc: Document, node: yaml.Node) -> int:
    try:
        return parse_size(doc.value(node))
    except ValueError:
        raise doc.error(node, f"memory_limit {doc.shown(node)} is not a size; write it like 4GiB, 500MB "
                              "or a number of bytes") from None


def _budget_text(doc: Document, node: yaml.Node) -> str:
    # The text as written (0.90 stays 0.90): it is what the user reads in the table, and part of the key.
    if not isinstance(node, yaml.ScalarNode) or node.value.strip() == "":
        raise doc.error(node, "a budget must be a single value such as 0.8, 80%, 12GiB or min")
    return node.value.strip()

def _methods(doc: Document, node: yaml.Node, seeds_given: bool) -> list[MethodGrid]:
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
