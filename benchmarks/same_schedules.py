"""Do two checkouts give the same schedules? For refactors that must not change behaviour.

Run it in each checkout (each with its own bound cache, so that neither reads the other's
bounds), then compare the two files::

    XDG_CACHE_HOME=$(mktemp -d) python -m benchmarks.same_schedules run -m moccasin -m checkmate -t 60 -o a.jsonl
    (in the other checkout)                                       ...                       -o b.jsonl
    python -m benchmarks.same_schedules compare a.jsonl b.jsonl

Each line records one instance (Table 2's published graphs and VGG16, and the shipped PyTorch zoo
graphs ``graphs/torch-*.json``, each at 0.9 and 0.8): status, overhead and a hash of the cleaned
schedule's steps. Runs cut short by the time limit are not
repeatable with CP-SAT's parallel workers (its portfolio's interleaving depends on timing), so a
difference there says nothing until the same checkout is run twice and differs too; the compare
table marks which rows are proven (repeatable), which ended on their own well inside the limit
(a heuristic's answer, repeatable too) and which were cut short by it.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import click

from benchmarks.common import ROOT, console, machine, paper, show

GRAPHS = ("random_layered_n100", "random_layered_n250", "checkmate_fcn8_vgg_train", "checkmate_resnet50_train",
          "checkmate_vgg16_train", "random_layered_n500", "random_layered_n1000")
ZOO = ("torch-mlp-b64", "torch-gpt-b8", "torch-resnet18-b8", "torch-vgg11-b8", "torch-unet-b4", "torch-resnet50-b4")
BUDGETS = ("0.9", "0.8")


@click.group()
def main() -> None:
    """Record schedules of one checkout, or compare two records."""


@main.command("run")
@click.option("-m", "--method", "methods", multiple=True, required=True)
@click.option("-t", "--time-limit", type=float, default=60.0, show_default=True)
@click.option("-o", "--output", type=click.Path(path_type=Path), required=True)
def run_cmd(methods: tuple[str, ...], time_limit: float, output: Path) -> None:
    from remat_bench.app.pipeline import run
    from remat_bench.core.graph_io import load_graph

    lines = []
    console.print(f"# {machine()}")
    sources = [(name, paper(name)) for name in GRAPHS] + [(name, ROOT / "graphs" / f"{name}.json") for name in ZOO]
    for method in methods:
        for name, path in sources:
            graph = load_graph(path)
            for budget in BUDGETS:
                start = time.perf_counter()
                r = run(graph, method, budget, time_limit=time_limit)
                steps = None if r.schedule is None else hashlib.sha256(
                    repr(list(r.schedule.steps(graph))).encode()).hexdigest()[:12]
                row = {"method": method, "graph": name, "budget": budget, "status": r.status.value,
                       "overhead": r.overhead_pct, "steps": steps, "wall": round(time.perf_counter() - start, 1)}
                console.print(json.dumps(row))
                lines.append(json.dumps(row))
    output.write_text("\n".join(lines) + "\n")


@main.command("compare")
@click.argument("first", type=click.Path(exists=True, path_type=Path))
@click.argument("second", type=click.Path(exists=True, path_type=Path))
@click.option("-t", "--time-limit", type=float, default=60.0, show_default=True,
              help="the runs' time limit: a run that ended well inside it in both records ended on its own")
def compare_cmd(first: Path, second: Path, time_limit: float) -> None:
    def load(path: Path) -> dict[tuple[str, str, str], dict]:
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.startswith("{")]
        return {(r["method"], r["graph"], r["budget"]): r for r in rows}

    a, b = load(first), load(second)

    def text(r: dict) -> str:
        return r["status"] if r["overhead"] is None else f"{r['status']} {r['overhead']:.5f}%"

    rows = []
    for key in a.keys() & b.keys():
        ra, rb = a[key], b[key]
        proven = "optimal" in (ra["status"], rb["status"]) or "infeasible" in (ra["status"], rb["status"])
        # A heuristic that returned well inside the limit in both runs was not cut short by it: its
        # answer depends on the code alone.
        own = max(ra["wall"], rb["wall"]) < 0.8 * time_limit
        rows.append([*key, text(ra), text(rb), "yes" if ra["steps"] == rb["steps"] else "no",
                     "proven" if proven else "ended on its own" if own else "time-limited"])
    rows.sort()
    for run in ("proven", "ended on its own", "time-limited"):
        of = [r for r in rows if r[-1] == run]
        console.print(f"{run}: {len(of)} instances, {sum(r[-2] == 'yes' for r in of)} the same schedule")
    show(f"{first} against {second}", ["method", "graph", "budget", str(first), str(second), "same schedule",
                                       "run"], rows)


if __name__ == "__main__":
    main()
