"""Random layered DAGs resembling the published instances of the Moccasin paper.

Bartan et al. (Moccasin, ICML 2023) benchmark on random layered graphs made by
the generator of Gagrani et al. ("Neural Topological Ordering for Computation
Graphs", NeurIPS 2022, Appendix A), which is not public. This generator is
fitted to the four published instances (``paper:random_layered_n*``, see
`remat_bench.app.datasets`). Measured on them (layers are ``-graph.pos[v][1]``):

    graph                  nodes  edges  layers  widest  edges between consecutive layers
    random_layered_n100      100    236      21       9  203 (86%)
    random_layered_n250      250    944      24      22  815 (86%)
    random_layered_n500      500   2461      33      29  2130 (87%)
    random_layered_n1000    1000   5875      51      36  5062 (86%)

one source and one sink of duration 0; the other edges skip 2 to ~47 layers,
fewer the longer the skip; durations spread evenly over [0, 1000); output
sizes multiples of 10 from 10 to ~8000, right-skewed (median ~1500, mean
~2000), independent of duration. The generator:

- Node 0 is the only source and node n-1 the only sink, each alone in its
  layer and of duration 0; the source feeds all of the first inner layer and
  the last inner layer feeds the sink.
- Inner layers have sizes ``width * (1 +- layer_variation)`` (uniform, then
  scaled to add up to n-2); ``width`` defaults to ``0.62 * sqrt(n)``, which
  gives about 18, 27, 38, 53 layers for n = 100, 250, 500, 1000 (published:
  21, 24, 33, 51).
- Consecutive inner layers are joined pair by pair with probability
  ``edge_density`` (0.28, fitted to the published edge counts); a node left
  without an input (a consumer) gets one from a random node of the previous
  (next) layer, so every node but the source has an input and every node but
  the sink a consumer.
- Skip edges make up ``skip_fraction`` of all edges (0.14 in the published
  names, "scd0.14"; measured 13.4-14%). Each starts at a random inner node and ends at a random
  node of a layer drawn uniformly from those at least two layers further on
  (never the sink), so skips of length k are about as frequent as
  log((L - 2) / (k - 1)): many short ones, a few spanning the whole graph,
  as measured.
- Durations are integers uniform in [0, 1000). Memory is gamma-distributed
  (shape 1.2, scale 1750, redrawn above 8000) and rounded to a multiple of
  10, at least 10: median ~1500, mean ~2000, 90th percentile ~4400,
  independent of duration (a least-squares fit to the published quantiles).

Node ids are "0".."n-1" in layer order, which is topological. The edge count
grows with n like the published graphs (about 236, 944, 2461, 5875 edges for
n = 100, 250, 500, 1000), within about 15%.
"""

from __future__ import annotations

import math

import numpy as np

from remat_bench.core.errors import GraphError
from remat_bench.core.graph import Graph, Node

UNITS = {"memory": "units", "duration": "units"}

WIDTH_PER_SQRT_N = 0.62
MEMORY_SHAPE = 1.2
MEMORY_SCALE = 1750.0
MEMORY_MAX = 8000
MAX_DURATION = 1000


def _layer_sizes(n_inner: int, width: float, variation: float, rng: np.random.Generator) -> list[int]:
    """Sizes of the inner layers: about ``width`` each, spread by ``variation``, adding up to n_inner."""
    n_layers = max(1, min(n_inner, round(n_inner / width)))
    weights = rng.uniform(1 - variation, 1 + variation, size=n_layers)
    # Every layer gets one node; the rest go by largest remainder, so the sizes add up exactly.
    share = (n_inner - n_layers) * weights / weights.sum()
    extra = np.floor(share).astype(np.int64)
    short = (n_inner - n_layers) - int(extra.sum())
    extra[np.argsort(extra - share)[:short]] += 1
    return [1 + int(e) for e in extra]


def _memory(size: int, rng: np.random.Generator) -> np.ndarray:
    """Right-skewed output sizes, multiples of 10 in [10, MEMORY_MAX]."""
    values = rng.gamma(MEMORY_SHAPE, MEMORY_SCALE, size=size)
    # Redraw the tail beyond the cap rather than piling it up at the cap.
    over = values > MEMORY_MAX
    while over.any():
        values[over] = rng.gamma(MEMORY_SHAPE, MEMORY_SCALE, size=int(over.sum()))
        over = values > MEMORY_MAX
    return np.clip(np.round(values / 10) * 10, 10, MEMORY_MAX).astype(np.int64)


def random_layered(
    n_nodes: int,
    *,
    seed: int,
    width: float | None = None,
    skip_fraction: float = 0.14,
    edge_density: float = 0.28,
    layer_variation: float = 0.75,
) -> Graph:
    """A seeded random layered DAG of ``n_nodes`` nodes (see the module docstring).

    ``width`` is the mean number of nodes per inner layer (default
    ``0.62 * sqrt(n_nodes)``), ``edge_density`` the chance that two nodes of
    consecutive inner layers are joined, ``skip_fraction`` the share of edges
    that skip at least one layer, ``layer_variation`` the relative spread of
    layer sizes. Same arguments, same graph (``numpy.random.default_rng(seed)``).
    Every node is kind ``forward``: these are inference-like graphs.

    Parameters
    ----------
    n_nodes : int
        At least 3: the source, the sink and one inner node.
    seed : int
        The seed of every random draw.
    width : float or None
        At least 1; None for ``0.62 * sqrt(n_nodes)``.
    skip_fraction : float
        In [0, 1).
    edge_density : float
        In [0, 1].
    layer_variation : float
        In [0, 1).

    Returns
    -------
    Graph
        Named ``random-layered-n<n>-seed<seed>``, sizes in abstract units, the arguments and the layer sizes
        in its metadata.

    Raises
    ------
    GraphError
        An argument out of its range.
    """
    _check_arguments(n_nodes, width, skip_fraction, edge_density, layer_variation)
    n = int(n_nodes)
    # Every draw comes from this one generator, in a fixed order (layer sizes, edges, skips, durations,
    # memory): reordering the steps below would change every seed's graph.
    rng = np.random.default_rng(seed)
    if width is None:
        width = max(1.0, WIDTH_PER_SQRT_N * math.sqrt(n))
    sizes = [1, *_layer_sizes(n - 2, width, layer_variation, rng), 1]
    edges = _consecutive_edges(sizes, edge_density, rng)
    edges |= _skip_edges(sizes, round(len(edges) * skip_fraction / (1 - skip_fraction)), rng)
    return Graph(
        _nodes(n, edges, rng),
        name=f"random-layered-n{n}-seed{seed}",
        outputs=None,
        fixed_memory=0,
        units=UNITS,
        metadata={
            "generator": "random-layered",
            "n_nodes": n,
            "seed": seed,
            "width": width,
            "skip_fraction": skip_fraction,
            "edge_density": edge_density,
            "layer_variation": layer_variation,
            "layer_sizes": sizes,
        },
        source=f"random-layered-n{n}",
    )


def _check_arguments(n_nodes: int, width: float | None, skip_fraction: float, edge_density: float,
                     layer_variation: float) -> None:
    if isinstance(n_nodes, bool) or not isinstance(n_nodes, int | np.integer) or n_nodes < 3:
        raise GraphError(f"random-layered: n_nodes must be a whole number of at least 3, not {n_nodes!r}")
    if width is not None and not (isinstance(width, int | float) and width >= 1):
        raise GraphError(f"random-layered: width must be a number of at least 1, not {width!r}")
    if not 0 <= skip_fraction < 1:
        raise GraphError(f"random-layered: skip_fraction must be in [0, 1), not {skip_fraction!r}")
    if not 0 <= edge_density <= 1:
        raise GraphError(f"random-layered: edge_density must be in [0, 1], not {edge_density!r}")
    if not 0 <= layer_variation < 1:
        raise GraphError(f"random-layered: layer_variation must be in [0, 1), not {layer_variation!r}")


def _consecutive_edges(sizes: list[int], edge_density: float, rng: np.random.Generator) -> set[tuple[int, int]]:
    """Edges between consecutive layers; the source and the sink join their whole neighbouring layer."""
    starts = np.concatenate([[0], np.cumsum(sizes)])
    last_inner = len(sizes) - 2
    edges: set[tuple[int, int]] = set()
    for layer in range(len(sizes) - 1):
        a0, a1, b0, b1 = starts[layer], starts[layer + 1], starts[layer + 1], starts[layer + 2]
        if layer == 0 or layer == last_inner:
            joined = np.ones((a1 - a0, b1 - b0), dtype=bool)
        else:
            joined = rng.random((a1 - a0, b1 - b0)) < edge_density
            for col in np.flatnonzero(~joined.any(axis=0)):
                joined[rng.integers(a1 - a0), col] = True
            for row in np.flatnonzero(~joined.any(axis=1)):
                joined[row, rng.integers(b1 - b0)] = True
        us, vs = np.nonzero(joined)
        edges.update(zip((us + a0).tolist(), (vs + b0).tolist()))
    return edges


def _skip_edges(sizes: list[int], n_skip: int, rng: np.random.Generator) -> set[tuple[int, int]]:
    """Up to ``n_skip`` distinct edges, each from an inner node to a node of a uniformly drawn inner
    layer at least two further on."""
    starts = np.concatenate([[0], np.cumsum(sizes)])
    layer_of = np.repeat(np.arange(len(sizes)), sizes)
    last_inner = len(sizes) - 2
    can_skip = np.flatnonzero((layer_of >= 1) & (layer_of <= last_inner - 2))
    skips: set[tuple[int, int]] = set()
    if not (n_skip and can_skip.size):
        return skips
    # Short graphs may not hold that many distinct skips; stop after a fair number of tries.
    for _ in range(20):
        want = n_skip - len(skips)
        if want <= 0:
            break
        us = rng.choice(can_skip, size=2 * want)
        lo = layer_of[us] + 2
        layers = lo + np.floor(rng.random(2 * want) * (last_inner + 1 - lo)).astype(np.int64)
        sizes_arr = np.asarray(sizes)[layers]
        vs = starts[layers] + np.floor(rng.random(2 * want) * sizes_arr).astype(np.int64)
        for u, v in zip(us.tolist(), vs.tolist()):
            if len(skips) == n_skip:
                break
            skips.add((u, v))
    return skips


def _nodes(n: int, edges: set[tuple[int, int]], rng: np.random.Generator) -> list[Node]:
    """The nodes "0".."n-1", inputs in increasing order; durations uniform (0 for the source and the
    sink), memory from `_memory`."""
    inputs: list[list[int]] = [[] for _ in range(n)]
    for u, v in sorted(edges):
        inputs[v].append(u)
    durations = rng.integers(0, MAX_DURATION, size=n)
    durations[0] = durations[n - 1] = 0
    memory = _memory(n, rng)
    return [
        Node(
            id=str(v),
            inputs=tuple(str(u) for u in inputs[v]),
            memory=int(memory[v]),
            duration=int(durations[v]),
            op="op",
            kind="forward",
        )
        for v in range(n)
    ]
