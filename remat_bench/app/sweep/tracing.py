"""The ``torch:`` graphs of a sweep config, traced when the sweep starts.

Reading a config (and ``--dry-run``) only locates a ``torch:`` entry's model
(`remat_bench.app.sweep.graph_entries`); tracing it runs its code, so it waits
for the sweep to start (`trace_torch_graphs`), and each model is traced in a
child process stopped after its time limit (`remat_bench.torch.isolated.trace_model`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import replace

from remat_bench.app.sweep.document import error_at
from remat_bench.app.sweep.links import with_links
from remat_bench.app.sweep.runs import GraphSource, SweepConfig, expand_runs, with_floors
from remat_bench.core.errors import RematBenchError
from remat_bench.core.files import safe_name
from remat_bench.core.graph import Graph
from remat_bench.core.provenance import CostWarning
from remat_bench.torch.isolated import trace_model


def trace_torch_graphs(config: SweepConfig, note: Callable[[str], None] | None = None) -> SweepConfig:
    """The config with its ``torch:`` graphs traced (`trace_model`) and their runs added.

    Runs the code of each model: a sweep calls it when it starts, never when a config is only read or
    checked (``--dry-run``). With ``links:``, each traced graph becomes one graph per link
    (`remat_bench.app.sweep.links.with_links`). Refuses, as a `ConfigError` naming the config's line, a model
    that cannot be traced, a link that does not apply to a traced graph, and a budget that does not parse
    against a traced graph.

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
        A model that cannot be traced, a link that does not apply to its graph, or a budget that does not parse
        against it, naming the line.
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
            raise error_at(config.path, pending.line, str(exc)) from None
        for w in caught:  # costs not measured as asked (the step does not fit here)
            if note is not None and issubclass(w.category, CostWarning):
                note(f"warning: {w.message}")
        path = config.output / "graphs" / f"{safe_name(graph.name)}-{graph.sha256[:8]}.json"
        own = [(GraphSource.of(graph, path, pending.line, generated=True), graph)]
        for source, built in with_links(config.path, own, config.links, config.link_lines, config.output / "graphs"):
            if source.sha256 not in known:
                known.add(source.sha256)
                traced.append((source, built))
    added = with_floors(config.path, traced, config.budget_lines, config.budgets)
    runs = expand_runs(added, budgets=config.budgets, grids=config.grids, seeds=config.seeds,
                       repeats=config.repeats, time_limit=config.time_limit, grace=config.grace,
                       memory_limit=config.memory_limit)
    return replace(config, graphs=[*config.graphs, *added], runs=[*config.runs, *runs], pending=[])
