"""The sweep journal: one JSON line per finished run, on disk the moment the run ends.

Appending a line, flushing and fsyncing it before the next run is recorded is
what makes a sweep lose nothing to a crash, a Ctrl-C or a killed machine:
``--resume`` reads the keys back and skips those runs. A process killed in
the middle of a write leaves at most one partial last line, which reading
skips (with a count) and the next append starts on a fresh line after.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from remat_bench.app.sweep.keys import row_key
from remat_bench.app.sweep.worker import SWEEP_FAULT
from remat_bench.core.errors import RematBenchError
from remat_bench.core.files import open_regular

JOURNAL = "journal.jsonl"
# A row is a few kB (a hundred progress points at most); a longer line is no row, and is not held in memory.
MAX_ROW_BYTES = 64 * 2**20


def _plain(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    return str(value)


# The columns that name a run and its graph: a row without them as text cannot be placed in a table.
NAMING_COLUMNS = ("graph", "graph_sha256", "method", "budget_text", "status")


def readable(row: Any) -> bool:
    """Whether ``row`` is a result row a run can be told by: an object whose run key can be built
    (what ``--resume`` compares).

    Parameters
    ----------
    row : Any
        A line of the journal, parsed.

    Returns
    -------
    bool
    """
    if not isinstance(row, dict):
        return False
    try:
        row_key(row)
    except (KeyError, TypeError, ValueError):
        return False
    return True


def named(row: dict[str, Any]) -> bool:
    """Whether a readable ``row`` can be placed in a table and drawn: its naming columns are text.

    Parameters
    ----------
    row : dict
        A row `readable` accepts.

    Returns
    -------
    bool
        True when every one of `NAMING_COLUMNS` is a string.
    """
    return all(isinstance(row.get(column), str) for column in NAMING_COLUMNS)


class Journal:
    """Append-only JSON-lines file of result rows."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.skipped_lines = 0

    def exists(self) -> bool:
        """Whether the journal holds anything (a file that is missing or empty holds nothing).

        Returns
        -------
        bool
        """
        return self.path.exists() and self.path.stat().st_size > 0

    def rows(self) -> Iterator[dict[str, Any]]:
        """Every complete row, in the order written; rows that cannot be read (a line cut short by a
        kill, a row edited by hand without the columns that name its run, bytes that are not UTF-8, a
        line longer than `MAX_ROW_BYTES`) are counted in ``skipped_lines`` and left out (`readable`).

        Yields
        ------
        dict
            One result row; none when the file is missing.

        Raises
        ------
        RematBenchError
            The journal is not a regular file (a device, pipe or socket, a folder) or cannot be read.
        """
        self.skipped_lines = 0
        if not self.path.exists():
            return
        with open_regular(self.path, RematBenchError, limit=None,
                          hint="a results folder's journal is the file a sweep appends its runs to: put that file "
                               "back, or remove this one (the table is then read from results.parquet)") as fh:
            while line := fh.readline(MAX_ROW_BYTES + 1):
                if len(line) > MAX_ROW_BYTES and not line.endswith(b"\n"):  # no row: skip to the next line
                    while (rest := fh.readline(MAX_ROW_BYTES)) and not rest.endswith(b"\n"):
                        pass
                    self.skipped_lines += 1
                    continue
                if not line.strip():
                    continue
                try:
                    row = json.loads(line.decode("utf-8"))
                except ValueError:  # the partial line of a process killed mid-write (or bytes that are not UTF-8)
                    self.skipped_lines += 1
                    continue
                if readable(row):
                    yield row
                else:
                    self.skipped_lines += 1

    def keys(self) -> set[tuple]:
        """The keys of the runs done: those ``--resume`` skips.

        A row marked `SWEEP_FAULT` (the run failed for reasons of the sweep itself, e.g. its schedule
        could not be saved) does not count: resuming runs it again, and its new row wins in the table.

        Returns
        -------
        set of tuple
            Run keys (`remat_bench.app.sweep.keys.row_key`).
        """
        return {row_key(row) for row in self.rows() if not row.get(SWEEP_FAULT)}

    def append(self, row: dict[str, Any]) -> None:
        """Write ``row`` as one line and force it to disk before returning.

        Parameters
        ----------
        row : dict
            A result row; NaN is written as null, values JSON does not know as their ``item()`` or text.
        """
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # A missing value is null, never NaN (infinity stays: Python's json reads it back).
        clean = {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}
        line = json.dumps(clean, default=_plain, ensure_ascii=False) + "\n"
        with self.path.open("a+b") as fh:
            if fh.tell() > 0:
                fh.seek(-1, os.SEEK_END)
                if fh.read(1) != b"\n":  # a line cut short by a kill: start afresh after it
                    line = "\n" + line
            fh.write(line.encode("utf-8"))
            fh.flush()
            os.fsync(fh.fileno())
