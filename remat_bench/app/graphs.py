"""Graphs by name: the one lookup behind every place a user names a graph (docs/design.md section 7).

The command line's GRAPH arguments, sweep config entries (section 8) and
`plot --graph` all resolve a text here. A text is a file when one exists at
that path; otherwise it is a name, tried in this order:

1. a published graph (section 10): ``paper:<name>``, or the name the graph
   itself carries (`datasets.resolve`);
2. a file on the search path (`search_path`: the folders of
   ``$REMAT_BENCH_GRAPHS``, then the shipped ``graphs/``), by its file name
   with or without ``.json`` (``chain-16-train``);
3. the name a graph on the search path declares inside it (``chain-16``:
   what results and `graphs show` print).

A name that is none of these is one `GraphError` sentence listing the names
that are known.
"""

from __future__ import annotations

import difflib
import os
import re
from pathlib import Path

from remat_bench.app import datasets
from remat_bench.core.errors import GraphError

# In an error, the search path's names are listed up to this many (a $REMAT_BENCH_GRAPHS folder may hold
# thousands); `remat-bench graphs list` shows them all.
LISTED = 20


def search_path() -> list[Path]:
    """The folders names are looked up in: those of $REMAT_BENCH_GRAPHS (separated like PATH), then the
    shipped graphs/.

    Returns
    -------
    list of Path
        In lookup order; a folder need not exist.
    """
    folders = [Path(p) for p in os.environ.get("REMAT_BENCH_GRAPHS", "").split(os.pathsep) if p]
    folders.append(datasets.CHECKOUT / "graphs")
    return folders


def graph_files() -> list[Path]:
    """Every graph file on the search path (``*.json``), folder by folder, each folder's sorted by name.

    Returns
    -------
    list of Path
        A name found in two folders appears twice, the first one being the one `graph_named` picks.
    """
    return [path for folder in search_path() if folder.is_dir() for path in sorted(folder.glob("*.json"))]


def known_graphs() -> list[tuple[str, Path | None]]:
    """Each name `graphs list` shows first, with its file: the search path's files by their stems, then the
    published graphs as ``paper:<name>`` (None when one is not on this machine).

    Returns
    -------
    list of (str, Path or None)
        Each name and its file.
    """
    named: list[tuple[str, Path | None]] = [(path.stem, path) for path in graph_files()]
    named += [(datasets.PREFIX + f.name.removesuffix(".json"), datasets.find(f.name)) for f in datasets.PAPER.files]
    return named


def find_graph(text: str) -> Path:
    """The graph file ``text`` names: a path that exists, else a name (`graph_named`).

    Parameters
    ----------
    text : str
        What the user wrote: a path, a file name on the search path, a declared name or ``paper:<name>``.

    Returns
    -------
    Path
        The file; it is not read here.

    Raises
    ------
    DatasetError
        A published graph that is not on this machine, with how to fetch it.
    GraphError
        A name that is none of the known ones, listing them.
    """
    path = Path(text)
    if path.exists():
        return path
    return graph_named(text)


def graph_named(text: str) -> Path:
    """The graph file a name stands for: a published graph, a file on the search path, or a graph there that
    declares the name inside it. A published graph that is not on this machine is a DatasetError saying how
    to fetch it; an unknown name is a GraphError listing the known ones.

    Parameters
    ----------
    text : str
        The name, in the order of lookup of this module's docstring.

    Returns
    -------
    Path
        The file; it is not read here.

    Raises
    ------
    DatasetError
        A published graph that is not on this machine, with how to fetch it.
    GraphError
        A name that is none of the known ones, listing them.
    """
    published = datasets.resolve(text)
    if published is not None:
        return published
    for folder in search_path():
        for candidate in (folder / text, folder / f"{text}.json"):
            if candidate.is_file():
                return candidate
    for candidate in graph_files():
        if _declared_name(candidate) == text:
            return candidate
    raise _unknown(text)


def _declared_name(path: Path) -> str | None:
    """The ``name`` a remat-bench graph file declares near its start (its first 4 KiB), else None."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096)
    except OSError:
        return None
    match = re.search(rb'^\s*\{\s*"format"\s*:\s*"remat-bench-graph"[^{]*?"name"\s*:\s*"([^"\\]*)"', head)
    return match.group(1).decode("utf-8", "replace") if match else None


def _unknown(text: str) -> GraphError:
    """One sentence: nothing of that name, the nearest known name, and the names that are known."""
    stems = list(dict.fromkeys(path.stem for path in graph_files()))
    published = [datasets.PREFIX + f.name.removesuffix(".json") for f in datasets.PAPER.files]
    close = difflib.get_close_matches(text, stems + published, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    listed = ", ".join(stems[:LISTED])
    if len(stems) > LISTED:
        listed += f" and {len(stems) - LISTED} more (`remat-bench graphs list` shows them all)"
    return GraphError(f"{text}: no such file, and no shipped graph of that name{hint}; a graph is named by its "
                      f"file on the search path ({listed or 'none there'}), by the name inside that file, or as a "
                      f"published graph ({', '.join(published)})")
