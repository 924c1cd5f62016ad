"""Simulator throughput: steps per second on schedules of a million steps and more."""

from __future__ import annotations

import numpy as np

from benchmarks.common import best_time, paper, show
from remat_bench.core.baseline import baseline_schedule
from remat_bench.core.cleanup import clean_up
from remat_bench.core.graph_io import load_graph
from remat_bench.core.schedule import FREE, Schedule
from remat_bench.core.simulate import simulate
from remat_bench.generators import chain, random_layered


def long_schedule(g, target_steps: int) -> Schedule:
    """A valid schedule of at least ``target_steps`` steps: the baseline pass, repeated.

    Between passes every output is freed, so each pass recomputes the whole graph.
    """
    base = baseline_schedule(g)
    outs = np.asarray(g.output_indices, dtype=np.int64)
    one = (np.concatenate([base.kinds, np.full(len(outs), FREE, dtype=np.int8)]),
           np.concatenate([base.nodes, outs]), np.zeros(len(base) + len(outs), dtype=np.int64))
    reps = target_steps // len(one[0]) + 1
    return Schedule(np.concatenate([one[0]] * reps + [base.kinds]),
                    np.concatenate([one[1]] * reps + [base.nodes]),
                    np.concatenate([one[2]] * reps + [base.impls]))


def main() -> None:
    cases = [
        ("chain-1000 (training, 2001 nodes)", chain(1000)),
        ("random_layered_n1000 (paper)", load_graph(paper("random_layered_n1000"))),
        ("random-layered 5000 nodes (14 inputs per node)", random_layered(5000, seed=1)),
    ]
    rows = []
    for label, g in cases:
        schedule = long_schedule(g, 2_000_000)
        t_sim, sim = best_time(lambda g=g, s=schedule: simulate(g, s), repeat=5)
        assert sim.valid
        t_clean, _ = best_time(lambda g=g, s=schedule: clean_up(g, s), repeat=1)
        rows.append([label, f"{len(schedule):,}", f"{t_sim:.3f}", f"{len(schedule) / t_sim / 1e6:.1f} M",
                     f"{t_clean:.2f}", f"{len(schedule) / t_clean / 1e6:.2f} M"])
    show("Simulator throughput", ["graph", "steps", "simulate (s)", "steps/s", "clean-up (s)",
                                  "clean-up steps/s"], rows)
    reading(cases[0][1])


def reading(g) -> None:
    """Reading and checking a schedule file against simulating it (`remat-bench simulate`'s two costs)."""
    import tempfile
    from pathlib import Path

    from remat_bench.core.schedule import load_schedule, save_schedule

    schedule = long_schedule(g, 1_000_000)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "s.json"
        save_schedule(schedule, g, path)
        t_read, loaded = best_time(lambda: load_schedule(path, g), repeat=3)
        t_sim, _ = best_time(lambda: simulate(g, loaded), repeat=3)
    show("Reading a schedule file", ["graph", "steps", "read and check (s)", "us per step", "simulate (s)",
                                     "read / simulate"],
         [[g.name, f"{len(schedule):,}", f"{t_read:.2f}", f"{1e6 * t_read / len(schedule):.2f}", f"{t_sim:.3f}",
           f"{t_read / t_sim:.0f}x"]])


if __name__ == "__main__":
    main()
