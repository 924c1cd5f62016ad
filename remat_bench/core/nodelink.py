"""Reading the networkx node-link JSON that Checkmate and Moccasin graphs are distributed in.

Two dialects are recognised by their content (docs/design.md section 2):

- Checkmate (exported from its Keras extraction): node attributes ``cost_ram``
  (bytes), ``cost_cpu``, ``backward`` (bool), ``name``; edges ``source``/``target``;
  node keys already in topological order. ``<layer>_backward`` nodes give
  ``grad_of``; ``backward`` gives ``kind``.
- Moccasin's random layered graphs: node attributes ``out_cost`` (memory) and
  ``duration``; edges ``{"0": u, "1": v}``; the input order in ``graph.order``.
"""

from __future__ import annotations

from typing import Any

from remat_bench.core.errors import GraphError

_MEMORY_KEYS = ("cost_ram", "out_cost", "memory")
_DURATION_KEYS = ("cost_cpu", "duration")


def looks_like_nodelink(data: dict[str, Any]) -> bool:
    """Whether ``data`` has the shape of node-link JSON: a ``nodes`` list beside ``links`` or ``edges``.

    Parameters
    ----------
    data : dict
        A parsed JSON object.

    Returns
    -------
    bool
    """
    return isinstance(data.get("nodes"), list) and ("links" in data or "edges" in data)


def _edge_ends(edge: Any, source: str, k: int) -> tuple[Any, Any]:
    if isinstance(edge, dict):
        if "source" in edge and "target" in edge:
            return edge["source"], edge["target"]
        if "0" in edge and "1" in edge:
            return edge["0"], edge["1"]
    if isinstance(edge, list | tuple) and len(edge) >= 2:
        return edge[0], edge[1]
    raise GraphError(f"{source}: edge [{k}] has neither 'source'/'target' nor '0'/'1'")


def _pick(attrs: dict[str, Any], keys: tuple[str, ...], what: str, source: str, key: Any) -> Any:
    for name in keys:
        if name in attrs:
            return attrs[name]
    raise GraphError(
        f"{source}: node {key!r} has no {what} attribute (expected one of {', '.join(keys)})"
    )


def to_remat_dict(data: dict[str, Any], source: str, default_name: str = "") -> dict[str, Any]:
    """Convert a node-link document to remat-bench graph JSON (validated afterwards).

    Parameters
    ----------
    data : dict
        A node-link document (`looks_like_nodelink`), of either dialect.
    source : str
        What the document is called in an error.
    default_name : str
        The graph's name when ``graph.name`` gives none.

    Returns
    -------
    dict
        A remat-bench graph document, for `remat_bench.core.graph_io.graph_from_dict` to check and build.

    Raises
    ------
    GraphError
        No nodes, a node without ``id`` or ``name`` or listed twice, an edge without two ends or with an end
        that is not a node, a ``graph.order`` that does not list every node once, or a node without a memory
        or duration attribute.
    """
    graph_attrs = data.get("graph") or {}
    raw_nodes = data["nodes"]
    edges = data.get("links", data.get("edges")) or []
    if not raw_nodes:
        raise GraphError(f"{source}: the graph has no nodes")
    keys, attrs_of = _nodes_by_key(raw_nodes, source)
    id_of = _readable_ids(keys, attrs_of)
    inputs = _inputs_from_edges(edges, keys, attrs_of, id_of, source)
    keys = _input_order(keys, graph_attrs, source)
    is_checkmate = any("backward" in attrs_of[k] for k in keys)
    known_ids = set(id_of.values())
    nodes = [_remat_node(key, attrs_of[key], id_of[key], inputs[key], is_checkmate, known_ids, source)
             for key in keys]

    fixed = sum(attrs_of[k].get("param_cost", 0) or 0 for k in keys)
    return {
        "format": "remat-bench-graph",
        "version": 1,
        "name": graph_attrs.get("name") or default_name,
        "units": {"memory": "bytes", "duration": "flops"}
        if is_checkmate
        else {"memory": "units", "duration": "units"},
        "fixed_memory": fixed,
        "nodes": nodes,
        "metadata": {"imported_from": "networkx node-link"},
    }


def _nodes_by_key(raw_nodes: list[Any], source: str) -> tuple[list[Any], dict[Any, dict[str, Any]]]:
    """Each node's key, as listed, and its attributes by key; refuses a node without a key or listed twice."""
    keys: list[Any] = []
    attrs_of: dict[Any, dict[str, Any]] = {}
    for k, nd in enumerate(raw_nodes):
        # networkx writes the node key as 'id' by default; Moccasin's files use 'name'.
        if not isinstance(nd, dict) or ("id" not in nd and "name" not in nd):
            raise GraphError(f"{source}: nodes[{k}] has neither 'id' nor 'name'")
        key = nd["id"] if "id" in nd else nd["name"]
        if key in attrs_of:
            raise GraphError(f"{source}: node id {key!r} appears twice")
        keys.append(key)
        attrs_of[key] = nd
    return keys, attrs_of


def _readable_ids(keys: list[Any], attrs_of: dict[Any, dict[str, Any]]) -> dict[Any, str]:
    """Readable ids: the 'name' attribute where names are unique strings, else the key."""
    names = [attrs_of[k].get("name") for k in keys]
    if all(isinstance(n, str) and n for n in names) and len(set(names)) == len(names):
        return {k: str(n) for k, n in zip(keys, names)}
    return {k: str(k) for k in keys}


def _inputs_from_edges(edges: list[Any], keys: list[Any], attrs_of: dict[Any, dict[str, Any]],
                       id_of: dict[Any, str], source: str) -> dict[Any, list[str]]:
    """Each node's inputs (ids), in edge order; refuses an edge whose end is not a node."""
    inputs: dict[Any, list[str]] = {k: [] for k in keys}
    for k, edge in enumerate(edges):
        u, v = _edge_ends(edge, source, k)
        if u not in attrs_of or v not in attrs_of:
            missing = u if u not in attrs_of else v
            raise GraphError(f"{source}: edge [{k}] refers to node {missing!r}, which is not a node")
        inputs[v].append(id_of[u])
    return inputs


def _input_order(keys: list[Any], graph_attrs: dict[str, Any], source: str) -> list[Any]:
    """The input order: graph.order (Moccasin), else integer keys ascending (Checkmate), else as listed."""
    order = graph_attrs.get("order")
    if order is not None:
        if sorted(map(str, order)) != sorted(map(str, keys)):
            raise GraphError(f"{source}: graph.order does not list every node exactly once")
        by_str = {str(k): k for k in keys}
        return [by_str[str(k)] for k in order]
    if all(isinstance(k, int) for k in keys):
        return sorted(keys)
    return keys


def _remat_node(key: Any, attrs: dict[str, Any], node_id: str, inputs: list[str], is_checkmate: bool,
                known_ids: set[str], source: str) -> dict[str, Any]:
    """One node of the remat-bench document; a Checkmate node also gets its kind, ``grad_of`` and the loss op."""
    node: dict[str, Any] = {
        "id": node_id,
        "inputs": inputs,
        "memory": _pick(attrs, _MEMORY_KEYS, "memory", source, key),
        "duration": _pick(attrs, _DURATION_KEYS, "duration", source, key),
    }
    if is_checkmate:
        backward = bool(attrs.get("backward", False))
        node["kind"] = "backward" if backward else "forward"
        if backward and node_id.endswith("_backward"):
            forward = node_id[: -len("_backward")]
            if forward in known_ids:
                node["grad_of"] = forward
        if node_id.lower() == "loss":
            node["op"] = "loss"
    return node
