"""Schedules that copy values to the host and back, run with real tensors (`remat_bench.torch.moves`): `replay`
and `train --mode exact` on the CPU, against the simulator's device and host peaks and autograd's gradients; and
the CUDA copies' logic (which stream copies, which event is waited for, when memory is let go) with stand-ins for
``torch.cuda``'s streams and events.
"""

from __future__ import annotations

from tests.needs_torch import torch  # first: torch, or a failure saying how to install it

# isort: split

import contextlib
import functools
import json
import weakref
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from remat_bench.app.cli import main
from remat_bench.core.baseline import baseline, baseline_schedule
from remat_bench.core.errors import ScheduleError
from remat_bench.core.graph import Link, Transfer
from remat_bench.core.graph_io import save_graph
from remat_bench.core.schedule import OFFLOAD, RELOAD, Schedule, save_schedule
from remat_bench.core.simulate import simulate
from remat_bench.torch import replay as replay_module
from remat_bench.torch.compiled import compiled_plan
from remat_bench.torch.executor import ExecutionError, Executor, State
from remat_bench.torch.importer import import_model, program_for_graph
from remat_bench.torch.moves import CudaCopies, HostCopies, Mover, move_plan, save_on_cpu_plan
from remat_bench.torch.replay import replay
from remat_bench.torch.train import ScheduledStep, TrainError, train
from tests.helpers import dags, make_graph
from tests.test_simulate import valid_random_schedule

# D2H: 10 units per time unit after a latency of 1; H2D: 5 units per time unit after 2 (tests/test_offload.py's).
LINK = Transfer(Link(10.0, 1.0), Link(5.0, 2.0), "by hand")


def four(c_duration: int = 5):
    """tests/test_offload.py's graph: a (100 units, 10 s) read by b (50, 20) and by d (10, 30); c (10) between."""
    return make_graph({"a": [], "b": ["a"], "c": ["b"], "d": ["a", "c"]},
                      memory={"a": 100, "b": 50, "c": 10, "d": 10},
                      duration={"a": 10, "b": 20, "c": c_duration, "d": 30}, outputs=["d"], transfer=LINK)


def sched(g, *steps):
    return Schedule.from_steps([(word, g.index[v]) for word, v in (step.split() for step in steps)])


OUT_AND_BACK = ("compute a", "compute b", "offload a", "compute c", "free b", "reload a", "compute d", "free a",
                "free c")


@functools.cache
def mlp():
    """An MLP whose activations outweigh its parameters, costs counted (no scratch memory to model)."""
    return import_model("mlp", batch=256, input_shape=(16,), in_features=16, hidden=32, depth=4,
                        durations="flops", workspace="none")


def with_link(g, bandwidth: float):
    """``g`` with a host link of ``bandwidth`` bytes per duration unit each way, no latency."""
    return g.with_transfer(Transfer(Link(bandwidth, 0), Link(bandwidth, 0)))


# ---------------------------------------------------------------------- the plan


def test_the_plan_lets_memory_go_where_the_model_ends_each_copy():
    g = four()
    s = sched(g, *OUT_AND_BACK)
    plan = move_plan(g, s, simulate(g, s))
    # a's copy out runs 30..41: c starts at 30 and the reload is issued at 35, both before it ends; d starts at
    # 63 (it waits for the copy in): a's device memory is let go just before step 6 (compute d).
    assert plan.device_release == {6: [2]}
    # The host copy is read by the reload (step 5) until 63: let go before the first step issued by then.
    assert plan.host_copy == {5: 2}
    assert plan.host_release == {6: [2]}
    assert plan.host_bytes == {2: 100} and plan.held == frozenset()


def test_a_value_freed_while_its_copy_in_arrives_is_held_until_it_ends():
    g = four()
    # a is reloaded (35..63 at the earliest) and freed unread at once, then reloaded again for d.
    s = sched(g, "compute a", "compute b", "offload a", "compute c", "free b", "reload a", "free a", "reload a",
              "compute d")
    sim = simulate(g, s)
    assert sim.valid
    plan = move_plan(g, s, sim)
    assert plan.held == frozenset({6})
    # The free's hold ends with the first copy in (63); d starts when the second ends (63 + 22 = 85).
    assert sim.step_start[8] == 85
    assert plan.device_release == {8: [2, 6]}
    result = replay(g, s, "cpu", timing_run=False)
    assert result.measured_peak == result.simulated_peak == sim.peak


def test_save_on_cpu_plan_offloads_between_the_passes():
    g = with_link(mlp(), 100.0)
    base = baseline_schedule(g)
    plan = save_on_cpu_plan(g, base)
    sim = simulate(g, plan)
    assert sim.valid and sim.offloads == sim.reloads > 0
    moved = plan.nodes[plan.kinds == OFFLOAD]
    assert sorted(moved.tolist()) == sorted(plan.nodes[plan.kinds == RELOAD].tolist())
    assert all(g.is_forward[v] for v in moved)
    # Every copy out is in the forward pass and every copy in in the backward: all are on the host at once.
    assert sim.host_peak == sim.to_host == sum(int(g.memory[v]) for v in moved)
    assert sim.peak < baseline(g).peak
    with pytest.raises(ValueError, match="moves values already"):
        save_on_cpu_plan(g, plan)


# ---------------------------------------------------------------------- replay on the CPU


def test_a_synthetic_replay_holds_the_copies_as_the_model_does():
    # Worked by hand in tests/test_offload.py: the reload is issued while a's copy out still holds its memory.
    g = four()
    result = replay(g, sched(g, *OUT_AND_BACK), "cpu", timing_run=False)
    assert result.mode == "synthetic"
    assert result.measured_peak == result.simulated_peak == 210
    assert result.measured_host_peak == result.simulated_host_peak == 100
    assert (result.offloads, result.reloads) == (1, 1)
    # c is a long step now: the copy out (30..41) ends during it and lets a's memory go before the reload.
    g = four(c_duration=35)
    result = replay(g, sched(g, *OUT_AND_BACK), "cpu", timing_run=False)
    assert result.measured_peak == result.simulated_peak == 160


def test_a_value_offloaded_right_after_its_computation_is_let_go_when_its_copy_ends():
    # a (1000 bytes, no time) out over [0, 1] and back over [1, 2]: the reload is issued at 0, while the copy
    # out still holds a's memory (2000); b starts at 2, when a's old memory has gone (a and b: 2000).
    g = make_graph({"a": [], "b": ["a"]}, memory=1000, duration=0, outputs=["b"],
                   transfer=Transfer(Link(1000.0, 0), Link(1000.0, 0)))
    s = sched(g, "compute a", "offload a", "reload a", "compute b", "free a")
    sim = simulate(g, s)
    assert sim.step_memory.tolist() == [1000, 1000, 2000, 2000, 1000]
    assert replay(g, s, "cpu", timing_run=False).measured_peak == sim.peak == 2000


@settings(max_examples=25, deadline=None)
@given(dags(min_nodes=2, workspace=True), st.data(), st.floats(0.5, 50.0), st.floats(0.0, 5.0),
       st.floats(0.5, 50.0), st.floats(0.0, 5.0))
def test_any_schedule_that_moves_values_replays_with_the_simulated_device_peak(g, data, b1, l1, b2, l2):
    """Random schedules (recomputations too) with values sent out after some computations and brought back
    before their next reader, on random links: the replay's device peak is the simulator's, to the byte; its
    host copies are held from their offload's step, so at least as long as the model holds them."""
    g = g.with_transfer(Transfer(Link(b1, l1), Link(b2, l2)))
    plain = valid_random_schedule(g, data)
    steps: list[tuple[str, int]] = []
    out: set[int] = set()
    for kind, v in zip(plain.kinds.tolist(), plain.nodes.tolist()):
        if kind == 0:
            for u in g.op_inputs[g.op_start[v]]:
                if u in out:
                    steps.append(("reload", u))
                    out.discard(u)
            steps.append(("compute", v))
            if not g.is_output[v] and data.draw(st.booleans()):
                steps.append(("offload", v))
                out.add(v)
        elif v in out:
            out.discard(v)  # its host copy is simply never read again
        else:
            steps.append(("free", v))
    moved = Schedule.from_steps(steps)
    sim = simulate(g, moved)
    assert sim.valid, sim.violation
    result = replay(g, moved, "cpu", timing_run=False)
    assert result.measured_peak == sim.peak
    if moved.moves:
        assert result.measured_host_peak >= sim.host_peak


@pytest.mark.parametrize("bandwidth", [1e9, 10.0, 0.01])
def test_an_offload_plan_replays_with_the_simulated_peak_and_autograds_gradients(bandwidth):
    g = with_link(mlp(), bandwidth)
    plan = save_on_cpu_plan(g, baseline_schedule(g))
    sim = simulate(g, plan)
    result = replay(g, plan, "cpu", timing_run=False)
    assert result.mode == "model"
    assert result.outputs_match and result.max_abs_diff == 0.0  # the copies are bit for bit
    assert result.measured_peak == result.simulated_peak == sim.peak
    assert result.measured_host_peak == result.simulated_host_peak == sim.host_peak
    data = result.to_json()
    assert (data["offloads"], data["reloads"]) == (sim.offloads, sim.reloads)
    assert "host copies" in data["measurement"]


def test_a_slow_link_holds_device_memory_longer_and_the_replay_measures_it():
    fast, slow = with_link(mlp(), 1e9), with_link(mlp(), 0.01)
    peaks = [replay(g, save_on_cpu_plan(g, baseline_schedule(g)), "cpu", timing_run=False).measured_peak
             for g in (fast, slow)]
    assert peaks == [simulate(g, save_on_cpu_plan(g, baseline_schedule(g))).peak for g in (fast, slow)]
    assert peaks[0] < peaks[1] < baseline(fast).peak


def test_a_timed_replay_of_an_offload_plan_times_pairs_and_says_its_steps_were_not_timed():
    g = with_link(mlp(), 100.0)
    result = replay(g, save_on_cpu_plan(g, baseline_schedule(g)), "cpu", repeats=1, precision=0, step_passes=1)
    assert result.repeats == 1 and result.attribution is None
    assert "not timed in place" in result.note


def test_multi_output_values_and_dropout_masks_come_back_whole():
    # Batch norm's outputs are one value of several storages; dropout's mask is random: both go to the host.
    g = with_link(import_model("tests.test_train:small_cnn", batch=2, input_shape=(3, 8, 8), durations="flops",
                               workspace="measure"), 1.0)
    plan = save_on_cpu_plan(g, baseline_schedule(g))
    result = replay(g, plan, "cpu", timing_run=False)
    assert result.outputs_match and result.max_abs_diff == 0.0
    assert result.measured_peak == result.simulated_peak


def test_cli_replay_prints_the_copies_and_host_peaks(tmp_path):
    g = with_link(mlp(), 100.0)
    plan = save_on_cpu_plan(g, baseline_schedule(g))
    sim = simulate(g, plan)
    save_graph(g, tmp_path / "g.json")
    save_schedule(plan, g, tmp_path / "s.json")
    args = ["replay", str(tmp_path / "g.json"), str(tmp_path / "s.json"), "--device", "cpu", "--precision", "0",
            "--repeats", "1"]
    r = CliRunner().invoke(main, [*args, "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["measured_peak"] == data["simulated_peak"] == sim.peak and data["outputs_match"] is True
    assert (data["measured_host_peak"], data["simulated_host_peak"]) == (sim.host_peak, sim.host_peak)
    assert (data["offloads"], data["reloads"]) == (sim.offloads, sim.reloads)
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    assert f"{sim.offloads} offloads, {sim.reloads} reloads; host peak" in " ".join(r.output.split())


# ---------------------------------------------------------------------- train, exact mode


def test_exact_training_with_an_offload_plan_trains_as_eager_does():
    g = with_link(mlp(), 10.0)
    plan = save_on_cpu_plan(g, baseline_schedule(g))
    report = train(g, plan, 3, configurations=["schedule", "eager"])
    assert report.params_match and report.max_param_diff == 0.0 and report.max_loss_diff == 0.0
    mine = report.configurations[0]
    assert mine.measured_peak == report.simulated_peak == simulate(g, plan).peak


def test_compiled_mode_and_a_run_without_copy_engines_refuse_copies_in_one_sentence():
    g = with_link(mlp(), 10.0)
    plan = save_on_cpu_plan(g, baseline_schedule(g))
    with pytest.raises(TrainError, match="train it with --mode exact"):
        train(g, plan, 2, mode="compiled", configurations=["schedule"])
    with pytest.raises(ScheduleError, match="copies values to the host"):
        compiled_plan(g, plan)
    program = program_for_graph(g)
    ex = Executor(program, State.create(program.spec, torch.device("cpu")))
    with pytest.raises(ExecutionError, match=r"offloads '.*', but this run was given no copy engines"):
        ex.run(zip(plan.kinds.tolist(), plan.nodes.tolist()))


def test_scheduled_step_keeps_its_host_buffers_across_steps():
    g = with_link(mlp(), 10.0)
    step = ScheduledStep(g, save_on_cpu_plan(g, baseline_schedule(g)))
    state = State.create(step.spec, torch.device("cpu"))
    step(state.inputs, state.labels)
    buffers = dict(step._copies._buffers)  # type: ignore[union-attr]
    step(state.inputs, state.labels, step=1)
    assert buffers and all(step._copies._buffers[k] is b for k, b in buffers.items())  # type: ignore[union-attr]


# ---------------------------------------------------------------------- CUDA's copies, with stand-ins


class FakeCuda:
    """``torch.cuda``'s streams and events as stand-ins that log what is asked of them, in order."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.log: list[tuple[str, ...]] = []
        self.events = 0
        streams = iter(["to_host", "to_device"])
        self.compute = self._stream("compute")
        monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: self.compute)
        monkeypatch.setattr(torch.cuda, "Stream", lambda device=None: self._stream(next(streams)))
        monkeypatch.setattr(torch.cuda, "Event", self._event)
        monkeypatch.setattr(torch.cuda, "stream", self._on)

    def _stream(self, name: str) -> Any:
        log = self.log

        class Stream:
            def wait_event(self, event: Any) -> None:
                log.append(("wait", name, event.name))

        stream = Stream()
        stream.name = name  # type: ignore[attr-defined]
        return stream

    def _event(self) -> Any:
        log = self.log
        self.events += 1
        number = self.events

        class Event:
            name = f"e{number}"

            def record(self, stream: Any) -> None:
                log.append(("record", stream.name, self.name))

        return Event()

    @contextlib.contextmanager
    def _on(self, stream: Any) -> Any:
        self.log.append(("copy on", stream.name))
        yield


def test_cuda_copies_run_on_their_streams_after_the_events_they_need(monkeypatch):
    cuda = FakeCuda(monkeypatch)
    g = four()
    s = sched(g, *OUT_AND_BACK)
    copies = CudaCopies(torch.device("cpu"), pin_memory=False)
    mover = Mover(move_plan(g, s, simulate(g, s)), copies, torch.device("cpu"))
    a = torch.full((100,), 7, dtype=torch.uint8)
    values: dict[int, Any] = {0: a}
    alive = weakref.ref(a)
    del a
    for step in range(2):
        mover.before(step)
    mover.before(2)
    mover.offload(2, 0, values)
    # The copy out waits for the compute stream's work so far (a's producer), runs on the device-to-host
    # stream, and records its end there.
    assert cuda.log == [("record", "compute", "e1"), ("wait", "to_host", "e1"), ("copy on", "to_host"),
                        ("record", "to_host", "e2")]
    assert 0 not in values and alive() is not None  # held: the copy still reads it
    cuda.log.clear()
    for step in (3, 4, 5):
        mover.before(step)
    mover.reload(5, 0, values)
    # The copy in waits for the compute stream (the new buffer's last users) and for the copy out.
    assert cuda.log == [("record", "compute", "e3"), ("wait", "to_device", "e3"), ("wait", "to_device", "e2"),
                        ("copy on", "to_device"), ("record", "to_device", "e4")]
    assert alive() is not None  # the model holds it until its copy out ends (41), past the reload's issue (35)
    cuda.log.clear()
    mover.before(6)
    # Before d: the compute stream waits for the copy out, then a's old memory goes.
    assert cuda.log == [("wait", "compute", "e2")] and alive() is None
    cuda.log.clear()
    mover.wait_for([0, 2])
    assert cuda.log == [("wait", "compute", "e4")]  # d reads a: it waits for the copy in, once
    mover.wait_for([0])
    assert cuda.log == [("wait", "compute", "e4")]
    assert values[0].tolist() == [7] * 100 and mover.host_peak == 100


def test_a_replay_through_the_cuda_copies_with_stand_ins_matches_autograd(monkeypatch):
    cuda = FakeCuda(monkeypatch)
    monkeypatch.setattr(replay_module, "copies_for", lambda device: CudaCopies(device, pin_memory=False))
    g = with_link(mlp(), 10.0)
    plan = save_on_cpu_plan(g, baseline_schedule(g))
    result = replay(g, plan, "cpu", timing_run=False)
    assert result.outputs_match and result.max_abs_diff == 0.0
    assert result.measured_peak == result.simulated_peak
    sim = simulate(g, plan)
    copies_on = [entry[1] for entry in cuda.log if entry[0] == "copy on"]
    assert copies_on == ["to_host"] * sim.offloads + ["to_device"] * sim.reloads
    # Every offloaded value's memory is let go after the compute stream waited for its copy out.
    outs = {entry[2] for entry in cuda.log if entry[:2] == ("record", "to_host")}
    assert outs <= {entry[2] for entry in cuda.log if entry[:2] == ("wait", "compute")}


def test_host_copies_do_nothing_to_wait_for():
    copies = HostCopies()
    source, target = torch.arange(4, dtype=torch.uint8), torch.zeros(4, dtype=torch.uint8)
    assert copies.copy_out([source], [target], [None]) is None and target.tolist() == [0, 1, 2, 3]
    copies.wait(None)
