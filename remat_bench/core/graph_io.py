"""Graph files: reading (remat-bench JSON or networkx node-link), checking against the schema, writing.

`load_graph` reads a file of either format (told apart by content), checks it
against the shipped schema (a hand-written check first, `fast_schema_ok`;
jsonschema only to word a refusal) and builds the `Graph`, whose own checks
follow (docs/design.md section 2). `save_graph` writes one atomically.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from remat_bench.core import nodelink
from remat_bench.core.errors import GraphError
from remat_bench.core.files import atomic_write_text
from remat_bench.core.graph import FORMAT, KINDS, VERSION, Graph, Implementation, Link, Node, Transfer
from remat_bench.core.json_files import describe_schema_error, json_type, parse_json, read_text, schema


def load_graph(path: str | Path) -> Graph:
    """Read a remat-bench graph or a networkx node-link graph (detected by content).

    Parameters
    ----------
    path : str or Path
        The file; its stem names a graph whose file gives no name.

    Returns
    -------
    Graph

    Raises
    ------
    GraphError
        One sentence naming the file and the node or field, for anything docs/design.md section 2 refuses.
    """
    path = Path(path)
    data = parse_json(read_text(path), str(path))
    return graph_from_data(data, str(path), default_name=path.stem)


def graph_from_data(data: Any, source: str = "graph", default_name: str = "") -> Graph:
    """Build a Graph from parsed JSON of either supported format.

    Parameters
    ----------
    data : Any
        The parsed document: a remat-bench graph (it has ``format``) or networkx node-link JSON.
    source : str
        What the document is called in an error.
    default_name : str
        The graph's name when the document gives none.

    Returns
    -------
    Graph

    Raises
    ------
    GraphError
        The document is neither format, or fails the checks of `graph_from_dict`.
    """
    if not isinstance(data, dict):
        raise GraphError(f"{source}: expected a JSON object at the top level, found {json_type(data)}")
    if "format" in data:
        if data["format"] != FORMAT:
            raise GraphError(
                f"{source}: 'format' is {data['format']!r}; a remat-bench graph has format '{FORMAT}'"
            )
        return graph_from_dict(data, source, default_name)
    if nodelink.looks_like_nodelink(data):
        return graph_from_dict(nodelink.to_remat_dict(data, source, default_name), source, default_name)
    raise GraphError(
        f"{source}: neither a remat-bench graph (no 'format' field) nor a networkx node-link "
        "graph (no 'nodes' with 'links' or 'edges')"
    )


def graph_from_dict(data: dict[str, Any], source: str = "graph", default_name: str = "") -> Graph:
    """Validate remat-bench JSON against the shipped schema and build the Graph.

    Parameters
    ----------
    data : dict
        A remat-bench graph document (``format`` ``remat-bench-graph``).
    source : str
        What the document is called in an error.
    default_name : str
        The graph's name when ``data`` gives none.

    Returns
    -------
    Graph

    Raises
    ------
    GraphError
        The schema refuses the document, a node's own duration or workspace differs from its first
        implementation's, or the graph fails the loader's checks (unknown inputs, a cycle, an order that
        is not topological, ...).
    """
    _validate_schema(data, source)
    nodes = []
    for nd in data["nodes"]:
        impls = tuple(
            Implementation(
                name=im["name"],
                duration=im["duration"],
                workspace=im.get("workspace", 0),
                inputs=tuple(im["inputs"]) if "inputs" in im else None,
            )
            for im in nd.get("implementations", ())
        )
        duration = nd["duration"]
        workspace = nd.get("workspace", 0)
        if impls:
            # The node's own duration and workspace are those of its first implementation; a file
            # that says otherwise is ambiguous (which one would a method use?), so it is refused.
            first = impls[0]
            for label, own, theirs in (("duration", duration, first.duration),
                                       ("workspace", workspace, first.workspace)):
                if own != theirs and not ("workspace" not in nd and label == "workspace"):
                    raise GraphError(
                        f"{source}: node '{nd['id']}' has {label} {own!r}, but its first implementation "
                        f"'{first.name}' has {theirs!r}; a node's own {label} is that of its first "
                        "implementation: make them equal (or leave the node's workspace out)")
            duration, workspace = first.duration, first.workspace
        nodes.append(
            Node(
                id=nd["id"],
                inputs=tuple(nd["inputs"]),
                memory=nd["memory"],
                duration=duration,
                workspace=workspace,
                op=nd.get("op", ""),
                kind=nd.get("kind", "forward"),
                grad_of=nd.get("grad_of"),
                implementations=impls,
                metadata=nd.get("metadata"),
            )
        )
    return Graph(
        nodes,
        name=data.get("name") or default_name,
        outputs=data.get("outputs"),
        fixed_memory=data.get("fixed_memory", 0),
        units=data.get("units"),
        metadata=data.get("metadata"),
        source=source,
        transfer=transfer_from_dict(data["transfer"], source) if "transfer" in data else None,
    )


def transfer_from_dict(data: dict[str, Any], source: str = "graph") -> Transfer:
    """The graph file's ``transfer`` field (the schema has checked its shape).

    Parameters
    ----------
    data : dict
        ``device_to_host`` and ``host_to_device``, each a ``bandwidth`` (> 0) and a ``latency`` (>= 0, default 0),
        and an optional ``source``.
    source : str
        What the document is called in an error.

    Returns
    -------
    Transfer

    Raises
    ------
    GraphError
        A bandwidth that is not a positive, finite number, or a latency that is not a finite one >= 0.
    """
    links = []
    for direction in ("device_to_host", "host_to_device"):
        d = data[direction]
        bandwidth, latency = d["bandwidth"], d.get("latency", 0)
        if not (math.isfinite(bandwidth) and bandwidth > 0):
            raise GraphError(f"{source}: transfer.{direction}.bandwidth is {bandwidth}; it must be a positive, finite "
                             "number of memory units per duration unit")
        if not (math.isfinite(latency) and latency >= 0):
            raise GraphError(f"{source}: transfer.{direction}.latency is {latency}; it must be a finite number >= 0 "
                             "in duration units")
        links.append(Link(float(bandwidth), float(latency)))
    return Transfer(links[0], links[1], str(data.get("source", "")))


_TOP_KEYS = frozenset({"format", "version", "name", "units", "fixed_memory", "outputs", "metadata", "nodes",
                       "transfer"})
_NODE_KEYS = frozenset({"id", "op", "kind", "grad_of", "inputs", "memory", "duration", "workspace",
                        "implementations", "metadata"})
_IMPL_KEYS = frozenset({"name", "duration", "workspace", "inputs"})


def _amount_ok(x: Any) -> bool:
    return type(x) in (int, float) and x >= 0


def _strings_ok(x: Any) -> bool:
    return type(x) is list and all(type(s) is str for s in x)


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")  # the schema's id pattern refuses these


def fast_schema_ok(data: dict[str, Any]) -> bool:
    """True only for documents the JSON Schema accepts; written out by hand for speed.

    jsonschema walks a graph node by node, too slowly for graphs of 100,000 nodes
    (docs/benchmarks.md, "Figures that used to live in the code"); this check
    covers the same rules with plain dict and type tests. It may only be
    stricter than the schema, never looser (tested against jsonschema); when it
    says no, jsonschema is run to find and word the problem.

    Parameters
    ----------
    data : dict
        A parsed graph document.

    Returns
    -------
    bool
        True when the schema surely accepts ``data``; False when it may not.
    """
    if not (data.keys() <= _TOP_KEYS and data.get("format") == FORMAT and data.get("version") == VERSION
            and type(data.get("version")) is int):
        return False
    if "name" in data and type(data["name"]) is not str:
        return False
    units = data.get("units", {})
    if type(units) is not dict or not units.keys() <= {"memory", "duration"} or any(
            type(u) is not str for u in units.values()):
        return False
    if "fixed_memory" in data and not _amount_ok(data["fixed_memory"]):
        return False
    if "outputs" in data and not _strings_ok(data["outputs"]):
        return False
    if "metadata" in data and type(data["metadata"]) is not dict:
        return False
    if "transfer" in data and not _transfer_ok(data["transfer"]):
        return False
    nodes = data.get("nodes")
    if type(nodes) is not list or not nodes:
        return False
    for node in nodes:
        if type(node) is not dict or not node.keys() <= _NODE_KEYS:
            return False
        if type(node.get("id")) is not str or not node["id"] or not _strings_ok(node.get("inputs")):
            return False
        if _CONTROL.search(node["id"]):
            return False
        if not (_amount_ok(node.get("memory")) and _amount_ok(node.get("duration"))):
            return False
        if "workspace" in node and not _amount_ok(node["workspace"]):
            return False
        if "op" in node and type(node["op"]) is not str:
            return False
        if "grad_of" in node and type(node["grad_of"]) is not str:
            return False
        if "kind" in node and node["kind"] not in KINDS:
            return False
        if "metadata" in node and type(node["metadata"]) is not dict:
            return False
        if "implementations" in node:
            impls = node["implementations"]
            if type(impls) is not list or not impls:
                return False
            for impl in impls:
                if type(impl) is not dict or not impl.keys() <= _IMPL_KEYS:
                    return False
                if type(impl.get("name")) is not str or not impl["name"] or not _amount_ok(impl.get("duration")):
                    return False
                if "workspace" in impl and not _amount_ok(impl["workspace"]):
                    return False
                if "inputs" in impl and not _strings_ok(impl["inputs"]):
                    return False
    return True


def _transfer_ok(transfer: Any) -> bool:
    if type(transfer) is not dict or not transfer.keys() <= {"device_to_host", "host_to_device", "source"}:
        return False
    if "source" in transfer and type(transfer["source"]) is not str:
        return False
    for direction in ("device_to_host", "host_to_device"):
        link = transfer.get(direction)
        if type(link) is not dict or not link.keys() <= {"bandwidth", "latency"}:
            return False
        if not _amount_ok(link.get("bandwidth")) or link["bandwidth"] == 0 or (
                "latency" in link and not _amount_ok(link["latency"])):  # the schema: bandwidth > 0
            return False
    return True


def _validate_schema(data: dict[str, Any], source: str) -> None:
    """Check against the JSON Schema; turn the first problem into one sentence."""
    if fast_schema_ok(data):
        return
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema("graph"))
    error = jsonschema.exceptions.best_match(validator.iter_errors(data))
    if error is None:
        return
    raise GraphError(f"{source}: {describe_schema_error(error, data, 'node')}")


# ---------------------------------------------------------------------- writing


def save_graph(graph: Graph, path: str | Path) -> None:
    """Write the graph as remat-bench JSON, atomically.

    Parameters
    ----------
    graph : Graph
        The graph, written with every default spelled out (`Graph.to_dict`).
    path : str or Path
        The output file; a symbolic link is written through.

    Raises
    ------
    OutputError
        ``path`` cannot be written (`remat_bench.core.files.atomic_write_bytes`).
    """
    atomic_write_text(path, json.dumps(graph.to_dict(), indent=1) + "\n")
