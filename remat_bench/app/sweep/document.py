"""The YAML node tree of a sweep config, and errors that name its lines.

A config is read as a node tree (`yaml.compose`), which keeps every node's
position, so that each problem becomes one `ConfigError` sentence naming the
file and the line (`error_at`). The tree is checked before any value is built: a
tag other than plain values, a value that holds itself, and aliases expanding
beyond `MAX_VALUES` values are refused (`Document`); so is a file over
`MAX_CONFIG_BYTES` or one that is not a regular file.
"""

from __future__ import annotations

import difflib
import math
import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from remat_bench.core.errors import ConfigError

# What a config file may hold, checked before anything is built: the project aims at sweeps of thousands
# of runs, and these leave two orders of magnitude above the configs they take.
MAX_CONFIG_BYTES = 2**20
MAX_VALUES = 1_000_000  # YAML values after aliases are expanded ("billion laughs")
# An error message quotes at most this much of a value, and is at most MESSAGE_CHARS long.
QUOTE_CHARS = 60
MESSAGE_CHARS = 1000
# Tags of plain values: what yaml.safe_load builds, and merge keys. Any other tag (!!python/object/apply:...)
# is refused by name, rather than in PyYAML's four lines.
_PLAIN_TAGS = {tag for tag in yaml.SafeLoader.yaml_constructors if tag is not None} | {"tag:yaml.org,2002:merge"}
_YAML_TAG = "tag:yaml.org,2002:"
_VARIABLE = re.compile(r"\$(?:\{([^}]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


class Document:
    """The YAML node tree of one config file, and errors that name its lines."""

    def __init__(self, path: Path) -> None:
        self.path = path
        text = _read_config(path)
        self.loader = yaml.SafeLoader(text)
        try:
            self.root = self.loader.get_single_node()
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            where = f", line {mark.line + 1}" if mark is not None else ""
            raise ConfigError(_capped(f"{path}{where}: not valid YAML: {exc.problem or exc.context}")) from None
        except yaml.YAMLError as exc:
            raise ConfigError(_capped(f"{path}: not valid YAML: {exc}")) from None
        except RecursionError:
            raise ConfigError(f"{path}: its lists or mappings are nested too deeply to read") from None
        if self.root is None:
            raise ConfigError(f"{path}: the config is empty; it needs at least graphs, methods and budgets")
        self._check_tree()

    def _check_tree(self) -> None:
        """Refuse tags that are not plain values, values that hold themselves, and aliases that expand
        beyond `MAX_VALUES` values, before any value is built. Iterative: a deep tree must not overflow
        Python's stack; each node's expanded size is counted once (an alias shares its anchor's node)."""
        size: dict[int, int] = {}
        open_nodes: set[int] = set()
        stack: list[tuple[yaml.Node, bool]] = [(self.root, False)]
        while stack:
            node, closing = stack.pop()
            key = id(node)
            if closing:
                open_nodes.discard(key)
                size[key] = 1 + sum(size[id(child)] for child in _children(node))
                if size[key] > MAX_VALUES:
                    raise self.error(node, f"this value expands to more than {MAX_VALUES:,} values through its "
                                           "aliases (*name); a config that large is refused")
                continue
            if key in size:
                continue
            if key in open_nodes:
                raise self.error(node, "this value contains itself through an alias (*name); a config must be "
                                       "finite")
            if node.tag not in _PLAIN_TAGS:
                tag = "!!" + node.tag[len(_YAML_TAG):] if node.tag.startswith(_YAML_TAG) else node.tag
                raise self.error(node, f"the tag {quote(tag)} is not allowed; a config holds plain values "
                                       "(text, numbers, lists and mappings)")
            open_nodes.add(key)
            stack.append((node, True))
            stack.extend((child, False) for child in _children(node))

    def error(self, node: yaml.Node, message: str) -> ConfigError:
        """The config's error at ``node``'s line (`error_at`).

        Parameters
        ----------
        node : yaml.Node
            Where the problem is.
        message : str
            What is wrong there, and what to do.

        Returns
        -------
        ConfigError
            For the caller to raise.
        """
        return error_at(self.path, node.start_mark.line + 1, message)

    def value(self, node: yaml.Node) -> Any:
        """The plain value ``node`` holds, built as `yaml.safe_load` builds it.

        Parameters
        ----------
        node : yaml.Node
            A node of the checked tree.

        Returns
        -------
        Any
            Text, a number, a bool, None, or lists and mappings of them.

        Raises
        ------
        ConfigError
            A value PyYAML cannot build, or an integer of more digits than Python converts.
        """
        try:
            return self.loader.construct_object(node, deep=True)
        except yaml.YAMLError as exc:
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            raise self.error(node, f"cannot read this value ({problem})") from None
        except ValueError as exc:  # an integer of more digits than Python converts
            raise self.error(node, f"cannot read this value ({exc})") from None

    def shown(self, node: yaml.Node) -> str:
        """A value as an error message quotes it: a scalar's text (cut short), else what kind of value it is.

        Parameters
        ----------
        node : yaml.Node
            The value.

        Returns
        -------
        str
            ``'text'`` (`quote`), ``a list`` or ``a mapping``.
        """
        if isinstance(node, yaml.ScalarNode):
            return quote(str(node.value))
        return "a list" if isinstance(node, yaml.SequenceNode) else "a mapping"

    def mapping(self, node: yaml.Node, what: str, allowed: tuple[str, ...]) -> dict[str, tuple[yaml.Node, yaml.Node]]:
        """``{key: (key_node, value_node)}``, refusing unknown and repeated keys.

        Parameters
        ----------
        node : yaml.Node
            The mapping.
        what : str
            What it is, for errors (``a graph entry``).
        allowed : tuple of str
            The keys it may have.

        Returns
        -------
        dict
            Each key's node and its value's node, in the config's order.

        Raises
        ------
        ConfigError
            Not a mapping, an unknown key (the closest allowed one suggested) or a key given twice.
        """
        if not isinstance(node, yaml.MappingNode):
            raise self.error(node, f"{what} must be a mapping of keys to values")
        out: dict[str, tuple[yaml.Node, yaml.Node]] = {}
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            if key not in allowed:
                close = difflib.get_close_matches(str(key)[:QUOTE_CHARS], allowed, n=1)
                hint = f" (did you mean '{close[0]}'?)" if close else ""
                raise self.error(key_node, f"unknown key {self.shown(key_node)} in {what}{hint}; the keys are "
                                           f"{', '.join(allowed)}")
            if key in out:
                raise self.error(key_node, f"key '{key}' appears twice in {what}")
            out[key] = (key_node, value_node)
        return out

    def items(self, node: yaml.Node, what: str) -> list[yaml.Node]:
        """A list's item nodes; a single scalar counts as a list of one.

        Parameters
        ----------
        node : yaml.Node
            The list, or one scalar.
        what : str
            Its key, for errors.

        Returns
        -------
        list of yaml.Node

        Raises
        ------
        ConfigError
            An empty list, or neither a list nor a scalar.
        """
        if isinstance(node, yaml.SequenceNode):
            if not node.value:
                raise self.error(node, f"'{what}' is empty; give at least one")
            return list(node.value)
        if isinstance(node, yaml.ScalarNode) and node.value != "":
            return [node]
        raise self.error(node, f"'{what}' must be a list")

    def number(self, node: yaml.Node, what: str, minimum: float, integer: bool = False,
               strict: bool = True) -> float:
        """A finite number above ``minimum`` (at least ``minimum`` when not ``strict``).

        Parameters
        ----------
        node : yaml.Node
            The value.
        what : str
            Its key, for errors.
        minimum : float
            The bound.
        integer : bool
            Whether it must be whole (then returned as an int).
        strict : bool
            Whether ``minimum`` itself is refused.

        Returns
        -------
        float
            An int when ``integer``.

        Raises
        ------
        ConfigError
            Not a number (a bool is not one), not finite, out of range, or not whole when it must be.
        """
        value = self.value(node)
        kind = "a whole number" if integer else "a number"
        ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and (
            value > minimum if strict else value >= minimum)
        if not ok or (integer and isinstance(value, float) and not value.is_integer()):
            relation = "above" if strict else "at least"
            raise self.error(node, f"'{what}' must be {kind} {relation} {minimum:g}, not {self.shown(node)}")
        return int(value) if integer else float(value)

    def text(self, node: yaml.Node, what: str) -> str:
        """A non-empty scalar's text.

        Parameters
        ----------
        node : yaml.Node
            The value.
        what : str
            Its key, for errors.

        Returns
        -------
        str

        Raises
        ------
        ConfigError
            A list, a mapping or an empty value.
        """
        if not isinstance(node, yaml.ScalarNode) or node.value == "":
            raise self.error(node, f"'{what}' must be a text value")
        return str(node.value)

    def expand_path(self, node: yaml.Node, text: str, env: Mapping[str, str]) -> str:
        """``${VAR}``/``$VAR`` and ``~`` expanded, relative to the config file's folder.

        Parameters
        ----------
        node : yaml.Node
            Where the path is written, for errors.
        text : str
            The path as written.
        env : Mapping
            The variables it may name.

        Returns
        -------
        str
            An absolute path.

        Raises
        ------
        ConfigError
            A variable not set in ``env``.
        """
        for match in _VARIABLE.finditer(text):
            name = match.group(1) if match.group(1) is not None else match.group(2)
            if name not in env:
                raise self.error(node, f"environment variable {quote(name)[1:-1]} is not set (used in "
                                       f"{quote(text)}); set it, e.g. `export {quote(name)[1:-1]}=...`")
        expanded = _VARIABLE.sub(lambda m: env[m.group(1) if m.group(1) is not None else m.group(2)], text)
        expanded = os.path.expanduser(expanded)
        if not os.path.isabs(expanded):
            expanded = os.path.join(self.path.parent, expanded)
        # Absolute: runs and results read it from other folders (a config named by a relative path
        # gave paths relative to where the sweep started, which charts then read against the results).
        return os.path.abspath(expanded)


def _read_config(path: Path) -> str:
    """The config's text; refuses what is not a regular file (a device never ends) or is over the size cap."""
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            what = "a folder" if stat.S_ISDIR(info.st_mode) else "a device, pipe or socket"
            raise ConfigError(f"{path}: is not a config file ({what}); give a YAML file")
        if info.st_size > MAX_CONFIG_BYTES:
            raise ConfigError(f"{path}: is {info.st_size:,} bytes, more than the {MAX_CONFIG_BYTES:,} a config may "
                              "be; split it into several sweeps")
        with open(path, "rb") as fh:
            data = fh.read(MAX_CONFIG_BYTES + 1)
        return data.decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such config file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot be read ({exc})") from None


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [item for pair in node.value for item in pair]
    return []


def quote(text: str) -> str:
    """``'text'``, cut to `QUOTE_CHARS` characters: an error message names a value, it does not repeat it.

    Parameters
    ----------
    text : str
        The value as the config wrote it.

    Returns
    -------
    str
        Its ``repr``, cut short with ``...``.
    """
    return repr(text if len(text) <= QUOTE_CHARS else text[:QUOTE_CHARS - 3] + "...")


def _capped(message: str) -> str:
    """At most `MESSAGE_CHARS` characters, keeping the start (where) and the end (what to do)."""
    if len(message) <= MESSAGE_CHARS:
        return message
    half = MESSAGE_CHARS // 2 - 3
    return f"{message[:half]} ... {message[-half:]}"


def error_at(path: Path, line: int, message: str) -> ConfigError:
    """The one error of a config: ``<path>, line <line>: <message>``, at most `MESSAGE_CHARS` long.

    Parameters
    ----------
    path : Path
        The config file.
    line : int
        Its line, from 1.
    message : str
        What is wrong there, and what to do.

    Returns
    -------
    ConfigError
        For the caller to raise.
    """
    return ConfigError(_capped(f"{path}, line {line}: {message}"))

