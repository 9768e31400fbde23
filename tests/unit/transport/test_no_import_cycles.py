"""No module of ``fsm_consumer`` imports itself back, through any chain of imports.

The graph is read from the source with ``ast``, not from ``sys.modules``: an import under
``if TYPE_CHECKING:`` or inside a function never runs at import time, yet it is a dependency
all the same, and a cycle through it is the one that breaks first when someone moves it.

An edge is "module A names module B in an import". ``from pkg import x`` is an edge to the
submodule ``pkg.x`` when x is a module, else to ``pkg`` itself (its ``__init__``); importing a
submodule is not counted as importing its parent package, so a package ``__init__`` that
re-exports its submodules does not make every submodule part of a cycle.
"""

from __future__ import annotations

import ast
from collections import deque
from pathlib import Path

import fsm_consumer

Graph = dict[str, dict[str, int]]  # module -> {imported module: line of the first such import}


def package_modules(root: Path, package: str) -> dict[str, tuple[Path, bool]]:
    """Dotted name -> (file, is a package ``__init__``) for every .py file under ``root``, and for every C
    extension's source (``fetch/_cdecode.c``: a module that imports none of ours, built or not)."""
    modules = {}
    for path in sorted([*root.rglob("*.py"), *root.rglob("*.c")]):
        parts = [package, *path.relative_to(root).with_suffix("").parts]
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        modules[".".join(parts)] = (path, is_package)
    return modules


def _known(name: str, modules: dict[str, tuple[Path, bool]]) -> str | None:
    """``name`` or its longest prefix that is one of ours (None: another distribution's)."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def imports_of(name: str, modules: dict[str, tuple[Path, bool]]) -> dict[str, int]:
    path, is_package = modules[name]
    here = name if is_package else name.rpartition(".")[0]  # what a level-1 relative import means
    found: dict[str, int] = {}
    if path.suffix == ".c":
        return found

    def edge(target: str | None, line: int) -> None:
        if target is not None and target != name:
            found.setdefault(target, line)

    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                edge(_known(alias.name, modules), node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.split(".")
                if node.level - 1 > len(base) - 1:
                    raise AssertionError(f"{path}:{node.lineno}: relative import beyond the top package")
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                edge(sub if sub in modules else _known(source, modules), node.lineno)
    return found


def import_graph(root: Path, package: str) -> Graph:
    modules = package_modules(root, package)
    return {name: imports_of(name, modules) for name in modules}


def cycles(graph: Graph) -> list[list[str]]:
    """One cycle (first module repeated at the end) per strongly connected component that has one."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    counter = 0
    for start in sorted(graph):  # Tarjan, iteratively: import chains can be deep
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in graph:
                    continue
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return [_one_cycle(graph, set(c), c[0]) for c in sorted(components)]


def _one_cycle(graph: Graph, members: set[str], first: str) -> list[str]:
    """The shortest path from ``first`` back to itself inside its component."""
    previous: dict[str, str] = {}
    queue = deque([first])
    while queue:
        node = queue.popleft()
        for child in sorted(graph[node]):
            if child not in members:
                continue
            if child == first:
                path = [node]
                while path[-1] != first:
                    path.append(previous[path[-1]])
                return [first, *reversed(path[:-1]), first]
            if child not in previous:
                previous[child] = node
                queue.append(child)
    raise AssertionError(f"{first} is in a component but on no cycle")


def describe(graph: Graph, cycle: list[str]) -> str:
    return " -> ".join(f"{a} (line {graph[a][b]})" for a, b in zip(cycle, cycle[1:], strict=False)) + f" -> {cycle[-1]}"


# -- tests ---------------------------------------------------------------------------------------


def test_fsm_consumer_has_no_import_cycles():
    root = Path(fsm_consumer.__file__).parent
    graph = import_graph(root, "fsm_consumer")
    # The graph is the real one: the edges this test exists for are in it.
    assert len(graph) > 40
    assert "fsm_consumer.transport._settings" in graph["fsm_consumer.transport._connection"]
    assert "fsm_consumer.transport._settings" in graph["fsm_consumer.transport._kafka"]
    assert "fsm_consumer.transport._connection" in graph["fsm_consumer.transport._kafka"]
    found = cycles(graph)
    assert not found, "import cycles:\n" + "\n".join(describe(graph, c) for c in found)


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_detector_sees_type_checking_lazy_and_relative_imports(tmp_path):
    _write(
        tmp_path,
        {
            # Re-exporting submodules is not a cycle with them.
            "__init__.py": "from .a import A\nfrom . import b\nHELPER = 1\n",
            # a <-> b, one side only under TYPE_CHECKING
            "a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import B\nA = 1\n",
            "b.py": "from . import a\nB = 2\n",
            # a name from the package's __init__: an edge to the package, which does not import c
            "c.py": "from . import HELPER\nimport os.path\n",
            # e <-> g: a lazy import in a function, and an absolute import
            "e.py": "def f():\n    from .sub import g\n    return g\n",
            "sub/__init__.py": "",
            "sub/g.py": "import pkg.e\nfrom .. import c\n",
        },
    )
    graph = import_graph(tmp_path, "pkg")
    assert graph["pkg.c"] == {"pkg": 1}
    assert graph["pkg.b"] == {"pkg.a": 1}
    assert graph["pkg.sub.g"] == {"pkg.e": 1, "pkg.c": 2}
    assert graph["pkg"] == {"pkg.a": 1, "pkg.b": 2}
    found = cycles(graph)
    assert found == [["pkg.a", "pkg.b", "pkg.a"], ["pkg.e", "pkg.sub.g", "pkg.e"]]
    assert describe(graph, found[0]) == "pkg.a (line 3) -> pkg.b (line 1) -> pkg.a"


def test_a_longer_cycle_is_reported_whole(tmp_path):
    _write(
        tmp_path,
        {
            "__init__.py": "",
            "x.py": "from . import y\n",
            "y.py": "from .z import Z\n",
            "z.py": "from .x import *\nZ = 0\n",
            "w.py": "from . import x\n",
        },
    )
    graph = import_graph(tmp_path, "pkg")
    assert cycles(graph) == [["pkg.x", "pkg.y", "pkg.z", "pkg.x"]]
