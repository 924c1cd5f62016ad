"""Run a checked sweep config: skip what the journal holds, run the rest, record every row at once.

The runner submits one `supervise` call per pending run to the executor and
appends each row to the journal as it arrives (in the calling process, so
one process writes the journal). At the end, or on Ctrl-C, it rebuilds the
table from the journal, so the table always holds every run ever finished in
the folder, once. A run the executor itself loses (a Dask worker machine
gone) is not a result: it is reported, not recorded, and ``--resume`` runs it
again; so is every run of a Dask cluster left without workers for
`NO_WORKERS_TIMEOUT_S`, which would otherwise wait forever.

Before any run, the results folder is checked for writing (one sentence, exit
status 2, rather than a traceback or runs whose results cannot be kept) and
locked for this sweep (`LOCK`), so that a second sweep or a ``--resume`` on the
same folder is refused instead of running the same runs twice. A sweep refused
then leaves nothing behind: the folders it made and its lock file go. A dry run
checks the folder the same way without making anything.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
import stat
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, CancelledError, Executor, Future, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pandas as pd

from remat_bench.app.sweep.executors import (
    RunInterrupted,
    live_workers,
    open_executor,
    runs_at_once,
    stop_all,
    supervise,
)
from remat_bench.app.sweep.journal import JOURNAL, Journal
from remat_bench.app.sweep.profiles import build_progress, write_progress
from remat_bench.app.sweep.results import CSV, TABLE, build_table, write_table
from remat_bench.app.sweep.runs import RunSpec, SweepConfig
from remat_bench.app.sweep.tracing import trace_torch_graphs
from remat_bench.app.sweep.worker import SWEEP_FAULT
from remat_bench.core.errors import ConfigError
from remat_bench.core.files import atomic_write_text
from remat_bench.core.graph_io import save_graph

# The lock file of a results folder (see `_locked`).
LOCK = ".sweep.lock"
# A Dask cluster without a single worker for this long, while runs wait, ends the sweep (exit 1); long
# enough for workers that are still starting, or that their nanny restarts.
NO_WORKERS_TIMEOUT_S = 60.0
# How often the runner looks at the executor while it waits for runs.
POLL_S = 1.0


class Reporter(Protocol):
    """What the runner tells about progress (the CLI shows a progress bar; tests pass nothing)."""

    def start(self, total: int, skipped: int, pending: int) -> None:
        """The sweep begins.

        Parameters
        ----------
        total : int
            The runs of the config.
        skipped : int
            Those the journal already holds (``--resume``).
        pending : int
            Those to run now.
        """
        ...

    def finished(self, row: dict[str, Any]) -> None:
        """A run ended and its row is journalled.

        Parameters
        ----------
        row : dict
            The run's results row.
        """
        ...

    def lost(self, spec: RunSpec, error: str) -> None:
        """The executor lost a run (not recorded: ``--resume`` runs it again).

        Parameters
        ----------
        spec : RunSpec
            The run lost.
        error : str
            What the executor said.
        """
        ...

    def note(self, text: str) -> None:
        """Something to tell the user that is no run's end.

        Parameters
        ----------
        text : str
            One line.
        """
        ...

    def replaying(self, total: int) -> None:
        """The runs are done and ``total`` schedules of PyTorch graphs are to be replayed, one at a time.

        Parameters
        ----------
        total : int
            The replays to do now (those a resumed sweep has done already are not counted).
        """
        ...

    def replayed(self, row: dict[str, Any]) -> None:
        """A replay ended and the run's row, with it, is journalled.

        Parameters
        ----------
        row : dict
            The run's row with its replay columns (`remat_bench.app.sweep.replays`).
        """
        ...

    def close(self) -> None:
        """The sweep's runs are over (or interrupted): nothing more is told."""
        ...


class _Silent:
    def start(self, total: int, skipped: int, pending: int) -> None:
        pass

    def finished(self, row: dict[str, Any]) -> None:
        pass

    def lost(self, spec: RunSpec, error: str) -> None:
        pass

    def note(self, text: str) -> None:
        pass

    def replaying(self, total: int) -> None:
        pass

    def replayed(self, row: dict[str, Any]) -> None:
        pass

    def close(self) -> None:
        pass


@dataclass
class SweepOutcome:
    """What a sweep did: the table (every run in the folder), and what happened this time."""

    output: Path
    table: pd.DataFrame
    planned: int
    skipped: int
    finished: int
    lost: list[tuple[RunSpec, str]] = field(default_factory=list)
    interrupted: bool = False
    written: list[Path] = field(default_factory=list)
    # Rows of runs that failed for reasons of the sweep itself (an unwritable schedule or log, the
    # worker failing outside the method): recorded, and run again by --resume.
    faults: list[dict[str, Any]] = field(default_factory=list)
    # Why the sweep itself stopped before its runs were done (no Dask workers, a journal that cannot be
    # written), in one sentence; None when it did not.
    failure: str | None = None
    # Schedules replayed this time (`replay:`), and how many of those replays failed.
    replayed: int = 0
    replay_failures: int = 0


def plan(config: SweepConfig, resume: bool) -> tuple[list[RunSpec], int]:
    """The runs still to do and how many the journal already holds; refuses to mix into an old sweep.

    Parameters
    ----------
    config : SweepConfig
        A checked config.
    resume : bool
        Continue the sweep the results folder's journal holds, skipping its runs.

    Returns
    -------
    tuple of (list of RunSpec, int)
        The pending runs in the config's order, and how many were skipped.

    Raises
    ------
    ConfigError
        The results folder already holds a sweep and ``resume`` is False.
    """
    journal = Journal(config.output / JOURNAL)
    if journal.exists() and not resume:
        raise ConfigError(
            f"{config.output} already holds a sweep ({JOURNAL}); pass --resume to continue it, "
            "or choose another --output"
        )
    done = journal.keys() if resume else set()
    pending = [spec for spec in config.runs if spec.key not in done]
    return pending, len(config.runs) - len(pending)


def check_output(out: Path, csv: bool = False, create: bool = True) -> None:
    """Refuse, before any run, a results folder the sweep could not write: one `ConfigError` sentence.

    The folder is created if needed (so a read-only parent is found here); then a file is created and
    removed in it and in each subfolder it already has, and every file the sweep appends to or replaces
    is opened for writing (nothing is written). Only trying finds out: permission bits do not stop root,
    while an immutable folder (``chattr +i``), a read-only mount or a file where a folder belongs do.
    With ``create=False`` (``--dry-run``) nothing is made: a folder that does not exist yet is tried in
    the nearest folder above it that does, where the sweep would make it.

    Parameters
    ----------
    out : Path
        The results folder.
    csv : bool
        The sweep writes ``results.csv`` too: check it as well.
    create : bool
        Make the folder if needed; False tries the nearest folder above it instead.

    Raises
    ------
    ConfigError
        A folder or file the sweep needs that cannot be made or written, or a file where a folder belongs.
    """
    def refuse(path: Path, exc: OSError) -> ConfigError:
        detail = ("" if path == out else f"{path}: ") + (exc.strerror or str(exc))
        if exc.errno == errno.EPERM:  # what root gets from an immutable file or folder
            detail += ", immutable?"
        return ConfigError(f"the results folder {out} cannot be written ({detail}); make it writable "
                           "or choose another --output")

    if out.exists() and not out.is_dir():
        raise ConfigError(f"the results folder {out} is a file, not a folder; choose another --output")
    if not create and not out.exists():
        above = next(folder for folder in out.parents if folder.exists())
        if not above.is_dir():
            raise ConfigError(f"the results folder {out} cannot be made: {above} is a file, not a folder; choose "
                              "another --output")
        try:
            fd, probe = tempfile.mkstemp(prefix=".probe-", dir=above)
            os.close(fd)
            os.unlink(probe)
        except OSError as exc:
            raise refuse(above, exc) from None
        return
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise refuse(out, exc) from None
    folders = [out]
    for name in ("schedules", "logs", "graphs"):
        sub = out / name
        if sub.exists() and not sub.is_dir():
            raise ConfigError(f"the results folder {out} holds a file '{name}' where the sweep keeps its {name} "
                              "folder; move it away or choose another --output")
        if sub.exists():
            folders.append(sub)
    for folder in folders:
        try:
            fd, probe = tempfile.mkstemp(prefix=".probe-", dir=folder)
            os.close(fd)
            os.unlink(probe)
        except OSError as exc:
            raise refuse(folder, exc) from None
    for name in (JOURNAL, LOCK, "config.yaml", TABLE, *([CSV] if csv else [])):
        path = out / name
        if path.exists():
            # A pipe would hold the open (and the sweep) until a reader came; a device is no record.
            if not stat.S_ISREG(os.stat(path).st_mode):
                raise ConfigError(f"the results folder {out} holds {name}, which is not a regular file (a folder, "
                                  "device, pipe or socket); move it away or choose another --output")
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_APPEND | getattr(os, "O_NONBLOCK", 0)))
            except OSError as exc:
                raise refuse(path, exc) from None


def _missing(out: Path) -> list[Path]:
    """The folders a sweep into ``out`` would make: ``out`` and those above it that do not exist, deepest first."""
    return [folder for folder in (out, *out.parents) if not folder.exists()]


def _tidy(made_folders: list[Path], made_files: list[Path]) -> None:
    """Remove what a sweep refused before its first run made (its lock, its config copy, generated
    graphs), and the folders it made, when they are empty; never anything it did not make."""
    for path in made_files:
        with contextlib.suppress(OSError):
            path.unlink()
    for folder in sorted(set(made_folders), key=lambda p: len(p.parts), reverse=True):
        with contextlib.suppress(OSError):
            folder.rmdir()  # only an empty folder goes


@contextlib.contextmanager
def _locked(out: Path) -> Iterator[None]:
    """Hold the results folder for this sweep; refuse (`ConfigError`) when another sweep holds it.

    The lock is ``flock`` on `LOCK` in the folder, not a PID file: the kernel drops it when the holding
    process ends, however it ends (SIGKILL, the out-of-memory killer, a crash), so a killed sweep never
    leaves a stale lock, and nothing has to guess whether a recorded PID (perhaps reused since, or on
    another machine) is still a sweep. It belongs to the open file, not the process (unlike
    ``fcntl.lockf``), so two sweeps in one process exclude each other too; worker processes do not
    inherit it. The file stays (removing it would race with a sweep about to lock it); the PID and host
    written in it only name the holder in the refusal.
    """
    path = out / LOCK
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as exc:
        raise ConfigError(f"the results folder {out} cannot be locked ({path}: {exc.strerror or exc}); make it "
                          "writable or choose another --output") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode("utf-8", errors="replace").strip()
            who = f" ({holder})" if holder else ""
            raise ConfigError(f"{out} is in use by another sweep{who}; wait for it to end, or choose another "
                              "--output") from None
        except OSError as exc:
            if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
                raise ConfigError(f"the results folder {out} cannot be locked ({path}: {exc.strerror or exc}); "
                                  "choose another --output") from None
            # A file system without locks: run unlocked rather than not at all.
        else:
            text = f"process {os.getpid()} on host {socket.gethostname()}\n".encode()
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
                os.pwrite(fd, text, 0)
        yield
    finally:
        os.close(fd)  # releases the lock


def run_sweep(
    config: SweepConfig,
    *,
    workers: int | None = None,
    executor: str | None = None,
    address: str | None = None,
    resume: bool = False,
    csv: bool = False,
    reporter: Reporter | None = None,
) -> SweepOutcome:
    """Run every run of ``config`` not yet in its journal; write the table. Ctrl-C stops cleanly.

    Raises `ConfigError` before any run for a results folder that cannot be written or that another
    sweep holds, and for an old sweep without ``resume``.

    Parameters
    ----------
    config : SweepConfig
        A checked config (its ``torch:`` graphs are traced here).
    workers : int or None
        Runs at a time; None for the config's (``workers``, else one per core).
    executor : str or None
        ``local`` or ``dask``; None for ``dask`` with an ``address``, else the config's.
    address : str or None
        A Dask scheduler; None for the config's (none: a local cluster, with ``dask``).
    resume : bool
        Continue the sweep the results folder holds, skipping the runs its journal has.
    csv : bool
        Write ``results.csv`` beside ``results.parquet``.
    reporter : Reporter or None
        Told of the sweep's progress; None tells nothing.

    Returns
    -------
    SweepOutcome
        The table of every run in the folder, and what happened this time (interrupted, lost runs,
        the sweep's own faults, a failure that stopped it).

    Raises
    ------
    ConfigError
        Before any run: the folder cannot be written or is held by another sweep, an old sweep without
        ``resume``, a torch model that cannot be traced, or an unknown executor.
    """
    reporter = reporter or _Silent()
    config = trace_torch_graphs(config, reporter.note)  # runs the models' code: only when the sweep runs
    out = config.output
    made_folders = _missing(out)
    made_files = [path for path in (out / LOCK, out / "config.yaml") if not path.exists()]
    started = False
    try:
        check_output(out, csv)
        with _locked(out):
            pending, skipped = plan(config, resume)
            try:
                atomic_write_text(out / "config.yaml", config.path.read_text(encoding="utf-8"))
                for source in config.graphs:
                    if source.generated is not None and not source.path.exists():
                        made_folders += _missing(source.path.parent)
                        made_files.append(source.path)
                        save_graph(source.generated, source.path)
            except OSError as exc:
                why = os.strerror(exc.errno) if exc.errno else str(exc)
                raise ConfigError(f"the results folder {out} cannot be written ({why}); make it writable or "
                                  "choose another --output") from None
            started = True
            return _run(config, pending, skipped, workers, executor, address, csv, reporter)
    except ConfigError:
        if not started:
            _tidy(made_folders, made_files)  # refused before any run: leave nothing behind
        raise


def parallelism(config: SweepConfig, workers: int | None = None, executor: str | None = None,
                address: str | None = None) -> tuple[int | None, str | None]:
    """The runs a sweep starts at once on this machine, at most one per core (`runs_at_once`), and the warning
    when what was asked for is more.

    Parameters
    ----------
    config : SweepConfig
        A checked config; its ``workers`` serve when ``workers`` is None.
    workers : int or None
        ``--workers``; None for the config's.
    executor, address : str or None
        As `run_sweep` takes them.

    Returns
    -------
    tuple of (int or None, str or None)
        The runs at once (None with a Dask scheduler's address: its workers run them, as many as it has),
        and one sentence when the request was cut to the cores here (None otherwise).
    """
    kind = executor or ("dask" if address else config.executor)
    if kind == "dask" and (address or config.address):
        return None, None
    return runs_at_once(workers or config.workers, "--workers" if workers else "workers:")


def _run(config: SweepConfig, pending: list[RunSpec], skipped: int, workers: int | None, executor: str | None,
         address: str | None, csv: bool, reporter: Reporter) -> SweepOutcome:
    """Run the pending runs of a checked, locked results folder; journal each; write the table."""
    out = config.output
    journal = Journal(out / JOURNAL)
    outcome = SweepOutcome(out, pd.DataFrame(), len(config.runs), skipped, 0)
    kind = executor or ("dask" if address else config.executor)
    where = address or config.address
    at_once, cut = parallelism(config, workers, executor, address)
    if cut is not None:
        reporter.note(f"warning: {cut}")
    reporter.start(len(config.runs), skipped, len(pending))
    try:
        with open_executor(kind, at_once, where) as pool:
            futures = {pool.submit(supervise, spec.to_json(), str(out)): spec for spec in pending}
            try:
                _collect(futures, pool, journal, outcome, reporter, where)
            except KeyboardInterrupt:
                outcome.interrupted = True
                stop_all()
                for future in futures:
                    future.cancel()
        # After the executor has shut down: no run shares the machine with the replays' timings.
        if config.replay is not None and not outcome.interrupted and outcome.failure is None:
            _replay(config, journal, outcome, reporter)
    finally:
        reporter.close()
        outcome.table = build_table(journal.rows())
        try:
            outcome.written = write_table(outcome.table, out, csv=csv)
            progress = build_progress(journal.rows())
            if not progress.empty:  # every run's improving schedules over time, keyed by run_id
                outcome.written.append(write_progress(progress, out))
        except OSError as exc:
            outcome.failure = outcome.failure or (
                f"cannot write the table in {out} ({exc}); every finished run is in {journal.path}, and the "
                "table is rebuilt from it by the next `sweep --resume`, `report` or `plot`")
    return outcome


def _collect(futures: dict[Future, RunSpec], pool: Executor, journal: Journal, outcome: SweepOutcome,
             reporter: Reporter, address: str | None) -> None:
    """Journal each run as it ends; give up on the rest when no worker is left to run them."""
    where = f"the Dask scheduler at {address}" if address else "the local Dask cluster"
    remedy = ("start workers (`dask worker ADDRESS`) and run again with --resume" if address else
              "its worker processes could not be restarted; run again with --resume")
    waiting = set(futures)
    idle_since: float | None = None
    while waiting:
        done, waiting = wait(waiting, timeout=POLL_S, return_when=FIRST_COMPLETED)
        for future in done:
            spec = futures[future]
            try:
                row = future.result()
            except RunInterrupted:
                continue
            except CancelledError:  # not by us (Ctrl-C leaves this loop): the executor dropped it
                outcome.lost.append((spec, "the executor cancelled the run"))
                reporter.lost(spec, "the executor cancelled the run")
                continue
            except Exception as exc:  # the executor lost the run; it is not a result
                outcome.lost.append((spec, f"{type(exc).__name__}: {exc}"))
                reporter.lost(spec, f"{type(exc).__name__}: {exc}")
                continue
            try:
                journal.append(row)
            except OSError as exc:
                # Nothing more can be recorded: stop rather than run what would be lost.
                outcome.failure = (f"cannot record runs in {journal.path} ({exc}); the sweep stopped, the runs "
                                   "recorded before are kept, and --resume runs the others once it can be written")
                outcome.lost.append((spec, "not recorded"))
                _abandon(futures, waiting, outcome, "not run: the journal cannot be written")
                return
            outcome.finished += 1
            if row.get(SWEEP_FAULT):
                outcome.faults.append(row)
            reporter.finished(row)
        workers = live_workers(pool) if waiting else None
        if workers != 0:
            idle_since = None
            continue
        now = time.monotonic()
        if idle_since is None:
            idle_since = now
            reporter.note(f"{where} has no workers; waiting up to {NO_WORKERS_TIMEOUT_S:g} s for one "
                          f"({len(waiting)} runs to go)")
        elif now - idle_since >= NO_WORKERS_TIMEOUT_S:
            outcome.failure = (f"{where} has had no workers for {now - idle_since:.0f} s while {len(waiting)} "
                               f"runs were waiting; {remedy}")
            _abandon(futures, waiting, outcome, "not run: no Dask workers")
            return


def _replay(config: SweepConfig, journal: Journal, outcome: SweepOutcome, reporter: Reporter) -> None:
    """Replay, one at a time, every schedule of a PyTorch graph the journal holds without a replay; journal each."""
    from remat_bench.app.sweep.replays import FAILED, nothing_to_replay, pending_replays, replay_row

    assert config.replay is not None  # the caller checks
    pending = pending_replays(journal.rows(), config.output)
    reporter.replaying(len(pending))
    if not pending:
        reporter.note(nothing_to_replay(journal.rows(), config.output))
    for row in pending:
        try:
            replayed = replay_row(row, config.output, config.replay)
        except KeyboardInterrupt:
            outcome.interrupted = True  # this replay is not recorded: --resume does it again
            return
        try:
            journal.append(replayed)
        except OSError as exc:
            outcome.failure = (f"cannot record replays in {journal.path} ({exc}); the sweep stopped, the replays "
                               "recorded before are kept, and --resume does the others once it can be written")
            return
        outcome.replayed += 1
        outcome.replay_failures += replayed.get("replay_status") == FAILED
        reporter.replayed(replayed)


def _abandon(futures: dict[Future, RunSpec], waiting: set[Future], outcome: SweepOutcome, why: str) -> None:
    stop_all()
    for future in waiting:
        future.cancel()
        outcome.lost.append((futures[future], why))
