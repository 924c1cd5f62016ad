"""Budgets (docs/design.md section 5): parse them, and the hard floor below which none is feasible."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

import numpy as np

from remat_bench.core.baseline import baseline
from remat_bench.core.errors import BudgetError
from remat_bench.core.graph import MAX_TOTAL, Graph, Number

_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}
_AMOUNT = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z]*)\s*$")


@dataclass(frozen=True)
class Budget:
    """A resolved budget: an absolute amount in the graph's memory units, or the lowest peak.

    ``fraction`` is the amount over the baseline peak (None for ``min``);
    ``text`` is what the user wrote. What the graph says of it before any method runs comes
    with it: ``refusal``, why no schedule can fit (below the memory floor), and, at ``min``,
    ``peak_bound``, a peak no schedule goes below (`peak_lower_bound`).
    """

    amount: Number | None
    fraction: float | None
    text: str
    warning: str | None = None  # a budget that parses but is probably not what the user meant
    refusal: str | None = None
    peak_bound: PeakBound | None = None

    @property
    def is_min(self) -> bool:
        return self.amount is None

    def __str__(self) -> str:
        if self.is_min:
            return "min"
        if self.fraction is None:
            return str(self.amount)
        return f"{self.amount} ({100 * self.fraction:.1f}% of baseline)"


def parse_budget(text: str | float | int, graph: Graph) -> Budget:
    """Resolve ``0.8``, ``80%``, ``12GiB``, ``12GB``, ``1.2e10`` or ``min`` against ``graph``.

    A fraction (a bare number at most 1, or a percentage) is taken of the
    baseline peak and rounded down to a whole unit, which reproduces the
    published budgets exactly. A bare number above 1 is in the graph's memory
    units; suffixes KB/MB/GB/TB are decimal, KiB/MiB/GiB/TiB binary.

    Parameters
    ----------
    text : str or float or int
        What the user wrote.
    graph : Graph
        The graph whose baseline peak a fraction is taken of.

    Returns
    -------
    Budget
        With the memory floor's verdict (``refusal``), at ``min`` the lowest possible peak (``peak_bound``),
        and a ``warning`` when a bare number above 1 looks meant as a fraction.

    Raises
    ------
    BudgetError
        ``text`` is not a budget, names an unknown unit, is a fraction of zero or less, or is above 2**53
        memory units.
    """
    return _checked(_parse(text, graph), graph)


def _parse(text: str | float | int, graph: Graph) -> Budget:
    raw = str(text).strip()
    peak = baseline(graph).peak
    if raw.lower() == "min":
        return Budget(None, None, raw)
    try:
        if raw.endswith("%"):
            frac = Fraction(raw[:-1].strip()) / 100
            return _from_fraction(frac, peak, raw)
        match = _AMOUNT.match(raw)
        if not match:
            raise ValueError
        number, unit = match.group(1), match.group(2).lower()
        if unit not in _UNITS:
            raise BudgetError(
                f"budget '{raw}': unknown unit '{match.group(2)}'; use KB, MB, GB, TB, KiB, MiB, GiB or TiB"
            )
        value = Fraction(number)
    except (ValueError, ZeroDivisionError):
        raise BudgetError(
            f"budget '{raw}' is not understood; give a fraction of the baseline peak (0.8), "
            "a percentage (80%), an amount (12GiB, 1.2e10) or 'min'"
        ) from None
    if unit == "" and value <= 1:
        return _from_fraction(value, peak, raw)
    amount = value * _UNITS[unit]
    if amount > MAX_TOTAL:
        raise BudgetError(
            f"budget '{raw}' is above 2**53 = {MAX_TOTAL:,} memory units, the largest amount every method "
            f"represents exactly; any budget at or above the baseline peak ({peak:,}) already means no limit"
        )
    amount_num: Number = math.floor(amount) if isinstance(peak, int) else float(amount)
    return Budget(amount_num, float(amount / Fraction(peak)) if peak else None, raw,
                  _amount_warning(raw, value, unit, amount, peak, graph))


def _amount_warning(raw: str, value: Fraction, unit: str, amount: Fraction, peak: Number,
                    graph: Graph) -> str | None:
    """A bare number above 1 is an amount in memory units: say so when it looks like a fraction."""
    if unit or not peak:
        return None
    units = graph.units.get("memory", "units")
    as_percent = f"{float(value):g}%"
    if amount > peak:
        hint = f"; did you mean {as_percent} of the baseline peak?" if value <= 100 else ""
        return (f"budget '{raw}' is read as {float(amount):,g} {units} (a bare number above 1 is an amount), "
                f"above the baseline peak {peak:,}, so every schedule fits{hint}")
    floor = memory_floor(graph).amount
    if amount < floor and value <= 100:
        return (f"budget '{raw}' is read as {float(amount):,g} {units} (a bare number above 1 is an amount), "
                f"below the memory floor {floor:,}; for a fraction of the baseline peak write 0.8 or 80%")
    return None


def _from_fraction(frac: Fraction, peak: Number, raw: str) -> Budget:
    if frac <= 0:
        raise BudgetError(f"budget '{raw}' must be more than zero")
    if frac * Fraction(peak) > MAX_TOTAL:
        raise BudgetError(f"budget '{raw}' is above 2**53 = {MAX_TOTAL:,} memory units, the largest amount "
                          f"every method represents exactly; any budget at or above 100% already means no limit")
    amount = frac * Fraction(peak)
    # Whole units when the graph's sizes are whole (the published budgets are rounded down).
    value: Number = math.floor(amount) if isinstance(peak, int) else float(amount)
    return Budget(value, float(frac), raw)


def format_amount(value: Number | None, unit: str = "", short: bool = False) -> str:
    """A number with thousands separators, and a binary-prefixed size beside byte counts:
    ``41,030,956 (39.13 MiB)``, or with ``short`` the size alone (``39.13 MiB``); ``-`` for None.

    Parameters
    ----------
    value : Number or None
        An amount.
    unit : str
        Its unit; only ``bytes`` adds a binary-prefixed size, and only from 1024 bytes up.
    short : bool
        Give the binary-prefixed size alone, without the exact count.

    Returns
    -------
    str
    """
    if value is None:
        return "-"
    text = f"{value:,}" if isinstance(value, int) else f"{value:,.6g}"
    if unit == "bytes" and value >= 1024:
        exponent = min(int(math.log(value, 1024)), 5)
        prefix = ("", "KiB", "MiB", "GiB", "TiB", "PiB")[exponent]
        size = f"{value / 1024**exponent:.2f} {prefix}"
        return size if short else f"{text} ({size})"
    return text


def memory_text(value: Number, graph: Graph) -> str:
    """An amount of ``graph``'s memory as a message gives it: ``39.13 MiB`` for bytes, else ``41,030,956``.

    Parameters
    ----------
    value : Number
        An amount in ``graph``'s memory units.
    graph : Graph
        The graph whose ``units`` say whether the amount is in bytes.

    Returns
    -------
    str
    """
    return format_amount(value, graph.units.get("memory", ""), short=True)


def lowest_fraction(amount: Number, peak: Number) -> float:
    """The least fraction of ``peak``, in hundredths, whose budget (rounded down as `parse_budget`
    rounds it) is at least ``amount``.

    Parameters
    ----------
    amount : Number
        The amount a budget must reach (a memory floor), in memory units.
    peak : Number
        The baseline peak, in the same units.

    Returns
    -------
    float
        A multiple of 0.01, at most 1.0; 1.0 when ``peak`` is zero.
    """
    if not peak:
        return 1.0
    hundredths = math.ceil(100 * Fraction(amount) / Fraction(peak))
    while hundredths < 100 and Fraction(hundredths, 100) * Fraction(peak) < amount:
        hundredths += 1
    return min(hundredths, 100) / 100


@dataclass(frozen=True)
class Floor:
    """The hard memory floor: no schedule peaks below it."""

    amount: Number
    node: str

    def message(self, budget: Number, graph: Graph) -> str:
        """Why ``budget`` cannot fit ``graph``, in the budget's own terms: the fraction of the baseline
        peak it is, the floor in memory units, and the lowest fraction worth trying.

        Parameters
        ----------
        budget : Number
            A budget below this floor, in memory units.
        graph : Graph
            The graph this floor is of.

        Returns
        -------
        str
            One sentence, without the graph's or the command's name.
        """
        unit = graph.units.get("memory", "")
        peak = baseline(graph).peak
        share = f"{100 * budget / peak:.1f}% of the baseline peak, " if peak else ""
        floor_share = f"{100 * self.amount / peak:.1f}%, " if peak else ""
        lowest = (f"; no budget below {lowest_fraction(self.amount, peak):.2f} of the baseline peak can fit "
                  f"(`remat-bench floor` finds the lowest that does)") if peak else ""
        return (f"the budget ({share}{format_amount(budget, unit, short=True)}) is below the memory floor "
                f"({floor_share}{format_amount(self.amount, unit, short=True)}): node '{self.node}' needs that much "
                f"with its inputs, output, workspace and the fixed memory, whatever the schedule{lowest}")


def memory_floor(graph: Graph) -> Floor:
    """``fixed + max over v of (inputs + output + workspace)``, over v's cheapest implementation.

    Parameters
    ----------
    graph : Graph

    Returns
    -------
    Floor
        The amount, in memory units, and the node whose need sets it (the first such node).
    """
    mem = graph.memory
    cumulative = np.concatenate([[0], np.cumsum(mem[graph.op_in_idx])])
    inputs_total = cumulative[graph.op_in_ptr[1:]] - cumulative[graph.op_in_ptr[:-1]]
    need = inputs_total + mem[graph.op_node] + graph.op_workspace
    per_node = np.minimum.reduceat(need, graph.op_start[:-1])
    v = int(np.argmax(per_node))
    return Floor((per_node[v] + graph.fixed_memory).item(), graph.ids[v])


@dataclass(frozen=True)
class PeakBound:
    """A proven lower bound on the peak of every valid schedule, and why it holds."""

    amount: Number
    reason: str


def peak_lower_bound(graph: Graph) -> PeakBound:
    """The highest of two peak bounds that hold for every schedule (any order, any recomputation).

    - the memory floor: some node's inputs, output and workspace with the fixed memory;
    - the outputs at the end: every output is resident from its last computation to the end, so
      when the last of them is computed, all the others are resident beside its inputs and
      workspace: fixed + all outputs + min over outputs o of (o's inputs that are not outputs,
      plus its workspace, over o's cheapest implementation).

    Parameters
    ----------
    graph : Graph

    Returns
    -------
    PeakBound
        The higher of the two, in memory units, with a phrase naming which one it is.
    """
    floor = memory_floor(graph)
    best = PeakBound(floor.amount, f"the memory floor (node '{floor.node}' with its inputs, output and workspace)")
    outputs = list(graph.output_indices)
    if not outputs:
        return best
    is_output = graph.is_output
    mem = graph.memory
    held = sum(mem[o].item() for o in outputs) + graph.fixed_memory
    last = None
    for o in outputs:
        extra = min(sum(mem[u].item() for u in graph.op_inputs[op] if not is_output[u]) + graph.op_workspace[op].item()
                    for op in graph.ops_of(o))
        if last is None or extra < last[0]:
            last = (extra, o)
    assert last is not None
    amount = held + last[0]
    if amount > best.amount:
        best = PeakBound(amount, f"the outputs at the end ({len(outputs)} outputs resident together when the last "
                                 f"is computed, at least {graph.ids[last[1]]}'s inputs beside them)")
    return best


def _checked(budget: Budget, graph: Graph) -> Budget:
    """``budget`` with the memory floor's verdict and, at ``min``, the lowest peak any schedule can have."""
    if budget.amount is None:
        return replace(budget, peak_bound=peak_lower_bound(graph))
    floor = memory_floor(graph)
    return replace(budget, refusal=floor.message(budget.amount, graph) if budget.amount < floor.amount else None)


def budget_of(amount: Number | None, graph: Graph) -> Budget:
    """An amount already resolved (a portfolio's budget for its members) as a `Budget`; None is ``min``.

    Parameters
    ----------
    amount : Number or None
        In ``graph``'s memory units; None for ``min``.
    graph : Graph

    Returns
    -------
    Budget
        Checked as `parse_budget` checks its budgets (``refusal``, ``peak_bound``); its ``text`` is the
        amount as ``str`` writes it.
    """
    if amount is None:
        return _checked(Budget(None, None, "min"), graph)
    peak = baseline(graph).peak
    return _checked(Budget(amount, float(amount / peak) if peak else None, str(amount)), graph)


_SIZE_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
               "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(text: Any) -> int:
    """``4GiB``, ``500MB``, ``2e9`` -> bytes; raises ValueError.

    Parameters
    ----------
    text : Any
        A positive number, optionally followed by a unit (B, kB, MB, GB, TB, KiB, MiB, GiB, TiB; any case).

    Returns
    -------
    int
        The size in bytes, rounded down.

    Raises
    ------
    ValueError
        Text that is not such a size, or a size that is not positive.
    """
    match = _SIZE.match(str(text))
    if not match or match.group(2).lower() not in _SIZE_UNITS:
        raise ValueError(text)
    value = float(match.group(1)) * _SIZE_UNITS[match.group(2).lower()]
    if value <= 0:
        raise ValueError(text)
    return int(value)
