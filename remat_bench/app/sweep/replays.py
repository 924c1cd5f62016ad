"""A sweep's schedules replayed with real tensors: what the simulator predicts against what a run measures.

With ``replay:`` in its config (or ``sweep --replay``), a sweep replays every
schedule it saved for a graph imported from PyTorch (one whose metadata keeps
the model's spec; `remat_bench.torch.replay`, docs/design.md section 9), once
its runs are done. Replays run one at a time, after the executor has shut
down, in the process that runs the sweep (on its machine, with a Dask
cluster too): no solver shares the machine with the timings. Each replay
measures the schedule's peak, checks its loss and gradients against autograd,
and times it in turns with the baseline (``repeats`` pairs), in a child
process (`remat_bench.toolkit.child.run_in_child`) stopped after the replay's
time limit: a model that crashes, hangs or runs out of memory is that
replay's failure, recorded in one sentence, and the sweep goes on.

What a replay measured goes into its run's row (the ``replay_*``, measured and
overhead columns of `remat_bench.app.sweep.results.COLUMNS`), appended to the
journal at once; the table keeps a run's latest row, so the row with the
replay replaces the one without. A resumed sweep replays only the runs whose
latest row has no ``replay_status`` yet, failures included (a failure is a
result; it is not tried again).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from remat_bench.app.sweep.keys import row_key
from remat_bench.app.sweep.runs import GraphSource, ReplaySettings, SweepConfig
from remat_bench.app.sweep.worker import SWEEP_FAULT
from remat_bench.core.errors import RematBenchError
from remat_bench.core.outcome import Termination

MEASURED = "measured"
FAILED = "failed"
# The columns a replay fills, each None until it does.
REPLAY_FIELDS = ("replay_status", "replay_message", "replay_device", "replay_repeats", "measured_peak",
                 "peak_error_pct", "measured_within_budget", "outputs_match", "step_time_s", "baseline_step_time_s",
                 "measured_overhead_pct", "measured_overhead_min_pct", "measured_overhead_max_pct",
                 "measured_overhead_spread", "modelled_overhead_pct", "baseline_measured_peak",
                 "measured_overhead_low_pct", "measured_overhead_high_pct", "replay_pairs", "timing_clock",
                 "replay_threads", "attribution")


def _inside(output: Path, text: str) -> Path:
    """A path of a row: relative to the results folder, or absolute (`results.make_row`)."""
    path = Path(text)
    return path if path.is_absolute() else output / path


def _imported_from_torch(path: Path) -> bool:
    """Whether the graph file keeps a PyTorch model's spec (a graph that cannot be read is not replayed)."""
    from remat_bench.core.graph_io import load_graph

    try:
        meta = load_graph(path).metadata.get("torch")
    except RematBenchError:
        return False
    return isinstance(meta, dict) and "spec" in meta


def pending_replays(rows: Iterable[dict[str, Any]], output: Path) -> list[dict[str, Any]]:
    """The runs whose schedule is still to be replayed: latest rows with a saved schedule of a PyTorch graph,
    without ``replay_status``.

    Parameters
    ----------
    rows : Iterable[dict]
        The journal's rows, in the order written (a run's latest row counts).
    output : Path
        The results folder (the rows' schedule and graph paths are relative to it).

    Returns
    -------
    list of dict
        Those rows, in the order their runs were first recorded.
    """
    latest: dict[tuple, dict[str, Any]] = {}
    for row in rows:
        latest[row_key(row)] = row  # a key keeps its first position, and its latest row
    imported: dict[Path, bool] = {}
    pending = []
    for row in latest.values():
        if row.get("replay_status") or not row.get("schedule") or not row.get("graph_path") or row.get(SWEEP_FAULT):
            continue
        graph = _inside(output, str(row["graph_path"]))
        if graph not in imported:
            imported[graph] = _imported_from_torch(graph)
        if imported[graph]:
            pending.append(row)
    return pending


# Why a sweep asked to replay has nothing to replay, most often: replays measure PyTorch graphs only.
NO_TORCH_GRAPH = ("no graph of this sweep is imported from PyTorch (a `torch:` entry in the config, or a file "
                  "`remat-bench graphs import-torch` wrote), and only those can be replayed")


def nothing_to_replay(rows: Iterable[dict[str, Any]], output: Path) -> str:
    """Why `pending_replays` found no schedule to replay, in one sentence (a replay asked for that does nothing
    must not pass in silence: the user asked for measurements).

    Parameters
    ----------
    rows : Iterable[dict]
        The journal's rows, as `pending_replays` took them.
    output : Path
        The results folder.

    Returns
    -------
    str
        ``nothing to replay: ...`` with the reason: no graph imported from PyTorch, no schedule saved on one,
        or every such schedule replayed already.
    """
    latest: dict[tuple, dict[str, Any]] = {}
    for row in rows:
        latest[row_key(row)] = row
    imported: dict[Path, bool] = {}
    mine = []
    for row in latest.values():
        if not row.get("graph_path"):
            continue
        graph = _inside(output, str(row["graph_path"]))
        if graph not in imported:
            imported[graph] = _imported_from_torch(graph)
        if imported[graph]:
            mine.append(row)
    if not mine:
        return f"nothing to replay: {NO_TORCH_GRAPH}"
    done = sum(bool(row.get("replay_status")) for row in mine)
    if done:
        return (f"nothing to replay: the {done} schedule{'s' if done != 1 else ''} of PyTorch graphs "
                f"{'were' if done != 1 else 'was'} replayed already")
    return (f"nothing to replay: none of the {len(mine)} runs on graphs imported from PyTorch saved a schedule "
            "(see their status and message)")


def torch_graphs(config: SweepConfig) -> int:
    """How many graphs of a config a replay would measure: its ``torch:`` entries (not traced yet) and its graph
    files imported from PyTorch.

    Parameters
    ----------
    config : SweepConfig
        A loaded config.

    Returns
    -------
    int
    """
    def from_torch(source: GraphSource) -> bool:
        if source.generated is None:
            return _imported_from_torch(source.path)
        meta = source.generated.metadata.get("torch")  # a graph file with a link of the config's (`links:`)
        return isinstance(meta, dict) and "spec" in meta

    return len(config.pending) * max(1, len(config.links)) + sum(map(from_torch, config.graphs))


def replay_row(row: dict[str, Any], output: Path, settings: ReplaySettings) -> dict[str, Any]:
    """Replay one run's schedule in a child process; the run's row with the replay's columns filled.

    Parameters
    ----------
    row : dict
        The run's latest row (`pending_replays`).
    output : Path
        The results folder.
    settings : ReplaySettings
        Repeats, device and time limit.

    Returns
    -------
    dict
        A copy of ``row`` with `REPLAY_FIELDS`: ``replay_status`` ``measured``, or ``failed`` with
        ``replay_message`` saying why in one sentence.

    Raises
    ------
    KeyboardInterrupt
        Ctrl-C during the replay: its child is stopped, nothing is recorded.
    """
    from remat_bench.toolkit.child import can_spawn, run_in_child

    args = (str(_inside(output, str(row["graph_path"]))), str(_inside(output, str(row["schedule"]))),
            settings.device, settings.repeats, settings.precision, settings.max_pairs, settings.steps)
    end = time.monotonic() + settings.time_limit
    outcome = run_in_child(replay_fields, args, lambda: time.monotonic() > end) if can_spawn() else None
    if outcome is None or outcome.termination is Termination.NOT_APPLICABLE:
        fields = replay_fields(*args)  # no child can start here (a script on stdin): in this process
    elif outcome.returned:
        fields = outcome.value
    elif outcome.termination is Termination.INTERRUPTED:
        raise KeyboardInterrupt
    elif outcome.termination is Termination.TIME_LIMIT:
        fields = _failed(f"the replay did not end within {settings.time_limit:g} s and was stopped; give it more "
                         "time with time_limit under replay in the config")
    elif outcome.died:
        fields = _failed("the replay's process ended without an answer (killed, perhaps for want of memory)")
    else:
        fields = _failed(f"the replay failed: {outcome.message}")
    return {**row, **dict.fromkeys(REPLAY_FIELDS), **fields}


def _failed(message: str) -> dict[str, Any]:
    return {"replay_status": FAILED, "replay_message": message}



# The fields of `ReplayResult.to_json` that are columns of the same name.
_FROM_REPLAY = ("measured_peak", "peak_error_pct", "outputs_match", "step_time_s", "baseline_step_time_s",
                "measured_overhead_pct", "measured_overhead_min_pct", "measured_overhead_max_pct",
                "measured_overhead_spread", "modelled_overhead_pct", "baseline_measured_peak",
                "measured_overhead_low_pct", "measured_overhead_high_pct")


def replay_fields(graph_path: str, schedule_path: str, device: str | None, repeats: int,
                  precision: float = 0.0, max_pairs: int = 1, steps: int = 0) -> dict[str, Any]:
    """Replay a schedule file here (`remat_bench.torch.replay.replay_files`, with the baseline); its columns.

    Runs in the child process `replay_row` starts. Never raises for what the replay meets: a failure is
    ``replay_status`` ``failed`` and one sentence.

    Parameters
    ----------
    graph_path : str
        The graph file.
    schedule_path : str
        The schedule file.
    device : str or None
        ``cpu``, ``cuda``, or None for CUDA when present.
    repeats : int
        Timed pairs at least, baseline then schedule.
    precision : float
        Pairs go on until the measured overhead's 95% interval is within +-this many points (0: ``repeats``).
    max_pairs : int
        Timed pairs at most.
    steps : int
        Passes timing every step in place after the pairs (`remat_bench.torch.attribution`; 0: none).

    Returns
    -------
    dict
        Some of `REPLAY_FIELDS`: the status, the device, the peaks, the outputs' check, the times and the
        overheads; ``replay_message`` holds the replay's notes (unmodelled scratch, a baseline left out).
    """
    try:
        from remat_bench.torch.replay import replay_files

        result = replay_files(graph_path, schedule_path, device, repeats=repeats, precision=precision,
                              max_pairs=max_pairs, step_passes=steps)
    except RematBenchError as exc:
        return _failed(str(exc))
    except MemoryError:
        return _failed("the replay ran out of memory")
    except Exception as exc:  # an operator or a library failing in a way replay does not know
        text = str(exc).strip()
        return _failed(f"{type(exc).__name__}: {text.splitlines()[0] if text else 'no message'}")
    notes = [result.note, f"baseline not run: {result.baseline_note}" if result.baseline_note else ""]
    printed = result.to_json()  # the columns are `replay --json`'s fields, under the sweep's names
    return {
        "replay_status": MEASURED,
        "replay_message": "; ".join(n for n in notes if n) or None,
        "replay_device": result.device,
        "replay_repeats": result.repeats,
        "replay_pairs": printed["pairs"],
        "timing_clock": result.clock or None,
        "replay_threads": result.threads,
        "attribution": None if result.attribution is None else json.dumps(result.attribution, sort_keys=True),
        "measured_within_budget": result.within_budget,
        **{name: printed[name] for name in _FROM_REPLAY},
    }

