"""The package's layers (docs/design.md, "Layers"): every import points down, and no modules import in a circle.

The imports are read from the source with `ast`, every one of them: at module
level and inside functions (a lazy import is still a dependency, and a circle
through one is still a circle).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import networkx as nx

PACKAGE = Path(__file__).resolve().parents[1] / "remat_bench"

# Which layers each layer may import (itself included). The model at the bottom, the
# application at the top; graph generators, PyTorch and the solver toolkit stand on the
# model alone; methods on the toolkit and the model.
ALLOWED = {
    "core": {"core"},
    "toolkit": {"core", "toolkit"},
    "generators": {"core", "generators"},
    # torch.compiled lowers a schedule's saved set with the shared lowering (toolkit.lowering): what runs
    # under torch.compile, scored as torch-budget scores PyTorch's own partitions. The toolkit imports no torch.
    "torch": {"core", "toolkit", "torch"},
    # torch-budget runs PyTorch's partitioner (remat_bench.torch.partition), imported inside its solve.
    "methods": {"core", "toolkit", "methods", "torch"},
    "app": {"core", "toolkit", "generators", "torch", "methods", "app"},
    "__main__": {"app"},
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "root"


# "remat_bench.methods.greedy:Greedy": a class named by its place, imported when the string is used
# (the method registry's entries); such a string is an import like any other.
TARGET = re.compile(r"^(remat_bench(?:\.\w+)+):\w+$")


def imports_of(path: Path) -> set[str]:
    """The remat_bench modules a file imports, resolved to module names (a name taken from a package
    counts as that package's submodule when one of that name exists), and those it names by string
    ("module:Class", as the registry does)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and (match := TARGET.match(node.value)):
            found.add(match.group(1))
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("remat_bench"))
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("remat_bench"):
            for alias in node.names:
                candidate = f"{node.module}.{alias.name}"
                found.add(candidate if candidate in MODULES else node.module)
    return found


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}
GRAPH = nx.DiGraph()
for _name, _path in MODULES.items():
    GRAPH.add_node(_name)
    for _target in imports_of(_path):
        if _target in MODULES and _target != _name:
            GRAPH.add_edge(_name, _target)


def test_the_package_has_the_layers_the_design_names():
    assert {layer(m) for m in MODULES} == {"root", *ALLOWED}
    flat = [m for m in MODULES if layer(m) == "root" and m != "remat_bench"]
    assert flat == [], "modules belong in a layer's folder"


def test_every_import_points_down_or_stays_in_its_layer():
    upward = []
    for source, target in GRAPH.edges:
        if layer(target) == "root":  # the package itself: its __version__
            continue
        if layer(target) not in ALLOWED.get(layer(source), set()):
            upward.append(f"{source} -> {target}")
    assert upward == []


def test_methods_share_work_through_candidates_never_by_importing_each_other():
    from remat_bench.methods import BUILTIN

    method_modules = {target.split(":")[0] for target in BUILTIN.values()}
    assert "remat_bench.methods.greedy" in method_modules
    crossing = [f"{s} -> {t}" for s, t in GRAPH.edges if s in method_modules and t in method_modules]
    assert crossing == []


def test_no_modules_import_each_other_in_a_circle():
    circles = [sorted(c) for c in nx.strongly_connected_components(GRAPH) if len(c) > 1]
    assert circles == []


def test_only_the_evaluation_path_catches_what_a_method_raises():
    """Issue 31: one function turns a method's exceptions into results (`remat_bench.app.evaluate._call`);
    no method and not the portfolio catches everything (``except Exception``, ``BaseException``, bare)."""
    broad = []
    for name, path in MODULES.items():
        if layer(name) != "methods" and name != "remat_bench.app.portfolio":
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ExceptHandler):
                caught = node.type
                names = [caught] if not isinstance(caught, ast.Tuple) else list(caught.elts)
                if caught is None or any(isinstance(n, ast.Name) and n.id in ("Exception", "BaseException")
                                         for n in names):
                    broad.append(f"{name}:{node.lineno}")
    assert broad == []


def test_the_reader_sees_strings_that_name_a_class_by_its_place():
    assert "remat_bench.methods.greedy" in imports_of(PACKAGE / "methods" / "__init__.py")
    assert GRAPH.has_edge("remat_bench.methods", "remat_bench.methods.moccasin")


def test_the_reader_sees_real_imports():
    # The walker itself: it must see a lazy import inside a function, and a module taken from a package.
    assert "remat_bench.core.graph" in imports_of(PACKAGE / "core" / "budget.py")
    assert GRAPH.has_edge("remat_bench.app.cli.solve", "remat_bench.app.pipeline")
    assert len(GRAPH.edges) > 100


def test_the_bound_cache_stands_apart_from_the_bound_and_from_the_environment():
    """Issue 31: the bound's mathematics (toolkit/bound.py) imports no cache; methods see the bounds through
    the `BoundSource` protocol (only `methods.base` makes a default, in-memory cache); and which folder the
    cache uses is read from the environment by the application alone, never by the toolkit or a method."""
    assert not GRAPH.has_edge("remat_bench.toolkit.bound", "remat_bench.toolkit.bound_cache")
    users = sorted(s for s, t in GRAPH.edges if t == "remat_bench.toolkit.bound_cache" and layer(s) == "methods")
    assert users == ["remat_bench.methods.base"]
    reading = []
    for name, path in MODULES.items():
        if layer(name) not in ("toolkit", "methods"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv"):
                reading.append(f"{name}:{node.lineno}")
    assert reading == []
