"""Every command of the README's code blocks runs as written (issue 30 item 14: its side-by-side
examples asked for a budget below the memory floor, so every one of them answered `infeasible`)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROGRAM = ".venv/bin/remat-bench"
# Commands the suite cannot run as written, each for a stated reason (and each still in the README).
NOT_RUN = {
    "graphs fetch paper": "downloads from GitHub; tests/test_datasets.py fetches from a local server instead",
}


def readme_commands() -> list[str]:
    """The remat-bench commands of the README's code blocks, in order, without their comments."""
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"^```[a-z]*\n(.*?)^```", text, flags=re.S | re.M)
    commands = []
    for block in blocks:
        for line in block.splitlines():
            line = line.split("#", 1)[0].strip()
            if line.startswith(PROGRAM):
                commands.append(line[len(PROGRAM):].strip())
    return commands


def test_the_readme_lists_the_commands_it_promises():
    commands = readme_commands()
    assert len(commands) >= 20
    for skipped in NOT_RUN:
        assert skipped in commands, f"NOT_RUN names '{skipped}', which the README no longer has"


# The README's commands in independent chains, each run in a folder of its own (their outputs, s.json among them,
# do not meet), so that a parallel run of the suite runs them side by side. A command goes to the first chain
# one of whose words it holds; the rest run in order in the last.
CHAINS = {
    "pytorch": ("import-torch", "resnet18.json"),
    "sweep": ("sweep ", "results/smoke", "report ", "plot "),
    "generated": ("graphs import ", "graph.json", "graphs generate", "r50.json", "resnet50.json"),
    "shipped": ("",),
}


def chain_of(command: str) -> str:
    return next(name for name, words in CHAINS.items() if any(word in command for word in words))


def test_the_chains_hold_every_command_in_the_readmes_order():
    chained = {name: [c for c in readme_commands() if chain_of(c) == name] for name in CHAINS}
    assert sum(len(commands) for commands in chained.values()) == len(readme_commands())
    assert all(chained.values()), chained  # each chain still has commands: a rename in the README shows here
    assert chained["pytorch"][0].startswith("graphs import-torch")  # the import before the solve and replay
    assert chained["sweep"][0].startswith("sweep ")  # the sweep before its report and chart


def workdir(tmp_path: Path) -> Path:
    """A folder to run in, as a user would from the clone (configs/, docs/ and graphs/ beside it), whose outputs
    (s.json, results/...) land outside the repository."""
    for name in ("configs", "docs", "graphs"):
        (tmp_path / name).symlink_to(ROOT / name)
    return tmp_path


@pytest.mark.parametrize("chain", list(CHAINS))
def test_every_readme_command_runs_as_written(tmp_path, chain):
    pytest.importorskip("torch", reason="the README's PyTorch commands need torch (make test installs it)")
    here = workdir(tmp_path)
    env = {**os.environ, "REMAT_BENCH_BOUND_CACHE": str(here / "bounds")}
    failures = []
    for command in readme_commands():
        if command in NOT_RUN or chain_of(command) != chain:
            continue
        proc = subprocess.run([sys.executable, "-m", "remat_bench", *shlex.split(command)], cwd=here,
                              capture_output=True, text=True, env=env, timeout=600)
        # Exit 1 is `solve` finding no schedule within the budget (an infeasible budget among them).
        if proc.returncode != 0:
            failures.append(f"`remat-bench {command}` exited {proc.returncode}: "
                            f"{(proc.stderr.strip() or proc.stdout.strip())[-300:]}")
    assert failures == [], "\n".join(failures)
