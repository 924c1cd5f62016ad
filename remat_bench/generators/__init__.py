"""Graph generators: linear chains, random layered DAGs and real architectures.

`GENERATORS` maps the kind names of ``remat-bench graphs generate KIND`` to the
generator functions; `generate` maps the command's options onto each one's
arguments and refuses, in one sentence, an option a kind does not take.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from remat_bench.core.errors import GraphError
from remat_bench.core.graph import Graph
from remat_bench.generators.architectures import densenet121, resnet50, transformer, unet, vgg16
from remat_bench.generators.chain import chain
from remat_bench.generators.implementations import add_implementations, first_implementations
from remat_bench.generators.random_layered import random_layered
from remat_bench.generators.training import ForwardOp, training_graph

__all__ = [
    "GENERATORS",
    "ForwardOp",
    "add_implementations",
    "chain",
    "densenet121",
    "first_implementations",
    "generate",
    "random_layered",
    "resnet50",
    "training_graph",
    "transformer",
    "unet",
    "vgg16",
]

GENERATORS: dict[str, Callable[..., Graph]] = {
    "chain": chain,
    "random-layered": random_layered,
    "vgg16": vgg16,
    "resnet50": resnet50,
    "unet": unet,
    "densenet121": densenet121,
    "transformer": transformer,
}

# For each kind: CLI option -> the generator's argument. Options not listed are refused.
_OPTIONS: dict[str, dict[str, str]] = {
    "chain": {"layers": "n_layers", "seed": "seed"},
    "random-layered": {"nodes": "n_nodes", "seed": "seed", "width": "width"},
    "vgg16": {"batch": "batch", "resolution": "resolution"},
    "resnet50": {"batch": "batch", "resolution": "resolution", "layers": "depth"},
    "unet": {"batch": "batch", "resolution": "resolution", "layers": "depth"},
    "densenet121": {"batch": "batch", "resolution": "resolution"},
    "transformer": {"batch": "batch", "layers": "layers", "width": "width", "seq": "seq"},
}

# Arguments the CLI must always supply because the generator has no default for them.
_REQUIRED_DEFAULTS: dict[str, dict[str, Any]] = {
    "chain": {"n_layers": 10},
    "random-layered": {"n_nodes": 100, "seed": 0},
}


def _heads_for(width: int) -> int:
    """GPT's convention of 64-wide heads, rounded down to a divisor of ``width`` (768 -> 12)."""
    heads = max(1, width // 64)
    while width % heads:
        heads -= 1
    return heads


def _flags(names: Any) -> str:
    return ", ".join(f"--{name}" for name in names)


def generate(
    kind: str,
    *,
    batch: int | None = None,
    layers: int | None = None,
    nodes: int | None = None,
    seed: int | None = None,
    resolution: int | None = None,
    width: int | None = None,
    seq: int | None = None,
    implementations: bool = False,
) -> Graph:
    """Generate a graph of ``kind`` from the options of ``remat-bench graphs generate``.

    ``layers`` is the number of layers of a chain or a transformer and the
    depth of a ResNet (18, 34, 50, 101, 152, 200) or a U-Net; ``nodes`` the
    size of a random layered graph; ``width`` the model width of a
    transformer (with 64-wide heads, as in GPT, or the nearest divisor) or
    the mean layer width of a random layered graph. Options
    left as None take the generator's defaults (chain: 10 layers;
    random-layered: 100 nodes, seed 0). ``implementations`` adds MONeT's
    operator implementations (convolution algorithms, output-activated
    gradients; `add_implementations`). Raises `GraphError` for an unknown
    kind, an option the kind does not take, a value out of range, or
    ``implementations`` on a graph with no operator they apply to.
    """
    if kind not in GENERATORS:
        raise GraphError(f"unknown graph kind '{kind}'; choose one of {', '.join(GENERATORS)}")
    given = {
        name: value
        for name, value in (("batch", batch), ("layers", layers), ("nodes", nodes), ("seed", seed),
                            ("resolution", resolution), ("width", width), ("seq", seq))
        if value is not None
    }
    accepted = _OPTIONS[kind]
    refused = [name for name in given if name not in accepted]
    if refused:
        raise GraphError(
            f"{kind} does not take {_flags(refused)}; it takes {_flags(accepted)}"
        )
    for name, value in given.items():
        minimum = 0 if name == "seed" else 1
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise GraphError(f"{kind}: --{name} must be a whole number of at least {minimum}, not {value!r}")
    kwargs = dict(_REQUIRED_DEFAULTS.get(kind, {}))
    kwargs.update({accepted[name]: value for name, value in given.items()})
    if kind == "transformer" and width is not None:
        kwargs["heads"] = _heads_for(width)
    graph = GENERATORS[kind](**kwargs)
    if implementations:
        graph = add_implementations(graph, kind)
    return graph
