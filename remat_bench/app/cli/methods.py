"""``methods``: every solver `--method` takes, or one in full (docs/design.md section 7)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import click
from rich.console import RenderableType
from rich.markup import escape
from rich.table import Table

from remat_bench.app.cli.helpers import show


@click.command()
@click.argument("name", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
def methods(name: str | None, as_json: bool) -> None:
    """List every method, its parameters and whether it can run here; NAME: one method in full."""
    from remat_bench.app.catalog import get_method, method_names
    from remat_bench.core.errors import MethodError

    if name is not None:
        get_method(name)  # an unknown name: one sentence, with a suggestion
    rows: list[dict[str, Any]] = []
    for method in [name] if name else method_names():
        try:
            cls = get_method(method)
        except MethodError as exc:  # a plugin (or a module) that fails to import: list it, say why
            rows.append({"name": method, "description": "", "available": False, "missing": str(exc),
                         "space": "", "params": []})
            continue
        ok, why = cls.available()
        rows.append({
            "name": method,
            "description": cls.description,
            "available": ok,
            "missing": why,
            "space": cls.search_space,
            "params": [{"name": p.name, "type": p.type.__name__, "default": p.default, "help": p.help,
                        "accepts": p.accepts, **({"choices": list(p.choices)} if p.choices else {}),
                        **({"minimum": p.minimum} if p.minimum is not None else {}),
                        **({"maximum": p.maximum} if p.maximum is not None else {}),
                        **({"aliases": list(p.aliases)} if p.aliases else {})} for p in cls.params],
        })
    show(rows, as_json, lambda: _one_method(rows[0]) if name is not None else _every_method(rows))


def _every_method(rows: list[dict[str, Any]]) -> Iterator[RenderableType]:
    table = Table(title="remat-bench methods")
    table.add_column("method", style="bold")
    table.add_column("here")
    table.add_column("description")
    table.add_column("parameters (default)")
    for row in rows:
        params = "\n".join(f"{p['name']}={p['default']}" for p in row["params"]) or "-"
        here = "[green]yes[/]" if row["available"] else f"[red]no[/]: {escape(row['missing'])}"
        table.add_row(row["name"], here, row["description"], params)
    yield table
    yield ("`remat-bench methods NAME` says what each parameter means and what it accepts; any method also "
           "takes -p impl=first|fastest-fit.")


def _one_method(row: dict[str, Any]) -> Iterator[RenderableType]:
    yield f"[bold]{row['name']}[/]: {escape(row['description'])}"
    yield f"searches: {escape(row['space'])} (its optimal and infeasible hold there only)"
    if not row["available"]:
        yield f"[red]not available here[/]: {escape(row['missing'])}"
    if not row["params"]:
        yield "parameters: none"
        return
    table = Table()
    for col in ("parameter", "default", "accepts", "meaning"):
        table.add_column(col, style="bold" if col == "parameter" else None)
    for p in row["params"]:
        label = p["name"] + (f" (also {', '.join(p['aliases'])})" if p.get("aliases") else "")
        table.add_row(label, str(p["default"]), escape(p["accepts"]), escape(p["help"]))
    yield table
