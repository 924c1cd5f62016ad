"""``policy``: the fixed recomputation rules training frameworks ship, applied to a training graph.

A framework's activation checkpointing is a rule over operators and modules, not a search: it
decides which forward values are saved for the backward pass without looking at the memory
budget, and recomputes the others. Three rules (param ``rule``), each a saved set S of forward
values; every value outside S that the backward pass reads is recomputed from S:

- ``dots_saveable``: JAX's ``jax.checkpoint_policies.dots_saveable`` (``jax/_src/ad_checkpoint.py``)
  under ``jax.checkpoint`` of the whole step. JAX saves the outputs of ``dot_general`` and
  ``conv_general_dilated`` and nothing else, so S = the forward nodes whose aten operator is a
  matrix product or a convolution (`DOT_OPS`: ``mm``, ``addmm``, ``bmm``, ``baddbmm``, ``matmul``,
  ``linear``, ``convolution`` ...). A fused attention kernel (``_scaled_dot_product_*``) is not a
  dot: JAX's fused attention is a custom call, which the policy does not save either.
- ``nothing_saveable``: JAX's ``nothing_saveable`` under ``jax.remat`` of each layer, or
  ``torch.utils.checkpoint`` around each block: a block saves only its input, and its internals
  are recomputed, the whole block together, when the backward pass reaches it. A value that
  crosses a block boundary is saved (a block's inputs, which the checkpoint keeps, and a block's
  outputs read outside it, which the next layer keeps for its own backward); nodes outside every
  block run without checkpointing and are saved. Blocks come from the importer's module paths
  (node metadata ``module``, `remat_bench.torch.importer`): see `block_container` for how they
  are found, or give them with ``block`` (a regular expression).
- ``megatron_selective``: Megatron-LM's selective activation recomputation (Korthikanti et al.
  2022, "Reducing Activation Recomputation in Large Transformer Models", section 5): save
  everything except the attention core, whose activations grow with the square of the sequence
  (the 5as^2b term of their equation 2) but cost little to compute. Unfused attention: the
  nodes from the QK^T product through the softmax (scale, mask, softmax, dropout) up to the
  product with V, which is saved. A fused attention operator (``_scaled_dot_product_*``) is one
  node whose internals are never stored: the node itself is recomputed, from its saved q, k, v.

The saved set becomes a `Plan` for the shared lowering (`remat_bench.toolkit.lowering`): one
segment per block for ``nothing_saveable``, one node per segment otherwise. ``lowering=hold``
(the default: what the frameworks do) keeps recomputed values until their last use; ``transient``
frees them after each backward node; ``best`` tries both. The schedule is simulated: it is
``feasible`` when its peak fits the budget and ``no_solution`` otherwise, with the schedule still
returned (as `twremat` returns its lowest peak) so that the report shows by how much it exceeds.

What it leaves out: the frameworks' own memory planning (fusion, in-place reuse, when exactly a
recomputed value is freed); PyTorch's checkpoint reruns the whole block forward, here only the
block's values the remaining backward nodes read and what they need are recomputed. A graph
whose nodes do not say what they compute (no ``aten.`` operators, no module paths: the
published Checkmate graphs, generated graphs) is ``unsupported``.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from remat_bench.core.budget import memory_text
from remat_bench.core.errors import MethodError
from remat_bench.core.graph import Graph, Number
from remat_bench.core.schedule import Schedule
from remat_bench.core.simulate import simulate
from remat_bench.methods.base import Deadline, Method, MethodResult, Param, SolutionStatus, Termination
from remat_bench.toolkit.lowering import LOWERINGS, Plan, lower_plan

RULES = ("dots_saveable", "nothing_saveable", "megatron_selective")

# Matrix products and convolutions, by aten name: JAX's dot_general_p and conv_general_dilated_p.
DOT_OPS = frozenset({
    "mm", "addmm", "bmm", "baddbmm", "addbmm", "matmul", "linear", "dot", "vdot", "mv", "addmv", "einsum",
    "convolution", "_convolution", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
    "conv_transpose3d",
})
SOFTMAX_OPS = frozenset({"_softmax", "softmax", "_safe_softmax"})
# One fused node computes the whole attention core (scores, softmax, product with V).
FUSED_ATTENTION_PREFIXES = ("_scaled_dot_product_", "scaled_dot_product_attention", "_flash_attention_forward",
                            "_efficient_attention_forward", "_cudnn_attention_forward")


def aten_name(op: str) -> str | None:
    """The operator's aten name (``aten.mm.default`` -> ``mm``); None when ``op`` is not an aten operator.

    Parameters
    ----------
    op : str
        A node's operator (`Node.op`).

    Returns
    -------
    str or None
    """
    return op.split(".")[1] if op.startswith("aten.") else None


def module_path(graph: Graph, v: int) -> str | None:
    """The qualified path of the module whose forward computed node ``v`` (metadata ``module``), if known.

    Parameters
    ----------
    graph : Graph
    v : int
        A node's index.

    Returns
    -------
    str or None
        The path (``model.blocks.0.attn``); None when the node's metadata has no string ``module``.
    """
    meta = graph.nodes[v].metadata
    path = meta.get("module") if meta else None
    return path if isinstance(path, str) else None


def has_aten_ops(graph: Graph) -> bool:
    """Whether some forward node of ``graph`` names an aten operator (the rules on operators can read it).

    Parameters
    ----------
    graph : Graph

    Returns
    -------
    bool
    """
    return any(aten_name(graph.nodes[v].op) is not None for v in graph.forward_indices)


def has_modules(graph: Graph) -> bool:
    """Whether some forward node of ``graph`` carries a module path (the rule on blocks can read it).

    Parameters
    ----------
    graph : Graph

    Returns
    -------
    bool
    """
    return any(module_path(graph, v) for v in graph.forward_indices)


# ---------------------------------------------------------------------- dots and attention


def dot_nodes(graph: Graph) -> list[int]:
    """Forward nodes whose operator is a matrix product or a convolution (`DOT_OPS`).

    Parameters
    ----------
    graph : Graph

    Returns
    -------
    list of int
        Their indices, in file order.
    """
    return [v for v in graph.forward_indices if aten_name(graph.nodes[v].op) in DOT_OPS]


def attention_core(graph: Graph) -> list[int]:
    """The forward nodes Megatron's selective recomputation recomputes, in file order.

    A fused attention node is its own core. Around each softmax of the forward pass, walking
    back through non-dot nodes to the dots that feed it (the scores, QK^T) and forward to the
    dots it feeds (the product with V): the core is every node on a path from a score dot to the
    softmax (the dot included) and from the softmax to a value dot (the dot excluded). A softmax
    with no dot on either side (a classifier's head) is not attention.

    Parameters
    ----------
    graph : Graph

    Returns
    -------
    list of int
        The core's node indices, sorted; empty when the graph has no attention.
    """
    dots = set(dot_nodes(graph))
    core: set[int] = set()
    for v in graph.forward_indices:
        name = aten_name(graph.nodes[v].op) or ""
        if name.startswith(FUSED_ATTENTION_PREFIXES):
            core.add(v)
        elif name in SOFTMAX_OPS:
            core |= _unfused_core(graph, v, dots)
    return sorted(core)


def _unfused_core(graph: Graph, softmax: int, dots: set[int]) -> set[int]:
    up, scores = _reach(softmax, lambda x: graph.inputs[x], graph, dots)
    down, values = _reach(softmax, lambda x: graph.consumers[x], graph, dots)
    if not scores or not values:
        return set()
    # Up: the nodes that descend from a score dot (not the mask's own inputs); down: the nodes that
    # lead to a value dot (not other readers of the probabilities).
    from_scores = set(scores)
    for x in sorted(up):
        if any(u in from_scores for u in graph.inputs[x]):
            from_scores.add(x)
    to_values = set(values)
    for x in sorted(down, reverse=True):
        if any(w in to_values for w in graph.consumers[x]):
            to_values.add(x)
    return (up & from_scores) | ((down & to_values) - values)


def _reach(start: int, step: Any, graph: Graph, dots: set[int]) -> tuple[set[int], set[int]]:
    """Forward nodes reached from ``start`` through ``step`` without passing a dot, and the dots reached."""
    seen, found, stack = {start}, set(), [start]
    while stack:
        x = stack.pop()
        for y in step(x):
            if y in seen or not graph.is_forward[y]:
                continue
            seen.add(y)
            if y in dots:
                found.add(y)
            else:
                stack.append(y)
    return seen, found


# ---------------------------------------------------------------------- blocks


@dataclass(frozen=True)
class Block:
    """A repeated module: its qualified path and its forward nodes, in file order."""

    name: str
    nodes: tuple[int, ...]


def block_container(paths: Sequence[str | None]) -> str | None:
    """The module whose indexed children are the blocks: among the paths ``<container>.<i>.(...)``
    (a ModuleList's or a Sequential's children), the container with at least two children whose
    subtrees hold the most nodes; on a tie, the shallower. None when no path has an index.

    On the zoo's GPT this is ``model.blocks`` (not ``model.blocks.0.mlp``, whose children hold
    three nodes); on its ResNets ``model.stages`` (not the stem).

    Parameters
    ----------
    paths : Sequence of str or None
        The forward nodes' module paths (`module_path`); None or empty for a node without one.

    Returns
    -------
    str or None
        The container's path (``model.blocks``).
    """
    coverage: Counter[str] = Counter()
    children: dict[str, set[str]] = defaultdict(set)
    for path in paths:
        if not path:
            continue
        parts = path.split(".")
        for k in range(1, len(parts)):
            if parts[k].isdigit():
                container = ".".join(parts[:k])
                coverage[container] += 1
                children[container].add(parts[k])
    candidates = [c for c in coverage if len(children[c]) >= 2]
    if not candidates:
        return None
    return max(candidates, key=lambda c: (coverage[c], -c.count(".")))


def find_blocks(graph: Graph, pattern: str | None = None) -> list[Block]:
    """The blocks of the forward pass, in the order they start.

    ``pattern`` None: the children of `block_container`. Otherwise a regular expression matched
    at the start of each module path: nodes whose paths match with the same text form a block
    (``model\\.blocks\\.\\d+``).

    Parameters
    ----------
    graph : Graph
    pattern : str or None
        A regular expression for the blocks' paths; None: found by `block_container`.

    Returns
    -------
    list of Block
        Each matched text with its forward nodes; empty when no path matches (or no container is found).
    """
    forward = graph.forward_indices
    paths = {v: module_path(graph, v) for v in forward}
    if pattern is None:
        container = block_container(list(paths.values()))
        if container is None:
            return []
        regex = re.compile(re.escape(container) + r"\.\d+(?=\.|$)")
    else:
        regex = re.compile(pattern)
    members: dict[str, list[int]] = {}
    for v in forward:
        path = paths[v]
        match = regex.match(path) if path is not None else None
        if match and match.group(0):
            members.setdefault(match.group(0), []).append(v)
    return [Block(name, tuple(nodes)) for name, nodes in members.items()]


# ---------------------------------------------------------------------- the rules


class PolicyUnsupported(ValueError):
    """The graph lacks what a rule reads (operator names, module paths, blocks)."""


def policy_plan(graph: Graph, rule: str, block: str | None = None) -> tuple[Plan, dict[str, Any]]:
    """The saved set and segments of ``rule`` on ``graph``, and what it found (for stats).

    Parameters
    ----------
    graph : Graph
        A training graph (forward nodes, then backward ones).
    rule : str
        One of `RULES`.
    block : str or None
        ``nothing_saveable``'s blocks, a regular expression (`find_blocks`); None: found automatically.

    Returns
    -------
    tuple of (Plan, dict)
        The plan for the shared lowering, and counts for the run's stats (``dots``, ``blocks`` and
        ``block_names``, or ``attention_nodes``).

    Raises
    ------
    PolicyUnsupported
        One sentence, when the graph does not say what the rule reads (no module paths or blocks for
        ``nothing_saveable``, no aten operators for the others).
    MethodError
        ``rule`` is not one of `RULES`.
    """
    forward = graph.forward_indices
    singles = tuple((v,) for v in forward)
    if rule == "nothing_saveable":
        if not has_modules(graph):
            raise PolicyUnsupported(
                f"rule nothing_saveable checkpoints each block, and the nodes of graph '{graph.name}' carry no module "
                "paths (metadata 'module'); import the model again with `remat-bench graphs import-torch`")
        blocks = find_blocks(graph, block)
        if not blocks:
            raise PolicyUnsupported(
                f"rule nothing_saveable found no repeated module (indexed children of a ModuleList or Sequential) "
                f"in graph '{graph.name}'" + ("" if block is None else f" matching block={block!r}")
                + "; name the blocks with param block=REGEX")
        return _per_block_plan(graph, blocks), {"blocks": len(blocks), "block_names": [b.name for b in blocks]}
    if not has_aten_ops(graph):
        raise PolicyUnsupported(
            f"rule {rule} reads operator names, and the forward nodes of graph '{graph.name}' have no aten operator "
            "(op 'aten.*'): only graphs imported from PyTorch say what each node computes")
    if rule == "dots_saveable":
        dots = dot_nodes(graph)
        return Plan(frozenset(dots), singles), {"dots": len(dots)}
    if rule == "megatron_selective":
        core = attention_core(graph)
        return Plan(frozenset(forward) - frozenset(core), singles), {"attention_nodes": len(core)}
    raise MethodError(f"unknown rule {rule!r}; the rules: {', '.join(RULES)}")


def _per_block_plan(graph: Graph, blocks: list[Block]) -> Plan:
    """Save every forward value except those of a block that only its own block reads (the values
    crossing a block boundary, and the nodes outside every block, are saved); one segment per block."""
    block_of = np.full(graph.n, -1, dtype=np.int64)
    for b, blk in enumerate(blocks):
        block_of[list(blk.nodes)] = b
    internal = set()
    for v in graph.forward_indices:
        readers = [w for w in graph.consumers[v] if graph.is_forward[w]]
        if block_of[v] >= 0 and readers and all(block_of[w] == block_of[v] for w in readers):
            internal.add(v)
    kept = frozenset(graph.forward_indices) - internal
    in_blocks = set(np.flatnonzero(block_of >= 0).tolist())
    segments = [blk.nodes for blk in blocks] + [(v,) for v in graph.forward_indices if v not in in_blocks]
    return Plan(kept, tuple(segments))


# ---------------------------------------------------------------------- the method


def _check_regex(pattern: str) -> None:
    if pattern == "auto":
        return
    try:
        re.compile(pattern)
    except re.error as exc:
        raise MethodError(f"parameter 'block' of method 'policy' is not a regular expression: {exc}") from None


Lowered = tuple[Number, Number, Schedule, bool]  # (duration, peak, schedule, transient)


class Policy(Method):
    name = "policy"
    production = True
    search_space = "one saved set per rule, fixed whatever the budget; recomputation by the shared lowering"
    description = ("frameworks' fixed rules: JAX's dots_saveable, per-block checkpointing (nothing_saveable), "
                   "Megatron's selective recomputation")
    params = (
        Param("rule", str, "dots_saveable", "dots_saveable: save matmul and convolution outputs; nothing_saveable: "
              "save each block's input, recompute the block; megatron_selective: recompute the attention core",
              choices=RULES),
        Param("block", str, "auto", "nothing_saveable's blocks: a regular expression matched at the start of the "
              "module paths (the matched text names the block), or auto: the indexed children of the module "
              "list holding the most nodes", check=_check_regex),
        Param("lowering", str, "hold", "hold: a recomputed value stays until its last use (what frameworks do); "
              "transient: freed after each use; best: both, the fastest that fits (else the lower peak)",
              choices=tuple(LOWERINGS)),
    )
    needs_backward = True

    @classmethod
    def skip(cls, graph: Graph, budget: Number | None) -> str | None:
        reason = super().skip(graph, budget)
        if reason is None and not has_aten_ops(graph) and not has_modules(graph):
            reason = (f"method 'policy' applies rules to operator names (aten.*) and module paths, and the nodes "
                      f"of graph '{graph.name}' have neither, so they do not say what they compute")
        return reason

    def solve(self, graph: Graph, budget: Number | None, time_limit: float | None,
              **params: Any) -> MethodResult:
        deadline = Deadline(time_limit)
        rule = params["rule"]
        try:
            plan, found = policy_plan(graph, rule, None if params["block"] == "auto" else params["block"])
        except PolicyUnsupported as exc:
            return MethodResult(SolutionStatus.NO_SOLUTION, solve_time_s=deadline.elapsed(), message=str(exc),
                                termination=Termination.NOT_APPLICABLE)
        modes = LOWERINGS[params["lowering"]]
        tried: list[Lowered] = []
        for transient in modes:
            schedule = lower_plan(graph, plan, transient)
            sim = simulate(graph, schedule)
            tried.append((sim.duration, sim.peak, schedule, transient))
        fits = [t for t in tried if budget is None or t[1] <= budget]
        if budget is None:
            duration, peak, schedule, transient = min(tried, key=lambda t: (t[1], t[0]))
        elif fits:
            duration, peak, schedule, transient = min(fits, key=lambda t: (t[0], t[1]))
        else:
            duration, peak, schedule, transient = min(tried, key=lambda t: (t[1], t[0]))
        stats = {"rule": rule, **found, "lowering": "transient" if transient else "hold",
                 **_saved_stats(graph, plan, schedule), "simulated_peak": peak}
        if budget is not None and peak > budget:
            shown = memory_text(budget, graph)
            times = f", {peak / budget:.2f} times the budget {shown}" if budget > 0 else f", above the budget {shown}"
            return MethodResult(
                SolutionStatus.NO_SOLUTION, schedule, objective=duration, solve_time_s=deadline.elapsed(), stats=stats,
                termination=Termination.CONVERGED,
                message=f"the {rule} rule's schedule peaks at {peak}{times} (the rule saves what it saves whatever "
                        "the budget)")
        return MethodResult(SolutionStatus.FEASIBLE, schedule, objective=duration, solve_time_s=deadline.elapsed(),
                            stats=stats, termination=Termination.CONVERGED)


def _saved_stats(graph: Graph, plan: Plan, schedule: Schedule) -> dict[str, Any]:
    """How much the plan saves, and what the schedule recomputes."""
    saved = sorted(plan.kept)
    counts = np.bincount(schedule.nodes[schedule.kinds == 0], minlength=graph.n)
    return {
        "saved": len(saved),
        "saved_memory": graph.memory[saved].sum().item() if saved else 0,
        "forward": len(graph.forward_indices),
        "recomputed_nodes": int((counts > 1).sum()),
        "recomputations": int((counts - 1).clip(min=0).sum()),
    }
