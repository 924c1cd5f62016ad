"""The method registry: built-in methods plus the ``remat_bench.methods`` entry-point group.

Built-in methods are named here by module path and imported only when used,
so that ``remat-bench methods`` works, and reports what is missing, even when
an optional solver is not installed.

A third-party package adds a method by declaring, in its pyproject.toml::

    [project.entry-points."remat_bench.methods"]
    mymethod = "mypackage.module:MyMethod"

where ``MyMethod`` subclasses `remat_bench.methods.base.Method`.
"""

from __future__ import annotations

import pkgutil
from importlib.metadata import entry_points

from remat_bench.core.errors import MethodError
from remat_bench.methods.base import Deadline, Method, MethodResult, Param, Status

__all__ = ["BUILTIN", "Deadline", "Method", "MethodResult", "Param", "Status", "all_methods", "get_method",
           "load_method", "method_names", "method_target", "unknown_method"]

# CLI name -> "module:Class", in the order `remat-bench methods` lists them.
BUILTIN: dict[str, str] = {
    "none": "remat_bench.methods.none:NoRemat",
    "chen": "remat_bench.methods.chen:Chen",
    "greedy": "remat_bench.methods.greedy:Greedy",
    "dtr": "remat_bench.methods.dtr:DTR",
    "reorder": "remat_bench.methods.reorder:Reorder",
    "shave": "remat_bench.methods.shave:Shave",
    "checkmate": "remat_bench.methods.checkmate:Checkmate",
    "checkmate-lp": "remat_bench.methods.checkmate_lp:CheckmateLP",
    "checkmate-offload": "remat_bench.methods.checkmate_offload:CheckmateOffload",
    "moccasin": "remat_bench.methods.moccasin:Moccasin",
    "kusumoto": "remat_bench.methods.kusumoto:Kusumoto",
    "twremat": "remat_bench.methods.twremat:TWRemat",
    "fenghuang": "remat_bench.methods.fenghuang:FengHuang",
    "monet": "remat_bench.methods.monet:Monet",
    "knapsack": "remat_bench.methods.knapsack:Knapsack",
    "policy": "remat_bench.methods.policy:Policy",
    "torch-budget": "remat_bench.methods.torch_budget:TorchBudget",
    "rotor": "remat_bench.methods.rotor:Rotor",
    "rotor-offload": "remat_bench.methods.rotor_offload:RotorOffload",
    "offload-hide": "remat_bench.methods.offload_hide:OffloadHide",
    "offload-all": "remat_bench.methods.offload_all:OffloadAll",
}


def _load(target: str, name: str) -> type[Method]:
    try:
        cls = pkgutil.resolve_name(target)
    except ImportError as exc:  # an optional dependency imported at module level
        raise MethodError(f"method '{name}' cannot be loaded: {exc}") from None
    if not (isinstance(cls, type) and issubclass(cls, Method)):
        raise MethodError(f"method '{name}' ({target}) is not a remat_bench Method subclass")
    return cls


def _plugins() -> dict[str, str]:
    found = {}
    for ep in entry_points(group="remat_bench.methods"):
        if ep.name not in BUILTIN:
            found[ep.name] = ep.value
    return found


def method_target(name: str) -> str:
    """Where the method registered as ``name`` lives ("module:Class"): a child process given it loads
    the same class (`load_method`), whatever the registry there says.

    Parameters
    ----------
    name : str
        A registered method name (built-in or entry point).

    Returns
    -------
    str
        The target, "module:Class".

    Raises
    ------
    MethodError
        ``name`` is not registered (the sentence lists the known names).
    """
    target = BUILTIN.get(name) or _plugins().get(name)
    if target is None:
        get_method(name)  # raises, naming the known methods
    assert target is not None
    return target


def load_method(target: str, name: str) -> type[Method]:
    """The method class at ``target`` ("module:Class"), registered as ``name``.

    Parameters
    ----------
    target : str
        Where the class lives, "module:Class" (as `method_target` gives it).
    name : str
        The name it is registered as, for the error.

    Returns
    -------
    type of Method

    Raises
    ------
    MethodError
        The module cannot be imported (an optional dependency missing), or the attribute is not a
        `Method` subclass.
    """
    return _load(target, name)


def get_method(name: str) -> type[Method]:
    """The method class registered as ``name``; an unknown name lists the known ones.

    Parameters
    ----------
    name : str
        A method name, as on the command line (``checkmate-lp``).

    Returns
    -------
    type of Method

    Raises
    ------
    MethodError
        ``name`` is not registered (with the closest name suggested), or its class cannot be loaded.
    """
    target = BUILTIN.get(name) or _plugins().get(name)
    if target is None:
        raise unknown_method(name, method_names())
    return _load(target, name)


def unknown_method(name: str, names: list[str]) -> MethodError:
    """The one sentence for a method name not among ``names``, with the closest one suggested.

    Parameters
    ----------
    name : str
        The name given.
    names : list of str
        The names known, in the order the sentence lists them.

    Returns
    -------
    MethodError
        The error, for the caller to raise.
    """
    import difflib

    close = difflib.get_close_matches(name, names, n=1)
    hint = f"did you mean '{close[0]}'? " if close else ""
    return MethodError(f"unknown method '{name}'; {hint}known methods: {', '.join(names)}")


def method_names() -> list[str]:
    """Every registered method name, built-ins first.

    Returns
    -------
    list of str
        `BUILTIN`'s names in their order, then the entry points' that do not shadow one.
    """
    return [*BUILTIN, *_plugins()]


def all_methods() -> list[type[Method]]:
    """Every registered method class, built-ins first.

    Returns
    -------
    list of type of Method

    Raises
    ------
    MethodError
        A registered class cannot be loaded (an optional dependency imported at module level is missing).
    """
    return [get_method(name) for name in method_names()]
