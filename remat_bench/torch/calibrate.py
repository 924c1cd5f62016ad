"""Operator costs measured on this machine: each operator timed and its scratch memory measured, cached
by operator signature.

A calibration runs the training step in file order on real tensors (each
value freed after its last reader, as the baseline schedule does), under
`remat_bench.torch.measure.steady_timing` as a replay runs: on the CPU one
thread by default and its CPU time as the clock, freed memory kept for reuse.
The first pass warms up (oneDNN builds its kernels, the allocator's heap grows
to the step's peak) and measures the workspaces asked for; then ``repeats``
passes of the whole step time every operator whose duration is wanted right
where it stands (`remat_bench.torch.measure.op_ns`: CUDA events on CUDA), with
the tensors and caches a real step leaves it. A signature's duration is the
median of all its samples, every node of it in every pass, in nanoseconds.
Timing an operator alone, run after run on warm inputs, gave durations that
neither a baseline step nor a schedule's recomputations show
(docs/benchmarks.md, "Time you can trust").

An operator's workspace is the allocator's peak while it runs once more
(`remat_bench.torch.measure.measure_peak`) less its output's bytes.

Both depend on the operator and what it is given, and on the machine:
the signature of a node is its aten operator, the dtype, shape, strides and
offset of every tensor it reads and writes, and its other arguments; the
machine is the device (and GPU), processor, instruction set, thread count and
torch version. A node whose signature was measured before on this machine is
answered from the cache (`CostCache`), so a second import of a model runs
nothing. A workspace is known without measuring for a gradient copy (a clone
allocates its output only) and a buffer update (``copy_`` writes in place).

The cache's file is anyone's to edit, so what it says is checked before it is
believed (`implausible`): an entry whose samples do not give its median, or
whose durations no real run shows on this machine's clock, is measured again.
A duration timed otherwise than in place (by an earlier version) is timed again.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import stat
import statistics
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, TypeGuard

import torch
from torch import fx

from remat_bench.core.errors import OutputError
from remat_bench.core.files import atomic_write_text, cache_dir
from remat_bench.core.provenance import CostWarning
from remat_bench.torch.executor import Executor, State
from remat_bench.torch.measure import measure_peak, measured_where, op_ns, steady_timing, timing_threads
from remat_bench.torch.program import GRADIENT, UPDATE, Program, ProgramNode

# The environment variable naming the cost cache's file (``off`` for none).
CACHE_SETTING = "REMAT_BENCH_COST_CACHE"
CACHE_FORMAT = "remat-bench-op-costs"
CACHE_VERSION = 1
# Entries kept at most; past it the oldest are dropped when the file is written.
MAX_ENTRIES = 50_000
# The most bytes of the file that are read, and that `CostCache.save` writes (dropping the oldest entries
# to stay under it). An entry of 5 samples takes about 250 bytes, so MAX_ENTRIES of them fit several times
# over; without a limit a file that never ends (a link to /dev/zero) is read until memory runs out.
MAX_FILE_BYTES = 64 * 2**20
# The least duration (ns) a real operator run shows on the clock `op_ns` reads off CUDA (the thread's CPU
# time or the wall clock): the run is a Python call into the executor that enters `torch.no_grad` and
# dispatches an aten operator, microseconds on any processor of today. CUDA events time the kernels
# alone, and an operator that launches none (a view) reads 0, which `op_ns` makes 1: there the floor is 1.
MIN_WALL_CLOCK_NS = 100
MIN_CUDA_EVENTS_NS = 1
# The most (ns) a cached duration may be: one run of one operator taking a quarter of an hour, which a
# calibration runs ``repeats`` + 1 times. Far above any operator, and low enough that thousands of such
# nodes stay within the graph's exact duration total (2**53, `remat_bench.core.graph`).
MAX_DURATION_NS = 10**12
# The most bytes a cached workspace may be: a petabyte, above any device's memory.
MAX_WORKSPACE_BYTES = 2**50
NOT_REGULAR = "it is not a regular file (a folder, device or pipe)"
STATISTIC = "median"
WARMUP = 1  # whole passes of the step before the timed ones
# How a cached duration was timed: in place, in whole passes of the step. An entry without it was timed by an
# earlier version (an operator run again and again on its own) and is timed again.
IN_PLACE = "in place, in whole steps"

Timer = Callable[[torch.device, Callable[[], None]], int]


class OutOfTime(Exception):
    """The calibration passed its deadline; what it measured until then is in the cache."""


def cost_cache_path() -> Path | None:
    """The file of the user's cost cache: $REMAT_BENCH_COST_CACHE, else ``<user cache>/op-costs.json``.

    The user cache is $REMAT_BENCH_CACHE, else $XDG_CACHE_HOME/remat-bench, else
    ~/.cache/remat-bench (`remat_bench.core.files.cache_dir`).

    Returns
    -------
    Path or None
        None when the setting is empty, ``off``, ``0`` or ``no`` (costs kept in memory only).
    """
    setting = os.environ.get(CACHE_SETTING)
    if setting is not None:
        return None if setting.strip().lower() in ("", "off", "0", "no") else Path(setting).expanduser()
    return cache_dir() / "op-costs.json"


class CostCache:
    """Measured operator costs by signature and machine (`signature_key`), in memory and in one JSON file.

    The file is read when first needed and written by `save`, atomically, merged with
    what another process wrote meanwhile. Only a regular file is opened, and at most
    `MAX_FILE_BYTES` of it read. A file that is not a cost cache (not JSON, another
    format, a device, a pipe, too large) is ignored with a `CostWarning` and never
    written: the costs measured then stay in memory. Nor is a symbolic link written
    through (it could point anywhere). A missing or empty file is an empty cache, and
    a cost cache of another version is measured again and rewritten. An entry that is
    not as expected is a miss; one that no real measurement gives is dropped
    (`drop_implausible`). A cache that cannot be written costs time, never an import.

    Parameters
    ----------
    path : Path or None
        The file; None keeps the costs in memory only.
    """

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._entries: dict[str, dict[str, Any]] | None = None
        self._changed: dict[str, dict[str, Any]] = {}
        self._measured: set[str] = set()  # keys put by this process: measured here, not read from the file
        self._refused: str | None = None  # why the file, once read, is not a cost cache: it is never written
        self._said = False  # whether a warning said that the file is ignored or not written

    @classmethod
    def user(cls) -> CostCache:
        """The user's cost cache, on `cost_cache_path`.

        Returns
        -------
        CostCache
        """
        return cls(cost_cache_path())

    def _load(self) -> tuple[dict[str, dict[str, Any]], str | None]:
        """The file's entries, and why it is not a cost cache (None when it is one, or is missing or empty)."""
        assert self.path is not None
        try:
            # A device or pipe is not even opened: opening one can block (a pipe with no writer) or act (a
            # tape, a watchdog). The descriptor is checked again, in case the file changed in between.
            if not stat.S_ISREG(os.stat(self.path).st_mode):
                return {}, NOT_REGULAR
            fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        except FileNotFoundError:
            return {}, None
        except OSError as exc:
            return {}, f"it cannot be read ({exc.strerror or exc.__class__.__name__})"
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return {}, NOT_REGULAR
            with os.fdopen(fd, "rb", closefd=False) as fh:
                raw = fh.read(MAX_FILE_BYTES + 1)
        except OSError as exc:
            return {}, f"it cannot be read ({exc.strerror or exc.__class__.__name__})"
        finally:
            os.close(fd)
        if len(raw) > MAX_FILE_BYTES:
            return {}, f"it is larger than {MAX_FILE_BYTES // 2**20} MiB, more than a cost cache holds"
        if not raw.strip():
            return {}, None  # an empty file (as mktemp makes one): an empty cache
        try:
            data = json.loads(raw.decode("utf-8"))
        except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
            return {}, "it is not JSON"
        if not isinstance(data, dict) or data.get("format") != CACHE_FORMAT or not isinstance(data.get("entries"),
                                                                                              dict):
            return {}, "it is not a remat-bench operator cost cache"
        if data.get("version") != CACHE_VERSION:
            return {}, None  # another version's entries: measured again, and the file rewritten
        return {k: v for k, v in data["entries"].items() if isinstance(k, str) and isinstance(v, dict)}, None

    def _read(self, warn: bool) -> dict[str, dict[str, Any]]:
        if self.path is None:
            return {}
        entries, why = self._load()
        if why is not None:
            if warn and not self._said:
                fix = (f"set {CACHE_SETTING} to a regular file" if why == NOT_REGULAR else
                       f"delete the file if it is a damaged cost cache, or set {CACHE_SETTING} to another file")
                warnings.warn(f"the operator cost cache {self.path} was ignored and is left as it is: {why}; "
                              f"operators are measured again and their costs kept in memory only ({fix})",
                              CostWarning, stacklevel=4)
                self._said = True
            self._refused = self._refused or why
        return entries

    @property
    def entries(self) -> dict[str, dict[str, Any]]:
        """Every entry, by key (the file read on first use).

        Returns
        -------
        dict
        """
        if self._entries is None:
            self._entries = self._read(warn=True)
        return self._entries

    def get(self, key: str) -> dict[str, Any] | None:
        """The entry of ``key``, or None.

        Parameters
        ----------
        key : str
            A `signature_key`.

        Returns
        -------
        dict or None
            Its fields: ``ns`` (the median), ``samples``, ``repeats``, ``statistic``, ``workspace`` (bytes),
            ``op``, ``when``.
        """
        return self.entries.get(key)

    def put(self, key: str, **fields: Any) -> None:
        """Add ``fields`` to the entry of ``key`` (made if missing); `save` writes it.

        Parameters
        ----------
        key : str
            A `signature_key`.
        **fields : Any
            JSON values.
        """
        entry = {**self.entries.get(key, {}), **fields,
                 "when": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")}
        self.entries[key] = entry
        self._changed[key] = entry
        self._measured.add(key)

    def drop_implausible(self, keys: Iterable[str], floor_ns: int) -> int:
        """Drop the entries of ``keys`` read from the file that no real measurement gives (`implausible`),
        so that their operators are measured again; say so in one `CostWarning` naming the file.

        Parameters
        ----------
        keys : iterable of str
            `signature_key` values of one machine.
        floor_ns : int
            The least duration that machine's clock shows for a real operator run (`duration_floor_ns`).

        Returns
        -------
        int
            The entries dropped.
        """
        dropped: list[str] = []
        for key in dict.fromkeys(keys):
            entry = self.entries.get(key)
            why = None if entry is None or key in self._measured else implausible(entry, floor_ns)
            if why is not None:
                del self.entries[key]
                dropped.append(why)
        if dropped:
            warnings.warn(f"the operator cost cache {self.path} held {len(dropped)} "
                          f"{'entry' if len(dropped) == 1 else 'entries'} that no real measurement gives (the "
                          f"first: {dropped[0]}); those operators are measured again", CostWarning, stacklevel=3)
        return len(dropped)

    def save(self) -> None:
        """Write the entries added since the last save into the file, merged with what it holds now.

        The file is left alone, and that said once in a `CostWarning`, when it is a symbolic link or not a
        cost cache; likewise when it cannot be written. The entries stay in memory.
        """
        if self.path is None or not self._changed:
            return
        on_disk = self._read(warn=False)
        refused = ("it is a symbolic link, which is not written through" if os.path.islink(self.path)
                   else None if self._refused is None else f"it is not a cost cache: {self._refused}")
        if refused is not None:
            if not self._said:
                warnings.warn(f"the operator cost cache {self.path} was not written: {refused}; the costs measured "
                              f"now are kept in memory only (set {CACHE_SETTING} to a regular file)", CostWarning,
                              stacklevel=2)
                self._said = True
            self._changed = {}
            return
        merged = {**on_disk, **self._changed}
        text = _cache_text(merged)
        try:
            atomic_write_text(self.path, text)
        except OutputError as exc:
            warnings.warn(f"the operator cost cache was not written ({exc}); the costs are measured again next "
                          f"time (set {CACHE_SETTING} to use another file)", CostWarning, stacklevel=2)
        self._changed = {}


def _cache_text(entries: dict[str, dict[str, Any]]) -> str:
    """The file's text: ``format`` first (what `remat_bench.core.files.file_format` reads), then the newest
    entries, at most `MAX_ENTRIES` of them in at most `MAX_FILE_BYTES`."""
    newest_first = sorted(entries, key=lambda k: str(entries[k].get("when", "")), reverse=True)[:MAX_ENTRIES]
    head = json.dumps({"format": CACHE_FORMAT, "version": CACHE_VERSION}, separators=(",", ":"))[:-1]
    head += ',"entries":{'
    kept: dict[str, str] = {}
    size = len(head) + 2  # json.dumps writes ASCII: characters are bytes
    for key in newest_first:
        item = f"{json.dumps(key)}:{json.dumps(entries[key], separators=(',', ':'), sort_keys=True)}"
        if size + len(item) + 1 > MAX_FILE_BYTES:
            break
        kept[key] = item
        size += len(item) + 1
    return head + ",".join(kept[k] for k in sorted(kept)) + "}}"


def duration_floor_ns(device: torch.device) -> int:
    """The least duration `remat_bench.torch.measure.op_ns` gives for a real operator run on ``device``.

    Parameters
    ----------
    device : torch.device
        Where operators are timed.

    Returns
    -------
    int
        `MIN_CUDA_EVENTS_NS` on CUDA (events time the kernels alone), else `MIN_WALL_CLOCK_NS`.
    """
    return MIN_CUDA_EVENTS_NS if device.type == "cuda" else MIN_WALL_CLOCK_NS


def _count(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def implausible(entry: dict[str, Any], floor_ns: int) -> str | None:
    """Why a cache entry is not what a calibration writes (`_run`), or None when it could be.

    A timed entry holds ``repeats`` samples for each node of its signature (a multiple of ``repeats``),
    each a duration the clock can show (``floor_ns`` to `MAX_DURATION_NS`), and ``ns`` is their median
    as `_run` rounds it; a workspace is a
    byte count up to `MAX_WORKSPACE_BYTES`. Every real measurement passes.

    Parameters
    ----------
    entry : dict
        A cache entry.
    floor_ns : int
        The least duration of a real run on the entry's machine (`duration_floor_ns`).

    Returns
    -------
    str or None
        A phrase naming what is wrong, or None.
    """
    if "op" in entry and not isinstance(entry["op"], str):
        return "an operator that is not a name"
    if "workspace" in entry:
        ws = entry["workspace"]
        if not _count(ws) or not 0 <= ws <= MAX_WORKSPACE_BYTES:
            return f"a workspace that is not a byte count from 0 to {MAX_WORKSPACE_BYTES:,}"
    if not any(k in entry for k in ("ns", "samples", "repeats", "statistic")):
        return None  # a workspace only
    ns, samples, runs = entry.get("ns"), entry.get("samples"), entry.get("repeats")
    if entry.get("statistic") != STATISTIC:
        return f"a duration that is not a {STATISTIC}"
    if not _count(runs) or runs < 1 or not isinstance(samples, list) or not samples or len(samples) % runs:
        return "samples that are not a multiple of the repeats"
    if not all(_count(t) and floor_ns <= t <= MAX_DURATION_NS for t in samples):
        return f"a duration outside the {floor_ns:,} to {MAX_DURATION_NS:,} ns a real run shows on its clock"
    if not _count(ns) or ns != max(1, round(statistics.median(samples))):
        return "a duration that is not the median of its samples"
    return None


# ---------------------------------------------------------------------- signatures


def _describe(value: Any) -> Any:
    """A JSON value standing for ``value``: a tensor by dtype, shape, strides and offset; an FX node by its value."""
    if isinstance(value, fx.Node):
        value = value.meta.get("val")
    if isinstance(value, torch.Tensor):
        return ["tensor", str(value.dtype), list(value.shape), list(value.stride()), int(value.storage_offset())]
    if isinstance(value, (list, tuple)):
        return [_describe(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _describe(v) for k, v in value.items()}
    if isinstance(value, (bool, int, str)) or value is None:
        return value
    if isinstance(value, float):
        return repr(value)  # nan and inf too
    return str(value)  # dtypes, devices, layouts, memory formats


def op_signature(node: ProgramNode) -> dict[str, Any] | None:
    """What a node's cost depends on, apart from the machine: its operator and what it reads and writes.

    Parameters
    ----------
    node : ProgramNode
        A node of a traced program.

    Returns
    -------
    dict or None
        ``op``, ``args``, ``kwargs`` and ``out`` (`_describe`d); None for a node that runs nothing.
    """
    n = node.fx
    if n is None:
        return None
    if node.role == GRADIENT:
        return {"op": "clone (gradient copy)", "out": _describe(n)}
    return {"op": str(n.target), "role": node.role, "args": _describe(list(n.args)),
            "kwargs": _describe(dict(n.kwargs)), "out": _describe(n)}


def machine_key(device: torch.device) -> dict[str, Any]:
    """What a measured cost depends on besides the operator: device, processor, threads, torch version.

    Parameters
    ----------
    device : torch.device
        Where operators run.

    Returns
    -------
    dict
        `remat_bench.torch.measure.measured_where` and ``torch``, the torch version.
    """
    return {**measured_where(device), "torch": torch.__version__}


def signature_key(signature: dict[str, Any], machine: dict[str, Any]) -> str:
    """The cache key of an operator signature measured on a machine.

    Parameters
    ----------
    signature : dict
        `op_signature`.
    machine : dict
        `machine_key`.

    Returns
    -------
    str
        32 hex digits of the SHA-256 of both, as canonical JSON.
    """
    text = json.dumps([signature, machine], sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def workspace_known_zero(node: ProgramNode) -> bool:
    """Whether a node's workspace is 0 without measuring it: a gradient copy allocates exactly its output
    (`torch.clone` of the gradient), a buffer update writes into the buffer and allocates nothing.

    Parameters
    ----------
    node : ProgramNode
        A node of a traced program.

    Returns
    -------
    bool
    """
    return node.fx is None or node.role in (GRADIENT, UPDATE)


# ---------------------------------------------------------------------- calibrating


@dataclass
class Calibration:
    """What a calibration gives: per node, its duration (ns) and workspace (bytes), and how each was known.

    ``durations`` or ``workspace`` is None when it was not asked for. ``timed`` and
    ``measured`` count the distinct signatures run now; ``from_cache`` the nodes
    answered from the cache; ``known_zero`` the workspaces known without measuring
    (`workspace_known_zero`); ``ran`` whether the step ran at all.
    """

    durations: list[int] | None
    workspace: list[int] | None
    machine: dict[str, Any]
    repeats: int
    timed: int = 0
    measured: int = 0
    from_cache: int = 0
    known_zero: int = 0
    ran: bool = False


def _in_file_order(program: Program, state: State) -> Iterator[tuple[int, Executor]]:
    """Yield each node index of a pass in file order; inputs are freed after their last reader."""
    n = len(program.nodes)
    last_use = list(range(n))
    for v, node in enumerate(program.nodes):
        for u in node.inputs:
            last_use[u] = max(last_use[u], v)
    frees: dict[int, list[int]] = {}
    for v in sorted(set(range(n)) - set(program.outputs())):
        frees.setdefault(last_use[v], []).append(v)
    ex = Executor(program, state)
    for v in range(n):
        yield v, ex  # the caller computes v
        for u in frees.get(v, ()):
            ex.free(u)


def _usable_ns(entry: dict[str, Any] | None, repeats: int) -> int | None:
    """An entry's duration when it was timed in place (`IN_PLACE`) in at least ``repeats`` passes."""
    if not entry or entry.get("timed") != IN_PLACE:
        return None
    ns, runs = entry.get("ns"), entry.get("repeats")
    if isinstance(ns, int) and not isinstance(ns, bool) and ns >= 1 and isinstance(runs, int) and runs >= repeats:
        return ns
    return None


def _usable_workspace(entry: dict[str, Any] | None) -> int | None:
    if not entry:
        return None
    ws = entry.get("workspace")
    return ws if isinstance(ws, int) and not isinstance(ws, bool) and ws >= 0 else None


def calibrate(program: Program, device: torch.device, *, durations: bool = True, workspace: bool = True,
              repeats: int = 5, cache: CostCache | None = None, may_run: bool = True,
              timer: Timer | None = None, deadline: float | None = None,
              threads: int | None = None) -> Calibration | None:
    """Each node's duration and workspace on ``device``: from the cache where it knows them, else measured.

    Parameters
    ----------
    program : Program
        The lowered training step.
    device : torch.device
        Where its operators run.
    durations : bool
        Whether durations are wanted (the median of ``repeats`` timed runs, ns).
    workspace : bool
        Whether workspaces are wanted (bytes beyond the node's output).
    repeats : int
        Timed passes of the step after its warm-up pass, every operator timed in place in each; an entry of
        the cache timed in fewer is timed again.
    cache : CostCache or None
        Where measured costs are looked up and added (None: in memory, for this call only).
    may_run : bool
        Whether the step may run here; when it may not and the cache does not know every cost asked, the
        answer is None (nothing is run).
    timer : callable or None
        ``timer(device, fn)``: nanoseconds ``fn`` takes (None: `remat_bench.torch.measure.op_ns`).
    deadline : float or None
        Wall-clock time (``time.time()``) by which measuring stops (None: none).
    threads : int or None
        CPU threads for the operators (None: `remat_bench.torch.measure.CPU_TIMING_THREADS`); ignored on
        CUDA. The machine key records them: a replay runs with the same.

    Returns
    -------
    Calibration or None
        None only when the step would have to run and ``may_run`` is false.

    Raises
    ------
    ExecutionError
        An operator that fails on real tensors.
    OutOfTime
        The deadline passed before every cost asked was measured; those measured are saved in the cache, so
        that a calibration given the time again goes on from there.
    """
    cache = cache if cache is not None else CostCache(None)
    with steady_timing(device, timing_threads(device, threads)):
        return _calibrate(program, device, durations, workspace, repeats, cache, may_run, timer or op_ns, deadline)


def _calibrate(program: Program, device: torch.device, durations: bool, workspace: bool, repeats: int,
               cache: CostCache, may_run: bool, timer: Timer, deadline: float | None) -> Calibration | None:
    """`calibrate` under the timing settings: what the cache knows, then one run for the rest."""
    machine = machine_key(device)
    nodes = program.nodes
    keys = [None if (sig := op_signature(nd)) is None else signature_key(sig, machine) for nd in nodes]
    out = Calibration(durations=[1] * len(nodes) if durations else None,
                      workspace=[0] * len(nodes) if workspace else None, machine=machine, repeats=repeats)
    time_now: set[str] = set()  # signatures timed in this run (every node of them, in place)
    measure_now: set[int] = set()  # nodes whose workspace is measured (the first of their signature)
    first: dict[str, int] = {}
    cache.drop_implausible((k for k in keys if k is not None), duration_floor_ns(device))
    for v, (node, key) in enumerate(zip(nodes, keys)):
        if key is None:
            continue
        entry = cache.get(key)
        cached_ns, cached_ws = _usable_ns(entry, repeats), _usable_workspace(entry)
        leader = first.setdefault(key, v) == v
        known = workspace_known_zero(node)
        if durations and cached_ns is None:
            time_now.add(key)
        if workspace and not known and cached_ws is None and leader:
            measure_now.add(v)
        out.known_zero += bool(workspace and known)
        out.from_cache += bool((not durations or cached_ns is not None)
                               and (not workspace or known or cached_ws is not None))
    if (time_now or measure_now) and not may_run:
        return None
    if time_now or measure_now:
        try:
            _run(program, device, keys, time_now, measure_now, repeats, cache, timer, deadline)
        finally:
            cache.save()
        out.timed, out.measured, out.ran = len(time_now), len(measure_now), True
    # Every node takes the costs of its signature: cached before, or measured now.
    for v, key in enumerate(keys):
        entry = cache.get(key) if key is not None else None
        if out.durations is not None and key is not None:
            out.durations[v] = _usable_ns(entry, repeats) or 1
        if out.workspace is not None and key is not None and not workspace_known_zero(nodes[v]):
            out.workspace[v] = _usable_workspace(entry) or 0
    return out


def _run(program: Program, device: torch.device, keys: list[str | None], time_now: set[str],
         measure_now: set[int], repeats: int, cache: CostCache, timer: Timer, deadline: float | None) -> None:
    """The calibration: a warm-up pass of the step in file order measuring ``measure_now``'s workspaces, then
    ``repeats`` passes timing every node of the signatures ``time_now`` in place."""
    nodes = program.nodes
    state = State.create(program.spec, device)

    def in_time() -> None:
        if deadline is not None and time.time() > deadline:
            raise OutOfTime

    for v, ex in _in_file_order(program, state):
        in_time()
        ex.compute(v)  # the pass's run: it makes v's value for its readers, and warms v up
        if v in measure_now:
            ex.free(v)
            peak = measure_peak(device, partial(ex.compute, v))
            key = keys[v]
            assert key is not None  # measure_now holds nodes with a signature
            cache.put(key, op=_op_text(nodes[v]), workspace=max(0, int(peak) - int(nodes[v].memory)))
    if not time_now:
        return
    samples: dict[str, list[int]] = {key: [] for key in time_now}
    for _ in range(repeats):
        for v, ex in _in_file_order(program, state):
            in_time()
            key = keys[v]
            if key in samples:
                samples[key].append(int(timer(device, partial(ex.compute, v))))
            else:
                ex.compute(v)
    for v, key in enumerate(keys):
        if key is not None and samples.get(key):
            taken = samples.pop(key)
            cache.put(key, op=_op_text(nodes[v]), ns=max(1, round(statistics.median(taken))), samples=taken,
                      repeats=repeats, statistic=STATISTIC, timed=IN_PLACE)


def _op_text(node: ProgramNode) -> str:
    return "clone (gradient copy)" if node.role == GRADIENT else str(node.runs().target)
