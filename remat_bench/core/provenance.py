"""Where a graph's costs come from: how its durations and workspaces were obtained, and on what machine.

A graph imported from PyTorch records it in ``metadata["costs"]``
(`remat_bench.torch.importer`): durations ``calibrated`` (each operator timed
on this machine, the median of its runs, in ns), ``flops`` (counted from the
trace) or ``roofline`` (estimated on a device profile, in ns, nothing timed:
`remat_bench.core.device_profile`); workspaces (operators' scratch memory)
``measured`` on this machine, ``none`` (0, as asked) or ``unmeasured`` (0
because the step could not run here); the device, processor, threads, torch version, repeats and statistic
of the measurement, and when. Older imports have only ``metadata["torch"]``'s
duration unit and, when measured, where their workspaces were measured; any
other graph's costs are what its file says.

A simulator predicts a real run only as well as these costs do: a schedule
solved on a graph whose workspaces were not measured can peak above its
simulated peak when it runs (`unmeasured_memory_warning`), and overheads of
graphs whose durations come from different sources or machines are not
measured alike (`mixed_sources`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

COSTS_KEY = "costs"
# Values of a cost record's ``durations``: counted from the trace, timed on a machine, or estimated on a device
# profile (whose figures the record keeps under ``device_profile``).
COUNTED, CALIBRATED, ROOFLINE = "flops", "calibrated", "roofline"
# Values of its ``workspace``: measured on a machine, 0 as asked, or 0 because nothing could be measured.
MEASURED, NONE, UNMEASURED = "measured", "none", "unmeasured"


class CostWarning(UserWarning):
    """An import whose costs are not what was asked (not measured here), or a cost cache that was ignored."""


@dataclass(frozen=True)
class CostSource:
    """How one graph's costs were obtained (module docstring).

    ``durations``: ``calibrated``, ``flops``, ``roofline`` or, for a graph not
    imported from PyTorch, ``file`` (what the file says). ``device_profile``:
    for ``roofline``, the profile's name, source and figures. ``workspace``:
    ``measured``, ``none``, ``unmeasured`` or ``file``. ``where``: the device, processor,
    threads and torch version of the measurement (empty when nothing was
    measured). ``imported``: the graph was imported from PyTorch.
    """

    durations: str
    duration_unit: str
    workspace: str
    imported: bool
    where: Mapping[str, Any] = field(default_factory=dict)
    repeats: int | None = None
    statistic: str | None = None
    when: str | None = None
    notes: tuple[str, ...] = ()
    device_profile: Mapping[str, Any] = field(default_factory=dict)
    timed_in: str | None = None  # how each operator was timed: "in place, in whole steps" (None: alone, before)

    @property
    def timed(self) -> bool:
        """Whether the durations were measured on a machine (rather than counted or given).

        Returns
        -------
        bool
        """
        return self.durations == CALIBRATED or (self.durations == "file" and self.duration_unit == "ns")

    def machine(self) -> str:
        """The machine the costs were measured on, in words (empty when nothing was measured).

        Returns
        -------
        str
            E.g. ``cpu, AMD EPYC, 2 threads, torch 2.14.1``.
        """
        w = self.where
        if not w:
            return ""
        parts = [str(w.get("device", "?"))]
        if w.get("gpu"):
            parts.append(str(w["gpu"]))
        if w.get("processor"):
            parts.append(str(w["processor"]))
        if w.get("threads") is not None:
            parts.append(f"{w['threads']} thread{'s' if w['threads'] != 1 else ''}")
        if w.get("torch"):
            parts.append(f"torch {w['torch']}")
        return ", ".join(parts)

    def label(self) -> str:
        """What a comparison between graphs must hold equal: how durations were obtained, and where.

        Returns
        -------
        str
            ``counted (flops)``, ``timed on <machine>``, ``roofline of device profile <name>`` or ``given in
            the file (<unit>)``.
        """
        if self.durations == CALIBRATED:
            return f"timed on {self.machine() or 'an unknown machine'}"
        if self.durations == "file":
            return f"given in the file ({self.duration_unit or 'no unit'})"
        if self.durations == ROOFLINE:
            return f"roofline of device profile {self.device_profile.get('name', '?')}"
        return f"counted ({self.duration_unit})"

    def describe(self) -> str:
        """The whole source in one line, for `graphs show`, `solve` and reports.

        Returns
        -------
        str
        """
        if self.durations == CALIBRATED:
            if self.timed_in:  # in place in whole passes of the step (`remat_bench.torch.calibrate.IN_PLACE`)
                runs = f"{self.repeats} pass{'es' if self.repeats != 1 else ''} of the step, each operator in place"
            else:
                runs = f"{self.repeats} run{'s' if self.repeats != 1 else ''}"
            how = f"{self.statistic or 'timed'} of {runs}" if self.repeats else "timed"
            durations = f"durations calibrated ({how}, {self.duration_unit})"
        elif self.durations == "file":
            durations = f"durations as the file gives them (in {self.duration_unit or 'no unit'})"
        elif self.durations == ROOFLINE:
            profile = self.device_profile
            durations = (f"durations: {self.label()} ({profile.get('source', 'source not given')}), "
                         f"{self.duration_unit}, estimated, not timed")
        else:
            durations = f"durations counted ({self.duration_unit}, not timed)"
        workspace = {MEASURED: "workspaces measured",
                     NONE: "workspaces 0 (not measured)",
                     UNMEASURED: "workspaces 0 (not measured: the step could not be measured here)",
                     "file": "workspaces as the file gives them"}.get(self.workspace, f"workspaces {self.workspace}")
        where = self.machine()
        text = f"{durations}; {workspace}"
        if where:  # where the costs were measured: with a roofline, only the workspaces were
            text += f" on {where}" if self.durations == ROOFLINE else f"; on {where}"
        if self.when:
            text += f"; {self.when}"
        return text


def cost_source(graph: Any) -> CostSource:
    """How ``graph``'s costs were obtained, read from its metadata (module docstring).

    Parameters
    ----------
    graph : Graph
        Any graph; only its ``metadata`` and ``units`` are read.

    Returns
    -------
    CostSource
        From ``metadata["costs"]``; for an older PyTorch import, from ``metadata["torch"]``; for any other
        graph, ``file`` for both.
    """
    unit = str(graph.units.get("duration", "") or "")
    meta = graph.metadata if isinstance(graph.metadata, dict) else {}
    record = meta.get(COSTS_KEY)
    torch_meta = meta.get("torch")
    imported = isinstance(torch_meta, dict) and "spec" in torch_meta
    if isinstance(record, dict):
        where, profile = record.get("measured_on"), record.get("device_profile")
        return CostSource(
            durations=str(record.get("durations", COUNTED)), duration_unit=str(record.get("duration_unit", unit)),
            workspace=str(record.get("workspace", NONE)), imported=imported,
            where=dict(where) if isinstance(where, dict) else {},
            device_profile=dict(profile) if isinstance(profile, dict) else {},
            repeats=record.get("repeats") if isinstance(record.get("repeats"), int) else None,
            statistic=record.get("statistic") if isinstance(record.get("statistic"), str) else None,
            when=record.get("when") if isinstance(record.get("when"), str) else None,
            notes=tuple(str(n) for n in record.get("notes", ()) if isinstance(n, str)),
            timed_in=record.get("timed") if isinstance(record.get("timed"), str) else None,
        )
    if imported and isinstance(torch_meta, dict):  # imported before cost records: FLOPs, or "profile" (ns)
        where = torch_meta.get("workspace")
        where = dict(where) if isinstance(where, dict) else {}
        if where and "torch" not in where and torch_meta.get("torch_version"):
            where["torch"] = torch_meta["torch_version"]
        timed = torch_meta.get("durations") == "ns"
        return CostSource(durations=CALIBRATED if timed else COUNTED, duration_unit=unit,
                          workspace=MEASURED if where else NONE, imported=True, where=where,
                          repeats=3 if timed else None, statistic="least" if timed else None)
    return CostSource(durations="file", duration_unit=unit, workspace="file", imported=False)


def unmeasured_memory_warning(graph: Any) -> str | None:
    """One sentence when ``graph`` was imported from PyTorch without measuring its operators' scratch memory.

    Parameters
    ----------
    graph : Graph
        Any graph.

    Returns
    -------
    str or None
        The warning; None for a graph with measured workspaces, or not imported from PyTorch.
    """
    source = cost_source(graph)
    if not source.imported or source.workspace == MEASURED:
        return None
    return (f"graph '{graph.name}' was imported without measuring its operators' scratch memory (every workspace "
            "is 0), so a real run's peak can exceed the simulated one; import it again with `--workspace auto` "
            "on the machine that will run it")


def mixed_sources(sources: Mapping[str, CostSource | None]) -> str | None:
    """One sentence when a comparison mixes graphs whose durations were obtained differently or elsewhere.

    Graphs whose durations are counted (FLOPs) or given in their files compare
    among themselves; graphs timed on one machine compare among themselves, and
    so do graphs estimated on one device profile; a mix of these, or of
    machines or profiles, does not measure overhead alike.

    Parameters
    ----------
    sources : Mapping of str to CostSource or None
        Graph name -> its source (None: unknown, e.g. a graph file that is gone; left out).

    Returns
    -------
    str or None
        The sentence, naming each source and its graphs; None when all agree.
    """
    groups: dict[str, list[str]] = {}
    for name, source in sources.items():
        if source is None:
            continue
        # Counted and given durations are alike (neither was timed), unless a file's are nanoseconds; roofline
        # estimates are alike on one device profile.
        key = source.label() if source.timed or source.durations == ROOFLINE else "counted"
        groups.setdefault(key, []).append(name)
    if len(groups) < 2:
        return None

    def shown(key: str, names: list[str]) -> str:
        listed = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        what = "counted or given (not timed)" if key == "counted" else key
        return f"{what} for {listed}"

    return ("these graphs' durations come from different sources (" + "; ".join(
        shown(k, v) for k, v in groups.items()) + "), so their overheads are not measured alike")


def measured_threads(metadata: Mapping[str, Any]) -> int | None:
    """The CPU threads a graph's costs were measured with (its durations', else its workspaces'): a replay
    runs with as many; None when nothing was measured on a CPU.

    Parameters
    ----------
    metadata : Mapping
        The graph's metadata.

    Returns
    -------
    int or None
    """
    costs = metadata.get("costs")
    torch_meta = metadata.get("torch")
    for where in (costs.get("measured_on") if isinstance(costs, dict) else None,
                  torch_meta.get("workspace") if isinstance(torch_meta, dict) else None):
        if isinstance(where, dict) and str(where.get("device", "cpu")).startswith("cpu"):
            threads = where.get("threads")
            if isinstance(threads, int) and not isinstance(threads, bool) and threads >= 1:
                return threads
    return None
