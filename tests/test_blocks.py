"""Repeated blocks: found from the graph's structure, checked wiring and all."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from remat_bench.core.graph import Graph, Node
from remat_bench.generators.architectures import transformer
from remat_bench.toolkit.blocks import find_blocks


@pytest.mark.parametrize("layers", [2, 5, 12])
def test_a_generated_transformer_is_its_layers(layers):
    g = transformer(layers=layers, width=64, seq=16, batch=2, heads=4, vocab=100)
    blocks = find_blocks(g)
    assert blocks is not None
    # Twelve forward nodes per layer (ln1 .. add2); the first layer reads the embedding, which its
    # copies read shifted by one layer (the previous layer's add2), so every layer is a copy.
    assert (blocks.period, blocks.copies) == (12, layers)
    forward = g.forward_indices
    assert blocks.covered == 12 * layers and len(forward) == 12 * layers + 3  # embed, ln_f, logits
    for b in range(layers):
        inside = [g.ids[v] for v in forward if blocks.block[v] == b]
        assert inside[0] == f"layer{b + 1}.ln1" and len(inside) == 12
        assert {name.split(".", 1)[0] for name in inside} == {f"layer{b + 1}"}
    assert (blocks.block[g.backward_indices] == -1).all()


def test_the_classes_group_one_place_of_every_block_and_leave_the_rest_alone():
    g = transformer(layers=3, width=64, seq=16, batch=2, heads=4, vocab=100)
    blocks = find_blocks(g)
    classes = blocks.classes(g.forward_indices)
    assert sorted(v for c in classes for v in c) == sorted(g.forward_indices)
    places = [c for c in classes if len(c) > 1]
    assert len(places) == 12 and all(len(c) == 3 for c in places)
    for c in places:
        names = {g.ids[v].split(".", 1)[1] for v in c}
        assert len(names) == 1  # layer1.gelu, layer2.gelu, layer3.gelu
    singles = [g.ids[c[0]] for c in classes if len(c) == 1]
    assert singles == ["embed", "ln_f", "logits"]


def chain_of_blocks(copies: int, rewire: int | None = None, heavier: int | None = None) -> Graph:
    """Copies of a three-node block a -> b -> c with a skip a -> c; block k's a reads block k-1's c.
    ``rewire``: that copy's c skips from the previous copy's a instead. ``heavier``: that copy's b is larger."""
    nodes = [Node("x", (), memory=4, duration=1, op="input")]
    prev = "x"
    for k in range(copies):
        skip = f"a{k - 1}" if rewire == k else f"a{k}"
        nodes += [Node(f"a{k}", (prev,), memory=2, duration=3, op="mm"),
                  Node(f"b{k}", (f"a{k}",), memory=5 if heavier == k else 2, duration=1, op="relu"),
                  Node(f"c{k}", (f"b{k}", skip), memory=2, duration=1, op="add")]
        prev = f"c{k}"
    return Graph(nodes, name="blocks")


def test_copies_that_look_alike_but_are_wired_otherwise_are_not_the_same_block():
    assert find_blocks(chain_of_blocks(6)).copies == 6
    # Copy 4 reads like the others operator by operator, but its skip comes from copy 3: the run of
    # identical copies is 0..3 (copies 4 and 5 read alike each other, a shorter run).
    blocks = find_blocks(chain_of_blocks(6, rewire=4))
    assert (blocks.period, blocks.copies) == (3, 4)
    g = chain_of_blocks(6, rewire=4)
    assert [g.ids[v] for v in np.flatnonzero(blocks.block == 0)] == ["a0", "b0", "c0"]


def test_a_copy_of_other_sizes_ends_the_run():
    g = chain_of_blocks(7, heavier=2)
    blocks = find_blocks(g)
    # Copies 3..6 are the longest run of equal copies.
    assert (blocks.period, blocks.copies) == (3, 4)
    assert [g.ids[v] for v in np.flatnonzero(blocks.block == 0)] == ["a3", "b3", "c3"]


def test_no_repetition_no_blocks():
    nodes = [Node("n0", (), memory=1, duration=1, op="op0")]
    nodes += [Node(f"n{i}", (f"n{i - 1}",), memory=i + 1, duration=1, op=f"op{i}") for i in range(1, 9)]
    assert find_blocks(Graph(nodes, name="distinct")) is None
    assert find_blocks(Graph(nodes[:3], name="tiny")) is None


def test_only_forward_nodes_are_placed():
    g = transformer(layers=2, width=64, seq=16, batch=2, heads=4, vocab=100)
    # The same graph with its forward nodes' metadata dropped reads the same: blocks come from structure.
    bare = Graph([dataclasses.replace(node, metadata=None) for node in g.nodes], name="bare")
    a, b = find_blocks(g), find_blocks(bare)
    assert (a.period, a.copies) == (b.period, b.copies)
    assert np.array_equal(a.position, b.position)


def test_copies_timed_apart_are_still_one_block():
    # A calibrated import times every node on its own: the copies of one layer differ in duration by noise.
    g = chain_of_blocks(5)
    nodes = [dataclasses.replace(node, duration=10 * node.duration + k % 4) for k, node in enumerate(g.nodes)]
    assert find_blocks(Graph(nodes, name="timed")).copies == 5  # within 1.3x of each other
    # Twice as long (weights are no nodes: a convolution reading twice the channels tells only by its time).
    nodes = [dataclasses.replace(node, duration=2 * node.duration if node.id == "a2" else node.duration)
             for node in g.nodes]
    blocks = find_blocks(Graph(nodes, name="timed"))
    # Copy 2 reads like neither neighbour: the runs of like copies are 0..1 and 3..4, the first kept.
    assert (blocks.period, blocks.copies) == (3, 2)
    assert [g.ids[v] for v in np.flatnonzero(blocks.block == 0)] == ["a0", "b0", "c0"]


@pytest.mark.parametrize("steps,layers", [(6, 1), (8, 2)])
def test_an_unrolled_recurrent_network_is_its_time_steps(steps, layers):
    # Every step reads the one input and the step before's hidden states; the first step reads no hidden
    # state (zero), so it is not a copy of the others.
    from remat_bench.generators import generate

    g = generate("recurrent", seq=steps, layers=layers, batch=2, width=8)
    blocks = find_blocks(g)
    assert (blocks.period, blocks.copies) == (1 + 2 * layers, steps - 1)
    assert g.ids[int(np.flatnonzero(blocks.block == 0)[0])] == "x1"
