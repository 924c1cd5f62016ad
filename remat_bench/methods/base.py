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
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, ClassVar

import numpy as np

from remat_bench.core.control import (  # noqa: F401 (re-exported: methods import them from here)
    Deadline,
    interrupted,
    run_interruptibly,
)
from remat_bench.core.errors import MethodError
from remat_bench.core.graph import Graph, Number
from remat_bench.core.outcome import (  # noqa: F401 (re-exported: methods import them from here)
    MethodResult,
    SolutionStatus,
    Status,
    Termination,
    cut_short,
    search_ended,
)
from remat_bench.core.progress import ProgressSink, Renumbered, Watcher
from remat_bench.core.schedule import Schedule
from remat_bench.toolkit.bound import BoundSource
from remat_bench.toolkit.bound_cache import BoundCache


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
        """Convert ``text`` (a string from the command line, or a YAML value) to this type.

        Parameters
        ----------
        text : Any
            The value as given.
        method : str
            The method's name, for the error.

        Returns
        -------
        Any
            The value, of the declared type, within the declared range and choices.

        Raises
        ------
        MethodError
            A value of another type, out of range, not among the choices, not finite, or refused
            by ``check``.
        """
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
class SolveContext:
    """What the caller shares with a method for one run: where its any-order bounds come from
    (``bounds``, a `remat_bench.toolkit.bound.BoundSource`: an object, not a global; methods ask it
    only what that protocol names), and schedules it already has (``hints``: label and schedule;
    ``auto`` offers its fast members' answers to its exact ones, which start from them where they
    fit and never return worse).

    ``duration_goal`` and ``peak_goal`` say when the caller is done: a schedule within the budget
    that takes at most ``duration_goal`` (the any-order bound: none is faster), or, at ``budget=min``
    for a caller that wants the peak only (`remat-bench floor`), one whose peak is at most
    ``peak_goal`` (a peak no schedule goes below). A method that finds one may stop at once.

    ``runner`` runs another registered method by name and judges its answer, for candidate
    schedules (`remat_bench.methods.candidates`): ``runner(name, graph, budget, time_limit, params)``
    returns a run's result (`remat_bench.app.evaluate.RunResult`: its status, and ``method_schedule``,
    the schedule as the method returned it). The evaluation path sets it
    (`remat_bench.app.evaluate.run_source`); methods never look another method up themselves.

    ``gap`` is how far above a valid lower bound the caller is content to stop (duration units,
    ``solve --gap``): the search may end once its schedule is within ``gap`` of the any-order bound
    (`stop_duration`) or of its own solver's bound (CP-SAT's ``absolute_gap_limit``, HiGHS's
    ``mip_abs_gap``). A schedule is proven optimal only where it meets ``duration_goal`` itself.

    ``model_memory`` is the most memory, in bytes, a solver's model may take by its estimate (None: no
    cap beyond the machine's, `remat_bench.toolkit.milp.refuse_too_large`); a larger model is refused
    before it is built. ``auto`` sets it for its members (its ``model_memory`` parameter).

    ``progress`` receives the run's progress (`remat_bench.core.progress`): a method offers each
    improving schedule it holds, as it finds it, with its own bound (`report`); the evaluation
    path sets it to the run's recorder, which scores them with the simulator. None (a method called
    directly): reports go nowhere. ``watch`` is who watches the run, as its caller gives it (the
    terminal, a portfolio): the recorder passes the points it keeps on to it.

    A method called directly (tests, other code) gets an empty in-memory cache of its own, no hints
    and no runner (candidates from other methods are then skipped, and say so).
    """

    bounds: BoundSource = field(default_factory=BoundCache)  # in memory only, unless the caller gives one
    hints: list[tuple[str, Schedule]] = field(default_factory=list)
    duration_goal: Number | None = None
    peak_goal: Number | None = None
    runner: Callable[..., Any] | None = None
    gap: Number = 0
    progress: ProgressSink | None = None
    watch: Watcher | None = None
    model_memory: int | None = None

    @property
    def stop_duration(self) -> Number | None:
        """The duration at which the search may stop: ``duration_goal`` plus ``gap`` (None without a goal)."""
        return None if self.duration_goal is None else self.duration_goal + self.gap

    def reached(self, budget: Number | None, peak: Number, duration: Number) -> bool:
        """Whether a schedule of ``peak`` and ``duration`` (simulated, after clean-up) ends the search.

        Parameters
        ----------
        budget : int or float or None
            The run's budget (None: the lowest peak, where ``peak_goal`` decides).
        peak, duration : int or float
            The schedule's simulated peak and duration.

        Returns
        -------
        bool
            True when the schedule fits and is within ``gap`` of the duration goal (or, at ``min``,
            meets the peak goal).
        """
        if budget is None:
            return self.peak_goal is not None and peak <= self.peak_goal
        stop = self.stop_duration
        return stop is not None and peak <= budget and duration <= stop

    def proves(self, duration: Number) -> bool:
        """Whether a schedule within the budget lasting ``duration`` is optimal: it meets the any-order bound.

        Parameters
        ----------
        duration : int or float
            The schedule's duration (simulated, or the method's exact objective).

        Returns
        -------
        bool
        """
        return self.duration_goal is not None and duration <= self.duration_goal

    def report(self, schedule: Schedule | Callable[[], Schedule], bound: Number | None = None,
               source: str = "") -> bool:
        """Offer the run's progress a schedule the method holds now (and its own lower bound now).

        Parameters
        ----------
        schedule : Schedule or callable
            The schedule, or a function building it (called only if it is scored: decoding a
            solver's solution is not free).
        bound : int or float or None
            The method's own lower bound on duration now, in its space, where its solver has one.
        source : str
            Who found it when not the method itself (a candidate schedule's method).

        Returns
        -------
        bool
            True when the run's best schedule, as the simulator scored it, meets the goal
            (`reached`): the method may stop its search.
        """
        return self.progress.offer(schedule, bound, source) if self.progress is not None else False


class Role(Enum):
    """A method's part in the portfolio (``auto``, `remat_bench.app.portfolio`)."""

    FAST = "fast"  # run first, one after another, each on a share of the members' time
    EXACT = "exact"  # run after them, offered their schedules (`SolveContext.hints`), side by side


@dataclass(frozen=True)
class Membership:
    """How the portfolio (``auto``) runs a method as one of its members (`Method.member`).

    ``rank`` is its place among the members of its role, the lowest first: fast members that end
    in milliseconds run first, so that the time they leave passes on to the others. ``params`` are
    its parameters inside the portfolio beyond its defaults. ``share`` caps the share of the
    members' time it may take (None: its weighted share of what is left, ``weight`` against the weights
    of the members still to run: a member whose schedule starts the exact members weighs more).
    ``beside_s``: it runs beside the others from the start of the run, in a child process, when the
    members have at least that many seconds (None: in its turn); ``beside_why`` completes the
    sentence that says so when they have less ("... less than the 30 s " + ``beside_why``).
    """

    role: Role
    rank: int = 100
    params: Mapping[str, Any] = field(default_factory=dict)
    share: float | None = None
    weight: float = 1.0
    beside_s: float | None = None
    beside_why: str = ""


class Method:
    """Base class of every method. Subclasses set the class attributes and implement `solve`."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    params: ClassVar[tuple[Param, ...]] = ()
    requires: ClassVar[tuple[str, ...]] = ()  # importable module names
    install_hint: ClassVar[str] = ""  # how to get the requirements, e.g. "pip install remat-bench[torch]"
    # Applicability, checked by the pipeline through `skip` before the method runs:
    needs_backward: ClassVar[bool] = False  # plans a training graph's forward pass, then its backward
    supports_min: ClassVar[bool] = True  # answers ``budget=min`` (the lowest peak it can reach)
    # The schedules the method searches: its "optimal" and "infeasible" hold there only.
    search_space: ClassVar[str] = "its own schedule space"
    # What the report and the charts say of a method, read from here rather than from lists of names:
    # a planner a training framework ships (PyTorch's budget, DTR's eviction, the rule policies), set
    # beside the best schedule and bound in the report's production section.
    production: ClassVar[bool] = False
    # What the portfolio (``auto``) runs it as, read from here rather than from lists of names; None: no
    # member (auto runs it only where its ``members`` parameter names it, as a fast member).
    member: ClassVar[Membership | None] = None
    # Whether its schedules may copy values to host memory and back (offload and reload steps,
    # docs/design.md section 3, "Offload"). Such a method runs only on a graph with a host link
    # (``transfer``); its runs are not judged by the any-order bound (offloading can beat it) nor
    # refused below the recompute-only memory floor, but by the offload floor.
    offloads: ClassVar[bool] = False

    @classmethod
    def may_offload(cls, graph: Graph) -> bool:
        """Whether its schedules on ``graph`` may copy values to the host and back (`offloads`; a portfolio
        whose members may, where the graph has a host link).

        Parameters
        ----------
        graph : Graph

        Returns
        -------
        bool
        """
        return cls.offloads and graph.transfer is not None

    @classmethod
    def input_order(cls, params: dict[str, Any]) -> str | None:
        """How this method's schedules stand to the graph's input order, for ``params``.

        Parameters
        ----------
        params : dict
            The method's parameters as a run recorded them (defaults may be missing).

        Returns
        -------
        str or None
            ``"kept"``: its schedules keep the input order's first computations (input-order stages);
            ``"free"``: they may leave it; None: neither is claimed.
        """
        return None

    @classmethod
    def member_params(cls, graph: Graph, any_order_peak: Number | None) -> dict[str, Any]:
        """Its parameters as a member of the portfolio, beyond its defaults, from what ran before it.

        Parameters
        ----------
        graph : Graph
            The graph the portfolio solves.
        any_order_peak : int or float or None
            The lowest peak (after clean-up) of the schedules found so far by members that may leave the
            input order (`input_order` ``"free"``); None when none found one.

        Returns
        -------
        dict
            ``member.params`` unless a method overrides this.
        """
        return dict(cls.member.params) if cls.member is not None else {}

    @classmethod
    def member_skip(cls, graph: Graph, budget: Number | None, bounds: BoundSource) -> str | None:
        """Why the portfolio does not run it here although it applies (`skip`): its answer would add nothing.

        Parameters
        ----------
        graph : Graph
        budget : int or float or None
            The budget in the graph's memory units (None: the lowest peak).
        bounds : BoundSource
            The run's bounds, asked only for what they already hold (`BoundSource.peek`).

        Returns
        -------
        str or None
            One sentence, recorded as the member's ``unsupported`` reason; None: it runs.
        """
        return None

    @classmethod
    def member_covered(cls, graph: Graph, exact: Collection[str]) -> str | None:
        """Why the portfolio leaves it out when the exact members ``exact`` run with it (another one's search
        holds its space), or None.

        Parameters
        ----------
        graph : Graph
        exact : collection of str
            The exact members that apply here, itself among them.

        Returns
        -------
        str or None
            One sentence, recorded as the member's message (not run); None: it runs.
        """
        return None

    @property
    def context(self) -> SolveContext:
        """The run's shared objects, set by the pipeline before `solve`; a fresh one otherwise."""
        context = self.__dict__.get("_context")
        if context is None:
            context = self.__dict__["_context"] = SolveContext()
        return context

    @context.setter
    def context(self, value: SolveContext) -> None:
        self.__dict__["_context"] = value

    @classmethod
    def space(cls, params: dict[str, Any]) -> str:
        """The schedule space a proof of this method (optimal, infeasible) holds in, for ``params``.

        Parameters
        ----------
        params : dict
            The method's parsed parameters.

        Returns
        -------
        str
            A few words (``input-order stages, at most 2 retention intervals per node``).
        """
        return cls.search_space

    @classmethod
    def available(cls) -> tuple[bool, str]:
        """Whether the requirements import here, and if not, one sentence saying how to fix it.

        Returns
        -------
        tuple of (bool, str)
            True and an empty sentence, or False and what to install.
        """
        missing = [mod for mod in cls.requires if importlib.util.find_spec(mod) is None]
        if not missing:
            return True, ""
        hint = cls.install_hint or f"pip install {' '.join(missing)}"
        return False, f"method '{cls.name}' needs {', '.join(missing)}: install it with `{hint}`"

    @classmethod
    def parse_params(cls, given: dict[str, Any]) -> dict[str, Any]:
        """Defaults overlaid with ``given``, each converted to its declared type.

        Parameters
        ----------
        given : dict
            Parameter names (or their aliases) and values as given (text or values).

        Returns
        -------
        dict
            Every declared parameter by its name, typed.

        Raises
        ------
        MethodError
            An undeclared name (with the closest declared one), a name given twice through an
            alias, or a value `Param.parse` refuses.
        """
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

    @classmethod
    def skip(cls, graph: Graph, budget: Number | None) -> str | None:
        """Why the method does not apply to ``graph`` at ``budget`` (one sentence), or None when it does.

        The pipeline answers ``unsupported`` with this reason and does not call `solve`,
        as benchopt's runner honours a solver's ``skip``; a method overrides it to add
        conditions of its own. From the declarations: ``needs_backward`` asks for
        backward nodes and forward nodes that read forward values only;
        ``supports_min`` for a budget rather than ``min``.

        Parameters
        ----------
        graph : Graph
            The graph to solve.
        budget : int or float or None
            The budget in the graph's memory units (None: the lowest peak).

        Returns
        -------
        str or None
            One sentence saying why the method does not apply, or None.
        """
        if cls.needs_backward:
            if not graph.has_backward:
                return (f"method '{cls.name}' plans checkpoints of a training graph's forward pass, and "
                        f"graph '{graph.name}' has no backward nodes (no node of kind 'backward')")
            if not graph.forward_indices:
                return (f"method '{cls.name}' plans checkpoints of the forward pass, and graph '{graph.name}' "
                        "has no forward nodes")
            from remat_bench.toolkit.lowering import LoweringError, check_forward_then_backward

            try:
                check_forward_then_backward(graph)
            except LoweringError as exc:
                return f"method '{cls.name}' runs the forward pass first: {exc}"
        if budget is None and not cls.supports_min:
            return (f"method '{cls.name}' minimises duration under a budget; give a budget (a fraction, or an "
                    "amount) rather than 'min'")
        return None

    def solve(self, graph: Graph, budget: Number | None, time_limit: float | None,
              **params: Any) -> MethodResult:
        """Solve ``graph`` within ``budget`` (None: the lowest peak) in ``time_limit`` seconds.

        Called only where `skip` gives no reason (the pipeline checks it first). The run's shared
        objects (bounds, hints, goals, progress) are in `context`.

        Parameters
        ----------
        graph : Graph
            The graph to solve.
        budget : int or float or None
            The budget in the graph's memory units; None asks for the lowest peak the method reaches.
        time_limit : float or None
            Seconds the method may take (None: no limit).
        **params
            The method's declared parameters, parsed (`parse_params`).

        Returns
        -------
        MethodResult
            What it found (a schedule or none, its own objective and bound) and why it stopped.
        """
        raise NotImplementedError

    def solve_in_order(self, graph: Graph, listing: Sequence[int], budget: Number | None, time_limit: float | None,
                       **params: Any) -> MethodResult:
        """`solve` on ``graph`` with its nodes listed in ``listing`` (`Graph.in_order`), its answer mapped back.

        For a method whose space follows the input order (staged models): another topological order gives it
        other stages. The run's bound at ``budget`` is shared with the copy (it does not depend on the order),
        the hints are renumbered for it, and what it reports is mapped back.

        Parameters
        ----------
        graph : Graph
        listing : sequence of int
            Every node index of ``graph`` once, each node after its inputs: node i of the copy is ``listing[i]``.
        budget : int or float or None
        time_limit : float or None
        **params
            As `solve` takes them.

        Returns
        -------
        MethodResult
            Its schedule over ``graph``'s node indices.
        """
        if list(listing) == list(range(graph.n)):
            return self.solve(graph, budget, time_limit, **params)
        permuted = graph.in_order(listing)
        self.context.bounds.share(graph, permuted, budget)
        back = np.asarray(listing, dtype=np.int64)
        position = np.empty(graph.n, dtype=np.int64)
        position[back] = np.arange(graph.n)  # node v of ``graph`` is node position[v] of the copy
        offered, watcher = self.context.hints, self.context.progress
        self.context.hints = [(label, replace(h, nodes=position[h.nodes])) for label, h in offered]
        if watcher is not None:
            self.context.progress = Renumbered(watcher, back)
        try:
            result = self.solve(permuted, budget, time_limit, **params)
        finally:
            self.context.hints, self.context.progress = offered, watcher
        if result.schedule is not None:
            result.schedule = replace(result.schedule, nodes=back[result.schedule.nodes])
        return result
