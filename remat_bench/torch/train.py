"""Train with the plan: a schedule found here runs in a real PyTorch training loop (docs/pytorch.md).

`ScheduledStep` performs a training step exactly as a schedule says: every
``compute v`` runs node v's aten operator on the resident values of its inputs
(`remat_bench.torch.executor.Executor`, the operators `replay` runs), every
``free v`` drops the value, and every ``offload v`` and ``reload v`` copies
the value to host memory and back (`remat_bench.torch.moves`: side streams and
pinned buffers on CUDA), so the forward pass, the recomputations, the copies
and the backward pass happen in the schedule's order and memory follows the
simulator's account. The parameters are the ``nn.Parameter`` objects of an
ordinary module (`build_step`: the model and its loss): the gradients land in
their ``.grad``, any ``torch.optim`` optimizer updates them in place, and the
next step reads the updated values. Batch-norm running statistics are updated
by the schedule's buffer updates, as autograd's step updates them. Random
operators (dropout) draw from per-operator seeds of the step
(`remat_bench.torch.randomness`): a recomputation draws the mask its first
computation drew, and the plain eager step run under `seeded_random_ops` with
the same step number draws the same masks, so losses compare exactly.

`train` runs N steps of several configurations of one model, each from the
same initial parameters (the model's seed) on the same batches
(`batch_for_step`), with plain SGD:

- ``schedule``: the schedule, exactly (`ScheduledStep`);
- ``eager``: the model trained plainly, eager autograd, no checkpointing;
- ``compile``: ``torch.compile`` with its defaults;
- ``compile-budget``: ``torch.compile`` with PyTorch's own
  ``activation_memory_budget`` at the schedule's budget fraction;
- ``schedule-compiled`` (``mode="compiled"``): the schedule's plan as
  recompute decisions under ``torch.compile`` (`remat_bench.torch.compiled`),
  drawing eager's dropout masks; its parameters are compared with eager's to
  inductor's fusion tolerance, and its measured peak with the plan as
  compiled (``as_compiled_peak``), the schedule the simulator scores for it.

For each it records the loss per step, the measured peak of one step (the
fixed memory, i.e. parameters, buffers and the batch, plus the most allocated
at once during the step above what was allocated when it began; measured as
`replay` measures: profiler memory events on the CPU, the allocator's peak
statistics on CUDA, ``torch.cuda.max_memory_allocated``) and the median step
time (`remat_bench.torch.measure.run_ns`, under `steady_timing` as a replay: on
CUDA from an idle device to an idle device; on the CPU the threads the graph's
costs were measured with, one by default, and that thread's CPU time). The
first step of every configuration is left out of the times (it compiles, or
warms up the kernels); the peak is measured on the second step, which is left
out of the times as well (the profiler slows it).
"""

from __future__ import annotations

import hashlib
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import torch

from remat_bench.core.baseline import baseline
from remat_bench.core.errors import RematBenchError, ScheduleError
from remat_bench.core.graph import Graph, Number
from remat_bench.core.provenance import measured_threads
from remat_bench.core.schedule import Schedule, load_schedule
from remat_bench.core.simulate import Simulation, simulate
from remat_bench.torch.executor import ExecutionError, Executor, State
from remat_bench.torch.importer import program_for_graph, random_nodes, spec_of
from remat_bench.torch.measure import measure_peak, no_room, run_ns, steady_timing, timing_threads
from remat_bench.torch.moves import Copies, Mover, copies_for, move_plan
from remat_bench.torch.randomness import seeded_random_ops
from remat_bench.torch.replay import ATOL, RTOL, compare, load_schedule_for
from remat_bench.torch.spec import ModelSpec, build_step, make_batch
from remat_bench.torch.zoo import TrainingStep

CONFIGURATIONS = ("schedule", "eager", "compile", "compile-budget")
MODES = ("exact", "compiled")
DEFAULT_LR = 0.01

# What `train` tells its caller as it goes (a configuration begins, a step ends, a warning before a run): one
# dict per event, ``{"kind": "configuration" | "step" | "warning", ...}``; `remat_bench.torch.isolated` streams
# them from its child process to the command line.
Events = Callable[[dict[str, Any]], None]


class TrainError(RematBenchError):
    """A training run that cannot go ahead: a schedule the simulator refuses, or a step that fails."""


def batch_for_step(spec: ModelSpec, step: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The batch of training step ``step``: step 0's is the imported one (`make_batch`), later ones are new.

    Parameters
    ----------
    spec : ModelSpec
        Shapes, dtype and ranges of the batch; its seed.
    step : int
        The step, from 0.
    device : torch.device
        Where the tensors go.

    Returns
    -------
    tuple of (torch.Tensor, torch.Tensor)
        Inputs and labels, the same for every configuration and every run with this seed.
    """
    if step == 0:
        return make_batch(spec, device)
    digest = hashlib.blake2b(f"batch:{spec.seed}:{step}".encode(), digest_size=8).digest()
    # make_batch draws from seed + 1: a spec whose seed gives the step's own generator.
    return make_batch(replace(spec, seed=int.from_bytes(digest, "little") % (2**62) - 1), device)


def accepted(graph: Graph, schedule: Schedule, simulation: Simulation | None = None) -> Simulation:
    """The simulator's account of ``schedule`` on ``graph``, which must accept it.

    Parameters
    ----------
    graph : Graph
        The graph.
    schedule : Schedule
        A schedule over it.
    simulation : Simulation or None
        Its account when the caller has it already (None: simulated here).

    Returns
    -------
    Simulation
        Valid.

    Raises
    ------
    TrainError
        A schedule the simulator refuses for ``graph``.
    """
    sim = simulation if simulation is not None else simulate(graph, schedule)
    if not sim.valid:
        raise TrainError(f"the schedule is not valid for graph '{graph.name}': {sim.violation}")
    return sim


def schedule_for_training(graph: Graph, path: str | Path, imported: bool = False) -> tuple[Schedule, Simulation]:
    """A schedule file read for ``graph``, and its simulation: what `train` takes, checked once here.

    On the graph file it was solved on, the schedule must have been written for that graph (its sha256,
    `remat_bench.torch.replay.load_schedule_for`). On a model imported anew (other costs, perhaps another
    batch: another hash), its steps must run on the graph's nodes.

    Parameters
    ----------
    graph : Graph
        A graph imported from PyTorch.
    path : str or Path
        The schedule file.
    imported : bool
        Whether ``graph`` was imported anew rather than read from the file the schedule was solved on.

    Returns
    -------
    tuple of (Schedule, Simulation)
        The schedule and the simulator's account of it (valid).

    Raises
    ------
    ScheduleError
        A file that cannot be read, one written for another graph, or (``imported``) one whose steps do not
        run on the graph's nodes.
    TrainError
        A schedule the simulator refuses for the graph it was written for.
    """
    if not imported:
        schedule = load_schedule_for(graph, path, use="train with")
        return schedule, accepted(graph, schedule)
    schedule = load_schedule(path, graph, force=True)  # refuses steps that name nodes the graph lacks
    sim = simulate(graph, schedule)
    if not sim.valid:
        raise ScheduleError(f"{path} was solved for another graph and its steps do not run on "
                            f"'{graph.name}' ({sim.violation}); pass the graph file it was solved on")
    return schedule, sim


class ScheduledStep:
    """A training step that runs ``schedule`` exactly; ``step(inputs, labels)`` fills the parameters' ``.grad``.

    Parameters
    ----------
    graph : Graph
        A graph imported from PyTorch (its model spec rebuilds the model; re-traced and checked).
    schedule : Schedule
        A schedule the simulator accepts for ``graph``.
    device : torch.device or str
        Where the step runs.
    module : TrainingStep or None
        The module whose parameters the step reads and whose ``.grad`` it fills (None: a new one from
        the spec's seed, as `build_step` builds it).
    simulation : Simulation or None
        The simulator's account of ``schedule`` when the caller has it (None: simulated here).

    Raises
    ------
    TrainError
        A schedule the simulator refuses for the graph.
    """

    def __init__(self, graph: Graph, schedule: Schedule, device: torch.device | str = "cpu",
                 module: TrainingStep | None = None, simulation: Simulation | None = None) -> None:
        sim = accepted(graph, schedule, simulation)
        self.graph = graph
        self.device = torch.device(device)
        self.program = program_for_graph(graph)
        self.spec = self.program.spec
        self.module = module if module is not None else build_step(self.spec).to(self.device)
        self.steps = [(int(k), int(v)) for k, v in zip(schedule.kinds, schedule.nodes)]
        self.simulated_peak = sim.peak
        self.plan = move_plan(graph, schedule, sim) if schedule.moves else None
        self._copies: Copies | None = None  # the device's copy engines and host buffers, kept across steps

    def parameters(self) -> Any:
        """The module's parameters, for an optimizer.

        Returns
        -------
        iterator of torch.nn.Parameter
        """
        return self.module.parameters()

    def __call__(self, inputs: torch.Tensor, labels: torch.Tensor, step: int = 0) -> torch.Tensor:
        """Run one training step on a batch; the gradients land in the parameters' ``.grad``.

        Parameters
        ----------
        inputs : torch.Tensor
            The batch, of the imported shape.
        labels : torch.Tensor
            Its labels.
        step : int
            The step number: random operators draw the masks of this step.

        Returns
        -------
        torch.Tensor
            The loss (detached).

        Raises
        ------
        TrainError
            An operator that fails on the device.
        """
        params = dict(self.module.named_parameters())
        state = State(self.spec, self.device, {k: p.detach() for k, p in params.items()},
                      dict(self.module.named_buffers()), inputs, labels)
        moves = None
        if self.plan is not None:
            self._copies = self._copies or copies_for(self.device)
            moves = Mover(self.plan, self._copies, self.device, state.tensors())
        ex = Executor(self.program, state, step=step, moves=moves)
        try:
            ex.run(self.steps)
            loss, grads = ex.results()
        except ExecutionError as exc:
            raise TrainError(f"training with the schedule on '{self.graph.name}': {exc}") from None
        for name, p in params.items():
            g = grads.get(name)
            if g is None:
                continue
            g = g.detach()
            if g.data_ptr() == p.data_ptr() or g._base is not None:
                g = g.clone()  # a gradient that is a view keeps the whole of its base alive
            p.grad = g if p.grad is None else p.grad + g
        ex.values.clear()
        return loss.detach()


@dataclass
class Configuration:
    """What one configuration measured over the steps of a `train` run."""

    name: str
    losses: list[float] = field(default_factory=list)
    step_times_s: list[float | None] = field(default_factory=list)  # None: the profiled step
    measured_peak: int | None = None
    note: str = ""
    parameters: dict[str, torch.Tensor] = field(default_factory=dict, repr=False)
    saved_bytes: int | None = None  # compiled configurations: the activations the compiled forward saves
    partition: list[str] = field(default_factory=list)  # the compiled schedule: how its partition differs

    @property
    def median_step_time_s(self) -> float | None:
        """Median of the timed steps (the first two are left out: warm-up or compilation, and the profiled one)."""
        timed = [t for k, t in enumerate(self.step_times_s) if k >= 2 and t is not None]
        return statistics.median(timed) if timed else None

    def to_json(self) -> dict[str, Any]:
        """The configuration as ``remat-bench train --json`` prints it.

        Returns
        -------
        dict
        """
        return {"name": self.name, "losses": self.losses, "measured_peak": self.measured_peak,
                "median_step_time_s": self.median_step_time_s, "step_times_s": self.step_times_s,
                "saved_bytes": self.saved_bytes, "partition": self.partition,
                "note": self.note}


@dataclass
class TrainReport:
    """The result of `train`: one `Configuration` per configuration, and the simulator's numbers."""

    graph: str
    device: str
    steps: int
    mode: str
    budget: int | None
    budget_fraction: float | None
    simulated_peak: int
    fixed_bytes: int
    configurations: list[Configuration]
    as_compiled_peak: int | None = None  # compiled mode: the simulated peak of the plan as compiled
    max_loss_diff: float | None = None  # schedule against eager: the largest |difference| of a step's loss
    max_param_diff: float | None = None  # after the last step: the largest |schedule - eager| of a parameter
    params_match: bool | None = None  # every parameter within `tolerance` of eager's
    # torch.compile's own configuration against eager (dropout-free models): what inductor's fusions do to
    # the same training, the scale a compiled schedule's differences compare with.
    compile_max_loss_diff: float | None = None
    compile_max_param_diff: float | None = None

    @property
    def tolerance(self) -> tuple[float, float]:
        """(rtol, atol) the parameters are compared with: replay's in exact mode, inductor's fusions'
        (`remat_bench.torch.compiled.FUSION_RTOL`, ``FUSION_ATOL``) in compiled mode."""
        if self.mode == "compiled":
            from remat_bench.torch.compiled import FUSION_ATOL, FUSION_RTOL

            return FUSION_RTOL, FUSION_ATOL
        return RTOL, ATOL

    def to_json(self) -> dict[str, Any]:
        """The report as ``remat-bench train --json`` prints it.

        Returns
        -------
        dict
        """
        return {"graph": self.graph, "device": self.device, "steps": self.steps, "mode": self.mode,
                "budget": self.budget, "budget_fraction": self.budget_fraction,
                "simulated_peak": self.simulated_peak, "as_compiled_peak": self.as_compiled_peak,
                "fixed_bytes": self.fixed_bytes,
                "max_loss_diff": self.max_loss_diff, "max_param_diff": self.max_param_diff,
                "params_match": self.params_match, "tolerance": dict(zip(("rtol", "atol"), self.tolerance)),
                "compile_max_loss_diff": self.compile_max_loss_diff,
                "compile_max_param_diff": self.compile_max_param_diff,
                "configurations": [c.to_json() for c in self.configurations]}


StepFn = Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor]


def _eager_step(module: TrainingStep, seed: int, device: torch.device) -> StepFn:
    def step(inputs: torch.Tensor, labels: torch.Tensor, k: int) -> torch.Tensor:
        with seeded_random_ops(seed, k, device):
            loss = module(inputs, labels)
            loss.backward()
        return loss.detach()

    return step


def _run(config: Configuration, step_fn: StepFn, module: TrainingStep, spec: ModelSpec, steps: int,
         device: torch.device, lr: float, fixed_bytes: int, on_event: Events) -> None:
    optimizer = torch.optim.SGD(module.parameters(), lr=lr)
    for k in range(steps):
        inputs, labels = batch_for_step(spec, k, device)
        optimizer.zero_grad(set_to_none=True)
        box: list[torch.Tensor] = []
        run = partial(_into, box, step_fn, inputs, labels, k)
        elapsed: float | None = None
        if k == 1:  # the profiled step: its peak; left out of the times
            config.measured_peak = fixed_bytes + measure_peak(device, run)
        else:
            elapsed = run_ns(device, run) / 1e9
        loss = float(box[0])
        if not math.isfinite(loss):
            raise TrainError(f"training diverged: {config.name}'s loss is {loss} at step {k + 1} with the learning "
                             f"rate {lr:g}; give a smaller --lr")
        optimizer.step()
        config.losses.append(loss)
        config.step_times_s.append(elapsed)
        on_event({"kind": "step", "configuration": config.name, "step": k + 1, "steps": steps, "loss": loss,
                  "time_s": elapsed})
    optimizer.zero_grad(set_to_none=True)
    config.parameters = {k: p.detach().clone() for k, p in module.named_parameters()}


def _into(box: list[torch.Tensor], step_fn: StepFn, inputs: torch.Tensor, labels: torch.Tensor, k: int) -> None:
    box.append(step_fn(inputs, labels, k))


def train(graph: Graph, schedule: Schedule, steps: int = 20, *, mode: str = "exact",
          device: torch.device | str = "cpu", lr: float = DEFAULT_LR,
          configurations: Sequence[str] = CONFIGURATIONS, backend: str = "inductor",
          on_event: Events | None = None, simulation: Simulation | None = None) -> TrainReport:
    """Train the graph's model for ``steps`` steps with the schedule and beside it (module docstring).

    Parameters
    ----------
    graph : Graph
        A graph imported from PyTorch.
    schedule : Schedule
        A schedule the simulator accepts for it (its budget, if any, sets ``compile-budget``'s fraction).
    steps : int
        Optimizer steps per configuration, at least 2 (the second is the profiled one).
    mode : str
        ``exact`` (`ScheduledStep`) or ``compiled`` (the plan under ``torch.compile``).
    device : torch.device or str
        Where everything runs.
    lr : float
        The SGD learning rate.
    configurations : Sequence of str
        Which of `CONFIGURATIONS` to run (``schedule`` always runs).
    backend : str
        The compiled schedule's backend (``mode="compiled"``): ``inductor``, or ``aot_eager`` (the same
        partition, graphs run uncompiled: a plan checked in seconds).
    on_event : callable or None
        Told of each configuration as it begins, each step as it ends (its loss and time) and, before a
        compiled plan runs, that it is over its budget as compiled (`Events`).
    simulation : Simulation or None
        The simulator's account of ``schedule`` when the caller has it (`schedule_for_training`); None:
        simulated here.

    Returns
    -------
    TrainReport

    Raises
    ------
    TrainError
        Fewer than 2 steps, an unknown mode or configuration (or one named twice), a learning rate that is
        not a positive number the parameters can hold, a schedule the simulator refuses (or, in compiled
        mode, one that copies values to the host), a run that would not fit in the device's free memory, or
        a loss that is no longer finite (the training diverged).
    """
    _check_options(steps, mode, configurations, lr)
    tell: Events = on_event if on_event is not None else (lambda event: None)
    dev = torch.device(device)
    sim = accepted(graph, schedule, simulation)
    spec = spec_of(graph)
    if spec is None:
        raise TrainError(f"graph '{graph.name}' was not imported from PyTorch: there is no model to train")
    if mode == "compiled" and schedule.moves:
        raise TrainError("the schedule copies values to the host and back, which torch.compile's recompute "
                         "decisions cannot say; train it with --mode exact")
    base_peak = baseline(graph).peak
    others = [c for c in configurations if c != "schedule"]
    _check_room(graph, dev, sim.peak, base_peak, others)
    fraction = (float(schedule.budget) / float(base_peak)) if schedule.budget is not None else None
    setting = _Setting(graph, schedule, sim, spec, dev, backend, fraction, bool(random_nodes(graph)), tell)
    fixed_bytes = 0
    as_compiled_peak: int | None = None
    results: list[Configuration] = []
    chosen = ["schedule", *others]
    with steady_timing(dev, timing_threads(dev, measured_threads(graph.metadata))):
        for index, name in enumerate(chosen):
            compiled = name != "eager" and not (name == "schedule" and mode == "exact")
            if compiled:
                # Each configuration compiles a new module: without a reset, dynamo counts their compilations
                # against one recompile limit and, past it, runs eager PyTorch (`CompiledStep` refuses that).
                torch._dynamo.reset()
            module = build_step(spec).to(dev)
            if not fixed_bytes:  # parameters, buffers and the batch, as the replay measures them
                fixed_bytes = State(spec, dev, dict(module.named_parameters()), dict(module.named_buffers()),
                                    *batch_for_step(spec, 0, dev)).nbytes
            config = Configuration(name if not (name == "schedule" and mode == "compiled") else "schedule-compiled")
            step_fn: StepFn | None
            if config.name == "schedule-compiled":
                step_fn, as_compiled_peak = _compiled_schedule(setting, module, config)
            else:
                step_fn = _step(setting, name, module, config)
            if step_fn is None:  # not run; its note says why
                results.append(config)
                continue
            tell({"kind": "configuration", "configuration": config.name, "index": index + 1, "of": len(chosen)})
            _run(config, step_fn, module, spec, steps, dev, lr, fixed_bytes, tell)
            if compiled:
                _record_partition(config, step_fn)
            results.append(config)
    report = TrainReport(graph.name, str(dev), steps, mode, _whole(schedule.budget), fraction,
                         int(sim.peak), fixed_bytes, results, as_compiled_peak)
    _compare_with_eager(report, setting.random)
    return report


def _check_options(steps: int, mode: str, configurations: Sequence[str], lr: float) -> None:
    """Refuse, in one sentence, what `train` cannot run: its Raises, but for the schedule and the memory."""
    if steps < 2:
        raise TrainError(f"train needs at least 2 steps (the second one's peak is measured), not {steps}")
    if mode not in MODES:
        raise TrainError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    fault = configuration_fault(configurations)
    if fault is not None and fault[0] == "unknown":
        raise TrainError(f"unknown configuration {fault[1]!r}; choose from {', '.join(CONFIGURATIONS)}")
    if fault is not None:
        raise TrainError(f"configuration {fault[1]!r} is named twice; name each once")
    # SGD scales each gradient by the rate in the parameters' dtype (float32 here): one it cannot hold ends
    # the step with an overflow, a negative or zero one trains nothing.
    if not (math.isfinite(lr) and 0 < lr <= torch.finfo(torch.float32).max):
        raise TrainError(f"the learning rate must be a positive number below {torch.finfo(torch.float32).max:.3g}, "
                         f"not {lr:g}")


def configuration_fault(configurations: Sequence[str]) -> tuple[str, str] | None:
    """What is wrong with a list of configurations, first an unknown one, then one named twice.

    Parameters
    ----------
    configurations : Sequence of str
        Names of configurations, as `train` takes them.

    Returns
    -------
    tuple of (str, str) or None
        ``("unknown", name)`` for the first name not in `CONFIGURATIONS`, else ``("twice", name)`` for the
        first one named a second time; None when every name is known and named once.
    """
    unknown = [c for c in configurations if c not in CONFIGURATIONS]
    if unknown:
        return "unknown", unknown[0]
    twice = [c for i, c in enumerate(configurations) if c in configurations[:i]]
    if twice:
        return "twice", twice[0]
    return None


def _check_room(graph: Graph, device: torch.device, peak: Number, base_peak: Number, others: list[str]) -> None:
    """Refuse a run whose largest peak (the schedule's, or the baseline's when other configurations run) would
    not fit in the device's free memory: checked before anything is built, as an allocator failure half-way
    through says less, and later."""
    need = max(int(peak), int(base_peak) if others else 0)
    short = no_room(device, need)
    if short:
        raise TrainError(f"training '{graph.name}' needs {short}"
                         + (" (the other configurations train without the schedule, at the baseline's peak)"
                            if others and base_peak > peak else "")
                         + "; train a smaller batch or model")


@dataclass(frozen=True)
class _Setting:
    """What the configurations of one `train` run share."""

    graph: Graph
    schedule: Schedule
    simulation: Simulation  # the schedule's, valid
    spec: ModelSpec
    device: torch.device
    backend: str  # the compiled schedule's
    fraction: float | None  # the schedule's budget over the baseline's peak, for compile-budget
    random: bool  # the model has random operators (dropout)
    tell: Events


def _step(setting: _Setting, name: str, module: TrainingStep, config: Configuration) -> StepFn | None:
    """The step of configuration ``name`` (all but the compiled schedule's) on ``module``, its note set in
    ``config``; None for compile-budget without a budget (not run)."""
    # Inductor's own generator draws its dropout masks (module docstring of remat_bench.torch.compiled).
    own_masks = ("dropout masks from inductor's generator: losses comparable in distribution only"
                 if setting.random else "")
    if name == "schedule":
        return ScheduledStep(setting.graph, setting.schedule, setting.device, module, setting.simulation)
    if name == "eager":
        return _eager_step(module, setting.spec.seed, setting.device)
    if name == "compile":
        from remat_bench.torch.compiled import compile_with_memory_budget

        config.note = own_masks
        return compile_with_memory_budget(module, None)
    if setting.fraction is None:
        config.note = "not run: the schedule has no budget"
        return None
    from remat_bench.torch.compiled import compile_with_memory_budget

    config.note = "; ".join(filter(None, [f"activation_memory_budget={setting.fraction:.3f}", own_masks]))
    return compile_with_memory_budget(module, setting.fraction)


def _compiled_schedule(setting: _Setting, module: TrainingStep, config: Configuration) -> tuple[StepFn, int]:
    """The schedule's plan compiled on ``module`` (``mode="compiled"``), its note set in ``config``, and the
    simulated peak of the plan as compiled; a warning told when that peak is above the schedule's budget."""
    from remat_bench.torch.compiled import compile_training_step, compiled_plan

    graph, schedule = setting.graph, setting.schedule
    plan = compiled_plan(graph, schedule, setting.simulation)
    as_compiled_peak = int(plan.as_compiled_peak)
    step_fn = compile_training_step(module, plan, backend=setting.backend)
    config.note = ("the schedule's plan under torch.compile, exactly" if plan.exact else
                   "the schedule's plan under torch.compile, as compiled: " + "; ".join(plan.differences))
    if schedule.budget is not None and as_compiled_peak > schedule.budget:
        over = (f"as compiled, the plan's simulated peak {as_compiled_peak:,} is above the budget "
                f"{int(schedule.budget):,} (torch.compile recomputes a value once at most and holds "
                "it until its last use; chen's and torch-budget's schedules compile as they are)")
        config.note = over + "; " + config.note
        setting.tell({"kind": "warning", "text": over + "; training it anyway"})
    return step_fn, as_compiled_peak


def _compare_with_eager(report: TrainReport, random: bool) -> None:
    """The schedule's losses and final parameters against eager training's, and torch.compile's (without
    random operators, whose masks are inductor's there), into ``report``."""
    by_name = {c.name: c for c in report.configurations}
    mine = report.configurations[0]
    eager = by_name.get("eager")
    if eager is None or not eager.losses:
        return
    report.max_loss_diff = max(abs(a - b) for a, b in zip(mine.losses, eager.losses))
    same = compare(dict(mine.parameters), eager.parameters, *report.tolerance)
    report.max_param_diff, report.params_match = same["max_abs"], same["match"]
    plain = by_name.get("compile")
    if plain is not None and plain.losses and not random:  # with dropout its masks are inductor's
        report.compile_max_loss_diff = max(abs(a - b) for a, b in zip(plain.losses, eager.losses))
        report.compile_max_param_diff = compare(dict(plain.parameters), eager.parameters)["max_abs"]


def _record_partition(config: Configuration, step_fn: StepFn) -> None:
    """What a compiled step's forward saved and how its partition differs from its plan, into ``config``."""
    from remat_bench.torch.compiled import CompiledStep

    if isinstance(step_fn, CompiledStep):
        config.saved_bytes = step_fn.saved_bytes
        config.partition = list(step_fn.check.mismatches) if step_fn.check is not None else []


def _whole(amount: Any) -> int | None:
    return None if amount is None else int(amount)
