"""A sweep config is data (docs/sweeps.md, 'PyTorch models' and 'Limits'): reading it, and `--dry-run`,
import and call nothing it names; a real run calls only a zoo model, an nn.Module subclass or a function
in a file of the user's own; every path derived from a name stays in its folder; sizes are counted and
refused before anything is built; YAML beyond plain values is one sentence.

Each test here failed before the fix it covers (issue 30, items 3, 4, 5 and 19).
"""

from __future__ import annotations

from tests.needs_torch import torch  # first: torch, or a failure saying how to install it

# isort: split

import os
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from remat_bench.app.cli import main
from remat_bench.app.sweep import load_config
from remat_bench.app.sweep.config import MAX_RUNS
from remat_bench.app.sweep.executors import schedule_path
from remat_bench.app.sweep.tracing import trace_torch_graphs
from remat_bench.core.errors import ConfigError
from remat_bench.core.files import safe_name
from remat_bench.torch.zoo import INSTALLED, USER, ModelSpecError, load_factory, locate_factory
from tests.helpers import SHIPPED

CHAIN = SHIPPED / "chain-16-train.json"
RULE = ("a model is a zoo name (mlp, vgg11, resnet18, resnet50, unet, gpt, gru, dunet, moe, convnext), an "
        "nn.Module subclass, or a function in a file of your own (docs/sweeps.md, 'PyTorch models')")


def sweep(*args: str) -> tuple[int, list[str]]:
    """Exit status and the non-empty lines of a `remat-bench sweep` run in this process."""
    result = CliRunner().invoke(main, ["sweep", *args], prog_name="remat-bench")
    assert "Traceback" not in result.output, result.output
    return result.exit_code, [line for line in result.output.splitlines() if line.strip()]


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


# ---------------------------------------------------------------------- item 3: a config runs no code


@pytest.mark.parametrize("model, kwargs, module", [
    ("os:system", '{command: "touch FILE"}', "os"),
    ("subprocess:run", '{args: [touch, FILE]}', "subprocess"),
    ("builtins:eval", '{source: "open(\'FILE\', \'w\')"}', "builtins"),
    ("shutil:rmtree", '{path: FILE}', "shutil"),
])
@pytest.mark.parametrize("dry_run", [True, False])
def test_a_standard_library_callable_is_refused_before_anything_is_called(tmp_path, model, kwargs, module,
                                                                          dry_run):
    victim = tmp_path / "victim"
    victim.mkdir()
    target = victim / "FILE"
    config = write(tmp_path / "c.yaml", f"""output: out
graphs:
  - torch: {{model: "{model}", input_shape: [3], kwargs: {kwargs.replace("FILE", str(target))}}}
methods: [none]
budgets: [0.9]
""")
    status, lines = sweep(str(config), *(["--dry-run"] if dry_run else []))
    assert (status, lines) == (2, [f"error: {config}, line 3: '{model}' names the standard library ({module}), "
                                   f"which is never called; {RULE}"])
    assert not target.exists() and list(victim.iterdir()) == []  # nothing ran: no file made, none removed
    assert not (tmp_path / "out").exists()


def test_reading_a_config_imports_nothing_it_names_and_a_run_traces_it(tmp_path):
    # The module announces its import in a file: reading and --dry-run must not import it.
    marker = tmp_path / "imported"
    write(tmp_path / "mine.py", f"""from pathlib import Path
from torch import nn

Path({str(marker)!r}).write_text("imported")


def make(width=4):
    return nn.Sequential(nn.Linear(3, width), nn.ReLU(), nn.Linear(width, 2))
""")
    config = write(tmp_path / "c.yaml", """output: out
graphs:
  - torch: {model: "mine:make", batch: 2, input_shape: [3], kwargs: {width: [4, 6]}}
methods: [none]
budgets: [0.9, 0.8]
""")
    cfg = load_config(config)
    assert "mine" not in sys.modules and not marker.exists()
    assert (cfg.graphs, cfg.runs, cfg.planned_runs) == ([], [], 4)
    status, lines = sweep(str(config), "--dry-run")
    assert status == 0 and not marker.exists()
    assert lines == [f"{config}: ok; 4 runs (2 graphs, 1 methods), 0 already in {tmp_path / 'out'}, 4 to run; "
                     "time limit 300 s (+20 s grace) per run; 2 of the graphs are PyTorch models, traced (running "
                     "their code) when the sweep starts, and their budgets checked then"]
    # Tracing runs the code, in a child process: this process still has not imported the module.
    traced = trace_torch_graphs(cfg)
    assert marker.read_text() == "imported" and "mine" not in sys.modules
    assert [g.name for g in traced.graphs] == ["torch-mine-make-b2-width4", "torch-mine-make-b2-width6"]
    assert len(traced.runs) == 4 and all(g.generated is not None for g in traced.graphs)


def test_locating_a_factory_runs_no_code_of_its_package(tmp_path, monkeypatch):
    # importlib.util.find_spec would import `pkg` (its __init__) to find `pkg.models`.
    marker = tmp_path / "ran"
    write(tmp_path / "pkg" / "__init__.py", f"open({str(marker)!r}, 'w').close()\n")
    write(tmp_path / "pkg" / "models.py", "def make():\n    return None\n")
    place = locate_factory("pkg.models:make", [str(tmp_path)])
    assert place is not None and place.origin == str(tmp_path / "pkg" / "models.py") and place.kind == USER
    assert not marker.exists() and "pkg" not in sys.modules
    with pytest.raises(ModelSpecError, match=r"cannot find module 'pkg\.nothing'"):
        locate_factory("pkg.nothing:make", [str(tmp_path)])
    assert locate_factory("torch.nn:Linear").kind == INSTALLED


def test_only_module_classes_and_functions_of_your_own_are_called(tmp_path, monkeypatch):
    victim = tmp_path / "FILE"
    write(tmp_path / "shady.py", f"""import functools
import subprocess
from subprocess import run
from torch.nn.init import zeros_

touch = functools.partial(subprocess.run, ["touch", {str(victim)!r}])


class NotAModel:
    pass
""")
    monkeypatch.chdir(tmp_path)
    refusals = {
        "shady:run": "'shady:run' is a function of the standard library (subprocess), so it is not called",
        "shady:zeros_": "'shady:zeros_' is a function of an installed package (torch.nn.init), so it is not called",
        "shady:touch": "'shady:touch' is a partial, not a function of your own, so it is not called",
        "shady:NotAModel": "'shady:NotAModel' is a class that is not an nn.Module (NotAModel), so it is not called",
    }
    for model, sentence in refusals.items():
        with pytest.raises(ModelSpecError) as refused:
            load_factory(model)
        assert str(refused.value) == f"{sentence}; {RULE}"
    assert not victim.exists()
    assert load_factory("torch.nn:Linear") is torch.nn.Linear  # an installed nn.Module subclass


def test_a_real_sweep_does_not_call_a_standard_library_function_a_users_module_imports(tmp_path):
    victim = tmp_path / "FILE"
    write(tmp_path / "shady_run.py", "from subprocess import run\n")
    config = write(tmp_path / "c.yaml", f"""output: out
graphs:
  - torch: {{model: "shady_run:run", input_shape: [3], kwargs: {{args: [touch, {victim}]}}}}
methods: [none]
budgets: [0.9]
""")
    status, lines = sweep(str(config))
    assert status == 2 and not victim.exists()
    assert lines[-1] == (f"error: {config}, line 3: 'shady_run:run' is a function of the standard library "
                         f"(subprocess), so it is not called; {RULE}")
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------- item 4: paths stay in their folder


@pytest.mark.parametrize("name", ["../../../x", "/abs/path", "..", "."])
def test_a_sweep_name_that_is_a_path_is_refused(tmp_path, monkeypatch, name):
    work = tmp_path / "a" / "b" / "c"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    config = write(work / "c.yaml", f'name: "{name}"\ngraphs: [{CHAIN}]\nmethods: [none]\nbudgets: [0.9]\n')
    status, lines = sweep(str(config))
    assert (status, lines) == (2, [
        f"error: {config}, line 1: the sweep's name {name!r} must be a plain name, not a path (no '/', not '.' or "
        "'..'): it names the results folder results/<name>; choose another folder with 'output' or --output"])
    assert list(tmp_path.rglob("results.parquet")) == []


def test_a_graph_named_dot_dot_keeps_its_schedules_in_schedules(tmp_path):
    graph = CHAIN.read_text().replace('"name": "chain-16"', '"name": ".."')
    assert '"name": ".."' in graph
    write(tmp_path / "dots.json", graph)
    config = write(tmp_path / "c.yaml", "output: out\ngraphs: [dots.json]\nmethods: [none]\nbudgets: [1.0]\n")
    status, _ = sweep(str(config), "-j", "1")
    assert status == 0
    written = [p.relative_to(tmp_path / "out") for p in (tmp_path / "out").rglob("*.json")]
    assert len(written) == 1 and written[0].parts[:2] == ("schedules", "_..")
    assert schedule_path(Path("/r"), {"graph": "../../etc", "run_id": "../x"}) == \
        Path("/r/schedules/_.._.._etc/_.._x.json")


def test_safe_name_keeps_one_file_name_in_its_folder():
    assert safe_name("chain-16") == "chain-16"
    assert safe_name("..") == "_.." and safe_name(".") == "_." and safe_name("") == "graph"
    assert safe_name("/abs/path") == "_abs_path" and safe_name("a/../b") == "a_.._b"
    long = safe_name("x" * 5000)
    assert len(long) == 100 and long != safe_name("x" * 4999)


def test_a_torch_graph_named_by_a_path_like_argument_is_written_inside_graphs(tmp_path):
    write(tmp_path / "tiny.py", "from torch import nn\n\n\ndef make(tag='x'):\n    return nn.Linear(3, 2)\n")
    config = write(tmp_path / "c.yaml", """output: out
graphs:
  - torch: {model: "tiny:make", batch: 2, input_shape: [3], kwargs: {tag: "/../../../escaped"}}
methods: [none]
budgets: [0.9]
""")
    cfg = trace_torch_graphs(load_config(config))
    (source,) = cfg.graphs
    assert source.path.parent == tmp_path / "out" / "graphs"
    assert source.path.name.startswith("torch-tiny-make-b2-tag_.._.._.._escaped-")


# ---------------------------------------------------------------------- item 5: sizes, counted first


def dry_run_error(tmp_path: Path, body: str) -> tuple[str, float]:
    config = write(tmp_path / "c.yaml", body.replace("CHAIN", str(CHAIN)))
    start = time.monotonic()
    status, lines = sweep(str(config), "--dry-run")
    took = time.monotonic() - start
    assert status == 2 and len(lines) == 1, lines
    prefix = f"error: {config}, "
    assert lines[0].startswith(prefix)
    return lines[0][len(prefix):], took


def test_a_billion_repeats_are_refused_before_any_run_is_listed(tmp_path):
    message, took = dry_run_error(tmp_path, "graphs: [CHAIN]\nmethods: [none]\nbudgets: [0.5]\nrepeats: 1000000000\n")
    assert message == (f"line 4: the sweep has 1,000,000,000 runs (1 graph x 1 budget x 1 method setting x "
                       f"1,000,000,000 repeats), more than the {MAX_RUNS:,} one sweep may have; split it into "
                       "several sweeps")
    assert took < 60  # it ended (listing the runs first took a minute and a MemoryError)


def test_a_3000_by_3000_grid_is_refused_before_it_is_expanded(tmp_path):
    values = ", ".join(str(i) for i in range(1, 3001))
    message, took = dry_run_error(tmp_path, f"graphs: [CHAIN]\nmethods:\n  - name: moccasin\n    params: "
                                            f"{{events: [{values}], seed: [{values}]}}\nbudgets: [0.5]\n")
    assert message == ("line 3: the sweep has 9,000,000 runs (1 graph x 1 budget x 9,000,000 method settings and "
                       "seeds x 1 repeat), more than the 1,000,000 one sweep may have; split it into several sweeps")
    assert took < 60


def test_a_generated_graph_too_large_to_build_is_refused_by_its_count(tmp_path):
    message, _ = dry_run_error(tmp_path, "graphs:\n  - generate: {kind: random-layered, nodes: 100000000}\n"
                                         "methods: [none]\nbudgets: [0.5]\n")
    assert message == ("line 2: random-layered: these options give a graph of 100,000,000 nodes, more than the "
                       "1,000,000 a generated graph may have; choose a smaller --nodes")
    message, _ = dry_run_error(tmp_path, "graphs:\n  - generate: {kind: random-layered, nodes: [900000, 900000], "
                                         "width: 2, seed: [1, 2, 3]}\nmethods: [none]\nbudgets: [0.5]\n")
    assert message == ("line 2: the generated graphs add up to more than 2,000,000 nodes, more than one sweep "
                       "holds in memory; split it into several sweeps")


def test_aliases_that_expand_a_billion_times_are_one_short_sentence(tmp_path):
    anchors = ["&x0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    anchors += [f"&x{i} [" + ", ".join([f"*x{i - 1}"] * 9) + "]" for i in range(1, 9)]
    message, took = dry_run_error(tmp_path, "graphs: [CHAIN]\nmethods: [none]\nbudgets: [0.5]\ntime_limit: ["
                                            + ", ".join(anchors) + "]\n")
    assert message == ("line 4: this value expands to more than 1,000,000 values through its aliases (*name); a "
                       "config that large is refused")
    assert took < 60
    message, _ = dry_run_error(tmp_path, "graphs: [CHAIN]\nmethods: [none]\nbudgets: [0.5]\nseeds: &s [1, *s]\n")
    assert message == "line 4: this value contains itself through an alias (*name); a config must be finite"


def test_an_error_quotes_a_long_value_short(tmp_path):
    message, _ = dry_run_error(tmp_path, "graphs: [CHAIN]\nmethods: [none]\nbudgets: [0.5]\ntime_limit: "
                                         + "9" * 5000 + "\n")
    assert message == ("line 4: cannot read this value (Exceeds the limit (4300 digits) for integer string "
                       "conversion: value has 5000 digits; use sys.set_int_max_str_digits() to increase the limit)")
    message, _ = dry_run_error(tmp_path, "graphs: [CHAIN]\nmethods: [none]\nbudgets: [0.5]\nworkers: "
                                         + "x" * 100_000 + "\n")
    assert message == "line 4: 'workers' must be a whole number at least 1, not '" + "x" * 57 + "...'"
    message, _ = dry_run_error(tmp_path, "graphs: [CHAIN]\nmethods: [none]\nbudgets: [0.5]\nexecutor: "
                                         + "k" * 100_000 + "\n")
    assert message == "line 4: executor '" + "k" * 57 + "...' is not known; use local or dask"
    message, _ = dry_run_error(tmp_path, "graphs: [CHAIN]\nmethods: [none]\nbudgets: ['" + "9" * 100_000 + "']\n")
    assert len(message) <= 1000 and message.startswith("line 3: budget '999") and message.endswith(
        "(for graph 'chain-16')")


def test_a_config_that_is_not_a_small_regular_file_is_refused(tmp_path):
    status, lines = sweep("/dev/zero", "--dry-run")
    assert (status, lines) == (2, ["error: /dev/zero: is not a config file (a device, pipe or socket); give a YAML "
                                   "file"])
    big = write(tmp_path / "big.yaml", "# " + "x" * (2**20) + "\n")
    status, lines = sweep(str(big), "--dry-run")
    assert (status, lines) == (2, [f"error: {big}: is {2**20 + 3:,} bytes, more than the 1,048,576 a config may be; "
                                   "split it into several sweeps"])


# ---------------------------------------------------------------------- item 19: YAML tags


@pytest.mark.parametrize("value, tag", [
    ('!!python/object/apply:os.system ["id"]', "!!python/object/apply:os.system"),
    ("!!python/name:os.system ''", "!!python/name:os.system"),
    ("!custom 5", "!custom"),
])
def test_a_yaml_tag_beyond_plain_values_is_one_sentence_naming_the_line_and_tag(tmp_path, value, tag):
    message, _ = dry_run_error(tmp_path, f"graphs: [CHAIN]\nmethods: [none]\nbudgets: [0.5]\ntime_limit: {value}\n")
    assert message == (f"line 4: the tag '{tag}' is not allowed; a config holds plain values (text, numbers, lists "
                       "and mappings)")


def test_load_config_raises_config_error_for_each_of_these(tmp_path):
    # The library, not only the CLI: load_config refuses each one with ConfigError.
    for body in ("graphs: [CHAIN]\nmethods: [none]\nbudgets: [0.5]\nrepeats: 2000000\n",
                 "name: ../x\ngraphs: [CHAIN]\nmethods: [none]\nbudgets: [0.5]\n",
                 "graphs: [CHAIN]\nmethods: [none]\nbudgets: [!!python/object/apply:os.system [id]]\n"):
        with pytest.raises(ConfigError):
            load_config(write(tmp_path / "c.yaml", body.replace("CHAIN", str(CHAIN))))


# ---------------------------------------------------------------------- issue 43, item 11: a glob that never ends


def test_a_glob_over_proc_ends_with_a_sentence(tmp_path):
    # The standard library's walk follows /proc's links back to the root and never ended (dry run included).
    config = write(tmp_path / "c.yaml", "graphs:\n  - glob: /proc/**/*.json\nmethods: [none]\nbudgets: [0.5]\n")
    for args in ([str(config), "--dry-run"], [str(config), "-o", str(tmp_path / "out")]):
        status, lines = sweep(*args)
        assert status == 2 and lines == [f"error: {config}, line 2: the pattern /proc/**/*.json matches no graph file"]


def test_a_glob_follows_no_link_to_a_folder_and_stops_after_its_limit(tmp_path):
    from remat_bench.core.files import bounded_glob

    (tmp_path / "a" / "b").mkdir(parents=True)
    for name in ("a/g1.json", "a/b/g2.json", "a/b/.hidden.json", "top.json", "a/notes.txt"):
        (tmp_path / name).write_text("{}")
    (tmp_path / "a" / "b" / "loop").symlink_to(tmp_path)  # a walk that follows it never ends
    (tmp_path / "a" / "link.json").symlink_to(tmp_path / "top.json")  # a link to a file is matched
    os.mkfifo(tmp_path / "a" / "pipe.json")  # not a regular file: never matched
    root = str(tmp_path)
    assert bounded_glob(f"{root}/**/*.json") == sorted(
        f"{root}/{name}" for name in ("top.json", "a/g1.json", "a/b/g2.json", "a/link.json"))
    assert bounded_glob(f"{root}/a/*.json") == [f"{root}/a/g1.json", f"{root}/a/link.json"]
    assert bounded_glob(f"{root}/*/b/g?.json") == [f"{root}/a/b/g2.json"]
    assert bounded_glob(f"{root}/**/.*.json") == [f"{root}/a/b/.hidden.json"]
    assert bounded_glob(f"{root}/top.json") == [f"{root}/top.json"] and bounded_glob(f"{root}/none.json") == []
    with pytest.raises(ConfigError, match=r"^the pattern .*/\*\*/\*.json visits more than 5 files and folders under "):
        bounded_glob(f"{root}/**/*.json", ConfigError, limit=5)
