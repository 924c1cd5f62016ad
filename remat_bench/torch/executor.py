"""Running a `remat_bench.torch.program.Program` node by node on real tensors (`Executor`), and the plain
autograd step it is checked against (`reference_step`).

A random node runs with the generators seeded from the spec's seed, the
training step and its number among the step's random operators
(`remat_bench.torch.randomness.random_key`), so that a recomputation draws the
first computation's values, and `reference_step` runs eager autograd under
`remat_bench.torch.randomness.seeded_random_ops`, which draws the same.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch import fx

from remat_bench.core.schedule import COMPUTE, FREE, OFFLOAD
from remat_bench.torch.moves import Mover
from remat_bench.torch.program import GRADIENT, OP, Program, distinct_storage_bytes, storage_bytes
from remat_bench.torch.randomness import random_key, seeded_generators, seeded_random_ops
from remat_bench.torch.spec import ModelSpec, build_step, make_batch


@dataclass
class State:
    """The real tensors of one training step: parameters, buffers, the batch; fixed for the whole run."""

    spec: ModelSpec
    device: torch.device
    parameters: dict[str, torch.Tensor]
    buffers: dict[str, torch.Tensor]
    inputs: torch.Tensor
    labels: torch.Tensor

    @classmethod
    def create(cls, spec: ModelSpec, device: torch.device) -> State:
        """Parameters as the model's initialisers set them after ``torch.manual_seed(spec.seed)``.

        Parameters
        ----------
        spec : ModelSpec
            The model and its batch.
        device : torch.device
            Where the tensors go.

        Returns
        -------
        State
        """
        step = build_step(spec)
        params = {k: p.detach().to(device).clone() for k, p in step.named_parameters()}
        buffers = {k: b.detach().to(device).clone() for k, b in step.named_buffers()}
        inputs, labels = make_batch(spec, device)
        return cls(spec, device, params, buffers, inputs, labels)

    @property
    def nbytes(self) -> int:
        """Bytes of every distinct storage the state holds: the fixed memory, measured."""
        return distinct_storage_bytes(self.tensors())

    def tensors(self) -> list[torch.Tensor]:
        """Every tensor the state holds: parameters, buffers, the batch and its labels.

        Returns
        -------
        list of torch.Tensor
        """
        return [*self.parameters.values(), *self.buffers.values(), self.inputs, self.labels]


class ExecutionError(RuntimeError):
    """An operator failed when run on real tensors; the message names the node."""


class Executor:
    """Runs program nodes one at a time on real tensors: ``compute(i)`` and ``free(i)``; with a `Mover`,
    the offload and reload steps of a schedule that moves values too.

    ``compute`` evaluates the node's operator on the values of its inputs
    (views and getitems are re-derived from their base values each time: they
    cost no memory) and keeps the result; ``free`` drops the reference to it,
    the last one, so the allocator gets the memory back. A gradient node copies
    its gradient out of a tuple; an update node writes into a buffer. A random
    node runs with the generators seeded by its key for training step ``step``
    (`remat_bench.torch.randomness.random_key`), so that every computation of
    it, first or recomputed, draws what eager autograd under
    `remat_bench.torch.randomness.seeded_random_ops` draws.

    Parameters
    ----------
    program : Program
        The traced step.
    state : State
        Its parameters, buffers and batch.
    step : int
        The training step random operators draw for.
    moves : Mover or None
        The copies of one run of a schedule that moves values (`remat_bench.torch.moves`); None for one
        that moves nothing.
    """

    def __init__(self, program: Program, state: State, step: int = 0, moves: Mover | None = None) -> None:
        self.program = program
        self.state = state
        self.step = step
        self.moves = moves
        self.values: dict[int, Any] = {}
        self._placeholders: dict[str, torch.Tensor] = {}
        for name, (kind, key) in program.placeholders.items():
            if kind == "parameter":
                self._placeholders[name] = state.parameters[key]
            elif kind == "buffer":
                self._placeholders[name] = state.buffers[key]
            else:
                self._placeholders[name] = state.inputs if key == "inputs" else state.labels
        device = state.device
        # Device arguments (ones_like(..., device=cpu), arange) follow the replay's device.
        self._args = {
            n: fx.node.map_aggregate((n.args, n.kwargs), lambda a: device if isinstance(a, torch.device) else a)
            for n in program.gm.graph.nodes if n.op == "call_function"
        }
        # The storage bytes the graph counts for each output of an op node, as traced.
        self._counted = {
            i: [storage_bytes(t) if isinstance(t, torch.Tensor) else None
                for t in pytree.tree_leaves(node.runs().meta.get("val"))]
            for i, node in enumerate(program.nodes) if node.role == OP
        }

    def _read(self, n: fx.Node, local: dict[fx.Node, Any]) -> Any:
        if n in local:
            return local[n]
        if n.op == "placeholder":
            return self._placeholders[n.name]
        if n.op == "get_attr":
            return getattr(self.program.gm, str(n.target)).to(self.state.device)
        base = self.program.base.get(n)
        if base is None or base not in self.values:
            name = self.program.nodes[base].id if base is not None else n.name
            raise RuntimeError(f"value '{name}' is read but not resident")
        return self.values[base]

    def _call(self, n: fx.Node, local: dict[fx.Node, Any]) -> Any:
        args, kwargs = fx.node.map_arg(self._args[n], lambda a: self._read(a, local))
        return n.target(*args, **kwargs)  # type: ignore[operator]  # call_function: a callable target

    def evaluate(self, n: fx.Node | None, aliases: tuple[fx.Node, ...]) -> Any:
        """The value of FX node ``n``, re-deriving ``aliases`` from resident values first.

        Parameters
        ----------
        n : fx.Node or None
            The value read (None: nothing to read).
        aliases : tuple of fx.Node
            The aliases it is derived through (`FxValues.alias_closure`), in graph order.

        Returns
        -------
        Any
            The tensor or tuple; None for ``n`` None.
        """
        if n is None:
            return None
        local: dict[fx.Node, Any] = {}
        for a in aliases:
            local[a] = self._call(a, local)
        return self._read(n, local)

    def compute(self, i: int) -> None:
        """Run node ``i`` on the resident values of its inputs and keep its value.

        Parameters
        ----------
        i : int
            The node's index.

        Raises
        ------
        ExecutionError
            The operator failed, or read a value that is not resident; the message names the node.
        """
        node = self.program.nodes[i]
        try:
            with torch.no_grad():
                if node.role == GRADIENT:
                    value = self.evaluate(node.fx, node.aliases)
                    self.values[i] = None if value is None else torch.clone(value)
                    return
                local: dict[fx.Node, Any] = {}
                for a in node.aliases:
                    local[a] = self._call(a, local)
                if node.random is None:
                    value = self._call(node.runs(), local)
                else:
                    key = random_key(self.program.spec.seed, self.step, node.random)
                    with seeded_generators(self.state.device, key):
                        value = self._call(node.runs(), local)
                self.values[i] = self._compact(i, value) if node.role == OP else value
        except Exception as exc:
            raise ExecutionError(f"node '{node.id}' ({node.fx.target if node.fx is not None else 'gradient'}) "
                                 f"failed on {self.state.device}: {exc}") from exc

    def _compact(self, i: int, value: Any) -> Any:
        """``value`` with every output held in no more storage than the graph counts for it.

        Some CPU kernels return a small result inside the larger buffer they
        computed it in: ``mse_loss`` returns its scalar in the storage of the
        elementwise squares, which would stay resident as long as the loss,
        while the fake tensors (and the graph) count 4 bytes. Such an output is
        copied out, and the buffer is freed at the end of the step: scratch
        memory of the operator, which `remat_bench.torch.calibrate.calibrate` measures into its
        workspace like any other.
        """
        leaves, tree = pytree.tree_flatten(value)
        counted = self._counted[i]
        oversized = [k for k, t in enumerate(leaves) if isinstance(t, torch.Tensor) and k < len(counted)
                     and (c := counted[k]) is not None and storage_bytes(t) > c]
        if not oversized:
            return value
        for k in oversized:
            leaves[k] = leaves[k].clone()
        return pytree.tree_unflatten(leaves, tree)

    def free(self, i: int) -> None:
        """Drop node ``i``'s value, the last reference to it.

        Parameters
        ----------
        i : int
            The node's index; its value must be resident.
        """
        del self.values[i]

    def run(self, steps: Iterable[tuple[int, int]]) -> None:
        """Perform a schedule's steps in order: compute, free, and with a `Mover` offload and reload.

        Parameters
        ----------
        steps : iterable of (int, int)
            (kind, node index) pairs, as a `remat_bench.core.schedule.Schedule` holds them.

        Raises
        ------
        ExecutionError
            An operator that fails on the device, or a copy step without a `Mover` to copy with.
        """
        moves = self.moves
        if moves is None:
            for s, (kind, i) in enumerate(steps):
                if kind == COMPUTE:
                    self.compute(i)
                elif kind == FREE:
                    self.free(i)
                else:
                    word = "offloads" if kind == OFFLOAD else "reloads"
                    raise ExecutionError(f"step {s} {word} '{self.program.nodes[i].id}', but this run was given "
                                         "no copy engines; run the schedule with its plan of copies")
            return
        for s, (kind, i) in enumerate(steps):
            moves.before(s)
            if kind == COMPUTE:
                moves.wait_for(self.program.nodes[i].inputs)
                self.compute(i)
            elif kind == FREE:
                moves.free(s, i, self.values)
            elif kind == OFFLOAD:
                moves.offload(s, i, self.values)
            else:
                moves.reload(s, i, self.values)
        moves.finish()

    def results(self) -> tuple[torch.Tensor, dict[str, torch.Tensor | None]]:
        """The loss and every parameter's gradient, read from the resident outputs.

        Returns
        -------
        tuple of (torch.Tensor, dict)
            The loss, and parameter name -> gradient (None where the step gives none).
        """
        program = self.program
        with torch.no_grad():
            loss = self.evaluate(*program.loss_read)
            grads = {}
            for name, read in program.gradient_reads.items():
                i = program.gradients[name]
                grads[name] = self.values[i] if program.nodes[i].role == GRADIENT else self.evaluate(*read)
        return loss, grads


def reference_step(spec: ModelSpec, device: torch.device, step: int = 0
                   ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """A plain autograd training step: the loss and every parameter's gradient, for comparison.

    Random operators (dropout) draw what the program's random nodes draw in training step ``step``
    (`remat_bench.torch.randomness.seeded_random_ops`); the global random state is left as it was.

    Parameters
    ----------
    spec : ModelSpec
        The model, its parameters' seed and its batch.
    device : torch.device
        Where the step runs.
    step : int
        The training step whose random values are drawn.

    Returns
    -------
    tuple of (torch.Tensor, dict)
        The loss, and parameter name -> gradient (zeros for a parameter the loss does not use).
    """
    model = build_step(spec).to(device)
    inputs, labels = make_batch(spec, device)
    params = list(model.parameters())
    with seeded_random_ops(spec.seed, step, device):
        loss = model(inputs, labels)
        grads = torch.autograd.grad(loss, params, allow_unused=True)
    names = [k for k, _ in model.named_parameters()]
    return loss.detach(), {k: (torch.zeros_like(p) if g is None else g) for k, g, p in zip(names, grads, params)}
