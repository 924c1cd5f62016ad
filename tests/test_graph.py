"""Graph loading and validation: every bad-input case of docs/design.md section 2."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from remat_bench.app.cli import main
from remat_bench.core.errors import GraphError
from remat_bench.core.graph_io import graph_from_data, load_graph, save_graph
from tests.helpers import paper_graph


def doc(nodes, **extra):
    return {"format": "remat-bench-graph", "version": 1, "name": "t", "nodes": nodes, **extra}


def node(id, inputs=(), memory=1, duration=1, **extra):
    return {"id": id, "inputs": list(inputs), "memory": memory, "duration": duration, **extra}


GOOD = doc([node("a"), node("b", ["a"]), node("c", ["a", "b"])])

BAD_CASES = {
    "malformed": ('{"format": "remat-bench-graph",\n "nodes": [}', "line 2, column 12"),
    "nan": ('{"format": "remat-bench-graph", "version": 1, "nodes": [{"id": "a", "inputs": [], '
            '"memory": NaN, "duration": 1}]}', "NaN is not a valid JSON number at line 1"),
    "missing_field": (doc([node("a"), {"id": "b", "inputs": ["a"], "duration": 1}]),
                      "node 'b' (nodes[1]) is missing the required field 'memory'"),
    "mistyped_field": (doc([node("a"), node("b", ["a"], memory="big")]),
                       "node 'b' (nodes[1]), field memory must be a number, not a string"),
    "mistyped_inputs": (doc([node("a"), {**node("b"), "inputs": "a"}]),
                        "node 'b' (nodes[1]), field inputs must be an array"),
    "unknown_field": (doc([node("a", colour="red")]), "node 'a' (nodes[0]) has an unknown field 'colour'"),
    "duplicate_id": (doc([node("a"), node("b", ["a"]), node("a")]),
                     "node id 'a' appears twice (nodes[0] and nodes[2])"),
    "unknown_input": (doc([node("a"), node("b", ["zz"])]),
                      "node 'b' lists input 'zz', which is not a node of the graph"),
    "cycle": (doc([node("a", ["c"]), node("b", ["a"]), node("c", ["b"])]), "cycle: 'a' -> 'b' -> 'c' -> 'a'"),
    "self_loop": (doc([node("a", ["a"])]), "cycle: 'a' -> 'a'"),
    "not_topological": (doc([node("b", ["a"]), node("a")]),
                        "node 'b' (nodes[0]) uses 'a', which is listed after it"),
    "negative_memory": (doc([node("a", memory=-5)]), "node 'a' (nodes[0]), field memory is negative (-5)"),
    "negative_workspace": (doc([node("a", workspace=-1)]), "field workspace is negative"),
    "empty": (doc([]), "the graph has no nodes"),
    "wrong_format": ({"format": "something-else", "nodes": []}, "'format' is 'something-else'"),
    "not_an_object": ([1, 2], "expected a JSON object at the top level, found an array"),
    "neither_format": ({"hello": 1}, "neither a remat-bench graph"),
    "unknown_output": (doc([node("a")], outputs=["zz"]), "'outputs' names 'zz'"),
    "unknown_grad_of": (doc([node("a", kind="backward", grad_of="zz")]), "grad_of 'zz'"),
    "bad_kind": (doc([node("a", kind="sideways")]), "kind is \"sideways\""),
}


@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_bad_graph_gets_one_sentence_and_exit_2(case, tmp_path):
    content, fragment = BAD_CASES[case]
    path = tmp_path / f"{case}.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    with pytest.raises(GraphError) as info:
        load_graph(path)
    message = str(info.value)
    assert message.startswith(str(path))
    assert fragment in message
    assert "\n" not in message

    result = CliRunner().invoke(main, ["graphs", "validate", str(path)])
    assert result.exit_code == 2
    assert fragment in result.output
    assert "Traceback" not in result.output


def test_missing_file_and_folder(tmp_path):
    result = CliRunner().invoke(main, ["graphs", "validate", str(tmp_path / "nope.json")])
    assert result.exit_code == 2
    assert "no such file" in result.output
    result = CliRunner().invoke(main, ["graphs", "show", str(tmp_path)])
    assert result.exit_code == 2


def test_a_device_or_a_pipe_is_refused_unread_as_graph_and_schedule(tmp_path):
    # /dev/zero was read until memory ran out (a MemoryError traceback), a pipe with no writer blocked.
    import os

    os.mkfifo(tmp_path / "pipe.json")
    shipped = "graphs/chain-16-train.json"
    for args in (["/dev/zero", "/dev/zero"], [str(tmp_path / "pipe.json"), "x.json"], [shipped, "/dev/urandom"]):
        result = CliRunner().invoke(main, ["simulate", *args])
        bad = next(a for a in args if a != shipped)
        assert result.exit_code == 2 and result.output == (f"error: {bad}: is a device, pipe or socket, not a regular "
                                                           "file, and is not read (it could never end)\n")


def test_good_graph_round_trips_with_same_hash(tmp_path):
    g = graph_from_data(GOOD)
    save_graph(g, tmp_path / "g.json")
    again = load_graph(tmp_path / "g.json")
    assert again.sha256 == g.sha256
    assert again.to_dict()["nodes"] == g.to_dict()["nodes"]
    assert g.outputs == ["c"]  # default: nodes without consumers


def test_duplicate_inputs_are_read_once():
    g = graph_from_data(doc([node("a", memory=3), node("b", ["a", "a"], memory=1)]))
    assert g.inputs[1] == (0,)


def test_checkmate_nodelink_gives_kinds_and_grad_of():
    g = load_graph(paper_graph("checkmate_vgg16_train"))
    i = g.index["block1_conv2_backward"]
    assert g.nodes[i].kind == "backward"
    assert g.nodes[i].grad_of == "block1_conv2"
    assert g.nodes[g.index["Loss"]].kind == "backward"
    assert g.nodes[g.index["fc1"]].kind == "forward"
    assert len(g.forward_indices) == 22


def test_moccasin_nodelink_follows_graph_order():
    raw = json.loads((paper_graph("random_layered_n100")).read_text())
    g = load_graph(paper_graph("random_layered_n100"))
    assert g.ids == [str(k) for k in raw["graph"]["order"]]
    assert not g.has_backward
    assert g.memory[g.index["0"]] == 790


def test_import_converts_nodelink_and_refuses_to_overwrite_foreign_files(tmp_path):
    out = tmp_path / "vgg.json"
    runner = CliRunner()
    result = runner.invoke(main, ["graphs", "import", str(paper_graph("checkmate_vgg16_train")), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert load_graph(out).sha256 == load_graph(paper_graph("checkmate_vgg16_train")).sha256
    notes = tmp_path / "notes.json"
    notes.write_text('{"mine": true}')
    result = runner.invoke(main, ["graphs", "import", str(paper_graph("checkmate_vgg16_train")), "-o", str(notes)])
    assert result.exit_code == 2
    assert "only replaces files it wrote" in result.output
    assert notes.read_text() == '{"mine": true}'


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.floats(-2, 2, allow_nan=False) | st.text(max_size=3),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=3), children, max_size=3),
    max_leaves=6,
)
field_values = st.one_of(json_values, st.integers(0, 5), st.sampled_from(["forward", "backward", "x", ""]),
                         st.lists(st.sampled_from(["a", "b"]), max_size=2))


@st.composite
def near_graph_docs(draw):
    """Documents close to valid graphs: valid fields, with some swapped for arbitrary JSON."""
    def maybe(value):
        return draw(field_values) if draw(st.integers(0, 9)) == 0 else value

    def node(i):
        d = {"id": maybe(f"n{i}"), "inputs": maybe([]), "memory": maybe(1), "duration": maybe(2)}
        for key in ("op", "kind", "grad_of", "workspace", "metadata", "colour"):
            if draw(st.integers(0, 6)) == 0:
                d[key] = draw(field_values)
        if draw(st.integers(0, 5)) == 0:
            d["implementations"] = maybe([{"name": maybe("x"), "duration": maybe(1)}])
        return d

    doc = {"format": maybe("remat-bench-graph"), "version": maybe(1),
           "nodes": maybe([node(i) for i in range(draw(st.integers(0, 3)))])}
    for key in ("name", "units", "fixed_memory", "outputs", "metadata", "extra"):
        if draw(st.integers(0, 4)) == 0:
            doc[key] = draw(field_values)
    return doc


@settings(max_examples=500, deadline=None)
@given(near_graph_docs())
def test_fast_schema_check_is_never_looser_than_jsonschema(doc):
    import jsonschema

    from remat_bench.core.graph_io import fast_schema_ok
    from remat_bench.core.json_files import schema

    if fast_schema_ok(doc):
        assert not list(jsonschema.Draft202012Validator(schema("graph")).iter_errors(doc))
