"""The library's import graph has no cycles, down to single modules.

The layers contract (``pyproject.toml``, checked by ``lint-imports``) orders the
packages; this test also catches a cycle inside one package, including imports made
only for type checking or inside a function (either ties two modules together as much
as a top-level import does when one of them moves).
"""

from __future__ import annotations

import grimp


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected sets of more than one module (Tarjan, iterative)."""
    modules = sorted(graph.modules)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in modules}
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
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = grimp.ImportGraph()
    for name in ("p", "p.a", "p.b", "p.c"):
        graph.add_module(name)
    graph.add_import(importer="p.a", imported="p.b")
    graph.add_import(importer="p.b", imported="p.a")
    graph.add_import(importer="p.b", imported="p.c")
    assert _cycles(graph) == [["p.a", "p.b"]]
