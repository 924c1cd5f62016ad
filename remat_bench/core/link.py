"""The host link a run plans with: ``--link`` on the command line and ``links:`` in a sweep.

A graph records its device's host link in its ``transfer`` field (docs/design.md sections 2 and 3,
"Offload"). `parse_link` reads what a user gives instead: a device profile (its data-sheet figures,
for a graph timed in ns with memory in bytes), a bandwidth in the graph's own units, a factor applied
to the graph's own link ("x8", "/8": the issue's "8x higher, 8x lower"), or ``none``.
"""

from __future__ import annotations

import math

from remat_bench.core.errors import DeviceProfileError, GraphError
from remat_bench.core.graph import Graph, Link, Transfer

FORMS = ("a device profile (h100-pcie), 'x8' or '/8' (the graph's own link 8 times faster or slower), "
         "a bandwidth in the graph's memory units per duration unit ('64', or '64,32' for device-to-host, "
         "host-to-device), or 'none'")


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) and value > 0 else None


def parse_link(text: str, graph: Graph, *, given: str = "--link") -> Transfer | None:
    """The host link ``text`` names, for ``graph``.

    Parameters
    ----------
    text : str
        One of `FORMS`.
    graph : Graph
        The graph it is for: its own ``transfer`` (for a factor) and its units (for a device profile).
    given : str
        Where ``text`` was given, as errors and a bandwidth's ``source`` name it (``--link``; a sweep's
        ``link``).

    Returns
    -------
    Transfer or None
        None for ``none``.

    Raises
    ------
    GraphError
        A factor on a graph with no link, a profile for a graph not in ns and bytes, a bandwidth that is not a
        positive number, or text that is none of the forms (one sentence).
    """
    text = text.strip()
    if text.lower() == "none":
        return None
    if text[:1] in ("x", "*", "/") and (factor := _number(text[1:])) is not None:
        if graph.transfer is None:
            raise GraphError(f"{given} {text} scales the graph's own host link, and graph '{graph.name}' has none; "
                             "give a device profile or a bandwidth instead")
        return graph.transfer.scaled(1 / factor if text[0] == "/" else factor)
    parts = text.split(",")
    if 1 <= len(parts) <= 2 and all(_number(p) is not None for p in parts):
        out, back = (float(parts[0]), float(parts[-1]))
        return Transfer(Link(out), Link(back), f"{given} {text}")
    if text and text[0].isdigit():
        raise GraphError(f"{given} {text}: a bandwidth is a positive, finite number; give {FORMS}")
    from remat_bench.core.device_profile import load_device_profile

    try:
        profile = load_device_profile(text)
    except DeviceProfileError as exc:
        raise GraphError(f"{given} {text} is none of {FORMS} ({exc})") from None
    units = (graph.units.get("memory"), graph.units.get("duration"))
    if units != ("bytes", "ns"):
        raise GraphError(f"{given} {text}: a device profile's link is in bytes per ns, and graph '{graph.name}' "
                         f"counts memory in {units[0]} and duration in {units[1]}; give the bandwidth in its "
                         f"units instead ({given} 64)")
    return profile.transfer()


def with_link(graph: Graph, text: str | None) -> Graph:
    """``graph`` with the host link ``text`` names (`parse_link`); ``graph`` itself when ``text`` is None.

    Parameters
    ----------
    graph : Graph
    text : str or None

    Returns
    -------
    Graph
        Another graph (another hash) when the link differs from the graph's own.
    """
    if text is None:
        return graph
    transfer = parse_link(text, graph)
    return graph if transfer == graph.transfer else graph.with_transfer(transfer)
