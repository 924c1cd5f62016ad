"""An unrolled recurrent network as a training graph: a stack of GRU-style cells over time steps.

Backpropagation through time is the oldest rematerialization problem with an exact answer
(Gruslys et al., "Memory-Efficient Backpropagation Through Time", NeurIPS 2016; Griewank and
Walther's revolve before it): the forward pass is a chain of time steps, each step's cells
reading the step's input and the hidden states of the step before, and every step's cells share
one set of weights. The graph built here has that shape without PyTorch, at layer granularity:

    x                               the input sequence (batch x steps x features)
    x{t}      = x[:, t]             the step's input slice
    g{l}_{t}  = gates(in, h{l}_{t-1})   the three gates of layer l (3 x hidden), in = x{t} or h{l-1}_{t}
    h{l}_{t}  = update(g{l}_{t}, h{l}_{t-1})
    head      = linear(h{L}_{T})    the classifier on the top layer's last hidden state

then Checkmate's loss and one gradient per forward node (`remat_bench.generators.training`). The
first step's gates read no earlier hidden state (it is zero). Memory is in bytes (float32),
durations in FLOPs; the weights are the graph's fixed memory.
"""

from __future__ import annotations

from remat_bench.core.errors import GraphError
from remat_bench.core.graph import Graph
from remat_bench.generators.training import ForwardOp, training_graph

FLOAT = 4  # bytes of a float32
UPDATE_FLOPS = 10  # per hidden unit: the reset-gated candidate, tanh, the interpolation with h_{t-1}


def recurrent(steps: int = 32, layers: int = 2, *, batch: int = 32, hidden: int = 256, features: int = 64,
              classes: int = 10) -> Graph:
    """The training graph of a stack of ``layers`` GRU-style cells unrolled over ``steps`` time steps.

    Parameters
    ----------
    steps : int
        Time steps, at least 1.
    layers : int
        Stacked cells per step, at least 1.
    batch : int
        Sequences per batch.
    hidden : int
        Hidden units per cell.
    features : int
        Input features per time step.
    classes : int
        Outputs of the classifier.

    Returns
    -------
    Graph
        ``2 * f + 1`` nodes with ``f = steps * (1 + 2 * layers) + 2`` forward nodes, named
        ``recurrent-T<steps>-L<layers>-b<batch>-h<hidden>``; metadata records the options.

    Raises
    ------
    GraphError
        An option that is not a whole number of at least 1.
    """
    for label, value in (("steps", steps), ("layers", layers), ("batch", batch), ("hidden", hidden),
                         ("features", features), ("classes", classes)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise GraphError(f"recurrent: {label} must be a whole number of at least 1, got {value!r}")
    ops = [ForwardOp("x", "input", (), FLOAT * batch * steps * features, 0)]
    state = [""] * layers  # each layer's hidden state of the step before ("" at the first step)
    for t in range(steps):
        ops.append(ForwardOp(f"x{t}", "select", ("x",), FLOAT * batch * features, batch * features))
        below, width = f"x{t}", features
        for layer in range(layers):
            reads = (below,) if not state[layer] else (below, state[layer])
            gates = f"g{layer}_{t}"
            ops.append(ForwardOp(gates, "gates", reads, FLOAT * batch * 3 * hidden,
                                 2 * batch * (width + hidden) * 3 * hidden))
            h = f"h{layer}_{t}"
            reads = (gates,) if not state[layer] else (gates, state[layer])
            ops.append(ForwardOp(h, "update", reads, FLOAT * batch * hidden, UPDATE_FLOPS * batch * hidden))
            state[layer], below, width = h, h, hidden
    ops.append(ForwardOp("head", "linear", (state[-1],), FLOAT * batch * classes, 2 * batch * hidden * classes))
    weights = sum(3 * hidden * ((features if layer == 0 else hidden) + hidden + 2) for layer in range(layers))
    weights += classes * (hidden + 1)
    name = f"recurrent-T{steps}-L{layers}-b{batch}-h{hidden}"
    return training_graph(ops, name=name, loss_memory=FLOAT * batch, loss_duration=batch * classes,
                          fixed_memory=FLOAT * weights,
                          metadata={"generator": "recurrent", "steps": steps, "layers": layers, "batch": batch,
                                    "hidden": hidden, "features": features, "classes": classes})
