"""A sweep's ``links:`` (docs/design.md section 8): every graph of the sweep once per host link.

``links: [x8, /8, h100-pcie]`` runs each graph (files, generated graphs, and ``torch:`` graphs once traced)
with each host link, as ``--link`` gives it (`remat_bench.core.link.parse_link`): the graph's own link 8
times faster and 8 times slower, or a device profile's. Each such graph is named ``<graph>@<link>`` (the
link as the config writes it, so that the results table tells them apart) and written with the generated
graphs, under ``<output>/graphs/<graph>@<link>-<hash prefix>.json`` (`file_label`). Without ``links:`` each
graph keeps the link it has.

A link that no graph could take (an unknown text, a bandwidth that is no positive number) is refused when
the config is read (`check_link_texts`); one that does not apply to a graph (a factor on a graph without a
link, a device profile on a graph not timed in ns and bytes) is refused when that graph is built: at once
for files and generated graphs, once traced for ``torch:`` graphs. Each is one `ConfigError` naming the
``links:`` item's line.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from remat_bench.app.sweep.document import error_at, quote
from remat_bench.app.sweep.graph_entries import MAX_SWEEP_NODES
from remat_bench.app.sweep.runs import GraphSource
from remat_bench.core.errors import GraphError
from remat_bench.core.files import safe_name
from remat_bench.core.graph import Graph, Link, Node, Transfer
from remat_bench.core.link import parse_link

# How a sweep's errors and a bandwidth's `Transfer.source` name where a link was given.
GIVEN = "link"
# Names of graphs with links a dry run lists before it counts the rest.
SHOWN_NAMES = 12
# Stands for any graph when a link's text is checked on reading the config: timed in ns and bytes, with a
# link of its own, so that only a text no graph could take is refused.
_ANY_GRAPH = Graph([Node(id="x", inputs=(), memory=1, duration=1)], name="any",
                   units={"memory": "bytes", "duration": "ns"}, transfer=Transfer(Link(1.0), Link(1.0)))


def check_link_texts(path: Path, links: Sequence[str], lines: Sequence[int]) -> None:
    """Refuse, before any graph is built, a link that no graph could take.

    Parameters
    ----------
    path : Path
        The config file; a device profile's file is looked up beside it.
    links : sequence of str
        The ``links:`` items, as written.
    lines : sequence of int
        The config's line of each.

    Raises
    ------
    ConfigError
        An unknown text, or a bandwidth that is not a positive, finite number, naming the item's line.
    """
    for text, line in zip(links, lines):
        try:
            parse_link(_located(text, path.parent), _ANY_GRAPH, given=GIVEN)
        except GraphError as exc:
            raise error_at(path, line, str(exc)) from None


def with_links(path: Path, loaded: Sequence[tuple[GraphSource, Graph]], links: Sequence[str],
               lines: Sequence[int], graphs_dir: Path) -> list[tuple[GraphSource, Graph]]:
    """Each graph once per link (`linked`), in the order of the graphs, then of the links; each hash once.

    Parameters
    ----------
    path : Path
        The config file, for errors; a device profile's file is looked up beside it.
    loaded : sequence of (GraphSource, Graph)
        The sweep's graphs.
    links : sequence of str
        The ``links:`` items, as written (none: ``loaded`` as it is).
    lines : sequence of int
        The config's line of each.
    graphs_dir : Path
        The folder the graphs with links are to be written to (by the runner, as generated graphs are).

    Returns
    -------
    list of (GraphSource, Graph)
        Sources of generated graphs, named ``<graph>@<link>``.

    Raises
    ------
    ConfigError
        A link that does not apply to one of the graphs, naming the item's line; or graphs of more than
        `MAX_SWEEP_NODES` nodes together, which the sweep would hold until it writes them.
    """
    if not links:
        return list(loaded)
    found: dict[str, tuple[GraphSource, Graph]] = {}
    nodes = 0
    for source, graph in loaded:
        for text, line in zip(links, lines):
            try:
                variant = linked(graph, text, path.parent)
            except GraphError as exc:
                raise error_at(path, line, str(exc)) from None
            if variant.sha256 in found:
                continue
            nodes += variant.n
            if nodes > MAX_SWEEP_NODES:
                raise error_at(path, lines[0], f"the graphs with their links add up to more than "
                                               f"{MAX_SWEEP_NODES:,} nodes, more than one sweep holds in memory; "
                                               "split it into several sweeps")
            written = graphs_dir / f"{safe_name(graph.name)}@{file_label(text)}-{variant.sha256[:8]}.json"
            found[variant.sha256] = (GraphSource.of(variant, written, source.line, generated=True), variant)
    return list(found.values())


def linked(graph: Graph, text: str, folder: Path) -> Graph:
    """``graph`` with the host link ``text`` names (`parse_link`), named ``<graph>@<text>``.

    Parameters
    ----------
    graph : Graph
    text : str
        A ``links:`` item, as written.
    folder : Path
        The config's folder, where a device profile's file given by a relative path lies.

    Returns
    -------
    Graph
        Its hash differs from ``graph``'s wherever the link does (the name is not hashed).

    Raises
    ------
    GraphError
        A link that does not apply to ``graph`` (one sentence).
    """
    transfer = parse_link(_located(text, folder), graph, given=GIVEN)
    return Graph(graph.nodes, name=f"{graph.name}@{text.strip()}", outputs=graph.outputs,
                 fixed_memory=graph.fixed_memory, units=graph.units, metadata=graph.metadata, source=graph.source,
                 transfer=transfer)


def file_label(text: str) -> str:
    """A link as the name of a graph's file writes it: ``x8`` stays, ``/8`` becomes ``div8``, ``64,32``
    becomes ``64_32`` (`safe_name`, which keeps letters, digits, ``.``, ``_`` and ``-``).

    Parameters
    ----------
    text : str
        A ``links:`` item.

    Returns
    -------
    str
    """
    text = text.strip()
    if text.startswith("/"):
        text = "div" + text[1:]
    elif text.startswith("*"):
        text = "x" + text[1:]
    return safe_name(text, default="link")


def variants_note(names: Sequence[str], links: Sequence[str], pending: int) -> str:
    """What ``--dry-run`` says of a config's ``links:``: the graphs they make, the first `SHOWN_NAMES` by name.

    Parameters
    ----------
    names : sequence of str
        The names of the graphs with their links (files and generated graphs).
    links : sequence of str
        The ``links:`` items.
    pending : int
        The ``torch:`` graphs, which get their links once traced.

    Returns
    -------
    str
        One sentence.
    """
    shown = ", ".join(names[:SHOWN_NAMES]) + (f" and {len(names) - SHOWN_NAMES} more" if len(names) > SHOWN_NAMES
                                              else "")
    traced = (f"; the {pending} PyTorch graph{'s get their' if pending != 1 else ' gets its'} {len(links)} "
              "links once traced" if pending else "")
    return (f"links {', '.join(quote(text) for text in links)}: each graph once per link, {len(names)} graphs: "
            f"{shown or 'none'}{traced}")


def _located(text: str, folder: Path) -> str:
    """A device profile's file given relative to the config, found beside it (as ``device_profile`` in a
    ``torch:`` entry is); a shipped profile's name, and any other text, as it is."""
    from remat_bench.core.device_profile import shipped_aliases, shipped_profiles

    text = text.strip()
    if text.lower() in {*shipped_profiles(), *shipped_aliases()}:
        return text
    beside = folder / text
    return str(beside) if text and beside.is_file() else text
