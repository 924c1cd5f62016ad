"""policy: the frameworks' fixed rules (JAX's dots_saveable and nothing_saveable, Megatron's selective
recomputation) on imported PyTorch graphs and on hand-built graphs whose schedules are checked by hand."""

from __future__ import annotations

import numpy as np
import pytest

from remat_bench.app.pipeline import run
from remat_bench.core.baseline import baseline
from remat_bench.core.errors import MethodError
from remat_bench.core.graph import Graph, Node
from remat_bench.core.simulate import simulate
from remat_bench.generators.chain import chain
from remat_bench.methods import get_method
from remat_bench.methods.policy import (
    DOT_OPS,
    Policy,
    aten_name,
    attention_core,
    block_container,
    find_blocks,
    policy_plan,
)

RULES = ("dots_saveable", "nothing_saveable", "megatron_selective")


def solve(g: Graph, budget=None, **params):
    method = Policy()
    return method.solve(g, budget, None, **method.parse_params(params))


def computes(g: Graph, schedule) -> np.ndarray:
    """How many times the schedule computes each node."""
    return np.bincount(schedule.nodes[schedule.kinds == 0], minlength=g.n)


def saved(g: Graph, rule: str, block: str | None = None) -> set[str]:
    plan, _ = policy_plan(g, rule, block)
    return {g.ids[v] for v in plan.kept}


# ---------------------------------------------------------------------- imported models


@pytest.fixture(scope="module")
def models():
    import tests.needs_torch  # noqa: F401 (torch, or a failure saying how to install it; one thread)
    from remat_bench.torch.importer import import_model

    # Small enough to trace in a second; long enough sequences and narrow enough layers that the
    # activations, not the parameter gradients, decide the peaks.
    counted = {"durations": "flops", "workspace": "none"}  # the rules read the graph's structure, not its costs
    gpt = import_model("gpt", batch=2, input_shape=(64,), vocab=64, max_seq=64, width=32, layers=2, heads=2, **counted)
    resnet = import_model("resnet18", batch=2, input_shape=(3, 32, 32), width=8, **counted)
    return gpt, resnet


def test_the_importer_records_the_module_of_every_forward_node(models):
    gpt, resnet = models
    for g in (gpt, resnet):
        assert all(g.nodes[v].metadata.get("module") is not None for v in g.forward_indices)
        # Autograd runs the backward operators outside every module; only the loss, computed by
        # the training step itself (path ""), has one.
        assert {g.ids[b] for b in g.backward_indices if "module" in g.nodes[b].metadata} == {"nll_loss_forward"}
    meta = gpt.nodes[gpt.index["addmm"]].metadata
    assert (meta["module"], meta["module_type"]) == ("model.blocks.0.attn.qkv", "Linear")
    meta = gpt.nodes[gpt.index["_scaled_dot_product_flash_attention_for_cpu_1"]].metadata
    assert (meta["module"], meta["module_type"]) == ("model.blocks.1.attn", "CausalSelfAttention")
    assert gpt.nodes[gpt.index["add_2"]].metadata["module"] == "model.blocks.0"  # the block's residual add
    assert resnet.nodes[resnet.index["convolution"]].metadata["module"] == "model.stem.0"
    # A batchnorm's counter update runs after the whole step; it gets the module of the value it writes.
    assert resnet.nodes[resnet.index["copy__1"]].metadata["module"] == "model.stages.0.bn1"


def test_dots_saveable_saves_exactly_the_matmuls_and_convolutions(models):
    for g in models:
        dots = {g.ids[v] for v in g.forward_indices if aten_name(g.nodes[v].op) in DOT_OPS}
        assert saved(g, "dots_saveable") == dots
    gpt, resnet = models
    assert saved(gpt, "dots_saveable") == {f"addmm{s}" for s in ("", "_1", "_2", "_3", "_4", "_5", "_6", "_7")} | {
        "mm"}
    assert len(saved(resnet, "dots_saveable")) == 20 + 1  # 20 convolutions and the head's addmm
    r = solve(gpt)
    assert r.status.value == "feasible" and simulate(gpt, r.schedule).valid
    counts = computes(gpt, r.schedule)
    # No dot is computed twice; every other forward value the backward pass reads is recomputed once
    # (held until its last use), together with what it needs: the embeddings and the residual stream.
    assert not any(counts[gpt.index[d]] > 1 for d in saved(gpt, "dots_saveable"))
    assert {gpt.ids[v] for v in np.flatnonzero(counts > 1)} == {
        "arange", "embedding", "embedding_1", "add", "add_1", "add_2", "add_3", "add_4",
        *(f"native_layer_norm{s}" for s in ("", "_1", "_2", "_3", "_4")), "gelu", "gelu_1",
        "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention_for_cpu_1"}
    assert counts.max() == 2


def test_nothing_saveable_checkpoints_each_block(models):
    gpt, resnet = models
    assert [b.name for b in find_blocks(gpt)] == ["model.blocks.0", "model.blocks.1"]  # layers=2
    assert [b.name for b in find_blocks(resnet)] == [f"model.stages.{i}" for i in range(8)]  # 2+2+2+2 blocks
    # The GPT saves each block's input (the embeddings' sum add, block 0's output add_2), the last
    # block's output (ln_f reads it) and what runs outside the blocks; nothing inside a block.
    assert saved(gpt, "nothing_saveable") == {"arange", "embedding", "embedding_1", "add", "add_2", "add_4",
                                              "native_layer_norm_4", "mm", "_log_softmax"}
    r = solve(gpt, rule="nothing_saveable")
    assert r.stats["blocks"] == 2 and simulate(gpt, r.schedule).valid
    counts = computes(gpt, r.schedule)
    in_blocks = {v for b in find_blocks(gpt) for v in b.nodes}
    recomputed = set(np.flatnonzero(counts > 1).tolist())
    assert recomputed <= in_blocks and counts.max() == 2  # each block recomputed once, together
    # Every block node is recomputed but the blocks' outputs add_2 and add_4 (saved) and the mlp's
    # second matmuls addmm_3 and addmm_7: only the residual add reads them, and its backward reads
    # neither of its inputs.
    assert {gpt.ids[v] for v in in_blocks - recomputed} == {"addmm_3", "add_2", "addmm_7", "add_4"}
    # In the ResNet, the values saved inside blocks (memory > 0) are the blocks' outputs: the last relu.
    stage_nodes = {v for b in find_blocks(resnet) for v in b.nodes}
    kept = {resnet.ids[v] for v in policy_plan(resnet, "nothing_saveable")[0].kept
            if v in stage_nodes and resnet.memory[v] > 0}
    assert kept == {f"relu_{2 * i + 2}" for i in range(8)}
    r = solve(resnet, rule="nothing_saveable")
    assert simulate(resnet, r.schedule).valid and set(np.flatnonzero(computes(resnet, r.schedule) > 1)) <= stage_nodes


def test_megatron_selective_recomputes_the_attention_core_only(models):
    gpt, resnet = models
    sdpa = {"_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention_for_cpu_1"}
    assert {gpt.ids[v] for v in attention_core(gpt)} == sdpa
    assert saved(gpt, "megatron_selective") == {gpt.ids[v] for v in gpt.forward_indices} - sdpa
    r = solve(gpt, rule="megatron_selective")
    counts = computes(gpt, r.schedule)
    assert {gpt.ids[v] for v in np.flatnonzero(counts > 1)} == sdpa and counts.max() == 2
    # No attention in a ResNet: nothing is recomputed, and the schedule is the baseline's.
    r = solve(resnet, rule="megatron_selective")
    sim, base = simulate(resnet, r.schedule), baseline(resnet)
    assert r.stats["attention_nodes"] == 0 and (sim.peak, sim.duration) == (base.peak, base.duration)


def test_the_peaks_on_the_gpt_fall_as_the_rules_save_less(models):
    gpt, _ = models
    sims = {rule: simulate(gpt, solve(gpt, rule=rule).schedule) for rule in RULES}
    peaks = {rule: sim.peak for rule, sim in sims.items()}
    durations = {rule: sim.duration for rule, sim in sims.items()}
    base = baseline(gpt)
    # Megatron drops only the attention outputs (flash attention never stores the scores, so there is
    # little to drop); dots_saveable also drops the layernorms, gelus and residuals, but keeps every
    # matmul output, the widest being the mlp's 4x expansion; per-block checkpointing keeps one
    # residual per block and rebuilds a single block at a time. Recomputation costs the other way.
    assert peaks["nothing_saveable"] < peaks["dots_saveable"] < peaks["megatron_selective"] < base.peak
    assert base.duration < durations["megatron_selective"] < durations["dots_saveable"] < durations[
        "nothing_saveable"]


def test_a_budget_below_the_rules_peak_is_no_solution_with_the_schedule(models):
    gpt, _ = models
    peak = solve(gpt, rule="dots_saveable").stats["simulated_peak"]
    assert solve(gpt, peak, rule="dots_saveable").status.value == "feasible"
    r = solve(gpt, peak - 1, rule="dots_saveable")
    assert r.status.value == "no_solution" and r.schedule is not None and str(peak) in r.message
    # The pipeline scores it anyway, so the results show by how much the rule exceeds the budget.
    result = run(gpt, "policy", peak - 1, params={"rule": "dots_saveable"}, bound=False)
    assert result.status.value == "no_solution" and result.peak == peak


# ---------------------------------------------------------------------- hand-built graphs

MM, RELU = "aten.mm.default", "aten.relu.default"


def fw(node_id: str, op: str, module: str, inputs: tuple[str, ...], memory: int, duration: int) -> Node:
    return Node(id=node_id, inputs=inputs, memory=memory, duration=duration, op=op, kind="forward",
                metadata={"module": module})


def bw(node_id: str, op: str, inputs: tuple[str, ...], memory: int, duration: int) -> Node:
    return Node(id=node_id, inputs=inputs, memory=memory, duration=duration, op=op, kind="backward")


def two_blocks() -> Graph:
    """x = embedding; block i: a = mm, r = relu(a), o = mm(r); then the loss and the gradients.

    A matmul's gradient reads its input (go reads r, ga reads the block's input), relu's reads its
    output; matmuls cost 10, the rest 1.
    """
    nodes = [fw("x", "aten.embedding.default", "model.emb", (), 4, 1)]
    for i, prev in ((0, "x"), (1, "o0")):
        nodes += [fw(f"a{i}", MM, f"model.blocks.{i}.fc1", (prev,), 8, 10),
                  fw(f"r{i}", RELU, f"model.blocks.{i}.act", (f"a{i}",), 8, 1),
                  fw(f"o{i}", MM, f"model.blocks.{i}.fc2", (f"r{i}",), 4, 10)]
    nodes.append(bw("loss", "aten.nll_loss_forward.default", ("o1",), 1, 1))
    grad = "loss"
    for i, prev in ((1, "o0"), (0, "x")):
        nodes += [bw(f"go{i}", MM, (grad, f"r{i}"), 8, 10),
                  bw(f"gr{i}", "aten.threshold_backward.default", (f"go{i}", f"r{i}"), 8, 1),
                  bw(f"ga{i}", MM, (f"gr{i}", prev), 4, 10)]
        grad = f"ga{i}"
    return Graph(nodes, name="two-blocks")


def attention() -> Graph:
    """One unfused attention: s = q k^T (16 units: the quadratic tensor), scaled, masked, softmax,
    times v, projected; then its backward."""
    a = "model.blocks.0.attn"
    nodes = [
        fw("x", "aten.embedding.default", "model.emb", (), 4, 1),
        fw("q", MM, a + ".q", ("x",), 4, 10), fw("k", MM, a + ".k", ("x",), 4, 10),
        fw("v", MM, a + ".v", ("x",), 4, 10),
        fw("s", "aten.bmm.default", a, ("q", "k"), 16, 10),
        fw("d", "aten.div.Tensor", a, ("s",), 16, 1),
        fw("m", "aten.tril.default", a, (), 2, 1),  # the mask: not computed from the scores
        fw("f", "aten.masked_fill.Scalar", a, ("d", "m"), 16, 1),
        fw("p", "aten._softmax.default", a, ("f",), 16, 1),
        fw("c", "aten.bmm.default", a, ("p", "v"), 4, 10),
        fw("o", MM, a + ".proj", ("c",), 4, 10),
        bw("loss", "aten.nll_loss_forward.default", ("o",), 1, 1),
        bw("gc", MM, ("loss", "c"), 4, 10),
        bw("gp", "aten.bmm.default", ("gc", "v"), 16, 10),
        bw("gv", "aten.bmm.default", ("gc", "p"), 4, 10),
        bw("gf", "aten._softmax_backward_data.default", ("gp", "p"), 16, 1),
        bw("gd", "aten.masked_fill.Scalar", ("gf", "m"), 16, 1),
        bw("gs", "aten.div.Tensor", ("gd",), 16, 1),
        bw("gq", "aten.bmm.default", ("gs", "k"), 4, 10),
        bw("gk", "aten.bmm.default", ("gs", "q"), 4, 10),
        bw("gx", MM, ("gq", "gk", "gv", "x"), 4, 10),
    ]
    return Graph(nodes, name="attention")


def test_hand_built_blocks_each_rule_exactly():
    g = two_blocks()
    base = baseline(g)
    # Baseline: at gr1 it holds x, r0, o0, r1 (read later by gradients), go1 and gr1: 4+8+4+8+8+8.
    assert (base.peak, base.duration) == (40, 86)
    expected = {
        # dots_saveable: the mms are saved (a0 and a1 until r0 and r1 are recomputed from them);
        # r1, r0 and x are recomputed (+1 each). Peak at gr1: a0, o0, r1, go1, gr1 = 8+4+8+8+8.
        "dots_saveable": ({"a0", "o0", "a1", "o1"}, 36, 89),
        # nothing_saveable: the blocks' inputs x and o0 and the last output o1 are saved; each block's
        # a and r are recomputed (+11 twice). Peak at gr1: x, o0, r1, go1, gr1 = 4+4+8+8+8.
        "nothing_saveable": ({"x", "o0", "o1"}, 32, 108),
        # megatron_selective: no attention, everything saved: the baseline.
        "megatron_selective": ({"x", "a0", "r0", "o0", "a1", "r1", "o1"}, 40, 86),
    }
    for rule, (kept, peak, duration) in expected.items():
        assert saved(g, rule) == kept, rule
        r = solve(g, rule=rule)
        sim = simulate(g, r.schedule)
        assert sim.valid and (sim.peak, sim.duration) == (peak, duration), rule
        assert r.status.value == "feasible" and r.objective == duration and r.stats["simulated_peak"] == peak
    # Only block 0 checkpointed (a regular expression over the module paths): a0 and r0 are recomputed
    # (+11); at gr1 the peak is x, o0, r1, go1, gr1 again.
    assert saved(g, "nothing_saveable", r"model\.blocks\.0") == {"x", "o0", "a1", "r1", "o1"}
    sim = simulate(g, solve(g, rule="nothing_saveable", block=r"model\.blocks\.0").schedule)
    assert (sim.peak, sim.duration) == (32, 97)


def test_hand_built_attention_each_rule_exactly():
    g = attention()
    assert [g.ids[v] for v in attention_core(g)] == ["s", "d", "f", "p"]  # the mask m is not
    assert (baseline(g).peak, baseline(g).duration) == (66, 129)
    # megatron_selective recomputes s, d, f, p (+13) before gf reads p; the peak is there, while
    # x, q, k, m, gc and gp are held beside the recomputed s and d: 4+4+4+2+4+16+16+16.
    assert saved(g, "megatron_selective") == {"x", "q", "k", "v", "m", "c", "o"}
    sim = simulate(g, solve(g, rule="megatron_selective").schedule)
    assert (sim.peak, sim.duration) == (66, 142)
    # dots_saveable keeps the scores s (a dot: JAX saves it too) and recomputes d, m, f, p from it and
    # x for gx (+5). Peak when f is computed, in the forward pass and again in the backward:
    # q, k, v, s, d, m, f = 4+4+4+16+16+2+16.
    assert saved(g, "dots_saveable") == {"q", "k", "v", "s", "c", "o"}
    sim = simulate(g, solve(g, rule="dots_saveable").schedule)
    assert (sim.peak, sim.duration) == (62, 134)


def test_the_budget_decides_the_status_not_the_schedule():
    g = two_blocks()
    for budget, status in ((None, "feasible"), (32, "feasible"), (31, "no_solution")):
        r = solve(g, budget, rule="nothing_saveable")
        assert r.status.value == status and simulate(g, r.schedule).peak == 32
    r = solve(g, 16, rule="nothing_saveable")
    assert r.message == ("the nothing_saveable rule's schedule peaks at 32, 2.00 times the budget 16 (the rule "
                         "saves what it saves whatever the budget)")
    # transient frees recomputed values after each use: here more recomputation and no lower peak,
    # so best keeps hold.
    assert simulate(g, solve(g, rule="nothing_saveable", lowering="transient").schedule).duration == 130
    assert solve(g, 40, rule="nothing_saveable", lowering="best").stats["lowering"] == "hold"


def test_block_containers_are_the_module_lists_holding_most_nodes():
    paths = ["model.tok", *[f"model.blocks.{i}.{p}" for i in range(3) for p in ("ln", "mlp.0", "mlp.1", "mlp.2")],
             "model.head"]
    assert block_container(paths) == "model.blocks"  # not model.blocks.<i>.mlp, with fewer nodes
    assert block_container(["model.stem.0", "model.stem.1", "model.head"]) == "model.stem"
    assert block_container(["model.a", "model.b", "model.layers.0"]) is None  # one child is no repetition
    with pytest.raises(MethodError, match="not a regular expression"):
        Policy.parse_params({"block": "model.(blocks"})


# ---------------------------------------------------------------------- unsupported graphs


def test_graphs_that_do_not_say_what_nodes_compute_are_skipped():
    g = chain(4)  # a generated training graph: ops such as 'relu', no module paths
    reason = get_method("policy").skip(g, None)
    assert reason is not None and "do not say what they compute" in reason and reason.count(". ") == 0
    assert run(g, "policy", "1.0", bound=False).status.value == "unsupported"
    # Aten operators but no module paths: the operator rules apply, per-block checkpointing does not.
    plain = Graph([Node(id=n.id, inputs=n.inputs, memory=n.memory, duration=n.duration, op=n.op, kind=n.kind)
                   for n in two_blocks().nodes], name="no-modules")
    assert Policy.skip(plain, None) is None and solve(plain).status.value == "feasible"
    r = solve(plain, rule="nothing_saveable")
    assert r.status.value == "unsupported" and "carry no module paths" in r.message
    # Module paths but no aten operators: the other way round.
    named = Graph([Node(id=n.id, inputs=n.inputs, memory=n.memory, duration=n.duration, op=n.op.split(".")[-2]
                        if n.op else "", kind=n.kind, metadata=n.metadata) for n in two_blocks().nodes], name="named")
    assert Policy.skip(named, None) is None and solve(named, rule="nothing_saveable").status.value == "feasible"
    r = solve(named, rule="megatron_selective")
    assert r.status.value == "unsupported" and "no aten operator" in r.message
    # A block pattern that matches nothing says so.
    r = solve(two_blocks(), rule="nothing_saveable", block=r"model\.layers\.\d+")
    assert r.status.value == "unsupported" and "block=REGEX" in r.message
