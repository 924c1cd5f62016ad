"""What every method is and returns (docs/design.md section 6).

A method is a small class: a ``name``, a one-line ``description``, declared
``params`` (name, type, default, help), the Python modules it ``requires``,
and one ``solve``. It receives the graph, the budget (absolute units, or None
for the lowest peak it can reach), a time limit and its parameters, and
returns a `MethodResult`. It never reads files, parses arguments or prints;
the pipeline (`remat_bench.app.pipeline`) cleans up and simulates what it returns.
"""

from __future__ import annotations

import difflib
import importlib.util
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar, TypeVar

from remat_bench.core.errors import MethodError
from remat_bench.core.graph import Graph, Number
from remat_bench.core.schedule import Schedule


class Status(StrEnum):
    """How a run ended. The first six come from methods; the rest from the pipeline and sweeps."""

    OPTIMAL = "optimal"  # proven best in the method's own schedule space
    FEASIBLE = "feasible"  # a schedule within budget, not proven best
    INFEASIBLE = "infeasible"  # proven: no schedule in the method's space fits
    NO_SOLUTION = "no_solution"  # a limit was reached (or a heuristic gave up) with none found
    UNSUPPORTED = "unsupported"  # the method does not apply to this graph
    ERROR = "error"  # the method failed; the message says how
    OVER_BUDGET = "over_budget"  # the simulator measured a peak above the budget
    TIMEOUT = "timeout"  # killed past the hard time limit (sweeps)
    OOM = "oom"  # killed past the memory cap (sweeps)

    def __str__(self) -> str:
        return self.value

    @property
    def found_schedule(self) -> bool:
        return self in (Status.OPTIMAL, Status.FEASIBLE)


@dataclass(frozen=True)
class Param:
    """A declared method parameter: its type, default, meaning, and the values it accepts.

    ``minimum``/``maximum`` bound numbers (inclusive); ``check`` is called with the
    parsed value and raises MethodError for a value of the right type that cannot
    work (a solver backend that is not installed); ``aliases`` are older names that
    still parse. Every check runs before a method starts, so a bad value is exit 2.
    """

    name: str
    type: type
    default: Any
    help: str
    choices: tuple[Any, ...] | None = None
    minimum: float | None = None
    maximum: float | None = None
    check: Callable[[Any], Any] | None = None
    aliases: tuple[str, ...] = ()

    def parse(self, text: Any, method: str) -> Any:
        """Convert ``text`` (a string from the command line, or a YAML value) to this type."""
        try:
            if self.type is bool and isinstance(text, str):
                low = text.strip().lower()
                if low in ("1", "true", "yes", "on"):
                    value: Any = True
                elif low in ("0", "false", "no", "off"):
                    value = False
                else:
                    raise ValueError
            elif self.type is int and isinstance(text, float) and not text.is_integer():
                raise ValueError
            elif text is None:
                value = None
            else:
                value = self.type(text)
        except (TypeError, ValueError, OverflowError):
            raise MethodError(
                f"parameter '{self.name}' of method '{method}' must be {self.type.__name__}, got {text!r}"
            ) from None
        if self.choices is not None and value not in self.choices:
            options = ", ".join(map(str, self.choices))
            raise MethodError(
                f"parameter '{self.name}' of method '{method}' must be one of {options}, got {text!r}"
            )
        if isinstance(value, float) and not math.isfinite(value):
            raise MethodError(f"parameter '{self.name}' of method '{method}' must be a finite number, got {text!r}")
        if isinstance(value, int | float) and not isinstance(value, bool):
            if self.minimum is not None and value < self.minimum:
                raise MethodError(f"parameter '{self.name}' of method '{method}' must be at least "
                                  f"{self.minimum:g}{self._range_hint()}, got {text!r}")
            if self.maximum is not None and value > self.maximum:
                raise MethodError(f"parameter '{self.name}' of method '{method}' must be at most "
                                  f"{self.maximum:g}{self._range_hint()}, got {text!r}")
        if self.check is not None and value is not None:
            self.check(value)
        return value

    def _range_hint(self) -> str:
        return f" ({self.help})" if len(self.help) < 60 else ""

    @property
    def accepts(self) -> str:
        """The accepted values in a few words, for `remat-bench methods`."""
        def num(x: float) -> str:
            return f"{int(x):,}" if float(x).is_integer() else f"{x:g}"

        if self.choices is not None:
            return " | ".join(map(str, self.choices))
        if self.minimum is not None and self.maximum is not None:
            return f"{num(self.minimum)} to {num(self.maximum)}"
        if self.minimum is not None:
            return f">= {num(self.minimum)}"
        if self.maximum is not None:
            return f"<= {num(self.maximum)}"
        return self.type.__name__


@dataclass
class MethodResult:
    """What a method returns; the pipeline scores ``schedule`` with the simulator."""

    status: Status
    schedule: Schedule | None = None
    objective: Number | None = None  # the method's own duration, before clean-up
    lower_bound: Number | None = None  # valid for the method's own schedule space
    solve_time_s: float = 0.0
    stats: dict[str, Any] = field(default_factory=dict)
    message: str = ""


class Method:
    """Base class of every method. Subclasses set the class attributes and implement `solve`."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    params: ClassVar[tuple[Param, ...]] = ()
    requires: ClassVar[tuple[str, ...]] = ()  # importable module names
    install_hint: ClassVar[str] = ""  # how to get the requirements, e.g. "pip install remat-bench[torch]"
    needs_backward: ClassVar[bool] = False  # works on the forward graph of a training graph
    # The schedules the method searches: its "optimal" and "infeasible" hold there only.
    search_space: ClassVar[str] = "its own schedule space"

    @classmethod
    def space(cls, params: dict[str, Any]) -> str:
        """The schedule space a proof of this method (optimal, infeasible) holds in, for ``params``."""
        return cls.search_space

    @classmethod
    def available(cls) -> tuple[bool, str]:
        """Whether the requirements import here, and if not, one sentence saying how to fix it."""
        missing = [mod for mod in cls.requires if importlib.util.find_spec(mod) is None]
        if not missing:
            return True, ""
        hint = cls.install_hint or f"pip install {' '.join(missing)}"
        return False, f"method '{cls.name}' needs {', '.join(missing)}: install it with `{hint}`"

    @classmethod
    def parse_params(cls, given: dict[str, Any]) -> dict[str, Any]:
        """Defaults overlaid with ``given``, each converted to its declared type."""
        declared = {p.name: p for p in cls.params}
        aliases = {alias: p.name for p in cls.params for alias in p.aliases}
        out = {p.name: p.default for p in cls.params}
        seen: dict[str, str] = {}
        for key, value in given.items():
            name = aliases.get(key, key)
            if name not in declared:
                known = ", ".join(declared) or "none"
                close = difflib.get_close_matches(key, [*declared, *aliases], n=1)
                hint = f"; did you mean '{close[0]}'?" if close else ""
                raise MethodError(
                    f"method '{cls.name}' has no parameter '{key}' (its parameters: {known}){hint}"
                )
            if name in seen:
                raise MethodError(f"method '{cls.name}': '{key}' and '{seen[name]}' name the same parameter; "
                                  "give one")
            seen[name] = key
            out[name] = declared[name].parse(value, cls.name)
        return out

    def solve(self, graph: Graph, budget: Number | None, time_limit: float | None,
              **params: Any) -> MethodResult:
        raise NotImplementedError


_INTERRUPTED = threading.Event()


def interrupted() -> bool:
    """Whether the user pressed Ctrl-C during this solve: methods then return their best so far."""
    return _INTERRUPTED.is_set()


def reset_interrupt() -> None:
    _INTERRUPTED.clear()


def request_interrupt() -> None:
    """Ask the running method to stop and return its best so far (the CLI's first Ctrl-C)."""
    _INTERRUPTED.set()


class Deadline:
    """A wall-clock deadline that methods poll (``None`` means no limit); Ctrl-C ends it at once."""

    def __init__(self, seconds: float | None) -> None:
        self.start = time.monotonic()
        self.seconds = seconds

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def remaining(self) -> float | None:
        if _INTERRUPTED.is_set():
            return 0.0
        if self.seconds is None:
            return None
        return max(0.0, self.seconds - self.elapsed())

    def expired(self) -> bool:
        return _INTERRUPTED.is_set() or (self.seconds is not None and self.elapsed() >= self.seconds)


T = TypeVar("T")


def run_interruptibly(fn: Callable[[], T], stop: Callable[[], None]) -> T:
    """Run a native solver call so that Ctrl-C stops the search instead of the program.

    The call runs in a worker thread while the main thread waits (Python handles
    signals only there); on Ctrl-C the main thread asks the solver to stop
    (``stop``), marks the solve interrupted, and keeps waiting for the solver to
    return its best solution so far. Off the main thread, the call runs as is.
    """
    if threading.current_thread() is not threading.main_thread():
        return fn()
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # handed back to the caller below
            box["error"] = exc

    worker = threading.Thread(target=target, name="remat-bench-solver", daemon=True)
    worker.start()
    stopped = False
    while worker.is_alive():
        try:
            worker.join(0.1)
        except KeyboardInterrupt:
            _INTERRUPTED.set()
        if _INTERRUPTED.is_set() and not stopped:
            stopped = True
            stop()
    if "error" in box:
        raise box["error"]
    return box["value"]


def unsupported_without_backward(graph: Graph, method: str) -> MethodResult | None:
    """The answer forward-graph methods give on a graph with no backward nodes."""
    if graph.has_backward:
        return None
    return MethodResult(
        Status.UNSUPPORTED,
        message=(
            f"method '{method}' plans checkpoints of a training graph's forward pass, and "
            f"graph '{graph.name}' has no backward nodes (no node of kind 'backward')"
        ),
    )


def least_peak_by_bisection(graph: Graph, solve_at: Callable[[Number, float | None], MethodResult],
                            deadline: Deadline, search_share: float = 0.5) -> MethodResult:
    """``budget=min`` for a method that solves under a budget: bisect on the budget, then solve at the least.

    The budget is bisected between the memory floor (below it nothing fits) and the
    baseline peak (the baseline schedule fits there) with ``search_share`` of the time:
    a budget where the method finds a schedule lowers the upper end to that schedule's
    simulated peak, one it proves infeasible raises the lower end, and one where it
    finds nothing in its time slice also raises it, without proof. The search stops
    within half a percent of the baseline peak; the method then minimises duration at
    the least budget found, with the time left. The answer is optimal only when the
    least peak was proven (the two ends met on proofs) and the last solve proved its
    duration optimal. stats: ``least_peak``, ``least_peak_lower`` (no schedule of the
    method's space peaks below it, when ``least_peak_proven``), ``probes``.
    """
    from remat_bench.core.budget import memory_floor
    from remat_bench.core.simulate import baseline, simulate

    lo, hi = memory_floor(graph).amount, baseline(graph).peak
    whole = isinstance(hi, int) and isinstance(lo, int)
    # Half a percent of the baseline peak; on graphs of a few units, to the unit.
    tolerance = 0.005 * hi if not whole or 0.005 * hi >= 1 else 0
    remaining = deadline.remaining()
    search = Deadline(None if remaining is None else search_share * remaining)
    best: MethodResult | None = None
    proven, probes = True, []
    while hi - lo > tolerance and not search.expired() and not interrupted():
        mid = (lo + hi) // 2 if whole else (lo + hi) / 2
        left = search.remaining()
        # Each probe gets the time of the probes still needed, at most: about log2 of the gap.
        steps = max(1.0, math.log2(max(2.0, (hi - lo) / max(tolerance, 1e-9 * hi, 0.5))))
        answer = solve_at(mid, None if left is None else max(0.5, left / steps))
        peak = simulate(graph, answer.schedule).peak if answer.schedule is not None else None
        if answer.status.found_schedule and peak is not None and peak <= mid:
            hi, best = peak, answer
            probes.append({"budget": mid, "found_peak": peak})
        else:
            lo = mid + 1 if whole else mid
            proven = proven and answer.status is Status.INFEASIBLE
            probes.append({"budget": mid, "status": answer.status.value})
    final = solve_at(hi, deadline.remaining())
    result = final if final.status.found_schedule else best
    if result is None:
        return MethodResult(Status.NO_SOLUTION, solve_time_s=deadline.elapsed(), stats={"probes": probes},
                            message="no schedule found while searching for the least peak")
    exact = proven and hi <= lo
    result.stats = {**result.stats, "least_peak": hi, "least_peak_lower": lo, "least_peak_proven": exact,
                    "probes": probes}
    if result.status is Status.OPTIMAL and not (exact and result is final):
        result.status = Status.FEASIBLE
    if not exact:
        result.message = (f"least peak searched to within {tolerance:,g} of the baseline peak: between {lo:,} "
                          f"and {hi:,}" + ("" if proven else " (the lower end unproven: probes ran out of time)"))
    result.solve_time_s = deadline.elapsed()
    return result
