"""Test-only methods, registered as a user registers a method: an entry point of ``remat_bench.methods``.

A sweep runs each run in a worker process (and, with Dask, in a worker of the cluster), where a
registry monkeypatched in the test's process would not reach; an entry point on the import path
does. `register` writes the ``*.dist-info`` folder that names them (`importlib.metadata` reads its
``entry_points.txt`` from every folder on the import path) and puts it, and this folder with their
modules, on the import path of the test's process (`sys.path`) and of the processes it starts
(``PYTHONPATH``); pytest's monkeypatch undoes both when the test ends.

- ``sleepy`` (`remat_bench_test_sleepy`): greedy after a sleep, its pid written first: a run that
  overstays its limit, or one to kill mid-way;
- ``hog`` (`remat_bench_test_hog`): a method whose module cannot be loaded under a memory cap: a run
  that runs out of memory outside its method.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ENTRY_POINTS = {"sleepy": "remat_bench_test_sleepy:Sleepy", "hog": "remat_bench_test_hog:Hog"}


def register(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Register the test methods for the rest of the test, in its process and in those it starts.

    Parameters
    ----------
    folder : Path
        A folder that does not exist yet, for the distribution's metadata.
    monkeypatch : pytest.MonkeyPatch
        The test's: undoes the registration when the test ends.
    """
    info = folder / "remat_bench_test_methods-0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: remat-bench-test-methods\nVersion: 0\n")
    (info / "entry_points.txt").write_text(
        "[remat_bench.methods]\n" + "".join(f"{name} = {target}\n" for name, target in ENTRY_POINTS.items()))
    path = [str(folder), str(HERE)]
    for entry in reversed(path):
        monkeypatch.syspath_prepend(entry)
    inherited = os.environ.get("PYTHONPATH")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([*path, *([inherited] if inherited else [])]))
