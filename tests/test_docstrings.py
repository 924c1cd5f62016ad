"""Public functions are documented as numpydoc documents them: parameters and what is returned.

A public function is a module-level function or a method of a public class whose name has no leading
underscore. Not asked of: properties and their setters (their docstring says what they are), click commands (their
docstring is the --help text), and a method that overrides one documented on a class of the package
(``Method.solve`` is documented once, on the interface), where the override has no docstring of its own.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "remat_bench"


def _decorators(node: ast.FunctionDef) -> set[str]:
    names = set()
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        names.add(ast.unparse(target))
    return names


def _is_command(node: ast.FunctionDef) -> bool:
    return any(name.endswith((".command", ".group", "command", "group")) for name in _decorators(node))


def _classes() -> dict[str, ast.ClassDef]:
    """Every class of the package by name (a name defined twice keeps the first: none is)."""
    classes: dict[str, ast.ClassDef] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                classes.setdefault(node.name, node)
    return classes


def _documented_in_a_base(cls: ast.ClassDef, name: str, classes: dict[str, ast.ClassDef]) -> bool:
    """Whether a base class of ``cls`` in the package (followed upwards) documents method ``name``."""
    seen: set[str] = set()
    todo = [ast.unparse(b).rsplit(".", 1)[-1] for b in cls.bases]
    while todo:
        base = classes.get(todo.pop())
        if base is None or base.name in seen:
            continue
        seen.add(base.name)
        for item in base.body:
            if isinstance(item, ast.FunctionDef) and item.name == name and _complete(item):
                return True
        todo += [ast.unparse(b).rsplit(".", 1)[-1] for b in base.bases]
    return False


def _parameters(node: ast.FunctionDef) -> list[str]:
    arguments = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
    return [a.arg for a in arguments if a.arg not in ("self", "cls")]


def _returns_nothing(node: ast.FunctionDef) -> bool:
    return node.returns is not None and ast.unparse(node.returns) in ("None", "NoReturn")


def _complete(node: ast.FunctionDef) -> bool:
    doc = ast.get_docstring(node) or ""
    if not doc:
        return False
    if _parameters(node) and "Parameters\n" not in doc:
        return False
    return _returns_nothing(node) or any(s in doc for s in ("Returns\n", "Yields\n"))


def _exempt_method(function: ast.FunctionDef, owner: ast.ClassDef, classes: dict[str, ast.ClassDef]) -> bool:
    """A property or its setter, or an override without a docstring of a method a base class documents."""
    decorators = _decorators(function)
    if {"property", "cached_property", "functools.cached_property"} & decorators:
        return True
    if any(d.endswith(".setter") for d in decorators):
        return True
    return not ast.get_docstring(function) and _documented_in_a_base(owner, function.name, classes)


def undocumented() -> list[str]:
    classes = _classes()
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in tree.body:
            functions: list[tuple[ast.FunctionDef, ast.ClassDef | None]] = []
            if isinstance(node, ast.FunctionDef):
                functions.append((node, None))
            elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                functions += [(n, node) for n in node.body if isinstance(n, ast.FunctionDef)]
            for function, owner in functions:
                if function.name.startswith("_") or _is_command(function):
                    continue
                if owner is not None and _exempt_method(function, owner, classes):
                    continue
                if not _complete(function):
                    where = f"{path.relative_to(PACKAGE.parent)}:{function.lineno}"
                    missing.append(f"{where} {function.name}")
    return missing


def test_public_functions_say_their_parameters_and_what_they_return():
    missing = undocumented()
    assert not missing, f"{len(missing)} public functions without numpydoc sections:\n" + "\n".join(missing)


if __name__ == "__main__":
    for line in undocumented():
        print(line)
