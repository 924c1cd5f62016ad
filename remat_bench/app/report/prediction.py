"""What the simulator predicts against what a replay measures (a sweep with ``replay:``): peaks, overheads
with their 95% intervals, how alike both rank the methods, and whether replays of one schedule agree."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from remat_bench.app.report.tables import cell, each_instance, markdown_table

Interval = tuple[float, float]
ALL_OVERLAP = "intervals overlap: the measurement cannot rank these methods"


def rank_agreement(modelled: list[float], measured: list[float]) -> float | None:
    """Kendall's tau between the methods' modelled and measured overheads: do both rank them alike?

    tau-b (`scipy.stats.kendalltau`): (concordant - discordant pairs) over the pairs, corrected for ties;
    1 when the measurement ranks the methods as the simulator does, -1 when it reverses the order.

    Parameters
    ----------
    modelled : list of float
        Each method's modelled overhead, in percent.
    measured : list of float
        The same methods' measured overheads, in the same order.

    Returns
    -------
    float or None
        None with fewer than 2 methods, or when either side ties them all (tau is undefined).
    """
    from scipy.stats import kendalltau

    if len(modelled) < 2 or len(set(modelled)) < 2 or len(set(measured)) < 2:
        return None
    tau = float(kendalltau(modelled, measured).statistic)
    return None if math.isnan(tau) else tau


def intervals_overlap(a: Interval, b: Interval) -> bool:
    """Whether two closed intervals share a point (touching counts: the measurement does not separate them).

    Parameters
    ----------
    a, b : tuple of float
        (low, high) each.

    Returns
    -------
    bool
    """
    return a[0] <= b[1] and b[0] <= a[1]


def separated_rank_agreement(modelled: Sequence[float], intervals: Sequence[Interval]) -> tuple[float | None, int]:
    """Kendall's tau-b of the modelled overheads against the measured ones, over only the pairs of methods whose
    measured 95% intervals do not overlap: the pairs the measurement ranks.

    Over those pairs P, a pair is concordant when the method with the lower modelled overhead has the interval
    below the other's, discordant when it has the one above, and tied when the modelled overheads are equal.
    With C concordant, D discordant and T tied pairs (no pair of P ties on the measurement),

        tau = (C - D) / sqrt((C + D + T) (C + D)),

    tau-b (Kendall 1945) with its sums taken over P; over every pair it is `scipy.stats.kendalltau`'s, which
    has no way to leave pairs out, hence this count.

    Parameters
    ----------
    modelled : Sequence[float]
        Each method's modelled overhead, in percent.
    intervals : Sequence[tuple of float]
        The same methods' 95% intervals of the measured overhead, (low, high), in percent.

    Returns
    -------
    tuple of float or None and int
        tau (None when no pair is separated, or the modelled overheads tie on every pair that is) and the number
        of pairs separated.
    """
    concordant = discordant = tied = 0
    for i, j in itertools.combinations(range(len(modelled)), 2):
        if intervals_overlap(intervals[i], intervals[j]):
            continue
        measured_sign = 1 if intervals[i][0] > intervals[j][1] else -1  # i's interval above j's: +1
        modelled_sign = np.sign(modelled[i] - modelled[j])
        if modelled_sign == 0:
            tied += 1
        elif modelled_sign == measured_sign:
            concordant += 1
        else:
            discordant += 1
    separated = concordant + discordant + tied
    if concordant + discordant == 0:
        return None, separated
    return (concordant - discordant) / math.sqrt(separated * (concordant + discordant)), separated


def measured_interval(run: pd.Series) -> Interval | None:
    """The 95% interval of a run's measured overhead, or None where its replay has none (older results, too
    few pairs).

    Parameters
    ----------
    run : pandas.Series
        A row of a results table.

    Returns
    -------
    tuple of float or None
        (low, high), in percent.
    """
    low, high = run.get("measured_overhead_low_pct"), run.get("measured_overhead_high_pct")
    if low is None or high is None or pd.isna(low) or pd.isna(high):
        return None
    return float(low), float(high)


def overhead_text(measured: float, interval: Interval | None) -> str:
    """A measured overhead with its 95% interval, ``+21.3 [+19.8, +22.9]``; the overhead alone without one.

    Parameters
    ----------
    measured : float
        The measured overhead (median of the paired overheads), in percent.
    interval : tuple of float or None
        Its 95% interval, (low, high).

    Returns
    -------
    str
    """
    if interval is None:
        return f"{measured:+.1f}"
    return f"{measured:+.1f} [{interval[0]:+.1f}, {interval[1]:+.1f}]"


def prediction_section(frame: pd.DataFrame) -> str | None:
    """What the simulator predicts against what a replay measures (a sweep with ``replay:``).

    Per graph, budget and method (its fastest replayed run), the simulated and measured peaks and the modelled
    and measured overheads, the latter with its 95% interval where the replay has one; per graph and budget,
    how alike the two overheads rank the methods (`separated_rank_agreement` over the pairs the intervals
    separate, or `rank_agreement` over every pair where there are no intervals); whether the intervals of one
    schedule replayed for several methods overlap; a summary line.

    Parameters
    ----------
    frame : pandas.DataFrame
        A results table with a ``label`` and an ``ok`` column (`labels`, `succeeded`).

    Returns
    -------
    str or None
        Markdown; None when no run was replayed.
    """
    if "replay_status" not in frame or frame["replay_status"].isna().all():
        return None
    replayed = frame[frame["replay_status"].notna()]
    rows: list[list[str]] = []
    ranks: list[list[str]] = []
    picked = []
    without = 0
    for graph, budget, at in each_instance(frame, replayed):
        modelled, measured, intervals = [], [], []
        for label in dict.fromkeys(at["label"]):
            runs = at[at["label"] == label].assign(done=at["replay_status"] == "measured")
            run = runs.sort_values(["done", "duration"], ascending=[False, True], kind="stable").iloc[0]
            picked.append(run)
            rows.append([graph, budget, str(label), *_prediction_cells(run)])
            if run["replay_status"] == "measured" and not pd.isna(run["measured_overhead_pct"]):
                modelled.append(float(run["modelled_overhead_pct"]))
                measured.append(float(run["measured_overhead_pct"]))
                intervals.append(measured_interval(run))
        pairs, tau_text = _rank_cells(modelled, measured, intervals)
        without += pairs.endswith("without intervals")
        ranks.append([graph, budget, str(len(modelled)), pairs, tau_text])
    picked_runs = pd.DataFrame(picked)
    some = any(measured_interval(run) is not None for run in picked)
    table = markdown_table(["graph", "budget", "method", "simulated peak", "measured peak", "peak error %",
                            "modelled overhead %", _measured_header(picked_runs), "overhead error (points)"], rows)
    agreement = markdown_table(["graph", "budget", "methods", "pairs ranked", "Kendall tau"], ranks)
    parts = [_prediction_summary(picked_runs), table, agreement]
    if without:
        parts.append(f"Ranks taken without intervals at {without} graph and budget pair{'s' if without != 1 else ''}"
                     ": some replay there has no 95% interval (results from before replays measured one, or too "
                     "few pairs for one), so tau is taken over every pair of methods, on the median overheads.")
    if some and (same := _same_schedule(picked_runs)):
        parts.append(same)
    parts.append(_explanation(picked_runs, some))
    return "\n\n".join(parts)


def _rank_cells(modelled: list[float], measured: list[float], intervals: list[Interval | None]) -> tuple[str, str]:
    """The "pairs ranked" and "Kendall tau" cells of one graph and budget."""
    n = len(modelled)
    every = n * (n - 1) // 2
    if n < 2:
        return "-", "n/a (fewer than 2 methods measured)"
    if all(interval is not None for interval in intervals):
        known = [interval for interval in intervals if interval is not None]
        tau, separated = separated_rank_agreement(modelled, known)
        if separated == 0:
            return f"0 of {every}", ALL_OVERLAP
        return f"{separated} of {every}", ("n/a (the modelled overheads tie on every pair the intervals separate)"
                                           if tau is None else f"{tau:+.2f}")
    tau = rank_agreement(modelled, measured)
    why = "the modelled overheads all tie" if len(set(modelled)) < 2 else "the measured overheads all tie"
    return f"{every} of {every}, without intervals", f"n/a ({why})" if tau is None else f"{tau:+.2f}"


def _measured_header(runs: pd.DataFrame) -> str:
    """The measured overhead's column header: what its brackets and parentheses hold."""
    measured = [run for _, run in runs.iterrows() if run["replay_status"] == "measured"]
    having = [measured_interval(run) is not None for run in measured]
    if having and all(having):
        return "measured overhead % [95% interval]"
    if any(having):
        return "measured overhead % [95% interval], else (min to max)"
    return "measured overhead % (min to max)"


def _prediction_cells(run: pd.Series) -> list[str]:
    """A replayed run's peaks, overheads and errors; a failed replay's message."""
    if run["replay_status"] != "measured":
        return [cell(run["peak"], "{:,.0f}"), f"replay failed: {run['replay_message']}", "", "", "", ""]
    measured = run["measured_overhead_pct"]
    interval = measured_interval(run)
    if pd.isna(measured):
        spread = "not measured"
    elif interval is not None:
        spread = overhead_text(float(measured), interval)
    else:
        spread = (f"{measured:+.2f} ({run['measured_overhead_min_pct']:+.2f} to "
                  f"{run['measured_overhead_max_pct']:+.2f})")
    error = None if pd.isna(measured) else measured - run["modelled_overhead_pct"]
    within = run["measured_within_budget"]
    over = " **above the budget**" if not pd.isna(within) and not within else ""
    # Peaks in bytes (only PyTorch graphs are replayed).
    return [cell(run["peak"], "{:,.0f}"), cell(run["measured_peak"], "{:,.0f}") + over,
            cell(run["peak_error_pct"], "{:+.3f}"), cell(run["modelled_overhead_pct"], "{:+.2f}"),
            spread, cell(error, "{:+.2f}")]


def _prediction_summary(runs: pd.DataFrame) -> str:
    """Median and max |peak error|; the runs the simulator placed within budget that measured above it; the
    median, 90th percentile and largest |overhead error|; how many 95% intervals hold the modelled overhead."""
    measured = runs[runs["replay_status"] == "measured"]
    failed = len(runs) - len(measured)
    if measured.empty:
        return f"No replay measured anything: {failed} failed (see the table)."
    errors = measured["peak_error_pct"].astype(float).abs()
    above = measured["measured_within_budget"].map(lambda within: not pd.isna(within) and not within)
    surprise = measured[measured["ok"].astype(bool) & above.astype(bool)]
    text = (f"Over {len(measured)} replayed schedules: median |peak error| {errors.median():.3f}%, max "
            f"{errors.max():.3f}%; {len(surprise)} the simulator placed within their budget measured above it")
    if len(surprise):
        text += " (" + ", ".join(f"{r.label} on {r.graph} at {r.budget_text}" for r in surprise.itertuples()) + ")"
    timed = measured[measured["measured_overhead_pct"].notna()]
    overhead = (timed["measured_overhead_pct"].astype(float) - timed["modelled_overhead_pct"].astype(float)).abs()
    if len(overhead):
        worst = timed.loc[overhead.idxmax()]
        text += (f"; |overhead error| median {overhead.median():.2f}, 90th percentile "
                 f"{np.percentile(overhead.to_numpy(dtype=float), 90):.2f}, max {overhead.max():.2f} points "
                 f"({worst['label']} on {worst['graph']} at {worst['budget_text']})")
        intervals = [(measured_interval(run), float(run["modelled_overhead_pct"])) for _, run in timed.iterrows()]
        known = [(interval, modelled) for interval, modelled in intervals if interval is not None]
        if known:
            holding = sum(interval[0] <= modelled <= interval[1] for interval, modelled in known)
            text += (f"; the 95% interval of {holding} of {len(known)} runs holds the modelled overhead"
                     + (f" ({len(timed) - len(known)} without an interval)" if len(known) < len(timed) else ""))
        else:
            text += "; no replay has a 95% interval of its overhead"
    return text + (f"; {failed} replays failed." if failed else ".")


def _same_schedule(runs: pd.DataFrame) -> str | None:
    """Whether one schedule replayed for several methods (one graph, budget, simulated peak and modelled
    overhead) measured overlapping 95% intervals: a check of the measurement, which should not tell them apart."""
    timed = runs[(runs["replay_status"] == "measured") & runs["measured_overhead_pct"].notna()
                 & runs["modelled_overhead_pct"].notna() & runs["peak"].notna()]
    lines = []
    for (graph, budget, peak, modelled), group in timed.groupby(
            ["graph", "budget_text", "peak", "modelled_overhead_pct"], sort=False):
        if len(group) < 2:
            continue
        what = (f"{' and '.join(map(str, group['label']))} on {graph} at {budget} (simulated peak "
                f"{cell(peak, '{:,.0f}')}, modelled {float(modelled):+.2f}):")
        known = {str(run["label"]): interval for _, run in group.iterrows()
                 if (interval := measured_interval(run)) is not None}
        if len(known) < 2:
            lines.append(f"- {what} not compared: fewer than 2 of them have a 95% interval")
            continue
        shown = ", ".join(f"{label} {overhead_text(float(run['measured_overhead_pct']), known[label])}"
                          for label, run in ((str(r["label"]), r) for _, r in group.iterrows()) if label in known)
        apart = [f"{a} and {b}" for a, b in itertools.combinations(known, 2)
                 if not intervals_overlap(known[a], known[b])]
        lines.append(f"- {what} {shown}; " + (
            "the intervals overlap, as replays of one schedule should" if not apart else
            f"the intervals of {'; '.join(apart)} do not overlap: the measurement differs between replays of one "
            "schedule by more than its intervals allow"))
    if not lines:
        return None
    return ("One schedule replayed for several methods (the same graph, budget, simulated peak and modelled "
            "overhead), a check of the measurement:\n\n" + "\n".join(lines))


def _explanation(runs: pd.DataFrame, intervals: bool) -> str:
    """What the tables hold, and what the times were read off."""
    text = ("Each schedule replayed with the model's real operators (`remat-bench replay`; one run per method, "
            "its fastest): the measured peak against the simulated one (peak error, percent of the simulated peak), "
            "and the overhead measured against the baseline run in turns with it in the same process: the median "
            "of the paired overheads, ")
    text += ("with its 95% interval in brackets where the replay computed one, else the range of the pairs, min "
             "to max, in parentheses. " if intervals else "with their range, min to max, over the pairs. ")
    text += "The overhead error is measured less modelled, in points. "
    if intervals:
        text += ("Kendall tau compares how the modelled and the measured overheads rank the methods at one graph "
                 "and budget, over the pairs of methods whose 95% intervals do not overlap (the pairs the "
                 "measurement ranks; \"pairs ranked\"): 1 the same order, -1 the reverse; where every pair "
                 "overlaps, the measurement cannot rank the methods; where a replay has no interval, over every "
                 "pair on the medians (`scipy.stats.kendalltau`); n/a for fewer than 2 methods or when either "
                 "ranking ties them all.")
    else:
        text += ("Kendall tau compares how the modelled and the measured overheads rank the methods at one graph "
                 "and budget: 1 the same order, -1 the reverse; n/a for fewer than 2 methods or when either "
                 "ranking ties them all.")
    measured = runs[runs["replay_status"] == "measured"]
    if "timing_clock" in measured:
        clocks = measured["timing_clock"].dropna().astype(str)
        if len(clocks):
            text += " Times read off: " + ", ".join(
                f"{clock} ({n} runs)" if clocks.nunique() > 1 else clock
                for clock, n in clocks.value_counts(sort=False).items()) + "."
    if "replay_pairs" in measured:
        pairs = pd.to_numeric(measured["replay_pairs"], errors="coerce").dropna()
        if len(pairs):
            least, most = int(pairs.min()), int(pairs.max())
            text += f" Timed pairs per run: {least}" + (f" to {most}." if most != least else ".")
    return text + " The prediction chart (Charts) draws every replayed run, measured against modelled."
