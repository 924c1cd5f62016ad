"""MONeT against brute forces that also choose implementations, on training graphs of 7 nodes."""

from __future__ import annotations

import numpy as np
import pytest

from remat_bench.app.pipeline import run
from remat_bench.core.baseline import baseline
from remat_bench.core.budget import memory_floor
from remat_bench.core.graph import Graph, Implementation, Node
from remat_bench.core.simulate import simulate
from remat_bench.generators import ForwardOp, training_graph
from remat_bench.methods.checkmate import Checkmate
from remat_bench.methods.monet import Monet
from tests.bruteforce import staged_optimum, staged_optimum_with_implementations
from tests.helpers import with_runner


def random_training_graph(seed: int, implementations: bool = True) -> Graph:
    """3 forward ops (a random DAG), the loss and 3 gradients: 7 nodes.

    With ``implementations``, about half the nodes get 2 or 3 of them with
    their own durations and workspaces, and gradients may get one that reads
    one forward value fewer (MONeT's output-activated kind).
    """
    rng = np.random.default_rng(seed)
    fwd = []
    for i in range(3):
        ins = [f"f{u}" for u in range(i) if rng.random() < 0.6] or ([f"f{i - 1}"] if i else [])
        fwd.append(ForwardOp(f"f{i}", "conv2d", ins, int(rng.integers(1, 6)), int(rng.integers(1, 6))))
    g = training_graph(fwd, name=f"monet-{seed}", loss_memory=int(rng.integers(1, 3)), backward_factor=2)
    if not implementations:
        return g
    nodes = []
    for node in g.nodes:
        impls: list[Implementation] = []
        if rng.random() < 0.6:
            impls = [Implementation("default", node.duration, node.workspace)]
            for k in range(int(rng.integers(1, 3))):
                impls.append(Implementation(f"alt{k}", int(rng.integers(0, 2 * node.duration + 2)),
                                            int(rng.integers(0, 5))))
            forward_inputs = [u for u in node.inputs if not u.endswith("_grad") and u != "loss"]
            if node.kind == "backward" and forward_inputs and rng.random() < 0.7:
                dropped = forward_inputs[int(rng.integers(0, len(forward_inputs)))]
                impls.append(Implementation("activated", int(rng.integers(1, node.duration + 3)),
                                            int(rng.integers(0, 3)),
                                            inputs=tuple(u for u in node.inputs if u != dropped)))
        nodes.append(Node(id=node.id, inputs=node.inputs, memory=node.memory,
                          duration=impls[0].duration if impls else node.duration,
                          workspace=impls[0].workspace if impls else node.workspace, op=node.op,
                          kind=node.kind, grad_of=node.grad_of, implementations=tuple(impls)))
    return Graph(nodes, name=g.name, fixed_memory=seed % 3)


def budgets(g: Graph) -> list[int]:
    low, high = memory_floor(g).amount, baseline(g).peak
    return sorted({low - 1, low, *np.linspace(low, high, 4).astype(int).tolist(), high, high + 5})


CASES = [(seed, b) for seed in range(12) for b in budgets(random_training_graph(seed))]


def solve(g: Graph, budget, **params):
    method = with_runner(Monet())
    return method.solve(g, budget, 60, **method.parse_params(params))


def assert_confirmed(g: Graph, r, budget) -> None:
    """The decoded schedule is valid, fits, and lasts exactly the objective."""
    sim = simulate(g, r.schedule)
    assert sim.valid, sim.violation
    if budget is not None:
        assert sim.peak <= budget
    assert sim.duration == r.objective


@pytest.mark.parametrize("seed, budget", CASES)
def test_monet_is_the_optimum_of_its_schedule_space(seed, budget):
    g = random_training_graph(seed)
    assert g.n == 7 and g.has_implementations
    want = staged_optimum_with_implementations(g, budget, monet_shape=True)
    anywhere = staged_optimum_with_implementations(g, budget)
    r = solve(g, budget, warm_start="false")
    if want is None:
        assert r.status.value == "infeasible", r.message
        return
    assert r.status.value == "optimal", r.message
    assert r.objective == want
    # Never better than the best staged schedule with any implementations.
    assert anywhere is not None and r.objective >= anywhere
    assert_confirmed(g, r, budget)


@pytest.mark.parametrize("seed", range(12))
def test_warm_start_and_pulp_cbc_agree(seed):
    g = random_training_graph(seed + 50)
    b = budgets(g)[2]
    want = staged_optimum_with_implementations(g, b, monet_shape=True)
    for params in ({}, {"backend": "pulp:PULP_CBC_CMD"}):
        r = solve(g, b, **params)
        if want is None:
            assert r.status.value == "infeasible", r.message
        else:
            assert (r.status.value, r.objective) == ("optimal", want), r.message
            assert_confirmed(g, r, b)


@pytest.mark.parametrize("seed", range(10))
def test_without_implementations_monet_is_checkpointing_alone(seed):
    """No choice of implementation: MONeT's optimum is the best checkpointing schedule of its shape,
    which is never better than Checkmate's (its space holds MONeT's)."""
    g = random_training_graph(seed, implementations=False)
    assert not g.has_implementations
    for b in budgets(g):
        want = staged_optimum_with_implementations(g, b, monet_shape=True)
        r = solve(g, b)
        if want is None:
            assert r.status.value == "infeasible", r.message
            continue
        assert (r.status.value, r.objective) == ("optimal", want), r.message
        assert r.objective >= staged_optimum(g, b)
        assert_confirmed(g, r, b)
        checkmate = with_runner(Checkmate())
        c = checkmate.solve(g, b, 60, **checkmate.parse_params({}))
        assert c.objective <= r.objective


@pytest.mark.parametrize("seed", range(8))
def test_least_peak_then_least_duration(seed):
    g = random_training_graph(seed + 100)
    # The least budget any MONeT schedule fits, found by the brute force.
    low = memory_floor(g).amount
    least = next(b for b in range(low, baseline(g).peak + 100)
                 if staged_optimum_with_implementations(g, b, monet_shape=True) is not None)
    r = solve(g, None)
    assert r.status.value == "optimal", r.message
    assert simulate(g, r.schedule).peak == least
    assert r.objective == staged_optimum_with_implementations(g, least, monet_shape=True)
    assert_confirmed(g, r, least)


def test_implementation_choice_beats_the_first_implementation_on_a_worked_example():
    """a -> b -> loss -> b_grad -> a_grad. b has a fast implementation with a workspace of 4 and a
    slow one with none; at a budget of 6 only the slow one fits while a is held, so MONeT
    recomputes a for a_grad and runs b fast, or keeps a and runs b slowly, whichever is cheaper."""
    fwd = [ForwardOp("a", "conv2d", [], 2, 3),
           ForwardOp("b", "conv2d", ["a"], 2, 10, implementations=[
               Implementation("default", 10, 2), Implementation("fast", 2, 4), Implementation("slow", 20, 0)])]
    g = training_graph(fwd, name="worked", loss_memory=1, backward_factor=1)
    brute = staged_optimum_with_implementations(g, 8, monet_shape=True)
    r = solve(g, 8)
    assert (r.status.value, r.objective) == ("optimal", brute)
    computes = [(g.ids[v], g.nodes[v].implementations[i].name if g.nodes[v].implementations else "")
                for v, i in zip(r.schedule.nodes, r.schedule.impls)]
    assert ("b", "fast") in computes
    assert_confirmed(g, r, 8)


def test_monet_refuses_graphs_without_a_forward_then_backward_order():
    g = Graph([Node("x", (), 1, 1, kind="forward"), Node("y", ("x",), 1, 1, kind="backward"),
               Node("z", ("y",), 1, 1, kind="forward")], name="interleaved")
    assert "forward pass first" in Monet.skip(g, 10)
    r = run(g, "monet", "10")
    assert r.status.value == "unsupported" and "forward pass first" in r.message


def test_out_of_time_returns_the_best_heuristic_schedule_within_the_budget():
    from remat_bench.core.budget import parse_budget
    from remat_bench.generators import generate

    g = generate("vgg16", batch=8, resolution=64, implementations=True)
    b = parse_budget("0.9", g).amount
    method = with_runner(Monet())
    r = method.solve(g, b, 1e-6, **method.parse_params({}))
    assert r.status.value == "feasible", r.message
    assert "time limit" in r.message and r.stats["returned"] in r.message
    sim = simulate(g, r.schedule)
    assert sim.valid and sim.peak <= b and sim.duration == r.objective


def test_monet_shape_is_the_forward_pass_then_stages_of_forward_recomputations():
    from remat_bench.methods.monet import Stages, monet_shaped

    g = random_training_graph(3, implementations=False)
    st = Stages.of(g)
    ids = {id: v for v, id in enumerate(g.ids)}
    order = [ids[x] for x in ("f0", "f1", "f2", "loss", "f2_grad", "f1_grad", "f0_grad")]
    assert monet_shaped(st, np.array(order))
    # A recomputation of f0 before f1_grad: still MONeT's shape; twice in one stage, or during
    # the forward pass, or a backward node recomputed, is not.
    assert monet_shaped(st, np.array([*order[:5], ids["f0"], *order[5:]]))
    assert not monet_shaped(st, np.array([*order[:5], ids["f0"], ids["f0"], *order[5:]]))
    assert not monet_shaped(st, np.array([ids["f0"], ids["f0"], *order[1:]]))
    assert not monet_shaped(st, np.array([*order, ids["loss"]]))


@pytest.mark.parametrize("seed", range(4))
def test_quick_size_estimate_is_a_lower_bound_of_the_counted_one(seed):
    # The quick estimate lets a 50,000-layer chain be refused at once, where counting took minutes.
    from remat_bench.methods.monet import Stages, model_size

    st = Stages.of(random_training_graph(seed + 12, implementations=bool(seed % 2)))
    quick, counted = model_size(st, exact=False), model_size(st)
    assert all(0 < quick[k] <= counted[k] for k in quick)
    assert counted["est_nonzeros"] > quick["est_nonzeros"]


def test_a_chain_far_too_large_is_refused_in_a_sentence_and_at_once():
    from remat_bench.core.errors import RematBenchError
    from remat_bench.generators import chain
    from remat_bench.methods.monet import Stages, check_fits

    st = Stages.of(chain(20_000))
    with pytest.raises(RematBenchError, match=r"would have at least [\d,]+ variables .* GiB available"):
        check_fits(st)
