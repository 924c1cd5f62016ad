"""The operator cost cache under hostile files: what it is not, it never writes; what no real
measurement gives, it measures again (`remat_bench.torch.calibrate.CostCache`).

These tests need PyTorch (the calibration runs a small MLP's step on real tensors). They are not
skipped without it: `make install` installs torch, and a missing torch fails the module with how to
install it.
"""

from __future__ import annotations

from tests.needs_torch import torch  # first: torch, or a failure saying how to install it

# isort: split

import json
import os
import threading
import warnings

import pytest
from click.testing import CliRunner

from remat_bench.app.cli import main
from remat_bench.core.provenance import CostWarning
from remat_bench.torch import calibrate as calibrate_module
from remat_bench.torch.calibrate import (
    MAX_DURATION_NS,
    MIN_WALL_CLOCK_NS,
    CostCache,
    calibrate,
    duration_floor_ns,
    implausible,
)
from remat_bench.torch.program import build_program
from remat_bench.torch.spec import model_spec

CPU = torch.device("cpu")
TICK = 5_000  # ns each fake timed run takes: a plausible operator on any machine


@pytest.fixture(scope="module")
def program():
    """A one-layer MLP's training step (14 nodes)."""
    return build_program(model_spec("mlp", batch=4, kwargs={"depth": 1}))


class Timer:
    """A stand-in timer: runs the operator and says it took `TICK` ns; counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, device, fn) -> int:
        fn()
        self.calls += 1
        return TICK


def measure(program, path, timer=None, repeats: int = 3):
    """Calibrate ``program`` on the CPU with the cache on ``path``; the calibration and its cost warnings."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", CostWarning)
        out = calibrate(program, CPU, repeats=repeats, cache=CostCache(path), timer=timer or Timer())
    assert out is not None
    return out, [str(w.message) for w in caught if issubclass(w.category, CostWarning)]


def cached(program, tmp_path) -> dict:
    """A real cost cache of ``program``'s operators (the real timer), as JSON."""
    path = tmp_path / "real.json"
    calibrate(program, CPU, repeats=3, cache=CostCache(path))
    return json.loads(path.read_text())


# ---------------------------------------------------------------------- files that are not a cost cache


@pytest.mark.parametrize("content", [b"my notes, not JSON\n", b'{"format": "remat-bench-graph", "nodes": []}',
                                     b"[1, 2, 3]", b"\x00\xff\xfe", b"[" * 100_000])
def test_a_file_that_is_not_a_cost_cache_is_read_as_empty_and_never_written(program, tmp_path, content):
    path = tmp_path / "notes.txt"
    path.write_bytes(content)
    out, said = measure(program, path)
    assert out.timed > 0 and out.durations is not None and set(out.durations) == {TICK}
    assert len(said) == 1 and said[0].startswith(f"the operator cost cache {path} was ignored and is left as it "
                                                 "is: it is not")
    assert "measured again and their costs kept in memory only" in said[0] and "\n" not in said[0]
    assert path.read_bytes() == content


@pytest.mark.parametrize("content", [None, b"", b"  \n"])
def test_a_missing_or_empty_file_becomes_a_cost_cache(program, tmp_path, content):
    path = tmp_path / "sub" / "op-costs.json"
    if content is not None:
        path.parent.mkdir()
        path.write_bytes(content)
    first, said = measure(program, path)
    assert said == [] and first.timed > 0
    assert path.read_text().startswith('{"format":"remat-bench-op-costs","version":1,"entries":{')
    timer = Timer()
    again, said = measure(program, path, timer)
    assert said == [] and timer.calls == 0 and again.from_cache == len(program.nodes) - sum(
        nd.fx is None for nd in program.nodes)


def test_a_symbolic_link_is_never_written_through(program, tmp_path):
    # A link to someone's file: ignored (not JSON), the file and the link stay as they are.
    target = tmp_path / "target.txt"
    target.write_text("precious\n")
    link = tmp_path / "op-costs.json"
    link.symlink_to(target)
    _, said = measure(program, link)
    assert len(said) == 1 and "was ignored and is left as it is: it is not JSON" in said[0]
    assert target.read_text() == "precious\n" and link.is_symlink()
    # A link to a real cost cache: read (what it knows answers), never written (one warning says so).
    real = tmp_path / "real.json"
    calibrate(program, CPU, repeats=1, cache=CostCache(real), timer=Timer())
    before = real.read_bytes()
    link.unlink()
    link.symlink_to(real)
    timer = Timer()
    out, said = measure(program, link, timer, repeats=1)
    assert said == [] and timer.calls == 0 and out.from_cache > 0
    out, said = measure(program, link, timer, repeats=2)  # timed with fewer runs than asked: timed again
    assert timer.calls > 0 and real.read_bytes() == before and link.is_symlink()
    assert said == [f"the operator cost cache {link} was not written: it is a symbolic link, which is not written "
                    "through; the costs measured now are kept in memory only (set REMAT_BENCH_COST_CACHE to a "
                    "regular file)"]
    # A dangling link is not made into a file either.
    link.unlink()
    link.symlink_to(tmp_path / "nowhere.json")
    _, said = measure(program, link)
    assert len(said) == 1 and "symbolic link" in said[0] and not (tmp_path / "nowhere.json").exists()


def test_a_pipe_or_a_device_is_never_read(program, tmp_path):
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    zero = tmp_path / "zero.json"
    zero.symlink_to("/dev/zero")
    for path in (fifo, zero, tmp_path):
        said: list[str] = []
        # Reading a pipe without a writer would block for ever, and /dev/zero never ends: a thread, so that
        # the test fails rather than hangs. Declining takes a stat call; the minute is no speed limit.
        reader = threading.Thread(target=lambda p=path, out=said: out.extend(measure(program, p)[1]), daemon=True)
        reader.start()
        reader.join(timeout=60)
        assert not reader.is_alive(), f"reading the cost cache {path} did not return"
        assert len(said) == 1 and said[0].startswith(f"the operator cost cache {path} was ignored and is left as it "
                                                     "is: it is not a regular file (a folder, device or pipe)")
    assert fifo.is_fifo() and zero.is_symlink()


def test_a_file_above_the_size_limit_is_not_read_and_the_cache_keeps_under_it(program, tmp_path, monkeypatch):
    path = tmp_path / "op-costs.json"
    calibrate(program, CPU, repeats=3, cache=CostCache(path), timer=Timer())
    size = path.stat().st_size
    monkeypatch.setattr(calibrate_module, "MAX_FILE_BYTES", size - 1)
    before = path.read_bytes()
    _, said = measure(program, path)
    assert len(said) == 1 and f"was ignored and is left as it is: it is larger than {(size - 1) // 2**20} MiB" in \
        said[0]
    assert path.read_bytes() == before
    # What the cache writes keeps under the limit: the newest entries, the oldest dropped.
    monkeypatch.setattr(calibrate_module, "MAX_FILE_BYTES", size // 2)
    entries = json.loads(before)["entries"]
    for i, key in enumerate(sorted(entries)):
        entries[key]["when"] = f"2026-01-{1 + i:02d}T00:00:00+00:00"
    text = calibrate_module._cache_text(entries)
    kept = json.loads(text)["entries"]
    assert len(text) <= size // 2 and 0 < len(kept) < len(entries)
    assert set(kept) == set(sorted(entries)[len(entries) - len(kept):])  # the newest


# ---------------------------------------------------------------------- entries no real measurement gives


def _forge(entry: dict, how: str) -> None:
    if "ns" not in entry:
        return
    if how == "1 ns":
        entry["ns"], entry["samples"] = 1, [1] * len(entry["samples"])
        entry["workspace"] = 0
    elif how == "repeats 10**9":
        entry["repeats"] = 10**9
    elif how == "10**15 ns":
        entry["ns"], entry["samples"] = 10**15, [10**15] * len(entry["samples"])
    elif how == "median":
        entry["ns"] += 1
    elif how == "fewer samples":
        entry["samples"] = entry["samples"][:-1]
    elif how == "float samples":
        entry["samples"] = [float(t) for t in entry["samples"]]
    elif how == "statistic":
        entry["statistic"] = "min"
    elif how == "workspace -1":
        entry["workspace"] = -1
    elif how == "workspace true":
        entry["workspace"] = True
    elif how == "workspace 2**60":
        entry["workspace"] = 2**60


FORGERIES = ["1 ns", "repeats 10**9", "10**15 ns", "median", "fewer samples", "float samples", "statistic",
             "workspace -1", "workspace true", "workspace 2**60"]


@pytest.mark.parametrize("how", FORGERIES)
def test_an_entry_no_real_measurement_gives_is_measured_again_with_one_warning(program, tmp_path, how):
    path = tmp_path / "op-costs.json"
    first, _ = measure(program, path)
    data = json.loads(path.read_text())
    for entry in data["entries"].values():
        _forge(entry, how)
    path.write_text(json.dumps(data))
    timer = Timer()
    again, said = measure(program, path, timer)
    assert len(said) == 1, said
    assert said[0].startswith(f"the operator cost cache {path} held {first.timed} entries that no real measurement "
                              "gives (the first: ") and said[0].endswith("); those operators are measured again")
    assert timer.calls == 3 * first.timed and again.durations == first.durations
    assert again.workspace == first.workspace
    # Written back as measured: believed next time, without a word.
    timer = Timer()
    third, said = measure(program, path, timer)
    assert said == [] and timer.calls == 0 and third.durations == first.durations


def test_what_a_real_calibration_writes_is_plausible(program, tmp_path):
    entries = cached(program, tmp_path)["entries"]
    assert entries and all(implausible(e, duration_floor_ns(CPU)) is None for e in entries.values())
    # Every sample is far above the wall clock's floor: the floor is no threshold a slow call is near.
    assert min(t for e in entries.values() for t in e.get("samples", [])) > 10 * MIN_WALL_CLOCK_NS


def test_the_duration_floor_follows_the_clock():
    timed = {"op": "aten.view.default", "ns": 1, "samples": [1, 1, 1], "repeats": 3, "statistic": "median"}
    # CUDA events time the kernels alone: a view launches none, and its 1 ns is real there.
    assert duration_floor_ns(torch.device("cuda")) == 1 and implausible(timed, 1) is None
    assert duration_floor_ns(CPU) == MIN_WALL_CLOCK_NS and implausible(timed, MIN_WALL_CLOCK_NS) is not None
    longest = {**timed, "ns": MAX_DURATION_NS, "samples": [MAX_DURATION_NS] * 3}
    assert implausible(longest, 1) is None
    assert implausible({**longest, "samples": [MAX_DURATION_NS + 1] * 3, "ns": MAX_DURATION_NS + 1}, 1) is not None
    assert implausible({"op": "aten.mm.default", "workspace": 0}, MIN_WALL_CLOCK_NS) is None  # a workspace only
    # What this process measured is believed whatever its value (a stand-in timer's 1 ns).
    cache = CostCache(None)
    cache.put("k", **{k: v for k, v in timed.items() if k != "op"}, op="aten.view.default")
    assert cache.drop_implausible(["k"], MIN_WALL_CLOCK_NS) == 0 and cache.get("k") is not None


def test_a_forged_cache_on_the_command_line_is_one_warning_naming_it(tmp_path, monkeypatch):
    from remat_bench.toolkit import child

    monkeypatch.setattr(child, "can_spawn", lambda: False)  # in this process: a child takes seconds to start
    path = tmp_path / "op-costs.json"
    monkeypatch.setenv("REMAT_BENCH_COST_CACHE", str(path))
    args = ["graphs", "import-torch", "mlp", "--batch", "4", "--kwarg", "depth=1", "--repeats", "1",
            "-o", str(tmp_path / "g.json")]
    assert CliRunner().invoke(main, args).exit_code == 0
    data = json.loads(path.read_text())
    for entry in data["entries"].values():
        _forge(entry, "10**15 ns")
    path.write_text(json.dumps(data))
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    said = " ".join(r.stderr.split())
    assert said.startswith(f"warning: the operator cost cache {path} held ") and "measured again" in said
    assert r.stderr.strip().count("\n") == 0 and "Traceback" not in r.output
    assert "durations calibrated" in r.stdout
    graph = json.loads((tmp_path / "g.json").read_text())
    assert max(n["duration"] for n in graph["nodes"]) < 10**15
