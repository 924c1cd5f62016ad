"""The ``graphs`` group: list, show, validate, import, generate and fetch graphs, and the device profiles
imports can estimate durations on (docs/design.md sections 3 and 7).

``graphs import-torch`` is in `remat_bench.app.cli.torch`, beside ``replay``: both need PyTorch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.markup import escape
from rich.table import Table

from remat_bench.app.cli.helpers import SECONDS, check_output, err, key_values, load, out, show
from remat_bench.core.budget import format_amount
from remat_bench.core.errors import RematBenchError


@click.group()
def graphs() -> None:
    """List, show, validate, import and generate graphs."""


@graphs.command("list")
@click.option("--json", "as_json", is_flag=True)
def graphs_list(as_json: bool) -> None:
    """Graphs on the search path (shipped graphs/, $REMAT_BENCH_GRAPHS) and the published ones (paper:<name>)."""
    from remat_bench.app import datasets
    from remat_bench.app.graphs import known_graphs
    from remat_bench.core.baseline import baseline
    from remat_bench.core.graph_io import load_graph

    rows: list[dict[str, Any]] = []
    for label, path in known_graphs():
        if path is None:
            rows.append({"graph": label, "file": None, "error": f"not on this machine: {datasets.FETCH_HINT}"})
            continue
        try:
            g = load_graph(path)
        except RematBenchError as exc:
            rows.append({"graph": label, "file": str(path), "error": str(exc)})
            continue
        rows.append({
            "graph": label, "file": str(path), "name": g.name, "nodes": g.n, "edges": g.num_edges,
            "kind": "training" if g.has_backward else "forward only",
            "baseline_peak": baseline(g).peak, "memory_unit": g.units.get("memory", ""),
        })
    show(rows, as_json, lambda: _graphs_table(rows))


def _graphs_table(rows: list[dict[str, Any]]) -> Table:
    table = Table(title="graphs")
    # The first column is what a user types: never cut; the long names give way first.
    table.add_column("graph", no_wrap=True, min_width=max((len(r["graph"]) for r in rows), default=5))
    table.add_column("name", overflow="fold", ratio=1)
    for col in ("nodes", "edges", "kind", "baseline peak"):
        table.add_column(col, no_wrap=True)
    for r in rows:
        if "error" in r:
            table.add_row(r["graph"], f"[red]{escape(r['error'])}[/]", "", "", "", "")
        else:
            table.add_row(r["graph"], r["name"], str(r["nodes"]), str(r["edges"]), r["kind"],
                          format_amount(r["baseline_peak"], r["memory_unit"]))
    return table


@graphs.command("fetch")
@click.argument("dataset", type=click.Choice(["paper"]))
@click.option("-o", "--output", type=click.Path(path_type=Path, file_okay=False),
              help="Folder to put the files in (default: the user cache, $REMAT_BENCH_CACHE).")
@click.option("--source", metavar="URL|DIR",
              help="Base URL of a mirror, or a local folder holding the files (default: the pinned commit "
                   "of haoming-codes/moccasin on GitHub).")
@click.option("--deadline", type=SECONDS, metavar="SECONDS",
              help="Give up on the whole fetch after this long (default 600; each read also times out after 60).")
def graphs_fetch(dataset: str, output: Path | None, source: str | None, deadline: float | None) -> None:
    """Download the published graphs (DATASET: paper, the Moccasin paper's Table 2), SHA-256 checked.

    Each file is checked against the hash pinned in remat_bench/app/datasets.py
    before it is renamed into place; a file already there with the right hash
    is kept. The graphs are then named paper:<name> everywhere (solve,
    graphs show, sweep configs). A fetch that fails part-way keeps the files
    that arrived (listed), and leaves no partial file.
    """
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn

    from remat_bench.app import datasets

    data = datasets.DATASETS[dataset]
    dest = output or datasets.cache_dir() / "graphs" / data.name
    label = source or data.source
    err.print(f"fetching {len(data.files)} graphs of '{data.name}' ({data.description}) from {label} into {dest}")
    with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), console=err,
                  disable=not err.is_terminal, transient=True) as bar:
        tasks: dict[str, Any] = {}

        def progress(name: str, received: int, total: int) -> None:
            if name not in tasks:
                tasks[name] = bar.add_task(name, total=total)
            bar.update(tasks[name], completed=received)

        failed: datasets.FetchError | None = None
        try:
            fetched = datasets.fetch(data, dest, source, progress, deadline=deadline or datasets.DEADLINE_S)
        except datasets.FetchError as exc:  # the files that arrived stay: list them before the error
            fetched, failed = exc.fetched, exc
    for f in fetched:
        out.print(f"{f.action:>10}  {f.path}" + ("" if f.action == "present" else f"  (sha256 ok, from {f.source})"))
    if failed is not None:
        raise failed
    where = [p.resolve() for p in datasets.search_path(data)]
    if dest.resolve() not in where:
        out.print(f"the graphs are in {dest}; set PAPER_GRAPHS={dest} so that paper:<name> finds them")
    elif (first := datasets.find(data.files[0].name, data)) is not None and first != fetched[0].path:
        out.print(f"note: paper:<name> still reads {first.parent} first "
                  "(PAPER_GRAPHS, then ../shared/graphs/paper beside the checkout, then the cache)")


@graphs.command("show")
@click.argument("graph")
@click.option("--json", "as_json", is_flag=True)
def graphs_show(graph: str, as_json: bool) -> None:
    """Summary of one graph: size, kinds, baseline, memory floor."""
    from remat_bench.core.baseline import baseline
    from remat_bench.core.budget import memory_floor

    g = load(graph)
    base = baseline(g)
    floor = memory_floor(g)
    data = {
        "name": g.name, "sha256": g.sha256, "nodes": g.n, "edges": g.num_edges,
        "forward_nodes": len(g.forward_indices), "backward_nodes": len(g.backward_indices),
        "nodes_with_implementations": sum(1 for nd in g.nodes if nd.implementations),
        "outputs": g.outputs, "fixed_memory": g.fixed_memory, "units": g.units,
        "baseline_peak": base.peak, "baseline_duration": base.duration,
        "memory_floor": floor.amount, "memory_floor_node": floor.node,
        "memory_floor_fraction": floor.amount / base.peak if base.peak else None,
        "total_memory": g.memory.sum().item(),
        "repeated_blocks": _blocks(g),
        "random_operators": sum(1 for nd in g.nodes if "random" in (nd.metadata or {})),
        "costs": _costs(g),
    }
    show(data, as_json, lambda: key_values(_summary(data, g.units.get("memory", ""))))


def _costs(g: Any) -> dict[str, Any]:
    """How the graph's costs were obtained (`remat_bench.core.provenance`), with a sentence saying it."""
    from dataclasses import asdict

    from remat_bench.core.provenance import cost_source, unmeasured_memory_warning

    source = cost_source(g)
    return {**asdict(source), "notes": list(source.notes), "description": source.describe(),
            "warning": unmeasured_memory_warning(g)}


def _blocks(g: Any) -> dict[str, int] | None:
    """The repeated blocks of the forward pass (`remat_bench.toolkit.blocks`), or None."""
    from remat_bench.toolkit.blocks import find_blocks

    found = find_blocks(g)
    return None if found is None else {"copies": found.copies, "forward_nodes_each": found.period}


def _summary(data: dict[str, Any], unit: str) -> list[tuple[str, str]]:
    """`graphs show`'s keys in words, sizes in the graph's unit."""
    rows = []
    for key, value in data.items():
        if key in ("baseline_peak", "memory_floor", "fixed_memory", "total_memory"):
            value = format_amount(value, unit)
        elif key == "baseline_duration":
            value = format_amount(value)
        elif key == "memory_floor_fraction" and value is not None:
            value = f"{value:.4f} of the baseline peak (no budget below it is feasible)"
        elif key == "outputs":
            value = ", ".join(value[:8]) + (f" ... ({len(value)} in all)" if len(value) > 8 else "")
        elif key == "costs":
            value = escape(value["description"]) + "".join(
                f"\n[yellow]{escape(text)}[/]" for text in [*value["notes"], value["warning"]] if text)
        elif key == "repeated_blocks":
            value = "none found" if value is None else (
                f"{value['copies']} copies of {value['forward_nodes_each']} forward nodes (knapsack's search drops "
                "one place of every copy at a time)")
        if key == "random_operators":
            if value:  # an imported model's dropout: say why recomputing it is exact
                rows.append(("random operators", f"{value}, each seeded by its own key from the model's seed: every "
                                                 "computation draws the same values, as the autograd step replay "
                                                 "checks against does"))
            continue
        if key == "total_memory":
            rows.append(("all values at once", f"{value}: every node's value held together, the fixed memory "
                                               "not included"))
            continue
        rows.append((key.replace("_", " "), str(value)))
    return rows


@graphs.command("validate")
@click.argument("graph", nargs=-1, required=True)
def graphs_validate(graph: tuple[str, ...]) -> None:
    """Check graph files against the format; one line per file, exit 2 on the first bad one."""
    for text in graph:
        g = load(text)
        out.print(f"{text}: ok ({g.n} nodes, {g.num_edges} edges, sha256 {g.sha256[:12]})")


@graphs.command("import")
@click.argument("source", type=click.Path(path_type=Path))
@click.option("-o", "--output", type=click.Path(path_type=Path), required=True)
def graphs_import(source: Path, output: Path) -> None:
    """Convert a networkx node-link graph (Checkmate, Moccasin) to remat-bench JSON."""
    from remat_bench.core.graph_io import load_graph, save_graph

    g = load_graph(source)
    check_output(output, [source], "remat-bench-graph")
    save_graph(g, output)
    out.print(f"wrote {output} ({g.n} nodes, {g.num_edges} edges)")


@graphs.command("profiles")
@click.argument("profile", nargs=-1)
@click.option("--json", "as_json", is_flag=True)
def graphs_profiles(profile: tuple[str, ...], as_json: bool) -> None:
    """The device profiles `graphs import-torch --device-profile` estimates durations on: the shipped ones, or
    each PROFILE given (a name or a YAML file of your own, checked)."""
    from remat_bench.core.device_profile import load_device_profile, shipped_profiles

    profiles = [load_device_profile(p) for p in profile or shipped_profiles()]
    rows = [{**p.as_dict(), "aliases": list(p.aliases)} for p in profiles]
    show(rows, as_json, lambda: _profiles_table(rows))


def _profiles_table(rows: list[dict[str, Any]]) -> Table:
    """Device profiles, one per row: dense peaks in TFLOP/s, rates in GB/s and sizes in GB (10^9, as data sheets
    count)."""
    dtypes = {"float32": "fp32", "tfloat32": "tf32", "bfloat16": "bf16", "float16": "fp16", "float64": "fp64",
              "int8": "int8"}
    table = Table(title="device profiles: peak TFLOP/s by dtype, bandwidths in GB/s; a roofline on them is an "
                        "estimate, not a measurement")
    table.add_column("profile", no_wrap=True)
    for short in dtypes.values():
        table.add_column(short, justify="right")
    for column in ("memory", "GB/s", "host link", "launch"):
        table.add_column(column, justify="right", no_wrap=True)
    sources = []
    for r in rows:
        peaks = [f"{r['peak_flops'][d] / 1e12:g}" if d in r["peak_flops"] else "-" for d in dtypes]
        memory = f"{r['memory_bytes'] / 1e9:g} GB" if r.get("memory_bytes") else "-"
        link = f"{r['host_to_device'] / 1e9:g}/{r['device_to_host'] / 1e9:g}"
        aliases = f" ({', '.join(r['aliases'])})" if r["aliases"] else ""
        table.add_row(escape(r["name"]) + aliases, *peaks, memory, f"{r['memory_bandwidth'] / 1e9:g}", link,
                      f"{r['launch_s'] * 1e6:g} µs")
        sources.append(f"{escape(r['name'])}: {escape(r['source'])}"
                       + (f" (efficiency {r['efficiency']:g})" if r["efficiency"] != 1 else ""))
    table.caption = "\n".join(["host link: GB/s to / from the device", *sources])
    return table


@graphs.command("generate")
@click.argument("kind")
@click.option("--batch", type=int)
@click.option("--layers", type=int, help="Chain/transformer/recurrent layers; ResNet/U-Net depth.")
@click.option("--nodes", type=int, help="Nodes of a random layered graph.")
@click.option("--seed", type=int)
@click.option("--resolution", type=int, help="Input image side, in pixels.")
@click.option("--width", type=int, help="Transformer width; recurrent hidden units; random layered mean layer width.")
@click.option("--seq", type=int, help="Transformer sequence length; recurrent time steps.")
@click.option("--implementations", is_flag=True, help="Emit alternative operator implementations.")
@click.option("-o", "--output", type=click.Path(path_type=Path), required=True)
def graphs_generate(kind: str, output: Path, **options: Any) -> None:
    """Generate a graph: chain, random-layered, vgg16, resnet50, unet, densenet121, transformer, recurrent."""
    from remat_bench.core.graph_io import save_graph
    from remat_bench.generators import generate

    check_output(output, [], "remat-bench-graph")
    g = generate(kind, **options)
    save_graph(g, output)
    out.print(f"wrote {output}: {g.name} ({g.n} nodes, {g.num_edges} edges)")
