"""An output named by a symbolic link is written through it (issue 30, item 13; core/files.py).

Every `-o/--output` writer of the CLI renames a temporary file into place (`atomic_write_bytes`); a
rename onto the link replaced the link by a plain file, leaving the file it pointed to unchanged. Each
writer is checked here: the link stays a link, and the file it points to gets the new content.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from remat_bench.app.cli import main
from remat_bench.core.files import atomic_write_text, check_writable
from remat_bench.core.graph_io import load_graph
from remat_bench.core.schedule import load_schedule
from tests.helpers import SHIPPED

CHAIN = str(SHIPPED / "chain-16-train.json")


def cli(*args: str) -> None:
    result = CliRunner().invoke(main, list(args), prog_name="remat-bench")
    assert result.exit_code == 0, result.output


def schedule(tmp_path: Path, method: str = "none") -> str:
    """A schedule of the chain by ``method`` (none at budget 1.0, chen at 0.7)."""
    path = tmp_path / f"{method}.json"
    if not path.exists():
        cli("solve", CHAIN, "-m", method, "-b", "1.0" if method == "none" else "0.7", "--no-bound", "-o", str(path))
    return str(path)


# Each writer: the command writing to OUT twice with different results (first, then second), and a check
# that OUT's file holds the second.
WRITERS = {
    "solve -o": (".json", lambda out, tmp: ["solve", CHAIN, "-m", "none", "-b", "1.0", "--no-bound", "-o", out],
                 lambda out, tmp: ["solve", CHAIN, "-m", "chen", "-b", "0.7", "--no-bound", "-o", out],
                 lambda path: load_schedule(path, load_graph(CHAIN)).method == "chen"),
    "graphs generate -o": (".json", lambda out, tmp: ["graphs", "generate", "chain", "--layers", "3", "-o", out],
                           lambda out, tmp: ["graphs", "generate", "chain", "--layers", "4", "-o", out],
                           lambda path: load_graph(path).name == "chain-4"),
    "graphs import -o": (".json", lambda out, tmp: ["graphs", "generate", "chain", "--layers", "3", "-o", out],
                         lambda out, tmp: ["graphs", "import", CHAIN, "-o", out],
                         lambda path: load_graph(path).name == "chain-16"),
    "simulate --timeline": (".svg", lambda out, tmp: ["simulate", CHAIN, schedule(tmp), "--timeline", out],
                            lambda out, tmp: ["simulate", CHAIN, schedule(tmp, "chen"), "--timeline", out],
                            lambda path: path.read_bytes().startswith(b"<?xml")),
    "plot -o": (".png", lambda out, tmp: ["plot", schedule(tmp), "--graph", CHAIN, "--kind", "timeline", "-o", out],
                lambda out, tmp: ["plot", schedule(tmp), "--graph", CHAIN, "--kind", "intervals", "-o", out],
                lambda path: path.read_bytes().startswith(b"\x89PNG")),
}


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_an_output_named_by_a_link_is_written_through_it(tmp_path, writer):
    suffix, first, second, holds_second = WRITERS[writer]
    target = tmp_path / "real" / f"target{suffix}"
    target.parent.mkdir()
    cli(*first(str(target), tmp_path))
    before = target.read_bytes()
    link = tmp_path / f"link{suffix}"
    link.symlink_to(target)
    cli(*second(str(link), tmp_path))
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_bytes() != before and holds_second(target)
    assert sorted(p.name for p in target.parent.iterdir()) == [target.name]  # no temporary file left


def test_a_dangling_link_gets_its_file_and_stays_a_link(tmp_path):
    link = tmp_path / "g.json"
    link.symlink_to(tmp_path / "made.json")
    check_writable(link)
    atomic_write_text(link, '{"format": "x"}\n')
    assert link.is_symlink() and (tmp_path / "made.json").read_text() == '{"format": "x"}\n'


def test_a_report_named_by_a_link_is_written_through_it(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(f"output: out\ngraphs: [{CHAIN}]\nmethods: [none]\nbudgets: [1.0]\n")
    cli("sweep", str(config), "-j", "1")
    target = tmp_path / "real" / "report.md"
    target.parent.mkdir()
    target.write_text("an old report\n")
    link = tmp_path / "report.md"
    link.symlink_to(target)
    cli("report", str(tmp_path / "out"), "-o", str(link))
    assert link.is_symlink() and target.read_text().startswith("# ")
