"""Reading the package's JSON files, graphs and schedules alike: text, parse, schema.

`read_text` takes a regular file's UTF-8 text, `parse_json` parses it with
errors of one sentence (line and column; NaN and Infinity refused), `schema`
returns a shipped JSON Schema, and `describe_schema_error` turns the error
jsonschema chose into one sentence that names the node or step by its id.
"""

from __future__ import annotations

import gc
import json
import re
from importlib import resources
from pathlib import Path
from typing import Any

from remat_bench.core.errors import GraphError
from remat_bench.core.files import read_regular

_SCHEMA_CACHE: dict[str, Any] = {}


def schema(kind: str = "graph") -> dict[str, Any]:
    """The JSON Schema shipped with the package (``graph`` or ``schedule``).

    Parameters
    ----------
    kind : str
        ``graph`` or ``schedule``: the file ``<kind>.schema.json`` of ``remat_bench.core.schema``.

    Returns
    -------
    dict
        The parsed schema, read once and shared by every later call (not to be modified).
    """
    if kind not in _SCHEMA_CACHE:
        text = resources.files("remat_bench.core.schema").joinpath(f"{kind}.schema.json").read_text()
        _SCHEMA_CACHE[kind] = json.loads(text)
    return _SCHEMA_CACHE[kind]


_NON_FINITE = re.compile(r"(?<![\w\"])(-?Infinity|NaN)(?![\w\"])")


def parse_json(text: str, source: str, error: type[Exception] = GraphError) -> Any:
    """json.loads with one-sentence errors (line and column) and no NaN or Infinity.

    Parameters
    ----------
    text : str
        The JSON document.
    source : str
        What the document is called in an error (its path).
    error : type of Exception
        The error raised for a document that cannot be read (`GraphError`, `ScheduleError`).

    Returns
    -------
    Any
        The parsed value.

    Raises
    ------
    error
        Invalid JSON (with its line and column), a non-finite number, or nesting too deep to read.
    """

    def reject(constant: str) -> Any:
        raise ValueError(constant)

    # The cyclic garbage collector would scan the millions of lists a schedule's steps make
    # while they are built, a multiple of the parse time (docs/benchmarks.md, "Reading a schedule
    # file"); none of them can form a cycle.
    enabled = gc.isenabled()
    gc.disable()
    try:
        return json.loads(text, parse_constant=reject)
    except json.JSONDecodeError as exc:
        raise error(
            f"{source}: not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from None
    except ValueError as exc:
        match = _NON_FINITE.search(text)
        where = ""
        if match:
            line = text.count("\n", 0, match.start()) + 1
            col = match.start() - (text.rfind("\n", 0, match.start()) + 1) + 1
            where = f" at line {line}, column {col}"
        raise error(f"{source}: {exc} is not a valid JSON number{where}; numbers must be finite") from None
    except RecursionError:
        raise error(f"{source}: the JSON nests too deeply to be read (remat-bench files nest a few levels)") \
            from None
    finally:
        if enabled:
            gc.enable()


def read_text(path: str | Path, error: type[Exception] = GraphError) -> str:
    """The UTF-8 text of ``path``, a byte-order mark dropped.

    Parameters
    ----------
    path : str or Path
        The file.
    error : type of Exception
        The error raised for a file that cannot be read (`GraphError`, `ScheduleError`).

    Returns
    -------
    str

    Raises
    ------
    error
        One sentence for a missing file, a folder, a device, pipe or socket (``/dev/zero`` would never end, a
        pipe with no writer would block), a file above `remat_bench.core.files.MAX_READ_BYTES`, a file that
        cannot be read, or bytes that are not UTF-8.
    """
    data = read_regular(path, error, hint="")
    try:
        # A byte-order mark (as some Windows editors write) is not part of the text.
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise error(f"{path}: is not UTF-8 text (bad byte at offset {exc.start})") from None


def describe_schema_error(error: Any, data: Any, item_word: str) -> str:
    """One sentence for a jsonschema error: where (node id or field path) and what.

    Parameters
    ----------
    error : jsonschema.ValidationError
        The error jsonschema's ``best_match`` chose.
    data : Any
        The document it was found in (to name a node or step by its id).
    item_word : str
        What an entry of ``nodes`` is called (``node``); entries of ``steps`` are steps.

    Returns
    -------
    str
        The sentence, without the file's name.
    """
    path = list(error.absolute_path)
    where = "the top level"
    # Name a node (or step) by its id where we can.
    if len(path) >= 2 and path[0] in ("nodes", "steps") and isinstance(path[1], int):
        item = data[path[0]][path[1]]
        label = item_word if path[0] == "nodes" else "step"
        if isinstance(item, dict) and isinstance(item.get("id"), str):
            where = f"{label} '{item['id']}' (nodes[{path[1]}])"
        else:
            where = f"{label} {path[0]}[{path[1]}]"
        rest = path[2:]
        if rest:
            where += ", field " + _field_path(rest)
    elif path:
        where = "field " + _field_path(path)

    v = error.validator
    inst = error.instance
    if v == "required":
        missing = [f for f in error.validator_value if not (isinstance(inst, dict) and f in inst)]
        return f"{where} is missing the required field '{missing[0] if missing else '?'}'"
    if v == "additionalProperties":
        extra = sorted(set(inst) - set(error.schema.get("properties", {}))) if isinstance(inst, dict) else []
        return f"{where} has an unknown field '{extra[0] if extra else '?'}'"
    if v == "type":
        want = error.validator_value
        want = " or ".join(want) if isinstance(want, list) else want
        return f"{where} must be {_article(want)}, not {json_type(inst)} ({json.dumps(inst)[:40]})"
    if v == "minimum":
        return f"{where} is negative ({inst}); sizes and costs must be >= 0"
    if v == "minItems" and path == ["nodes"]:
        return "the graph has no nodes"
    if v == "minItems":
        need = error.validator_value
        return f"{where} is an empty list; give at least {need} item{'' if need == 1 else 's'}"
    if v == "pattern" and len(path) == 3 and path[2] == "id":
        return (f"node nodes[{path[1]}] has an id with a control character ({json.dumps(inst)[:60]}); ids must be "
                "printable text")
    if v == "minLength":
        return f"{where} is empty"
    if v == "const":
        return f"{where} is {json.dumps(inst)}, expected {json.dumps(error.validator_value)}"
    if v == "enum":
        choices = ", ".join(json.dumps(c) for c in error.validator_value)
        return f"{where} is {json.dumps(inst)[:40]}; expected one of {choices}"
    return f"{where}: {error.message}"


def _field_path(parts: list[Any]) -> str:
    """``inputs[0]``, ``implementations[1].workspace``: names joined by dots, positions in brackets."""
    text = ""
    for p in parts:
        text += f"[{p}]" if isinstance(p, int) else (f".{p}" if text else str(p))
    return text


def _article(word: str) -> str:
    return ("an " if word[:1] in "aeiou" else "a ") + word


def json_type(value: Any) -> str:
    """What a parsed JSON value is, in words for an error: ``an object``, ``an array``, ``a number``...

    Parameters
    ----------
    value : Any
        A value as `json.loads` returns it.

    Returns
    -------
    str
        With its article; ``null`` for None, the Python type's name for anything else.
    """
    return {
        dict: "an object",
        list: "an array",
        str: "a string",
        bool: "a boolean",
        int: "a number",
        float: "a number",
        type(None): "null",
    }.get(type(value), type(value).__name__)
