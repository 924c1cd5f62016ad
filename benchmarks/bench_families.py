"""auto on model families it was never tuned on: against each of its fast members run alone, and the bound.

Issue 46. The graphs: the zoo's families (`remat_bench.torch.families`) at their default sizes,
the unrolled GRU at batch 32, the diffusion U-Net and the mixture-of-experts decoder at batch 8,
the ConvNeXt at batch 32; and, where their libraries are installed, ecosystem models of the same
families (timm's ConvNeXt-atto and torchvision's ConvNeXt-T at 64x64; a Mixtral-style decoder when
`remat_bench.torch.ecosystem` builds one). Each is imported once with the default options, as a
new user would (``remat-bench graphs import-torch NAME --batch B``: durations calibrated on this
machine, workspaces measured), and kept under ``results/families-graphs/``; a graph already there
is read again, so that every run of this benchmark plans the same graph. A model that cannot be
imported here is skipped with one line saying why.

For each graph and budget (0.7, 0.5, 0.4 of the baseline peak) the any-order bound is computed
first (``BENCH_FAMILIES_BOUND_S`` seconds of effort, default 60; remembered beside the graphs),
then each of auto's members (`remat_bench.app.portfolio._roster`: the fast ones with the parameters
auto gives them, then the exact ones) runs alone with the limit, then ``auto`` with the same limit.
One table per limit: the bound, auto's overhead and its gap to the bound in points, the best member alone, whether auto
is at least as fast as it ("never behind"), the members that found no schedule alone, and the
seconds. ``BENCH_FAMILIES_LIMITS`` gives the limits (seconds, default ``10,60``);
``BENCH_FAMILIES_ONLY`` the instances to run, by name separated by commas (``gru``, ``dunet``,
``moe``, ``convnext``, ``timm:convnext_atto``, ``torchvision:convnext_tiny``, ``hf:mixtral``).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from dataclasses import dataclass

from benchmarks.common import ROOT, Rows, console, show
from remat_bench.app.pipeline import run
from remat_bench.core.budget import parse_budget
from remat_bench.core.graph import Graph
from remat_bench.core.graph_io import load_graph
from remat_bench.toolkit.bound_cache import BoundCache

LIMITS = tuple(float(x) for x in os.environ.get("BENCH_FAMILIES_LIMITS", "10,60").split(",") if x.strip())
ONLY = {x.strip() for x in os.environ.get("BENCH_FAMILIES_ONLY", "").split(",") if x.strip()}
BOUND_EFFORT = float(os.environ.get("BENCH_FAMILIES_BOUND_S", 60.0))
BUDGETS = ("0.7", "0.5", "0.4")
GRAPHS = ROOT / "results" / "families-graphs"


@dataclass(frozen=True)
class Instance:
    """A model as ``graphs import-torch`` takes it, and the library it needs (None: torch alone)."""

    name: str
    batch: int
    input_shape: str | None = None
    kwargs: tuple[str, ...] = ()
    library: str | None = None


INSTANCES = (
    Instance("gru", 32),
    Instance("dunet", 8),
    Instance("moe", 8),
    Instance("convnext", 32),
    Instance("timm:convnext_atto", 32, "3x64x64", library="timm"),
    Instance("torchvision:convnext_tiny", 16, "3x64x64", library="torchvision"),
    # Mixtral's feed-forward is a top-2 of 8 SwiGLU experts; a 4-layer, 4-expert one of width 256.
    Instance("hf:mixtral", 4, None, ("layers=4", "width=256", "heads=4", "kv_heads=4", "ffn=512", "vocab=1024",
                                     "sequence=128", "num_local_experts=4", "num_experts_per_tok=2"),
             library="transformers"),
)


def fast_members() -> list[tuple[str, dict[str, object]]]:
    """auto's members, the fast ones then the exact ones, in its run order, each with the parameters auto
    gives it (the exact ones with their defaults: alone, each has every core)."""
    from remat_bench.app.portfolio import _roster

    return [(name, dict(member.params)) for name, member in _roster()]


def graph_of(instance: Instance) -> Graph | None:
    """The instance's graph, imported with the default options once and cached; None (said) when it cannot be."""
    path = GRAPHS / f"{instance.name.replace(':', '-')}-b{instance.batch}.json"
    if path.exists():
        return load_graph(path)
    if instance.library and importlib.util.find_spec(instance.library) is None:
        console.print(f"{instance.name}: skipped, {instance.library} is not installed "
                      "(`pip install remat-bench[models]`)")
        return None
    GRAPHS.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "remat_bench", "graphs", "import-torch", instance.name,
               "--batch", str(instance.batch), "-o", str(path)]
    if instance.input_shape:
        command += ["--input-shape", instance.input_shape]
    for kwarg in instance.kwargs:
        command += ["--kwarg", kwarg]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        why = (done.stderr.strip() or done.stdout.strip() or f"exit status {done.returncode}").splitlines()[-1]
        why = why.removeprefix("error: ")
        console.print(f"{instance.name}: skipped, it does not import here: {why}")
        return None
    graph = load_graph(path)
    console.print(f"{instance.name}: imported in {time.perf_counter() - start:.1f} s, {graph.n} nodes "
                  f"({sum(nd.kind == 'forward' for nd in graph.nodes)} forward) -> {path.relative_to(ROOT)}")
    return graph


def pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.2f}%"


def main() -> None:
    members = fast_members()
    bounds = BoundCache(str(GRAPHS / "bounds"))
    rows: dict[float, Rows] = {limit: Rows() for limit in LIMITS}
    for instance in INSTANCES:
        if ONLY and instance.name not in ONLY:
            continue
        graph = graph_of(instance)
        if graph is None:
            continue
        label = f"{instance.name} b{instance.batch} ({graph.n} nodes)"
        for budget in BUDGETS:
            amount = parse_budget(budget, graph).amount
            bound, _ = bounds.get(graph, amount, BOUND_EFFORT)
            for limit in LIMITS:
                alone = {}
                start = time.perf_counter()
                for name, params in members:
                    alone[name] = run(graph, name, budget, time_limit=limit, params=params, bounds=bounds)
                members_s = time.perf_counter() - start
                auto = run(graph, "auto", budget, time_limit=limit, bounds=bounds)
                base = auto.baseline_duration
                bound_pct = None if bound.value is None else 100 * (bound.value / base - 1)
                found = {name: r for name, r in alone.items() if r.status.found_schedule and r.duration is not None}
                best = min(found, key=lambda name: float(found[name].duration or 0), default=None)
                auto_found = auto.status.found_schedule and auto.duration is not None
                gap = auto.overhead_pct - bound_pct if auto_found and bound_pct is not None else None
                if best is None:
                    behind = "yes" if auto_found or not found else "no"
                else:
                    behind = "yes" if auto_found and auto.duration <= found[best].duration else "no"
                rows[limit].append([
                    label, budget,
                    "infeasible" if bound.value is None else f"{pct(bound_pct)} ({bound.status})",
                    pct(auto.overhead_pct) if auto_found else auto.status.value,
                    "-" if gap is None else f"{gap:.2f}",
                    "-" if best is None else f"{best} {pct(found[best].overhead_pct)}",
                    behind,
                    ", ".join(name for name in alone if name not in found) or "-",
                    f"{auto.solve_time_s:.1f}", f"{members_s:.1f}",
                ])
    for limit, table in rows.items():
        if not table:
            continue
        show(f"Families never tuned on, {limit:g} s: auto against its fast members alone and the any-order bound",
             ["instance", "budget", "bound (any order)", "auto", "gap (points)", "best member alone",
              "never behind", "no schedule alone", "auto s", "members s"], table)
