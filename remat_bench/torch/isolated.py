"""The user's model code run in a child process: tracing, replay and training, each stopped at a time limit.

Building a model runs its factory and its forward pass, code of the user's: one that never returns,
exits (with any status, 0 included) or kills its interpreter must end in one sentence, never hang the
command or end it silently. The command line, sweeps and `remat-bench train` therefore trace
(`trace_model`), replay (`replay_isolated`) and train (`train_isolated`) in a spawned child process
(`remat_bench.toolkit.child.run_in_child`), stopped at its time limit or at Ctrl-C. A replay and a
training run stream their progress (`Events`) back as they go: the caller shows it, keeps what was
measured before a stop, and is told in one sentence when the run, at the pace of its first timed steps,
would outlast its time limit, so that a billion steps are refused within seconds rather than running
until killed.

Importing this module imports no PyTorch: the child does.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from remat_bench.core.control import interrupted
from remat_bench.core.errors import GraphError, RematBenchError
from remat_bench.core.graph import Graph
from remat_bench.core.outcome import Termination
from remat_bench.core.provenance import CostWarning
from remat_bench.core.schedule import Schedule

# Seconds a model may take to be built and traced: far above what the zoo's largest models take
# (docs/benchmarks.md, "Figures that used to live in the code"), so only a model that hangs reaches it.
TRACE_TIME_LIMIT = 600.0
# The share of a torch graph's time limit its costs may take to measure (`trace_model`).
MEASURE_SHARE = 0.8
# Seconds a replay or a training run may take in all (`remat-bench replay/train --time-limit`): ResNet-50 at
# batch 32, four configurations of 20 steps each, takes a few minutes on 2 cores.
RUN_TIME_LIMIT = 1800.0
# A run whose first timed steps say it would take more than its time limit is stopped there; the pace is
# read once this many seconds have passed or the run has timed this many steps (whichever comes first).
PACE_SECONDS = 5.0
# The steps of a training configuration that set no pace: the first warms up (or compiles), the second is profiled.
WARM_STEPS = 2

Events = Callable[[dict[str, Any]], None]


class RunStopped(RematBenchError):
    """A replay or training run stopped before its end: its time limit, its pace, or Ctrl-C (``termination``)."""

    def __init__(self, message: str, termination: Termination) -> None:
        super().__init__(message)
        self.termination = termination
        self.exit_code = 130 if termination is Termination.INTERRUPTED else 1


# ---------------------------------------------------------------------- tracing


def trace_model(options: Mapping[str, Any], time_limit: float = TRACE_TIME_LIMIT,
                search: Sequence[str] = ()) -> Graph:
    """`import_model(**options)` in a child process, stopped after ``time_limit`` seconds.

    Building and tracing a model runs its factory and its forward pass, the user's code: one that never
    returns is stopped, and one that exits (``sys.exit``) or raises anything is one sentence, a
    `GraphError`, instead of ending or hanging this process. ``search`` folders come first on the
    child's import path. Where no child can start (a script read from standard input), the call runs
    here, without the time limit. Measuring the step's costs stops at `MEASURE_SHARE` of the limit, and
    the graph then has counted costs, said in a `CostWarning` re-raised here.

    Parameters
    ----------
    options : Mapping
        The keywords of `remat_bench.torch.importer.import_model`.
    time_limit : float
        The longest the child may take, in s.
    search : Sequence of str
        Folders put first on the import path, where the model's factory may live.

    Returns
    -------
    Graph

    Raises
    ------
    GraphError
        A model that could not be built or traced, was stopped at the time limit, or ended the child.
    """
    from remat_bench.core.graph_io import graph_from_dict
    from remat_bench.toolkit.child import can_spawn, run_in_child
    from remat_bench.torch.importer import import_model_reporting

    model = options.get("model", "?")
    end = time.monotonic() + time_limit
    # Measuring a large step's costs can take most of the limit: it stops in time to answer with counted costs.
    options = {"measure_deadline": time.time() + MEASURE_SHARE * time_limit, **options}
    outcome = (run_in_child(import_model_reporting, (dict(options), list(search)), lambda: time.monotonic() > end)
               if can_spawn() else None)
    if outcome is None or outcome.termination is Termination.NOT_APPLICABLE:
        kind, payload = import_model_reporting(dict(options), list(search))
    elif outcome.returned:
        kind, payload = outcome.value
    elif outcome.termination in (Termination.TIME_LIMIT, Termination.INTERRUPTED):
        raise GraphError(f"model '{model}' was not built and traced within {time_limit:g} s, so it was stopped "
                         "(does its factory or forward pass ever return?); give it more time with --time-limit, "
                         "or time_limit in a torch entry")
    else:
        raise GraphError(f"model '{model}' could not be traced: {outcome.message} (did its code end the process?)")
    if kind != "graph":
        raise GraphError(payload)
    for text in payload["warnings"]:  # costs not measured as asked: the caller says it its own way
        warnings.warn(text, CostWarning, stacklevel=2)
    return graph_from_dict(payload["graph"], source=str(options.get("name") or model))


# ---------------------------------------------------------------------- replay and training


@dataclass
class Pace:
    """How far a streamed run has come: the work it has in all, and the seconds its timed units took.

    A unit is a training step or a replay's timed pair. ``total`` counts every unit of the run;
    ``done`` those ended; ``times`` the seconds of those that were timed (a warm-up or profiled unit
    has none).
    """

    total: int
    done: int = 0
    times: list[float] = field(default_factory=list)

    def seconds_left(self) -> float | None:
        """The seconds the units not yet run would take at the median pace so far; None before any was timed.

        Returns
        -------
        float or None
        """
        if not self.times:
            return None
        ordered = sorted(self.times)
        return (self.total - self.done) * ordered[len(ordered) // 2]


def _duration_text(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} minutes"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.0f} hours"
    if seconds < 2 * 365 * 86400:
        return f"{seconds / 86400:.0f} days"
    return f"{seconds / (365 * 86400):.3g} years"


def _stream(fn: Callable[..., Any], args: tuple[Any, ...], what: str, time_limit: float, pace: Pace,
            on_event: Events | None, unit: str, fewer: str) -> Any:
    """``fn(*args, send=...)`` in a child process; its events passed on; stopped at the limit, the pace or Ctrl-C.

    ``fn`` returns ``("done", value)``, or ``("refused", message, exit status)`` for a `RematBenchError`
    it met (its sentence kept whole). Before the child's first event (its model built) it has at most
    `TRACE_TIME_LIMIT` s, as an import has.
    """
    from remat_bench.toolkit.child import can_spawn, run_in_child

    start = time.monotonic()
    end = start + time_limit
    built = [False]
    why: list[str] = []

    def take(event: dict[str, Any]) -> None:
        built[0] = True
        if event.get("kind") in ("step", "pair"):
            pace.done += 1
            # A configuration's first two steps warm up (or compile) and are profiled: they set no pace.
            steady = event.get("kind") == "pair" or event.get("step", 0) > WARM_STEPS
            if event.get("time_s") is not None and steady:
                pace.times.append(float(event["time_s"]))
        if on_event is not None:
            on_event(event)

    def stop() -> bool:
        now = time.monotonic()
        if interrupted():
            return True
        if not built[0] and now - start > min(time_limit, TRACE_TIME_LIMIT):
            why.append(f"{what} stopped: the model was not built within {min(time_limit, TRACE_TIME_LIMIT):g} s "
                       "(does its factory or forward pass ever return?)")
            return True
        if now > end:
            why.append(f"{what} did not end within its time limit of {time_limit:g} s and was stopped after "
                       f"{pace.done:,} of {pace.total:,} {unit}; give it more time with --time-limit")
            return True
        left = pace.seconds_left()
        if left is not None and (now - start > PACE_SECONDS or len(pace.times) >= 3) and now + left > end:
            median = sorted(pace.times)[len(pace.times) // 2]
            why.append(f"{what} stopped: at {median:.3g} s per {unit[:-1]}, its {pace.total:,} {unit} would take "
                       f"about {_duration_text(now - start + left)}, beyond its time limit of {time_limit:g} s; "
                       f"{fewer}, or give it more time with --time-limit")
            return True
        return False

    if not can_spawn():  # a script on standard input: no child can start; run here, without the limit
        answer = fn(*args, send=take)
    else:
        try:
            outcome = run_in_child(fn, args, stop, stream_to="send", on_message=take, daemon=False)
        except KeyboardInterrupt:  # a second Ctrl-C while the child is stopped: the child is gone
            raise RunStopped(f"{what} was interrupted after {pace.done:,} of {pace.total:,} {unit}",
                             Termination.INTERRUPTED) from None
        if outcome.termination in (Termination.TIME_LIMIT, Termination.INTERRUPTED):
            if outcome.termination is Termination.INTERRUPTED:
                raise RunStopped(f"{what} was interrupted after {pace.done:,} of {pace.total:,} {unit}",
                                 Termination.INTERRUPTED)
            raise RunStopped(why[0] if why else f"{what} was stopped", Termination.TIME_LIMIT)
        if not outcome.returned:
            cause = ("its process ended without an answer (killed, perhaps for want of memory, or the model's "
                     "code ended it)" if outcome.died else f"it failed: {outcome.message}")
            raise RematBenchError(f"{what}: {cause}")
        answer = outcome.value
    if answer[0] == "refused":
        error = RematBenchError(answer[1])
        error.exit_code = answer[2]
        raise error
    return answer[1]


def _answer(call: Callable[[], Any]) -> tuple[Any, ...]:
    """Run ``call`` in the child: its value, or a `RematBenchError`'s sentence and exit status kept whole."""
    import torch

    try:
        return ("done", call())
    except RematBenchError as exc:
        return ("refused", str(exc), exc.exit_code)
    except torch.OutOfMemoryError:
        return ("refused", "the run ran out of memory on its device; give it a smaller batch or model", 1)
    except SystemExit as exc:  # the model's code ended the child: said, not obeyed
        return ("refused", f"the model's code called sys.exit({exc.code!r}) while it was built or run", 2)


def _train_child(graph: Graph, schedule: Schedule, steps: int, options: dict[str, Any], send: Events) -> Any:
    from remat_bench.torch.train import train

    def run() -> Any:
        report = train(graph, schedule, steps, on_event=send, **options)
        # The parameters were compared in the child; only the figures cross back.
        report.configurations = [replace(c, parameters={}) for c in report.configurations]
        return report

    return _answer(run)


def _replay_child(graph: Graph, schedule: Schedule, options: dict[str, Any], send: Events) -> Any:
    from remat_bench.torch.replay import replay

    return _answer(lambda: replay(graph, schedule, on_event=send, **options))


def train_isolated(graph: Graph, schedule: Schedule, steps: int, *, configurations: Sequence[str],
                   time_limit: float = RUN_TIME_LIMIT, on_event: Events | None = None, **options: Any) -> Any:
    """`remat_bench.torch.train.train` in a child process, its events streamed to ``on_event``.

    Parameters
    ----------
    graph : Graph
        A graph imported from PyTorch.
    schedule : Schedule
        A schedule the simulator accepts for it.
    steps : int
        Optimizer steps of each configuration.
    configurations : Sequence of str
        As `train` takes them (the schedule runs first, always).
    time_limit : float
        Seconds for the whole run: building, every configuration and every step.
    on_event : callable or None
        Told of every event `train` sends (a configuration begins, a step ends, a warning).
    **options
        `train`'s other keywords (mode, device, lr, backend, simulation).

    Returns
    -------
    TrainReport
        Without the trained parameters (compared in the child).

    Raises
    ------
    RunStopped
        Stopped at the time limit, because its pace would outlast it, or by Ctrl-C.
    RematBenchError
        What `train` refused, in its sentence; a child that failed or ended without an answer.
    """
    runs = len({"schedule", *configurations})
    pace = Pace(total=steps * runs)
    return _stream(_train_child, (graph, schedule, steps, {"configurations": list(configurations), **options}),
                   "training", time_limit, pace, on_event, "steps",
                   "give fewer --steps or --configurations")


def replay_isolated(graph: Graph, schedule: Schedule, *, repeats: int, time_limit: float = RUN_TIME_LIMIT,
                    on_event: Events | None = None, **options: Any) -> Any:
    """`remat_bench.torch.replay.replay` in a child process, its events streamed to ``on_event``.

    Parameters
    ----------
    graph : Graph
    schedule : Schedule
        A schedule the simulator accepts for ``graph``.
    repeats : int
        Timed pairs (baseline, schedule).
    time_limit : float
        Seconds for the whole replay, the model's build and the profiled runs included.
    on_event : callable or None
        Told of every event `replay` sends (the peak measured, each pair timed).
    **options
        `replay`'s other keywords (device, with_baseline, timing_run).

    Returns
    -------
    ReplayResult

    Raises
    ------
    RunStopped
        Stopped at the time limit, because its pace would outlast it, or by Ctrl-C.
    RematBenchError
        What `replay` refused, in its sentence; a child that failed or ended without an answer.
    """
    pace = Pace(total=repeats)
    return _stream(_replay_child, (graph, schedule, {"repeats": repeats, **options}), "the replay", time_limit,
                   pace, on_event, "pairs", "give fewer --repeats")

