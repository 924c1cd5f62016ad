"""Linear training graphs: Checkmate's chain of n layers, its loss and n gradients.

The linear network is the running example of Chen et al. ("Training Deep Nets
with Sublinear Memory Cost", 2016) and the first benchmark of Checkmate (Jain
et al., MLSys 2020): forward layers ``layer1 -> ... -> layerN``, a loss, and
the gradients ``layerN_grad -> ... -> layer1_grad``, each gradient reading its
layer, the next layer and the next layer's gradient (`training_graph`'s rule).
"""

from __future__ import annotations

import numpy as np

from remat_bench.core.errors import GraphError
from remat_bench.core.graph import Graph, Number
from remat_bench.generators.training import ForwardOp, training_graph

UNITS = {"memory": "units", "duration": "units"}
# With a seed, every size is the given scale times a whole number drawn uniformly from 1..SPREAD.
SPREAD = 10


def chain(
    n_layers: int,
    *,
    memory: Number = 1,
    duration: Number = 1,
    seed: int | None = None,
) -> Graph:
    """The training graph of a linear network of ``n_layers`` layers.

    Without a seed every forward node, the loss and every gradient node has
    memory ``memory``; forward nodes and the loss cost ``duration`` and
    gradients twice that. With a seed, each layer's memory is ``memory * k``
    and its duration ``duration * j``, with k and j drawn independently and
    uniformly from the integers 1..10 (``numpy.random.default_rng(seed)``);
    the loss keeps ``memory`` and ``duration``. Sizes are in abstract units.

    Parameters
    ----------
    n_layers : int
        The number of forward layers, at least 1.
    memory : Number
        The memory of every node, or with a seed the unit a layer's memory is a multiple of.
    duration : Number
        The duration of a forward node, or with a seed the unit a layer's duration is a multiple of.
    seed : int or None
        Draws the layers' sizes; None for every layer alike.

    Returns
    -------
    Graph
        ``2 * n_layers + 1`` nodes, named ``chain-N`` (``chain-N-seedS`` with a seed).

    Raises
    ------
    GraphError
        ``n_layers`` is not a whole number of at least 1, or ``memory`` or ``duration`` is not a
        non-negative number.
    """
    if isinstance(n_layers, bool) or not isinstance(n_layers, int | np.integer) or n_layers < 1:
        raise GraphError(f"chain: n_layers must be a whole number of at least 1, not {n_layers!r}")
    for label, value in (("memory", memory), ("duration", duration)):
        if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
            raise GraphError(f"chain: {label} must be a non-negative number, not {value!r}")
    n_layers = int(n_layers)

    if seed is None:
        mems: list[Number] = [memory] * n_layers
        durs: list[Number] = [duration] * n_layers
    else:
        rng = np.random.default_rng(seed)
        mems = [memory * int(k) for k in rng.integers(1, SPREAD + 1, size=n_layers)]
        durs = [duration * int(j) for j in rng.integers(1, SPREAD + 1, size=n_layers)]

    forward = [
        ForwardOp(
            id=f"layer{i + 1}",
            op="layer",
            inputs=[f"layer{i}"] if i else [],
            memory=mems[i],
            duration=durs[i],
        )
        for i in range(n_layers)
    ]
    return training_graph(
        forward,
        name=f"chain-{n_layers}" + ("" if seed is None else f"-seed{seed}"),
        loss_memory=memory,
        loss_duration=duration,
        units=UNITS,
        metadata={
            "generator": "chain",
            "n_layers": n_layers,
            "memory": memory,
            "duration": duration,
            "seed": seed,
        },
    )
