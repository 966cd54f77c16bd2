"""The library's import graph has no cycles, down to single modules.

The layers contract (``pyproject.toml``, checked by ``lint-imports``) orders the
packages; this test also catches a cycle inside one package, including imports made
only for type checking or inside a function (either ties two modules together as much
as a top-level import does when one of them moves), and the package inits an import
runs: importing ``a.b.c`` first runs ``a/__init__`` and ``a/b/__init__``, so a module
importing ``ledger_gc.orphans.reading`` depends on whatever ``orphans/__init__``
imports (a Spark job once imported the whole orphan engine that way, and back).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grimp

import ledger_gc


def _packages_above(module: str) -> list[str]:
    """``a.b.c`` -> ``["a", "a.b"]``: the packages whose inits run before ``a.b.c``."""
    parts = module.split(".")
    return [".".join(parts[:n]) for n in range(1, len(parts))]


def _edges(graph: grimp.ImportGraph) -> dict[str, list[str]]:
    """Each module's imports, plus the package inits each import runs.

    An import of ``a.b.c`` runs ``a/__init__`` and ``a/b/__init__`` unless they are
    already running: a module's own packages started their inits before it did, so an
    import inside its own package adds no edge to them (``orphans.cycle`` importing
    ``orphans.report`` does not re-run ``orphans/__init__``).
    """
    edges: dict[str, list[str]] = {}
    for module in graph.modules:
        running = {module, *_packages_above(module)}
        targets = set(graph.find_modules_directly_imported_by(module))
        for imported in list(targets):
            targets.update(
                package
                for package in _packages_above(imported)
                if package not in running and package in graph.modules
            )
        edges[module] = sorted(targets)
    return edges


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected sets of more than one module (Tarjan, iterative)."""
    modules = sorted(graph.modules)
    edges = _edges(graph)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in modules:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack.add(node)
            targets = edges.get(node, [])
            if i < len(targets):
                work.append((node, i + 1))
                target = targets[i]
                if target not in index:
                    work.append((target, 0))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return found


def test_no_module_of_the_library_imports_itself_back_through_others() -> None:
    graph = grimp.build_graph("ledger_gc", cache_dir=None)  # never a stale cached graph
    cycles = _cycles(graph)
    assert cycles == [], "modules that import each other (package inits counted):\n" + (
        "\n".join(", ".join(cycle) for cycle in cycles)
    )


def test_a_package_init_imports_no_module_of_the_library() -> None:
    # STYLE.md: a package's __init__ names the package and exports little. An init that
    # imports its engine makes every import of one of its modules import the whole
    # engine (and, from below, import it back).
    root = Path(ledger_gc.__file__).parent
    graph = grimp.build_graph("ledger_gc", cache_dir=None)
    heavy = {}
    for init in sorted(root.rglob("__init__.py")):
        package = ".".join(("ledger_gc", *init.parent.relative_to(root).parts))
        imported = sorted(graph.find_modules_directly_imported_by(package))
        if imported:
            heavy[package] = imported
    assert heavy == {}


#: Imports every module of the library as the first one of it a process imports (what a
#: Spark executor or ``spark-submit`` does with one job's module), in one interpreter:
#: the library's modules are forgotten before each, the third-party ones stay loaded.
_FIRST_IMPORTS = """
import importlib, pkgutil, sys
import ledger_gc
names = sorted(m.name for m in pkgutil.walk_packages(ledger_gc.__path__, "ledger_gc."))
for name in names:
    if name == "ledger_gc.state.migrations.env":
        continue  # Alembic's script: it runs only inside Alembic's migration context
    for loaded in [m for m in sys.modules if m.split(".")[0] == "ledger_gc"]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except Exception as error:
        print(f"{name}: {type(error).__name__}: {error}")
"""


def test_every_module_imports_first_on_its_own() -> None:
    # A cycle that grimp sees is a cycle; this one sees what Python does with it: a job
    # module imported first (``import ledger_gc.spark.diff``) that re-enters itself half
    # initialised fails with ImportError.
    plugins = Path(ledger_gc.__file__).parent.parent
    result = subprocess.run(
        [sys.executable, "-c", _FIRST_IMPORTS],
        capture_output=True,
        text=True,
        check=True,
        cwd=plugins,
        timeout=120,
    )
    assert result.stdout == ""


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = grimp.ImportGraph()
    for name in ("p", "p.a", "p.b", "p.c"):
        graph.add_module(name)
    graph.add_import(importer="p.a", imported="p.b")
    graph.add_import(importer="p.b", imported="p.a")
    graph.add_import(importer="p.b", imported="p.c")
    assert _cycles(graph) == [["p.a", "p.b"]]


def test_the_cycle_finder_counts_the_package_inits_an_import_runs() -> None:
    # q/__init__ imports q.engine, which imports p.job; p.job imports q.leaf, and
    # importing q.leaf runs q/__init__ first: p.job -> q -> q.engine -> p.job.
    graph = grimp.ImportGraph()
    for name in ("p", "p.job", "q", "q.engine", "q.leaf"):
        graph.add_module(name)
    graph.add_import(importer="q", imported="q.engine")
    graph.add_import(importer="q.engine", imported="p.job")
    graph.add_import(importer="q.engine", imported="q.leaf")
    graph.add_import(importer="p.job", imported="q.leaf")
    assert _cycles(graph) == [["p.job", "q", "q.engine"]]


def test_an_import_inside_its_own_package_runs_no_init_again() -> None:
    graph = grimp.ImportGraph()
    for name in ("q", "q.engine", "q.leaf"):
        graph.add_module(name)
    graph.add_import(importer="q", imported="q.engine")
    graph.add_import(importer="q.engine", imported="q.leaf")
    assert _cycles(graph) == []
