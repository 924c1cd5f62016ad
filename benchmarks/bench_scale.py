"""At scale: how soon `auto` is near the any-order bound on deep models and a 10,000-node graph, and how much
memory its whole process tree takes.

Instances (issue 33, "The frontier, fast and at scale"): the zoo GPT (width 768, 12 heads, sequence 512,
batch 8, vocabulary 8192, as configs/realscale.yaml imports it) at 12, 24, 48 and 96 layers; a generated
transformer training graph of 417 layers (10,015 nodes, `remat-bench graphs generate transformer --layers
417`); and the Llama-style decoder of configs/models/llama.py (batch 8, sequence 256, 4,096 token ids) at
8, 16 and 32 layers. Each at 0.5 of its baseline peak, with `auto` and, as a fast reference, `dtr`.

Each graph is written to a temporary folder once and its any-order bound computed here and cached on
disk (`REMAT_BENCH_BOUND_CACHE`, the folder `remat-bench solve` reads), so each run's time is solve
time. Each run is `remat-bench solve GRAPH -m METHOD -b 0.5 -t LIMIT --json` in a fresh child process:
the memory of the whole process tree (the child and every process it starts: auto's members run in
their own) is sampled from /proc every 0.2 s and its peak reported, beside the largest single process at any
sample. From the run's progress points (its
improving schedules, each scored by the simulator, docs/design.md section 6) the table gives the time
to its first schedule and to within 1, 0.5 and 0.1 point of overhead of the bound.

The issue's goal: on Llama-32 and the 10,000-node graph, auto within 0.5 point of the bound in 600 s,
the process tree under 4 GiB.

Settings: ``BENCH_SCALE_LIMIT`` sets every run's limit (default: 600 s on Llama-32 and the 10,000-node
graph, 120 s on the others); ``BENCH_SCALE_ONLY`` runs the instances whose label contains it;
``BENCH_SCALE_BOUND`` is the bound's effort (default 60 s).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks.bench_frontier import seconds, user_model, within, zoo_gpt
from benchmarks.common import ROOT, Rows, console, show
from remat_bench.app.evaluate import bound_effort
from remat_bench.app.pipeline import BOUND_CACHE_SETTING, bound_cache_folder
from remat_bench.core.budget import parse_budget
from remat_bench.core.graph import Graph
from remat_bench.core.graph_io import load_graph, save_graph
from remat_bench.core.progress import ProgressPoint
from remat_bench.toolkit.bound_cache import BoundCache

BUDGET = "0.5"
METHODS = ("auto", "dtr")
# The folder of the user's models (configs/models): torch-budget, an auto member, rebuilds the model
# from the graph's spec in the child, so the child needs it on its import path.
MODELS = ROOT / "configs" / "models"
# How often the process tree's memory is sampled, in s.
EVERY = 0.2
# A child still running this long past its limit is stopped (a hang, not a slow solve).
GRACE = 300.0


def setting(name: str) -> float | None:
    """A number of seconds from the environment (None: not set); one sentence and exit 2 when it is not a
    positive number."""
    text = os.environ.get(name, "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not value > 0 or not math.isfinite(value):
        console.print(f"[bold red]error:[/] {name}={text!r} is not a positive number of seconds; "
                      f"give one such as {name}=60")
        sys.exit(2)
    return value


def llama(layers: int) -> Graph:
    """configs/models/llama.py at ``layers`` layers, as bench_frontier imports it."""
    return user_model("llama:llama", 8, (256,), f"llama-{layers}-b8", task="language", vocab_ids=4096,
                      layers=layers)


def transformer_10k() -> Graph:
    from remat_bench.generators import transformer

    return transformer(layers=417)


@dataclass(frozen=True)
class Instance:
    """One graph of the benchmark: its label, how it is made, and auto's default limit in s."""

    label: str
    make: Callable[[], Graph]
    limit: float


INSTANCES = [
    *(Instance(f"GPT-{n}", partial(zoo_gpt, n), 120.0) for n in (12, 24, 48, 96)),
    Instance("transformer-10k", transformer_10k, 600.0),
    *(Instance(f"Llama-{n}", partial(llama, n), 600.0 if n == 32 else 120.0) for n in (8, 16, 32)),
]


@dataclass(frozen=True)
class Measured:
    """A child process run to its end: its exit code, wall time, output, and memory.

    ``tree_peak`` is the largest sum of resident memory over the child and all its descendants
    at one sample, in bytes; ``largest`` the largest resident memory of one process among them at
    any sample (a run shorter than the samples' interval may show less than it held).
    """

    exit_code: int
    wall_s: float
    stdout: str
    stderr: str
    tree_peak: int
    largest: int
    timed_out: bool


def process_table() -> dict[int, tuple[int, int]]:
    """Every process's parent and resident memory (bytes), read from /proc/<pid>/stat.

    psutil would do this, but it is not a dependency of the project, and the two fields needed are one
    read of one file per process. Threads are not listed at the top of /proc, so nothing counts twice.

    Returns
    -------
    dict
        pid -> (parent pid, resident bytes); processes that end while being read are left out.
    """
    page = os.sysconf("SC_PAGE_SIZE")
    table: dict[int, tuple[int, int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                text = f.read()
            # The command name (field 2) may hold spaces and parentheses: fields are counted after its last ")".
            fields = text[text.rindex(b")") + 2:].split()
            table[int(entry.name)] = (int(fields[1]), int(fields[21]) * page)  # ppid (field 4), rss (field 24)
        except (OSError, ValueError, IndexError):
            continue
    return table


def descendants(root: int, table: dict[int, tuple[int, int]]) -> list[int]:
    """``root`` and every process below it in ``table`` (`process_table`), following parent links.

    Parameters
    ----------
    root : int
    table : dict
        pid -> (parent pid, resident bytes).

    Returns
    -------
    list of int
        ``root`` first when it is in the table; empty when it is not.
    """
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    tree, frontier = [], [root] if root in table else []
    while frontier:
        pid = frontier.pop()
        tree.append(pid)
        frontier.extend(children.get(pid, ()))
    return tree


def tree_rss(root: int) -> tuple[int, int]:
    """The resident memory of ``root`` and all its descendants together, and of the largest of them, in
    bytes (0 when it has ended).

    Pages shared between processes (a forked child's, the libraries') count once per process: an upper
    bound on what the tree holds, as a machine's memory limit for it would count it per process.

    Parameters
    ----------
    root : int

    Returns
    -------
    tuple of (int, int)
        The sum, and the largest process's.
    """
    table = process_table()
    sizes = [table[pid][1] for pid in descendants(root, table)]
    return sum(sizes), max(sizes, default=0)


def _stop_tree(root: int) -> None:
    """SIGKILL ``root`` and its descendants, by their ids, the root last."""
    for pid in reversed(descendants(root, process_table())):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def run_measured(argv: Sequence[str], timeout: float, cwd: str | Path | None = None,
                 env: dict[str, str] | None = None, every: float = EVERY) -> Measured:
    """Run ``argv`` in a child process to its end, sampling its process tree's memory every ``every`` s.

    Parameters
    ----------
    argv : Sequence of str
    timeout : float
        Seconds after which the child and its descendants are killed (``timed_out`` is then True).
    cwd : str or Path or None
    env : dict or None
        The child's environment (None: this process's).
    every : float
        Seconds between samples.

    Returns
    -------
    Measured
    """
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        # Its own session: Ctrl-C here reaches this process only, which then stops the tree (finally below).
        proc = subprocess.Popen(list(argv), cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                start_new_session=True)
        pid, peak, largest, timed_out = 0, 0, 0, False
        try:
            while True:
                pid, status, _ = os.wait4(proc.pid, os.WNOHANG)
                if pid:
                    break
                total, one = tree_rss(proc.pid)
                peak, largest = max(peak, total), max(largest, one)
                if time.perf_counter() - start > timeout:
                    timed_out = True
                    _stop_tree(proc.pid)
                    pid, status, _ = os.wait4(proc.pid, 0)
                    break
                time.sleep(every)
        finally:
            if pid == 0:  # interrupted: leave nothing running
                _stop_tree(proc.pid)
                os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait for it again
        wall = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        # Both from the samples. The kernel's figure (wait4's ru_maxrss) is no measure of the child: a
        # process's maximum counts the memory of the process that forked it, up to its exec (pytest's
        # 700 MiB beside a child holding nothing), and the parent here holds the graph and its bound.
        return Measured(proc.returncode, wall, out.read().decode(errors="replace"),
                        err.read().decode(errors="replace"), peak, largest, timed_out)


def gib(amount: int) -> str:
    return f"{amount / 2**30:.2f}"


def row(instance: Instance, graph: Graph, method: str, limit: float, bound_value: float | None,
        measured: Measured) -> list[Any]:
    """One table row from a child's `solve --json` output (or why there is none)."""
    notes = []
    result: dict[str, Any] = {}
    if measured.timed_out:
        notes.append(f"stopped {GRACE:g} s past its limit")
    try:
        result = json.loads(measured.stdout)
    except ValueError:
        last = measured.stderr.strip().splitlines()
        notes.append(f"exit {measured.exit_code}: " + (last[-1] if last else "no output"))
    base = result.get("baseline_duration") or graph.total_duration
    bound = result.get("lower_bound_any_order", bound_value)
    bound_pct = None if bound is None else 100 * (bound / base - 1)
    found = [ProgressPoint(**p) for p in result.get("progress", []) if p.get("duration") is not None]
    overhead = result.get("overhead_pct") if result.get("status") in ("optimal", "feasible") else None
    if result and overhead is None:
        notes.append(f"{result.get('status')}: {result.get('message', '')}")
    if result and not result.get("stats", {}).get("bound_any_order", {}).get("from_cache", True):
        notes.append("the child computed the bound itself")
    return [instance.label, f"{graph.n:,}", method, f"{limit:g}", seconds(found[0].time_s if found else math.inf),
            seconds(within(found, bound_pct, 1.0)), seconds(within(found, bound_pct, 0.5)),
            seconds(within(found, bound_pct, 0.1)),
            "-" if overhead is None else f"{overhead:+.3f}%", "-" if bound_pct is None else f"{bound_pct:+.3f}%",
            "-" if overhead is None or bound_pct is None else f"{overhead - bound_pct:.3f}",
            f"{measured.wall_s:.1f}", gib(measured.tree_peak), gib(measured.largest), "; ".join(notes)[:160]]


def main() -> None:
    only = os.environ.get("BENCH_SCALE_ONLY", "")
    limit_setting = setting("BENCH_SCALE_LIMIT")
    effort_setting = setting("BENCH_SCALE_BOUND") or 60.0
    chosen = [i for i in INSTANCES if only in i.label]
    if not chosen:
        console.print(f"[bold red]error:[/] BENCH_SCALE_ONLY={only!r} names none of the instances "
                      f"({', '.join(i.label for i in INSTANCES)}); give part of one of their labels")
        sys.exit(2)
    rows = Rows()
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        # The user's bound cache when there is one (a second run reuses its bounds), else one for this run.
        folder = bound_cache_folder() or str(Path(tmp) / "bounds")
        env = {**os.environ, BOUND_CACHE_SETTING: folder,
               "PYTHONPATH": os.pathsep.join(p for p in (str(MODELS), os.environ.get("PYTHONPATH")) if p)}
        for instance in chosen:
            limit = limit_setting or instance.limit
            began = time.perf_counter()
            made = instance.make()
            path = Path(tmp) / f"{instance.label}.json"
            save_graph(made, path)
            graph = load_graph(path)  # what the child reads, so the bound cached here is the one it looks up
            made_s = time.perf_counter() - began
            amount = parse_budget(BUDGET, graph).amount
            # At least the effort the child asks for (a tenth of its limit): a weaker cached bound is recomputed.
            effort = max(effort_setting, bound_effort(limit))
            began = time.perf_counter()
            bound, cached = BoundCache(folder).get(graph, amount, effort)
            bound_s = time.perf_counter() - began
            console.log(f"{instance.label}: {graph.n:,} nodes, made in {made_s:.1f} s; bound "
                        f"{'infeasible' if bound.value is None else f'{bound.value:.6g}'} ({bound.status}), "
                        f"{'from the cache' if cached else f'{bound_s:.1f} s'}")
            for method in METHODS:
                argv = [sys.executable, "-m", "remat_bench", "solve", str(path), "-m", method, "-b", BUDGET,
                        "-t", f"{limit:g}", "--json"]
                measured = run_measured(argv, limit + GRACE, cwd=MODELS, env=env)
                rows.append(row(instance, graph, method, limit, bound.value, measured))
    show(f"At scale: auto at {BUDGET} of the baseline peak, each run in a child process (bound cached first)",
         ["instance", "nodes", "method", "limit s", "first s", "within 1 pt s", "within 0.5 pt s",
          "within 0.1 pt s", "overhead", "bound", "gap (pts)", "wall s", "tree peak GiB", "largest process GiB",
          "note"], rows)


if __name__ == "__main__":
    main()
