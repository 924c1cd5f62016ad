"""The offload model (docs/design.md section 3, "Offload"): schedules that copy values to host memory and back,
scored beside two copy engines, against values worked out by hand."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remat_bench.core.errors import GraphError, ScheduleError
from remat_bench.core.graph import Link, Transfer
from remat_bench.core.graph_io import graph_from_dict, load_graph, save_graph
from remat_bench.core.schedule import Schedule, load_schedule, save_schedule, schedule_from_dict
from remat_bench.core.simulate import _simulate_moves, simulate
from tests.helpers import dags, make_graph
from tests.test_simulate import random_schedule, valid_random_schedule

# D2H: 10 units per time unit after a latency of 1; H2D: 5 units per time unit after 2.
LINK = Transfer(Link(10.0, 1.0), Link(5.0, 2.0), "by hand")


def four(transfer: Transfer | None = LINK):
    """a (100 units, 10 s) read by b (50, 20) and by d (10, 30) at the end; c (10, 5) between them."""
    return make_graph({"a": [], "b": ["a"], "c": ["b"], "d": ["a", "c"]},
                      memory={"a": 100, "b": 50, "c": 10, "d": 10}, duration={"a": 10, "b": 20, "c": 5, "d": 30},
                      outputs=["d"], transfer=transfer)


def sched(g, *steps):
    return Schedule.from_steps([(word, g.index[v]) for word, v in (step.split() for step in steps)])


def test_offload_and_reload_by_hand():
    g = four()
    s = sched(g, "compute a", "compute b", "offload a", "compute c", "free b", "reload a", "compute d", "free a",
              "free c")
    sim = simulate(g, s)
    assert sim.valid
    # a [0,10], b [10,30]; a's copy out starts at 30 and takes 1 + 100/10 = 11: [30,41]; c [30,35];
    # a's copy back waits for the copy out: [41, 41 + 2 + 100/5 = 63]; d waits for it: [63,93].
    assert sim.step_start.tolist() == [0, 10, 30, 30, 35, 41, 63, 93, 93]
    assert sim.step_end.tolist() == [10, 30, 41, 35, 35, 63, 93, 93, 93]
    # c's step holds b, c and a still being copied out (160); the reload is issued at 35, while a's copy
    # out still holds its device memory (until 41): c 10 + a 100 + a 100 leaving = 210, the peak.
    assert sim.step_memory.tolist() == [100, 150, 150, 160, 110, 210, 120, 20, 10]
    assert (sim.peak, sim.peak_step) == (210, 5)
    assert (sim.duration, sim.wait) == (93, 28)
    assert (sim.host_peak, sim.to_host, sim.to_device, sim.offloads, sim.reloads) == (100, 100, 100, 1, 1)
    summary = sim.summary()
    assert (summary["wait"], summary["host_peak"], summary["to_device"]) == (28, 100, 100)


def test_reload_issued_after_the_copy_out_ended_holds_the_value_once():
    # c is a long step now: the copy out (30..41) ends during it, before the reload is issued at 65.
    g = make_graph({"a": [], "b": ["a"], "c": ["b"], "d": ["a", "c"]},
                   memory={"a": 100, "b": 50, "c": 10, "d": 10}, duration={"a": 10, "b": 20, "c": 35, "d": 30},
                   outputs=["d"], transfer=LINK)
    s = sched(g, "compute a", "compute b", "offload a", "compute c", "free b", "reload a", "compute d")
    sim = simulate(g, s)
    assert sim.valid
    assert sim.step_memory.tolist() == [100, 150, 150, 160, 10, 110, 120]
    # The reload starts at 65 and ends at 87; d waits 22.
    assert (sim.step_start[5], sim.step_end[5], sim.wait, sim.duration) == (65, 87, 22, 117)
    assert sim.peak == 160


def test_copies_queue_on_their_engine_in_step_order():
    g = make_graph({"x": [], "y": [], "z": ["x", "y"]}, memory={"x": 20, "y": 30, "z": 1},
                   duration={"x": 1, "y": 1, "z": 1}, outputs=["z"], transfer=LINK)
    s = sched(g, "compute x", "compute y", "offload x", "offload y", "reload x", "reload y", "compute z")
    sim = simulate(g, s)
    assert sim.valid
    # x out [2, 5], y out queues behind it [5, 9]; x back [5, 11], y back queues [11, 19]; z waits from 2 to 19.
    assert sim.step_start.tolist() == [0, 1, 2, 5, 5, 11, 19]
    assert sim.step_end.tolist() == [1, 2, 5, 9, 11, 19, 20]
    assert (sim.wait, sim.duration) == (17, 20)
    # Host: x [2, 11], y [5, 19]: both at once.
    assert sim.host_peak == 50
    # The reloads are issued at 2, while both copies out still hold their memory.
    assert sim.step_memory.tolist() == [20, 50, 50, 50, 70, 100, 51]


def test_a_free_of_a_value_still_arriving_holds_its_memory_until_the_copy_ends():
    g = make_graph({"x": [], "y": [], "z": ["y"]}, memory={"x": 20, "y": 5, "z": 1},
                   duration={"x": 1, "y": 1, "z": 10}, outputs=["z", "x"], transfer=LINK)
    s = sched(g, "compute x", "offload x", "reload x", "free x", "compute y", "compute z", "reload x")
    sim = simulate(g, s)
    # x out [1, 4], x back [4, 10]; freed at 1 while arriving: held until 10. y [1, 2]: 20 (out) + 20 (back) + 5.
    assert sim.step_memory.tolist()[4] == 45
    # z starts at 2: x's copies still hold both (until 4 and 10).
    assert sim.step_memory.tolist()[5] == 20 + 20 + 5 + 1
    assert sim.valid and sim.duration == 18  # the last reload [12, 18] ends the step (its host copy read twice)


@pytest.mark.parametrize(("steps", "message"), [
    (("compute a", "offload a", "compute b"),
     "step 2 (compute 'b'): input 'a' is not resident; it is on the host: reload it first"),
    (("compute a", "reload a"), "step 1 (reload 'a'): 'a' is already resident on the device"),
    (("compute a", "free a", "reload a"),
     "step 2 (reload 'a'): 'a' has no copy on the host; offload it before reloading it"),
    (("offload a",), "step 0 (offload 'a'): 'a' is not resident on the device; only a resident value can be "
                     "offloaded"),
    (("compute a", "offload a", "offload a"),
     "step 2 (offload 'a'): 'a' is not resident on the device (its last copy went to the host); only a resident "
     "value can be offloaded"),
])
def test_invalid_steps_are_refused_in_one_sentence(steps, message):
    g = four()
    sim = simulate(g, sched(g, *steps))
    assert not sim.valid
    assert sim.violation.message == message


def test_an_output_left_on_the_host_is_not_resident_at_the_end():
    g = four()
    s = sched(g, "compute a", "compute b", "compute c", "compute d", "offload d")
    sim = simulate(g, s)
    assert sim.violation.message == "output 'd' is not resident when the schedule ends (it is on the host)"
    assert sim.violation.step == len(s)


def test_a_graph_without_a_host_link_cannot_offload():
    g = four(transfer=None)
    sim = simulate(g, sched(g, "compute a", "offload a"))
    assert sim.violation.message.startswith("step 1 (offload 'a'): graph 'test' has no host link to copy over")


def test_schedule_file_version_2_round_trip_and_version_1_refuses_moves(tmp_path):
    g = four()
    s = sched(g, "compute a", "compute b", "offload a", "compute c", "free b", "reload a", "compute d")
    save_schedule(s.with_meta(method="by-hand"), g, tmp_path / "s.json")
    data = json.loads((tmp_path / "s.json").read_text())
    assert data["version"] == 2
    assert data["steps"][2] == ["offload", "a"] and data["steps"][5] == ["reload", "a"]
    back = load_schedule(tmp_path / "s.json", g)
    assert back.kinds.tolist() == s.kinds.tolist() and back.nodes.tolist() == s.nodes.tolist()
    data["version"] = 1
    with pytest.raises(ScheduleError, match="step 2 is an offload step, which a version 1 schedule cannot have"):
        schedule_from_dict(data, g, "s.json")
    plain = sched(g, "compute a", "compute b", "compute c", "compute d")
    save_schedule(plain, g, tmp_path / "p.json")
    assert json.loads((tmp_path / "p.json").read_text())["version"] == 1
    data["version"] = 2
    data["steps"][2] = ["offload", "a", "default"]
    with pytest.raises(ScheduleError, match=r"step 2 \(offload 'a'\) names an implementation; only compute"):
        schedule_from_dict(data, g, "s.json")


def test_graph_transfer_round_trip_and_hash(tmp_path):
    g = four()
    save_graph(g, tmp_path / "g.json")
    back = load_graph(tmp_path / "g.json")
    assert back.transfer == LINK
    assert back.sha256 == g.sha256
    assert four(transfer=None).sha256 != g.sha256
    assert four(Transfer(Link(10.0, 1.0), Link(5.0, 2.0), "another source")).sha256 == g.sha256
    assert g.with_transfer(LINK.scaled(8)).transfer.host_to_device.bandwidth == 40.0
    d = g.to_dict()
    d["transfer"]["host_to_device"]["bandwidth"] = 0
    with pytest.raises(GraphError, match="bandwidth"):
        graph_from_dict(d, "g.json")
    d["transfer"]["host_to_device"] = {"bandwidth": 1, "speed": 2}
    with pytest.raises(GraphError, match=r"g\.json"):
        graph_from_dict(d, "g.json")


@settings(max_examples=300, deadline=None)
@given(dags(workspace=True), st.data())
def test_the_walk_agrees_with_the_array_simulator_on_schedules_that_move_nothing(g, data):
    for schedule in (random_schedule(g, data), valid_random_schedule(g, data)):
        fast, walk = simulate(g, schedule), _simulate_moves(g, schedule)
        assert (walk.valid, walk.peak, walk.duration, walk.computes, walk.recomputations) == (
            fast.valid, fast.peak, fast.duration, fast.computes, fast.recomputations)
        if fast.valid:
            assert walk.peak_step == fast.peak_step
            computes = schedule.kinds == 0
            assert np.array_equal(walk.step_memory[computes], fast.step_memory[computes])
        else:
            assert walk.violation.message == fast.violation.message


@settings(max_examples=200, deadline=None)
@given(dags(min_nodes=2, workspace=True), st.data(),
       st.floats(0.5, 50.0), st.floats(0.0, 5.0), st.floats(0.5, 50.0), st.floats(0.0, 5.0))
def test_moving_a_value_out_and_back_costs_only_waits_and_never_lowers_the_duration(g, data, b1, l1, b2, l2):
    """Offload every value right after it is computed and reload it right before its next reader: valid,
    every value moved once each way, the duration the computations' plus the waits, never less."""
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
            if not g.is_output[v]:
                steps.append(("offload", v))
                out.add(v)
        elif v in out:
            out.discard(v)  # its host copy is simply never read again
        else:
            steps.append(("free", v))
    moved = Schedule.from_steps(steps)
    before, after = simulate(g, plain), simulate(g, moved)
    assert after.valid, after.violation
    assert after.to_host == sum(int(g.memory[v]) for word, v in steps if word == "offload")
    assert after.to_device == sum(int(g.memory[v]) for word, v in steps if word == "reload")
    assert after.host_peak <= after.to_host
    assert after.duration >= before.duration
    if not moved.moves:  # every value an output: nothing to move
        assert after.duration == before.duration
        return
    last_compute_end = float(after.step_end[[i for i, (w, _) in enumerate(steps) if w == "compute"][-1]])
    assert last_compute_end == pytest.approx(before.duration + after.wait)


def test_a_transfer_passes_the_hand_written_check_and_the_schema_alike():
    """The loader's hand-written check (`fast_schema_ok`) may only be stricter than the JSON Schema: both take a
    well-formed transfer, and both refuse a bandwidth of 0 and an unknown key."""
    import jsonschema

    from remat_bench.core.graph_io import fast_schema_ok
    from remat_bench.core.json_files import schema

    d = make_graph({"a": []}, memory=1, transfer=LINK).to_dict()
    validator = jsonschema.Draft202012Validator(schema("graph"))
    assert fast_schema_ok(d) and validator.is_valid(d)
    assert graph_from_dict(d).transfer == LINK
    for bad in ({"bandwidth": 0}, {"bandwidth": 1, "speed": 2}):
        d["transfer"]["device_to_host"] = bad
        assert not fast_schema_ok(d) and not validator.is_valid(d)
