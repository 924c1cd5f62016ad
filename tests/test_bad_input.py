"""The bad-input corpus (tests/data/bad/): every case gets its exact sentence and exit status 2."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from click.testing import CliRunner

from remat_bench.app.catalog import method_names
from remat_bench.app.cli import main

BAD = Path(__file__).parent / "data" / "bad"
KUMAR = str(Path(__file__).resolve().parents[1] / "graphs" / "kumar-figure1.json")

MEMORY = "its memory (fixed memory, every node's value and the largest workspace) adds up to "
TOTAL = ", above 2**53 = 9,007,199,254,740,992, the largest total every method represents exactly; "

GRAPHS = {
    "graph-array.json": "expected a JSON object at the top level, found an array",
    "graph-bool-size.json": "node 'a' (nodes[0]), field memory must be a number, not a boolean (true)",
    "graph-cycle.json": "the graph has a cycle: 'a' -> 'b' -> 'c' -> 'a'",
    "graph-duplicate-id.json": "node id 'a' appears twice (nodes[0] and nodes[1])",
    "graph-empty-file.json": "not valid JSON at line 1, column 1: Expecting value",
    "graph-empty-object.json": "neither a remat-bench graph (no 'format' field) nor a networkx node-link graph "
                               "(no 'nodes' with 'links' or 'edges')",
    "graph-infinity.json": "Infinity is not a valid JSON number at line 1, column 108; numbers must be finite",
    "graph-nan.json": "NaN is not a valid JSON number at line 1, column 93; numbers must be finite",
    "graph-negative-memory.json": "node 'a' (nodes[0]), field memory is negative (-3); sizes and costs must be >= 0",
    "graph-no-nodes.json": "the graph has no nodes",
    "graph-nodelink-no-duration.json": "node 0 has no duration attribute (expected one of cost_cpu, duration)",
    "graph-nodelink-unknown-edge.json": "edge [0] refers to node 7, which is not a node",
    "graph-nodes-not-list.json": 'field nodes must be an array, not an object ({"a": 1})',
    "graph-not-topological.json": "node 'b' (nodes[0]) uses 'a', which is listed after it; nodes must appear in a "
                                  "topological order",
    "graph-not-utf8.json": "is not UTF-8 text (bad byte at offset 0)",
    "graph-overflow.json": "node 'a' has memory inf; it must be finite",
    "graph-truncated.json": "not valid JSON at line 3, column 32: Unterminated string starting at",
    "graph-unicode-unknown-input.json": "node '层' lists input '缺失', which is not a node of the graph",
    "graph-wrong-type.json": 'node \'a\' (nodes[0]), field memory must be a number, not a string ("12")',
    "graph-wrong-version.json": "field version is 2, expected 1",
    # Finite values whose sums no method represents exactly (2**53).
    "graph-memory-sum-overflow.json": f"{MEMORY}more than a double holds (1.8e308){TOTAL}give memory in a larger "
                                      "unit (KiB, MiB)",
    "graph-fixed-memory-huge.json": f"{MEMORY}1e+308{TOTAL}give memory in a larger unit (KiB, MiB)",
    "graph-workspace-huge.json": f"{MEMORY}1e+308{TOTAL}give memory in a larger unit (KiB, MiB)",
    "graph-memory-2-pow-70.json": f"{MEMORY}1.18059e+21{TOTAL}give memory in a larger unit (KiB, MiB)",
    # Issue 30 item 19: one sentence in plain words, and a control character never printed raw.
    "graph-control-character-id.json": 'node nodes[0] has an id with a control character ("a\\u0000b"); ids must '
                                       "be printable text",
    "graph-control-character-input.json": "node 'a' lists input 'zz\\x00', which is not a node of the graph",
    "graph-input-not-a-string.json": "node 'a' (nodes[0]), field inputs[0] must be a string, not a number (5)",
    "graph-empty-implementations.json": "node 'a' (nodes[0]), field implementations is an empty list; give at least "
                                        "1 item",
    "graph-duration-huge.json": "its duration (every node computed once, each at its slowest implementation) adds up "
                                f"to 1e+308{TOTAL}give durations in a larger unit",
}

SCHEDULES = {
    "schedule-already-resident.json":
        "step 1 (compute 'A'): 'A' is already resident; free it before computing it again",
    "schedule-free-not-resident.json": "step 1 (free 'B'): 'B' is not resident",
    "schedule-incomplete.json": "node 'E' is never computed; every node must be computed at least once",
    "schedule-input-missing.json": "step 1 (compute 'C'): input 'B' is not resident",
    "schedule-truncated.json": "not valid JSON at line 1, column 70: Expecting ',' delimiter",
    "schedule-unknown-implementation.json": "step 0 computes 'A' with implementation 'winograd', which it does not "
                                            "have (it has: default)",
    "schedule-unknown-node.json": "step 2 (compute 'Z') names a node that is not in graph 'kumar-figure1'",
    "schedule-wrong-format.json": "is a graph file, not a schedule; give the graph first and the schedule second",
    "schedule-nests-too-deeply.json": "the JSON nests too deeply to be read (remat-bench files nest a few levels)",
    "schedule-no-format.json": "is not a remat-bench schedule file (it has no 'format' field; a schedule file has "
                               "format 'remat-bench-schedule', as `remat-bench solve -o` writes)",
}

CONFIGS = {
    "config-bad-budget.yaml": "line 4: budget 'lots' is not understood; give a fraction of the baseline peak (0.8), "
                              "a percentage (80%), an amount (12GiB, 1.2e10) or 'min' (for graph 'chain-16')",
    "config-bad-yaml.yaml": "line 3: not valid YAML: expected ',' or ']', but got ':'",
    "config-missing-graph.yaml": f"line 2: graph file {Path(KUMAR).parent / 'no-such-graph.json'} does not exist",
    "config-unknown-key.yaml": "line 5: unknown key 'colour' in the config; the keys are name, description, output, "
                               "graphs, methods, budgets, time_limit, grace, memory_limit, repeats, seeds, executor, "
                               "address, workers, replay, links",
    "config-unknown-method.yaml": "line 3: unknown method 'nosuch'; known methods: " + ", ".join(method_names()),
    "config-infinite-time-limit.yaml": "line 5: 'time_limit' must be a number above 0, not '.inf'",
    "config-unknown-param.yaml": "line 5: method 'chen' has no parameter 'colour' (its parameters: variant, grid)",
    # Issue 30: a config is data, its derived paths stay in their folders, its sizes are counted first.
    "config-python-tag.yaml": "line 5: the tag '!!python/object/apply:os.system' is not allowed; a config holds "
                              "plain values (text, numbers, lists and mappings)",
    "config-torch-os-system.yaml": "line 3: 'os:system' names the standard library (os), which is never called; a "
                                   "model is a zoo name (mlp, vgg11, resnet18, resnet50, unet, gpt, gru, dunet, moe, "
                                   "convnext), an nn.Module subclass, or a function in a file of your own "
                                   "(docs/sweeps.md, 'PyTorch models')",
    "config-name-path.yaml": "line 1: the sweep's name '../../../escaped' must be a plain name, not a path (no '/', "
                             "not '.' or '..'): it names the results folder results/<name>; choose another folder "
                             "with 'output' or --output",
    "config-too-many-runs.yaml": "line 5: the sweep has 1,000,000,000 runs (1 graph x 1 budget x 1 method setting x "
                                 "1,000,000,000 repeats), more than the 1,000,000 one sweep may have; split it into "
                                 "several sweeps",
    "config-billion-laughs.yaml": "line 11: this value expands to more than 1,000,000 values through its aliases "
                                  "(*name); a config that large is refused",
    "config-generate-too-large.yaml": "line 3: random-layered: these options give a graph of 100,000,000 nodes, "
                                      "more than the 1,000,000 a generated graph may have; choose a smaller --nodes",
}


# How many inputs the corpus tried; tests/conftest.py prints it in the summary.
TRIED = {"inputs": 0}


HANG_S = 60  # an input that takes longer than this to refuse counts as a hang


def _hang(signum, frame):
    raise TimeoutError(f"no answer within {HANG_S} s: the input hangs the command")


def error_of(args: list[str]) -> str:
    TRIED["inputs"] += 1
    previous = signal.signal(signal.SIGALRM, _hang)
    signal.alarm(HANG_S)
    try:
        result = CliRunner().invoke(main, args, prog_name="remat-bench")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert not isinstance(result.exception, TimeoutError), result.exception
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output  # one sentence, nothing else
    return lines[0]


def test_the_corpus_is_complete():
    on_disk = {p.name for p in BAD.iterdir()}
    assert on_disk == set(GRAPHS) | set(SCHEDULES) | set(CONFIGS) | {"schedule-wrong-graph.json"}


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_bad_graph(name):
    path = BAD / name
    assert error_of(["graphs", "validate", str(path)]) == f"error: {path}: {GRAPHS[name]}"


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_bad_schedule(name):
    path = BAD / name
    assert error_of(["simulate", KUMAR, str(path)]) == f"error: {path}: {SCHEDULES[name]}"


def test_schedule_for_another_graph():
    path = BAD / "schedule-wrong-graph.json"
    message = error_of(["simulate", KUMAR, str(path)])
    assert message.startswith(f"error: {path} was written for graph 'other' (sha256 ")
    assert message.endswith("not for 'kumar-figure1' (sha256 2318736d99f6); pass --force to score it anyway")


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_bad_config(name):
    path = BAD / name
    assert error_of(["sweep", str(path), "--dry-run"]) == f"error: {path}, {CONFIGS[name]}"


def test_ten_megabytes_of_junk(tmp_path):
    # Generated here rather than kept in git: 10 MB of printable junk that is not JSON.
    junk = tmp_path / "junk.json"
    junk.write_bytes((b"remat-bench? " * 806_600)[: 10 * 2**20])
    assert error_of(["graphs", "validate", str(junk)]) == (
        f"error: {junk}: not valid JSON at line 1, column 1: Expecting value")


# ---------------------------------------------------------------------- arguments and outputs

CHAIN = str(Path(__file__).resolve().parents[1] / "graphs" / "chain-16-train.json")
TIME = "give a positive, finite number of seconds (see `remat-bench solve -h`)"
ARGUMENTS = [
    # Budgets.
    (["-m", "none", "-b", "1e400"], "budget '1e400' is above 2**53 = 9,007,199,254,740,992 memory units, the largest "
     "amount every method represents exactly; any budget at or above the baseline peak (18) already means no limit"),
    (["-m", "none", "-b", "0"], "budget '0' must be more than zero"),
    (["-m", "none", "-b", "lots"], "budget 'lots' is not understood; give a fraction of the baseline peak (0.8), a "
     "percentage (80%), an amount (12GiB, 1.2e10) or 'min'"),
    # Time limits.
    (["-m", "none", "-b", "1", "-t", "nan"], f"Invalid value for '--time-limit' / '-t': 'nan': {TIME}"),
    (["-m", "none", "-b", "1", "-t", "inf"], f"Invalid value for '--time-limit' / '-t': 'inf': {TIME}"),
    (["-m", "none", "-b", "1", "-t", "1e400"], f"Invalid value for '--time-limit' / '-t': '1e400': {TIME}"),
    (["-m", "none", "-b", "1", "-t", "-5"], f"Invalid value for '--time-limit' / '-t': '-5': {TIME}"),
    # Methods and parameters.
    (["-m", "mocasin", "-b", "0.8"], "unknown method 'mocasin'; did you mean 'moccasin'? known methods: "
     + ", ".join(method_names())),
    (["-m", "greedy", "-m", "greedy", "-b", "0.8"], "--method names greedy more than once; give each method once"),
    (["-m", "checkmate", "-b", "0.8", "-p", "backend=nonexistent"],
     "backend 'nonexistent' is not understood; use 'highs' or 'pulp:NAME' (e.g. pulp:PULP_CBC_CMD)"),
    (["-m", "checkmate", "-b", "0.8", "-p", "backend=cbc"],
     "backend 'cbc' is not understood; use 'highs' or 'pulp:NAME' (e.g. pulp:PULP_CBC_CMD)"),
    (["-m", "moccasin", "-b", "0.8", "-p", "max_intervals=-3"], "parameter 'max_intervals' of method 'moccasin' must "
     "be at least 0 (retention intervals per node, C (0: 2 staged, 3 order-free)), got '-3'"),
    (["-m", "moccasin", "-b", "0.8", "-p", "phase1_share=2"], "parameter 'phase1_share' of method 'moccasin' must be "
     "at most 1, got '2'"),
    (["-m", "moccasin", "-b", "0.8", "-p", "phase1_share=nan"],
     "parameter 'phase1_share' of method 'moccasin' must be a finite number, got 'nan'"),
    (["-m", "moccasin", "-b", "0.8", "-p", "num_workers=-4"],
     "parameter 'threads' of method 'moccasin' must be at least 0 (CP-SAT workers (0: all cores)), got '-4'"),
    (["-m", "moccasin", "-b", "0.8", "-p", "threads=1", "-p", "num_workers=1"],
     "method 'moccasin': 'num_workers' and 'threads' name the same parameter; give one"),
    (["-m", "checkmate", "-b", "0.8", "-p", "mip_gap=-1"],
     "parameter 'mip_gap' of method 'checkmate' must be at least 0, got '-1'"),
    (["-m", "checkmate", "-b", "0.8", "-p", "mip_gap=inf"],
     "parameter 'mip_gap' of method 'checkmate' must be a finite number, got 'inf'"),
    (["-m", "checkmate", "-b", "0.8", "-p", "heuristic_effort=-1"],
     "parameter 'heuristic_effort' of method 'checkmate' must be at least 0, got '-1'"),
    (["-m", "checkmate", "-b", "0.8", "-p", "threads=-1"], "parameter 'threads' of method 'checkmate' must be at "
     "least 0 (solver threads (0: the solver's default)), got '-1'"),
    (["-m", "chen", "-b", "0.8", "-p", "grid=0"],
     "parameter 'grid' of method 'chen' must be at least 1 (number of thresholds b the greedy variant tries), got '0'"),
    (["-m", "chen", "-b", "0.8", "-p", "gird=4"],
     "method 'chen' has no parameter 'gird' (its parameters: variant, grid); did you mean 'grid'?"),
    # Outputs that cannot be written atomically: refused before any work.
    (["-m", "none", "-b", "1", "-o", "/dev/full"], "/dev/full: is not a regular file (a device, pipe or socket); "
     "outputs are written to a file and renamed into place: give a file path (or use --json for standard output)"),
    (["-m", "none", "-b", "1", "-o", "/proc/self/x.json"],
     "cannot write /proc/self/x.json: No such file or directory; choose another path"),
    (["-m", "none", "-b", "1", "-o", f"{CHAIN}/s.json"],
     f"cannot write {CHAIN}/s.json: Not a directory; choose another path"),
    (["-m", "greedy", "-m", "chen", "-b", "0.8", "-o", "never-written.json"],
     "-o writes one schedule: give one --method, or solve each method on its own"),
]


@pytest.mark.parametrize("args, sentence", ARGUMENTS, ids=lambda a: " ".join(a) if isinstance(a, list) else "")
def test_bad_arguments(args, sentence):
    assert error_of(["solve", CHAIN, *args]) == f"error: {sentence}"
