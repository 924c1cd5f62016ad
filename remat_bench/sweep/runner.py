"""Run a checked sweep config: skip what the journal holds, run the rest, record every row at once.

The runner submits one `supervise` call per pending run to the executor and
appends each row to the journal as it arrives (in the calling process, so
one process writes the journal). At the end, or on Ctrl-C, it rebuilds the
table from the journal, so the table always holds every run ever finished in
the folder, once. A run the executor itself loses (a Dask worker machine
gone) is not a result: it is reported, not recorded, and ``--resume`` runs it
again.
"""

from __future__ import annotations

from concurrent.futures import CancelledError, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pandas as pd

from remat_bench.errors import ConfigError
from remat_bench.graph import save_graph
from remat_bench.io import atomic_write_text
from remat_bench.sweep.config import RunSpec, SweepConfig
from remat_bench.sweep.executors import RunInterrupted, open_executor, stop_all, supervise
from remat_bench.sweep.journal import JOURNAL, Journal
from remat_bench.sweep.results import build_table, write_table


class Reporter(Protocol):
    """What the runner tells about progress (the CLI shows a progress bar; tests pass nothing)."""

    def start(self, total: int, skipped: int, pending: int) -> None: ...
    def finished(self, row: dict[str, Any]) -> None: ...
    def lost(self, spec: RunSpec, error: str) -> None: ...
    def close(self) -> None: ...


class _Silent:
    def start(self, total: int, skipped: int, pending: int) -> None:
        pass

    def finished(self, row: dict[str, Any]) -> None:
        pass

    def lost(self, spec: RunSpec, error: str) -> None:
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


def plan(config: SweepConfig, resume: bool) -> tuple[list[RunSpec], int]:
    """The runs still to do and how many the journal already holds; refuses to mix into an old sweep."""
    journal = Journal(config.output / JOURNAL)
    if journal.exists() and not resume:
        raise ConfigError(
            f"{config.output} already holds a sweep ({JOURNAL}); pass --resume to continue it, "
            "or choose another --output"
        )
    done = journal.keys() if resume else set()
    pending = [spec for spec in config.runs if spec.key not in done]
    return pending, len(config.runs) - len(pending)


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
    """Run every run of ``config`` not yet in its journal; write the table. Ctrl-C stops cleanly."""
    reporter = reporter or _Silent()
    pending, skipped = plan(config, resume)
    out = config.output
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "config.yaml", config.path.read_text(encoding="utf-8"))
    for source in config.graphs:
        if source.generated is not None and not source.path.exists():
            save_graph(source.generated, source.path)

    journal = Journal(out / JOURNAL)
    outcome = SweepOutcome(out, pd.DataFrame(), len(config.runs), skipped, 0)
    kind = executor or ("dask" if address else config.executor)
    reporter.start(len(config.runs), skipped, len(pending))
    try:
        with open_executor(kind, workers or config.workers, address or config.address) as pool:
            futures = {pool.submit(supervise, spec.to_json(), str(out)): spec for spec in pending}
            try:
                for future in as_completed(futures):
                    spec = futures[future]
                    try:
                        row = future.result()
                    except (RunInterrupted, CancelledError):
                        continue
                    except Exception as exc:  # the executor lost the run; it is not a result
                        outcome.lost.append((spec, f"{type(exc).__name__}: {exc}"))
                        reporter.lost(spec, f"{type(exc).__name__}: {exc}")
                        continue
                    journal.append(row)
                    outcome.finished += 1
                    reporter.finished(row)
            except KeyboardInterrupt:
                outcome.interrupted = True
                stop_all()
                for future in futures:
                    future.cancel()
    finally:
        reporter.close()
        outcome.table = build_table(journal.rows())
        outcome.written = write_table(outcome.table, out, csv=csv)
    return outcome
