"""Graph generators: linear chains, random layered DAGs and real architectures.

`GENERATORS` maps the kind names of ``remat-bench graphs generate KIND`` to the
generator functions; `generate` maps the command's options onto each one's
arguments and refuses, in one sentence, an option a kind does not take, and a
graph larger than `MAX_NODES` nodes or `MAX_EDGES` edges before building it
(`estimated_size` counts them from the options alone).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from remat_bench.core.errors import GraphError
from remat_bench.core.graph import Graph
from remat_bench.generators.architectures import densenet121, resnet50, transformer, unet, vgg16
from remat_bench.generators.chain import chain
from remat_bench.generators.implementations import add_implementations, first_implementations
from remat_bench.generators.random_layered import WIDTH_PER_SQRT_N, random_layered
from remat_bench.generators.recurrent import recurrent
from remat_bench.generators.training import ForwardOp, training_graph

__all__ = [
    "GENERATORS",
    "ForwardOp",
    "add_implementations",
    "chain",
    "densenet121",
    "estimated_size",
    "first_implementations",
    "generate",
    "generated_size",
    "random_layered",
    "recurrent",
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
    "recurrent": recurrent,
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
    "recurrent": {"batch": "batch", "layers": "layers", "width": "hidden", "seq": "steps"},
}

# Arguments the CLI must always supply because the generator has no default for them.
_REQUIRED_DEFAULTS: dict[str, dict[str, Any]] = {
    "chain": {"n_layers": 10},
    "random-layered": {"n_nodes": 100, "seed": 0},
}


# The largest graph a generator builds: the benchmarks aim at ~10,000-node graphs, and a million nodes
# (about 1.5 GB in memory) leaves two orders of magnitude; 10**8 nodes would need 150 GB. Refused before
# anything is built, from the counts `estimated_size` gives.
MAX_NODES = 1_000_000
MAX_EDGES = 10_000_000
# Options are whole numbers up to 2**53: a larger batch, resolution or length gives sizes no method
# represents exactly (docs/design.md section 2), and arithmetic on them can overflow a float.
MAX_OPTION = 2**53
# GPT-3's width is 12,288; the head count search (`_heads_for`) walks down from width / 64.
MAX_TRANSFORMER_WIDTH = 2**20


def estimated_size(kind: str, **kwargs: Any) -> tuple[int, int]:
    """(nodes, edges) of the graph ``GENERATORS[kind](**kwargs)`` builds, counted without building it.

    Exact in nodes. Edges: exact for vgg16, resnet50 and densenet121 (their structure is fixed), a bound
    of three per node for the transformer and the U-Net; for a random layered
    graph the edge density times the products of consecutive layer sizes, plus the skip edges and one
    per node, which errs high, the more so for very wide layers (docs/benchmarks.md, "Figures that
    used to live in the code"): a cap on the estimate never lets a graph above the cap through.

    Parameters
    ----------
    kind : str
        A name of `GENERATORS`.
    **kwargs : Any
        The generator's own arguments (``n_layers``, ``n_nodes``, ``width``, ``depth``, ``layers``), as
        `generate` passes them; the others do not change the count.

    Returns
    -------
    tuple of (int, int)
        The number of nodes and of edges.
    """
    if kind == "chain":
        layers = kwargs["n_layers"]
        return 2 * layers + 1, 4 * layers
    if kind == "random-layered":
        n = kwargs["n_nodes"]
        width = min(float(kwargs.get("width") or max(1.0, WIDTH_PER_SQRT_N * n**0.5)), float(n))
        inner = max(1, n - 2)
        layers = max(1, min(inner, round(inner / width)))
        size = inner / layers
        consecutive = 0.28 * (layers - 1) * size * size + 2 * size + n
        return n, int(consecutive / (1 - 0.14))
    if kind == "transformer":
        nodes = 24 * kwargs.get("layers", 12) + 7
        return nodes, 3 * nodes
    if kind == "recurrent":
        steps, layers = kwargs.get("steps", 32), kwargs.get("layers", 2)
        forward, forward_edges = steps * (1 + 2 * layers) + 2, steps + 2 * layers * (2 * steps - 1) + 1
        return 2 * forward + 1, 3 * forward_edges + forward + 2  # the loss, and each gradient's reads
    if kind == "unet":
        nodes = 22 * kwargs.get("depth", 4) + 11
        return nodes, 3 * nodes
    if kind == "resnet50":
        depth = kwargs.get("depth", 50)
        return _FIXED.get((kind, depth), _FIXED[kind, 200])  # an unsupported depth is refused by resnet50
    return _FIXED[kind, 0]


# The architectures whose structure the options do not change: (nodes, edges) as built.
_FIXED = {("vgg16", 0): (73, 143), ("densenet121", 0): (853, 3308), ("resnet50", 18): (137, 295),
          ("resnet50", 34): (249, 543), ("resnet50", 50): (349, 743), ("resnet50", 101): (689, 1474),
          ("resnet50", 152): (1029, 2205), ("resnet50", 200): (1349, 2893)}


def _number(value: int) -> str:
    """An option's value as a message shows it (a number of thousands of digits is not spelled out)."""
    return str(value) if value.bit_length() <= 64 else f"a number of about {int(value.bit_length() * 0.30103)} digits"


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
    kind, an option the kind does not take, a value out of range, a graph
    above `MAX_NODES` nodes or `MAX_EDGES` edges (before building it), or
    ``implementations`` on a graph with no operator they apply to.

    Parameters
    ----------
    kind : str
        A name of `GENERATORS`.
    batch, layers, nodes, seed, resolution, width, seq : int or None
        The command's options of the same names, as above; None takes the generator's default.
    implementations : bool
        Add MONeT's operator implementations.

    Returns
    -------
    Graph

    Raises
    ------
    GraphError
        In the cases above, in one sentence naming the kind and the option.
    """
    kwargs = _arguments(kind, dict(batch=batch, layers=layers, nodes=nodes, seed=seed, resolution=resolution,
                                   width=width, seq=seq))
    if kind == "transformer" and width is not None:
        kwargs["heads"] = _heads_for(width)
    graph = GENERATORS[kind](**kwargs)
    if implementations:
        graph = add_implementations(graph, kind)
    return graph


def generated_size(kind: str, **options: Any) -> tuple[int, int]:
    """(nodes, edges) of ``generate(kind, **options)``, estimated without building it (`estimated_size`);
    raises `GraphError` as `generate` would for the options, and for a graph above the caps.

    Parameters
    ----------
    kind : str
        A name of `GENERATORS`.
    **options : Any
        `generate`'s keyword arguments; ``implementations`` is ignored (it does not change the size).

    Returns
    -------
    tuple of (int, int)
        The number of nodes (exact) and of edges (`estimated_size`: exact, or an estimate that errs high).

    Raises
    ------
    GraphError
        As `generate` raises for the options, before anything is built.
    TypeError
        An option `generate` does not have.
    """
    options.pop("implementations", None)
    return estimated_size(kind, **_arguments(kind, options))


def _arguments(kind: str, options: dict[str, Any]) -> dict[str, Any]:
    """The generator's arguments for the CLI's options, each checked, and the graph's size against the caps."""
    if kind not in GENERATORS:
        raise GraphError(f"unknown graph kind '{kind}'; choose one of {', '.join(GENERATORS)}")
    given = {name: value for name, value in options.items() if value is not None}
    unknown = [name for name in given if name not in ("batch", "layers", "nodes", "seed", "resolution", "width",
                                                      "seq")]
    if unknown:
        raise TypeError(f"generate() got an unexpected keyword argument '{unknown[0]}'")
    accepted = _OPTIONS[kind]
    refused = [name for name in given if name not in accepted]
    if refused:
        raise GraphError(
            f"{kind} does not take {_flags(refused)}; it takes {_flags(accepted)}"
        )
    for name, value in given.items():
        minimum = 0 if name == "seed" else 1
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            shown = _number(value) if isinstance(value, int) and not isinstance(value, bool) else repr(value)[:60]
            raise GraphError(f"{kind}: --{name} must be a whole number of at least {minimum}, not {shown}")
        if value > MAX_OPTION:
            raise GraphError(f"{kind}: --{name} must be at most 2**53 = {MAX_OPTION:,}, not {_number(value)}")
    width = given.get("width")
    if kind == "transformer" and width is not None and width > MAX_TRANSFORMER_WIDTH:
        raise GraphError(f"transformer: --width must be at most {MAX_TRANSFORMER_WIDTH:,}, not {width:,}")
    kwargs = dict(_REQUIRED_DEFAULTS.get(kind, {}))
    kwargs.update({accepted[name]: value for name, value in given.items()})
    nodes, edges = estimated_size(kind, **kwargs)
    if nodes > MAX_NODES:
        fewer = "--nodes" if kind == "random-layered" else "--layers"
        raise GraphError(f"{kind}: these options give a graph of {nodes:,} nodes, more than the {MAX_NODES:,} a "
                         f"generated graph may have; choose a smaller {fewer}")
    if edges > MAX_EDGES:
        raise GraphError(f"{kind}: these options give a graph of about {edges:,} edges, more than the "
                         f"{MAX_EDGES:,} a generated graph may have; choose fewer nodes or a smaller --width")
    return kwargs
