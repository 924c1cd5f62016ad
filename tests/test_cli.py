"""`remat-bench solve`, `methods` and `graphs`: outputs and exit statuses (docs/design.md section 7)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from remat_bench.app.cli import main
from remat_bench.core.graph_io import load_graph
from remat_bench.core.schedule import load_schedule
from remat_bench.core.simulate import simulate
from tests.helpers import SHIPPED, paper_graph

CHAIN = str(SHIPPED / "chain-16-train.json")
SOLVE_KEYS = {"graph", "method", "params", "status", "budget", "peak", "duration", "baseline_peak",
              "baseline_duration", "overhead_pct", "objective", "lower_bound", "lower_bound_any_order",
              "gap_pct", "solve_time_s", "schedule_steps"}


def invoke(*args):
    return CliRunner().invoke(main, list(args))


def test_solve_json_has_the_design_keys_and_writes_the_cleaned_schedule(tmp_path):
    out = tmp_path / "s.json"
    r = invoke("solve", CHAIN, "--method", "chen", "--budget", "0.7", "--json", "-o", str(out))
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert set(data) >= SOLVE_KEYS
    assert data["status"] == "feasible"
    assert data["peak"] <= data["budget"] == 12
    g = load_graph(CHAIN)
    sim = simulate(g, load_schedule(out, g))
    assert (sim.peak, sim.duration, sim.num_steps) == (data["peak"], data["duration"], data["schedule_steps"])


def test_solve_human_table():
    r = invoke("solve", CHAIN, "--method", "none", "--budget", "1")
    assert r.exit_code == 0
    assert "optimal" in r.output and "overhead +0.000%" in r.output


def test_solve_exit_1_when_no_schedule_fits():
    r = invoke("solve", str(paper_graph("checkmate_vgg16_train")), "-m", "chen", "-b", "0.8")
    assert r.exit_code == 1
    assert "infeasible" in r.output and "memory floor" in r.output
    r = invoke("solve", CHAIN, "-m", "none", "-b", "0.5", "--json")
    assert r.exit_code == 1
    assert json.loads(r.output)["status"] == "infeasible"


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["-m", "nosuch", "-b", "0.8"], "unknown method 'nosuch'; known methods: none, chen, greedy"),
        (["-m", "chen", "-b", "0.8", "-p", "colour=red"], "method 'chen' has no parameter 'colour'"),
        (["-m", "chen", "-b", "0.8", "-p", "grid=many"], "parameter 'grid' of method 'chen' must be int"),
        (["-m", "chen", "-b", "0.8", "-p", "variant=cube"], "must be one of greedy, sqrt"),
        (["-m", "chen", "-b", "lots"], "budget 'lots' is not understood"),
        (["-m", "chen", "-b", "0.8", "-p", "novalue"], "not of the form key=value"),
    ],
)
def test_usage_errors_exit_2(args, fragment):
    r = invoke("solve", CHAIN, *args)
    assert r.exit_code == 2
    assert fragment in r.output
    assert "Traceback" not in r.output


def test_solve_refuses_to_overwrite_its_input(tmp_path):
    r = invoke("solve", CHAIN, "-m", "none", "-b", "1", "-o", CHAIN)
    assert r.exit_code == 2
    assert "is one of the inputs" in r.output


def test_methods_lists_availability_and_params():
    r = invoke("methods", "--json")
    assert r.exit_code == 0
    rows = {m["name"]: m for m in json.loads(r.output)}
    assert rows["chen"]["available"] is True
    assert [p["name"] for p in rows["chen"]["params"]] == ["variant", "grid"]


def test_graph_names_resolve_on_the_search_path():
    r = invoke("graphs", "show", "chain-16-train", "--json")
    assert r.exit_code == 0
    assert json.loads(r.output)["nodes"] == 33


def test_graphs_show_names_the_repeated_blocks():
    shown = json.loads(invoke("graphs", "show", "torch-gpt-b8", "--json").output)
    assert shown["repeated_blocks"] == {"copies": 4, "forward_nodes_each": 10}  # the zoo GPT's four layers
    text = invoke("graphs", "show", "torch-gpt-b8").output
    assert "4 copies of 10 forward nodes" in text
    assert json.loads(invoke("graphs", "show", "torch-unet-b4", "--json").output)["repeated_blocks"] is None


def test_generate_writes_a_valid_graph(tmp_path):
    out = tmp_path / "rl.json"
    r = invoke("graphs", "generate", "random-layered", "--nodes", "40", "--seed", "3", "-o", str(out))
    assert r.exit_code == 0, r.output
    assert load_graph(out).n == 40
    r = invoke("graphs", "generate", "vgg16", "--nodes", "40", "-o", str(tmp_path / "x.json"))
    assert r.exit_code == 2


def test_third_party_methods_come_from_the_entry_point_group(monkeypatch):
    from importlib.metadata import EntryPoint

    import remat_bench.methods as registry

    fake = EntryPoint(name="plugin-none", value="remat_bench.methods.none:NoRemat", group="remat_bench.methods")
    monkeypatch.setattr(registry, "entry_points", lambda group: [fake] if group == "remat_bench.methods" else [])
    assert registry.get_method("plugin-none").name == "none"
    assert any(cls.name == "none" for cls in registry.all_methods())
    r = invoke("solve", CHAIN, "-m", "plugin-none", "-b", "1", "--json")
    assert r.exit_code == 0, r.output
    listed = [m["name"] for m in json.loads(invoke("methods", "--json").output)]
    assert "plugin-none" in listed and "none" in listed


def test_bound_command_prints_the_any_order_bound_and_exit_status():
    r = invoke("bound", str(paper_graph("checkmate_fcn8_vgg_train")), "-b", "0.8", "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["status"] == "optimal"
    assert round(data["lower_bound_overhead_pct"], 4) == 0.1361
    r = invoke("bound", str(paper_graph("checkmate_vgg16_train")), "-b", "0.8")
    assert r.exit_code == 1
    assert "no schedule fits" in r.output
    assert invoke("bound", CHAIN, "-b", "min").exit_code == 2


# ---------------------------------------------------------------------- faults (issue 20)


def test_a_device_as_output_is_refused_at_once_without_reading_it(tmp_path):
    import subprocess
    import sys

    # Before the fix the "is this a schedule file?" check read /dev/zero to the end: it never returned.
    for device in ("/dev/zero", "/dev/full", "/dev/stdout"):
        proc = subprocess.run([sys.executable, "-m", "remat_bench.app.cli", "solve", CHAIN, "-m", "none", "-b", "1",
                               "-o", device], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2, proc.stderr
        assert "is not a regular file (a device, pipe or socket)" in proc.stderr


def test_an_existing_file_is_judged_by_its_first_bytes(tmp_path):
    # A schedule file whose header is ours is replaced; 64 MB of anything else is refused unread.
    ours = tmp_path / "s.json"
    assert invoke("solve", CHAIN, "-m", "none", "-b", "1", "-o", str(ours)).exit_code == 0
    assert invoke("solve", CHAIN, "-m", "chen", "-b", "0.7", "-o", str(ours)).exit_code == 0
    assert json.loads(ours.read_text())["method"] == "chen"
    big = tmp_path / "big.json"
    with open(big, "wb") as fh:
        fh.write(b'{"not": "ours", "pad": "')
        fh.truncate(64 * 2**20)
    r = invoke("solve", CHAIN, "-m", "none", "-b", "1", "-o", str(big))
    assert r.exit_code == 2 and "exists and is not a remat-bench-schedule file" in r.output
    assert big.stat().st_size == 64 * 2**20


def test_an_immutable_output_fails_after_the_result_is_printed(tmp_path):
    import shutil
    import subprocess

    target = tmp_path / "s.json"
    assert invoke("solve", CHAIN, "-m", "none", "-b", "1", "-o", str(target)).exit_code == 0
    before = target.read_bytes()
    # Root ignores file modes; the immutable attribute stops even root from replacing the file.
    locked = shutil.which("chattr") and subprocess.run(["chattr", "+i", str(target)]).returncode == 0
    if not locked:  # no chattr here: a read-only file system stands in (sysfs is one everywhere)
        target = __import__("pathlib").Path("/sys/kernel/remat-bench-s.json")
    try:
        r = invoke("solve", CHAIN, "-m", "chen", "-b", "0.7", "-o", str(target))
    finally:
        if locked:
            subprocess.run(["chattr", "-i", str(target)], check=True)
    assert r.exit_code == 2
    if locked:
        # The result is shown first; then one sentence says why it could not be saved.
        assert "feasible" in r.output and "overhead +16.327%" in r.output
        assert "cannot write" in r.output and "Operation not permitted" in r.output
        assert target.read_bytes() == before
        assert not [p for p in tmp_path.iterdir() if p.name.startswith(".s.json.")]  # no litter


def test_several_methods_print_one_comparison_and_json_a_list():
    r = invoke("solve", CHAIN, "-m", "greedy", "-m", "chen", "-m", "checkmate", "-b", "0.7", "-t", "30")
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    row = {name: next(line for line in lines if line.startswith(f"│ {name}")) for name in ("greedy", "chen",
                                                                                          "checkmate")}
    # greedy and checkmate reach the any-order bound (55): fastest, and proven for all schedules.
    assert "+12.245%" in row["greedy"] and "*" in row["greedy"] and "all schedules" in row["greedy"]
    assert "+16.327%" in row["chen"] and "*" not in row["chen"] and "3.636%" in row["chen"]
    data = json.loads(invoke("solve", CHAIN, "-m", "greedy", "-m", "chen", "-b", "0.7", "--json").output)
    assert [d["method"] for d in data] == ["greedy", "chen"]
    assert [d["overhead_pct"] for d in data] == pytest.approx([12.2449, 16.3265], abs=1e-3)


def test_a_methods_proofs_name_its_space():
    # With one retention interval per node moccasin cannot recompute: infeasible in its space at
    # 0.7, where greedy finds a schedule (+12.245%, the any-order bound).
    one = ["solve", CHAIN, "-m", "moccasin", "-b", "0.7", "-p", "max_intervals=1", "-p", "keep_best=false"]
    data = json.loads(invoke(*one, "--json").output)
    assert data["status"] == "infeasible" and data["status_holds_for"] == "the method's space"
    assert data["space"] == "input-order stages, at most 1 retention intervals per node"
    assert "infeasible  in moccasin's space only: input-order stages, at most 1" in invoke(*one).output
    assert json.loads(invoke("solve", CHAIN, "-m", "greedy", "-b", "0.7", "--json").output)["status"] == "feasible"
    # keep_best (the default): the search's proof stands in its stats, and greedy's schedule is the answer.
    kept = json.loads(invoke(*one[:-2], "--json").output)
    assert kept["status"] == "feasible" and kept["stats"]["search_status"] == "infeasible"
    assert kept["stats"]["returned"] == "greedy" and kept["overhead_pct"] == pytest.approx(12.2449, abs=1e-3)
    below = json.loads(invoke("solve", CHAIN, "-m", "moccasin", "-b", "0.2", "--json").output)
    assert below["status"] == "infeasible" and below["status_holds_for"] == "every schedule"
    proven = json.loads(invoke("solve", CHAIN, "-m", "checkmate", "-b", "0.8", "--json").output)
    assert proven["proven_optimal"] and proven["status_holds_for"] == "every schedule"
    free = json.loads(invoke("solve", CHAIN, "-m", "moccasin", "-b", "0.8", "-p", "order=free", "-t", "20",
                             "--json").output)
    assert free["space"] == "any order, at most 3 retention intervals per node and 2n events"


def test_no_bound_skips_it_and_a_cached_bound_is_reused(tmp_path, monkeypatch):
    # Each command makes its own cache on the folder the environment names: a cache on disk is
    # what one run leaves for the next (in another process, or this one).
    monkeypatch.setenv("REMAT_BENCH_BOUND_CACHE", str(tmp_path / "bounds"))
    off = json.loads(invoke("solve", CHAIN, "-m", "greedy", "-b", "0.7", "--no-bound", "--json").output)
    assert off["lower_bound_any_order"] is None and off["gap_pct"] is None and not off["proven_optimal"]
    assert off["bound_time_s"] == 0.0 and not (tmp_path / "bounds").exists()
    first = json.loads(invoke("solve", CHAIN, "-m", "greedy", "-b", "0.7", "--json").output)
    assert first["lower_bound_any_order"] == 55 and first["stats"]["bound_any_order"]["from_cache"] is False
    assert len(list((tmp_path / "bounds").glob("*.json"))) == 1
    again = json.loads(invoke("solve", CHAIN, "-m", "greedy", "-b", "0.7", "--json").output)
    assert again["lower_bound_any_order"] == 55 and again["stats"]["bound_any_order"]["from_cache"] is True
    text = invoke("solve", CHAIN, "-m", "greedy", "-b", "0.7").output
    assert "(from the cache)" in text
    monkeypatch.setenv("REMAT_BENCH_BOUND_CACHE", "off")
    fresh = json.loads(invoke("solve", CHAIN, "-m", "greedy", "-b", "0.7", "--json").output)
    assert fresh["stats"]["bound_any_order"]["from_cache"] is False


def test_a_limit_bound_is_recomputed_for_more_effort_a_settled_one_is_not(tmp_path, monkeypatch):
    from remat_bench.core.outcome import Termination
    from remat_bench.toolkit import bound
    from remat_bench.toolkit.bound import Bound
    from remat_bench.toolkit.bound_cache import BoundCache

    g = load_graph(CHAIN)
    cache = BoundCache(str(tmp_path))
    calls = []
    monkeypatch.setattr(bound, "any_order_bound", lambda graph, budget, effort: calls.append(effort) or Bound(
        50, Termination.TIME_LIMIT if effort < 10 else Termination.PROVEN))
    assert cache.get(g, 12, 1.0) == (Bound(50, Termination.TIME_LIMIT), False)
    assert cache.get(g, 12, 0.5)[1] is True  # less effort than it was given: reused
    assert cache.get(g, 12, 20.0) == (Bound(50, Termination.PROVEN), False)  # more: computed again
    assert cache.get(g, 12, 300.0)[1] is True  # settled: reused whatever the effort
    assert calls == [1.0, 20.0]


def test_budget_warnings_say_how_a_bare_number_was_read():
    r = CliRunner().invoke(main, ["solve", CHAIN, "-m", "none", "-b", "80"])
    assert "warning: budget '80' is read as 80 units (a bare number above 1 is an amount), above the baseline " \
           "peak 18, so every schedule fits; did you mean 80% of the baseline peak?" in r.output
    r = CliRunner().invoke(main, ["solve", CHAIN, "-m", "chen", "-b", "1.5"])
    assert "warning: budget '1.5' is read as 1.5 units" in r.output and "below the memory floor 4" in r.output
    assert "warning" not in CliRunner().invoke(main, ["solve", CHAIN, "-m", "none", "-b", "18"]).output


def test_methods_name_shows_what_each_parameter_accepts():
    r = invoke("methods", "moccasin")
    assert r.exit_code == 0
    assert "threads (also num_workers)" in r.output and "0 to 1" in r.output and "staged | free" in r.output
    rows = json.loads(invoke("methods", "checkmate", "--json").output)
    mip_gap = next(p for p in rows[0]["params"] if p["name"] == "mip_gap")
    assert (mip_gap["minimum"], mip_gap["maximum"], mip_gap["accepts"]) == (0, 1, "0 to 1")


def test_a_graph_answers_to_its_file_stem_and_to_the_name_inside_it():
    by_stem = json.loads(invoke("graphs", "show", "resnet18-b8-r64-train", "--json").output)
    by_name = json.loads(invoke("graphs", "show", "resnet18-train-b8-r64", "--json").output)
    assert by_stem == by_name and by_name["name"] == "resnet18-train-b8-r64"
    assert json.loads(invoke("solve", "chain-16", "-m", "none", "-b", "1", "--json").output)["graph"] == "chain-16"
    r = invoke("graphs", "show", "chain-17")
    assert r.exit_code == 2 and "no shipped graph of that name" in r.output


def test_published_graphs_answer_to_their_own_names_too():
    paper_graph("checkmate_vgg16_train")  # skipped when the published graphs are not here
    for name in ("paper:checkmate_vgg16_train", "VGG16 (MLSys)_256_(224, 224, 3)_train",
                 "paper:VGG16 (MLSys)_256_(224, 224, 3)_train_nx"):
        data = json.loads(invoke("graphs", "show", name, "--json").output)
        assert (data["name"], data["nodes"]) == ("VGG16 (MLSys)_256_(224, 224, 3)_train", 45)


def test_methods_side_by_side_in_processes_give_the_same_table_as_one_after_another():
    args = ["solve", CHAIN, "-m", "greedy", "-m", "chen", "-m", "moccasin", "-m", "auto", "-b", "0.7", "-t", "20"]
    # On fewer than 3 cores --jobs 3 is cut to the cores, with a warning on stderr (tests/test_cli_faults.py).
    apart = json.loads(invoke(*args, "--jobs", "3", "--json").stdout)
    together = json.loads(invoke(*args, "--json").output)
    assert [d["method"] for d in apart] == ["greedy", "chen", "moccasin", "auto"]
    for a, b in zip(apart, together):
        assert (a["status"], a["overhead_pct"], a["peak"]) == (b["status"], b["overhead_pct"], b["peak"])
    auto = apart[-1]
    assert auto["overhead_pct"] == min(d["overhead_pct"] for d in apart) == pytest.approx(12.2449, abs=1e-3)
    assert auto["proven_optimal"] and auto["stats"]["winner"] in ("greedy", "kusumoto", "moccasin", "checkmate")
    table = invoke(*args, "--jobs", "2").output
    assert "auto: the fastest schedule is" in table


def test_floor_gives_the_lowest_peak_found_and_the_peak_no_schedule_goes_below():
    r = invoke("floor", CHAIN, "-t", "20", "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    # On the training chain the least peak (4) is the memory floor: proven.
    assert data["lowest_peak_found"] == data["peak_lower_bound"] == 4 and data["proven"]
    assert data["found_by"] and "memory floor" in data["peak_lower_bound_reason"]
    solved = json.loads(invoke("solve", CHAIN, "-m", "checkmate", "-b", "min", "-t", "20", "--json").output)
    assert solved["peak_lower_bound"] == 4 and solved["peak"] == 4
    assert "no schedule below" in invoke("floor", CHAIN, "-m", "greedy", "-t", "5").output


def test_solve_auto_shows_the_polish_and_whose_schedule_it_improved(tmp_path):
    from remat_bench.core.graph_io import save_graph
    from tests.helpers import needs_reordering

    g = needs_reordering()
    path = tmp_path / "g.json"
    save_graph(g, path)
    r = invoke("solve", str(path), "-m", "auto", "-p", "members=dtr", "-b", "7", "-t", "10")
    assert r.exit_code == 0, r.output
    assert "the fastest schedule is polish (dtr)'s" in r.output
    assert "from dtr's schedule: 1 recomputation undone" in r.output
    assert "duration          9" in r.output


ZERO = {"format": "remat-bench-graph", "version": 1, "name": "zero", "nodes": [
    {"id": "a", "inputs": [], "memory": 0, "duration": 0},
    {"id": "b", "inputs": ["a"], "memory": 0, "duration": 0},
    {"id": "c", "inputs": ["b", "a"], "memory": 0, "duration": 0}]}


def test_an_all_zero_graph_gets_answers_not_a_division_by_zero(tmp_path):
    """Issue 30 item 9: `floor` on a valid all-zero graph raised ZeroDivisionError (a baseline peak of 0)."""
    path = tmp_path / "zero.json"
    path.write_text(json.dumps(ZERO))
    floor = invoke("floor", str(path), "-t", "5")
    assert floor.exit_code == 0, floor.output
    assert "lowest peak found  0, by" in floor.output
    assert "none: the lowest peak is proven" not in floor.output  # a zero lower bound shows no gap line
    solved = invoke("solve", str(path), "-m", "auto", "-b", "min", "-t", "5", "-o", str(tmp_path / "s.json"))
    assert solved.exit_code == 0, solved.output
    assert "peak, at least    0 (" in solved.output
    shown = invoke("simulate", str(path), str(tmp_path / "s.json"))
    assert shown.exit_code == 0, shown.output
    assert "peak      0, at step 0" in shown.output


def test_every_number_parameter_declares_its_range_and_a_huge_one_is_refused_before_solving():
    """Issue 30 item 11: `-p grid=99999999999999999999999` for chen failed inside the method (exit 1)."""
    from remat_bench.app.catalog import get_method, method_names

    unbounded = [f"{m}.{p.name}" for m in method_names() for p in get_method(m).params
                 if p.type in (int, float) and p.choices is None and (p.minimum is None or p.maximum is None)]
    assert unbounded == []
    r = invoke("solve", CHAIN, "-m", "chen", "-p", "grid=99999999999999999999999", "-b", "0.8")
    assert r.exit_code == 2
    assert r.output.strip() == ("error: parameter 'grid' of method 'chen' must be at most 10000 (number of "
                                "thresholds b the greedy variant tries), got '99999999999999999999999'")


def test_floor_ends_once_the_lowest_peak_is_proven():
    """Issue 30 item 16: floor ran its whole limit after proving its answer."""
    r = invoke("floor", CHAIN, "-t", "300", "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["proven"] and data["lowest_peak_found"] == data["peak_lower_bound"] == 4
    assert data["solve_time_s"] < 100  # of 300 s; a fast member reaches the floor in milliseconds


def test_auto_ends_once_a_members_schedule_meets_the_any_order_bound():
    """Issue 30 item 16: auto ran its whole limit at a gap of 0.000%: its exact members ran on side by side."""
    r = invoke("solve", str(SHIPPED / "resnet18-b8-r64-train.json"), "-m", "auto", "-b", "0.9", "-t", "600",
               "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["proven_optimal"] and data["gap_pct"] == 0.0
    # Of 600 s: moccasin meets the bound in about a second on 2 cores; a run that waited for its members'
    # limits would take nearly all of it. The margin holds on a loaded machine.
    assert data["solve_time_s"] < 200
    exact = {m["method"]: m for m in data["stats"]["members"] if m["role"] == "exact"}
    assert any(m["status"] in ("optimal", "feasible") for m in exact.values())


def test_below_the_floor_is_said_once_for_the_graph_in_the_budgets_own_terms():
    """Issue 30 item 14: the same raw-bytes sentence once per method, never naming a budget that works."""
    r = invoke("solve", str(SHIPPED / "resnet18-b8-r64-train.json"), "-m", "greedy", "-m", "checkmate", "-m",
               "moccasin", "-b", "0.6", "-t", "5")
    assert r.exit_code == 1
    assert r.output.count("below the memory floor") == 1
    assert ("every method: the budget (60.0% of the baseline peak, 39.13 MiB) is below the memory floor (80.6%, "
            "52.59 MiB): node 'bn1_grad' needs that much with its inputs, output, workspace and the fixed memory, "
            "whatever the schedule; no budget below 0.81 of the baseline peak can fit") in r.output


def test_a_schedule_over_budget_shows_no_overhead_and_a_tiny_gap_is_not_zero():
    """Issue 30 items 15 and 16: numbers for a schedule that does not fit; 0.000% gap beside an empty proof."""
    from remat_bench.app.cli.helpers import gap_text

    r = invoke("solve", CHAIN, "-m", "none", "-m", "chen", "-b", "0.5", "-t", "5")
    row = next(line for line in r.output.splitlines() if line.startswith("│ none"))
    assert "infeasible" in row and "%" not in row.split("│")[4]  # the overhead column is '-'
    assert gap_text(0.0) == "0.000%" and gap_text(0.0002) == "<0.001%" and gap_text(0.0123) == "0.012%"


def test_graphs_list_never_cuts_the_name_a_user_types(tmp_path, monkeypatch):
    """Issue 30 item 18: `graphs list` cut 'paper:checkmate_fcn8_vgg_...' even at 160 columns."""
    long_stem = "a-graph-with-a-rather-long-file-name-to-type"
    data = json.loads((SHIPPED / "chain-16-train.json").read_text())
    data["name"] = "a much longer descriptive name (MLSys)_256_(224, 224, 3)_train, as published"
    (tmp_path / f"{long_stem}.json").write_text(json.dumps(data))
    monkeypatch.setenv("REMAT_BENCH_GRAPHS", str(tmp_path))
    r = invoke("graphs", "list")
    assert r.exit_code == 0, r.output
    assert f"│ {long_stem} " in r.output


def test_graphs_show_and_bound_say_what_their_numbers_are():
    """Issue 30 item 18: 'total memory' unexplained; 'overhead >= 0.04445% (optimal)'; raw durations."""
    shown = invoke("graphs", "show", str(SHIPPED / "resnet18-b8-r64-train.json")).output
    assert "baseline duration           7,150,116,288" in shown
    assert "all values at once" in shown and "fixed memory not included" in shown
    bounded = invoke("bound", str(SHIPPED / "resnet18-b8-r64-train.json"), "-b", "0.85").output
    assert "no schedule within the budget has an overhead below 0.04445%" in bounded
    assert "(optimal)" not in bounded


def test_a_graph_file_with_a_byte_order_mark_loads(tmp_path):
    """Issue 30 item 19: a BOM (as Windows editors write) said 'decode using utf-8-sig'."""
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + (SHIPPED / "chain-16-train.json").read_bytes())
    assert load_graph(path).sha256 == load_graph(CHAIN).sha256
