"""Run keys: what makes two runs of a sweep the same measurement.

Each run is keyed by (graph sha256, method, parameters, budget text, seed,
repeat, time limit): the journal uses the key to skip finished runs on
``--resume``, the results table to drop duplicates, and replays to find the
row a replay belongs to. A key is built from a run spec (`RunSpec.key`), from a
results row or journal entry (`row_key`), and names the run's files (`run_id`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any


def params_text(params: Mapping[str, Any] | str | None) -> str:
    """Canonical JSON text of a parameter set (sorted keys): the ``params`` column and part of the key.

    Parameters
    ----------
    params : Mapping, str or None
        The parameters: a mapping, or JSON text of one (as a table holds it); an empty text or None for none.

    Returns
    -------
    str
        Compact JSON (no spaces); ``{}`` for no parameters.
    """
    if isinstance(params, str):
        params = json.loads(params) if params else {}
    return json.dumps(dict(params or {}), sort_keys=True, separators=(",", ":"))


def run_key(graph_sha256: str, method: str, params: Mapping[str, Any] | str | None, budget_text: str,
            seed: int | None, repeat: int, time_limit: float) -> tuple:
    """The identity of a run: two runs with the same key are the same measurement.

    Parameters
    ----------
    graph_sha256 : str
        The graph's digest (`Graph.sha256`).
    method : str
        The method's name.
    params : Mapping, str or None
        Its parameters, as `params_text` takes them.
    budget_text : str
        The budget as the config wrote it (``0.8``, ``70%``, ``min``).
    seed : int or None
        The seed; None, or NaN as a table holds a missing one, for none.
    repeat : int
        Which repetition.
    time_limit : float
        The run's time limit, in s.

    Returns
    -------
    tuple
        (graph_sha256, method, params text, budget text, seed or None, repeat, time limit), each normalized.
    """
    seed = None if seed is None or seed != seed else int(seed)  # NaN from a table is "no seed"
    return (str(graph_sha256), str(method), params_text(params), str(budget_text), seed, int(repeat),
            float(time_limit))


def row_key(row: dict[str, Any]) -> tuple:
    """The `run_key` of a results row or journal entry.

    Parameters
    ----------
    row : dict
        The row; ``seed`` may be missing.

    Returns
    -------
    tuple
    """
    return run_key(row["graph_sha256"], row["method"], row["params"], row["budget_text"], row.get("seed"),
                   row["repeat"], row["time_limit"])


def run_id(key: tuple) -> str:
    """A short stable name for a run (its schedule file and log are named after it).

    Parameters
    ----------
    key : tuple
        The run's key (`run_key`).

    Returns
    -------
    str
        16 hexadecimal digits of the SHA-256 of the key's JSON.
    """
    return hashlib.sha256(json.dumps(list(key)).encode()).hexdigest()[:16]
