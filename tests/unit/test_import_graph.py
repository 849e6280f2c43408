"""No import cycle in drgpu, counting every import: at module level, inside functions, and
under `if TYPE_CHECKING:`.

The graph is read from the source with `ast`, so an import inside a function counts as
much as one at the top (a cycle that only bites when that function runs is still a
cycle). Imports under TYPE_CHECKING count too: they cannot cycle at run time, but a cycle
through them is still two modules that need each other, and mypy follows them. A
relative import is resolved against its module; `from drgpu.x import y` is an edge to
drgpu.x.y when y is a module, else to drgpu.x. Importing drgpu.x.y also runs drgpu.x's
`__init__`, so that edge is counted too.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "drgpu"

Graph = Mapping[str, frozenset[str]]


def module_name(path: Path, root: Path) -> str:
    """`drgpu/commands/up.py` -> `drgpu.commands.up`; a package is its `__init__`."""
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(tree: ast.AST, module: str, is_package: bool, known: set[str]) -> Iterator[str]:
    """Every drgpu module that `module` imports anywhere in `tree`."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield from _with_parents(alias.name, known)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, module, is_package)
            for alias in node.names:
                child = f"{base}.{alias.name}"
                yield from _with_parents(child if child in known else base, known)


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    parts = module.split(".")
    anchor = parts if is_package else parts[:-1]
    anchor = anchor[: len(anchor) - (node.level - 1)]
    return ".".join([*anchor, *([node.module] if node.module else [])])


def _with_parents(name: str, known: set[str]) -> Iterator[str]:
    """`name` and each package above it, when they are drgpu modules."""
    parts = name.split(".")
    for end in range(1, len(parts) + 1):
        candidate = ".".join(parts[:end])
        if candidate in known:
            yield candidate


def import_graph(sources: Mapping[str, tuple[str, bool]]) -> Graph:
    """Each module to the drgpu modules it imports; `sources`: module -> (its source,
    whether it is a package)."""
    known = set(sources)
    graph = {}
    for module, (source, is_package) in sources.items():
        graph[module] = frozenset(imported(ast.parse(source), module, is_package, known)) - {module}
    return graph


def find_cycle(graph: Graph) -> list[str] | None:
    """One import cycle as its path (first module repeated at the end), or None."""
    done: set[str] = set()

    def walk(path: list[str]) -> list[str] | None:
        for successor in sorted(graph.get(path[-1], ())):
            if successor in path:
                return [*path[path.index(successor) :], successor]
            if successor not in done:
                found = walk([*path, successor])
                if found is not None:
                    return found
        done.add(path[-1])
        return None

    for start in sorted(graph):
        cycle = None if start in done else walk([start])
        if cycle is not None:
            return cycle
    return None


def drgpu_sources() -> dict[str, tuple[str, bool]]:
    return {
        module_name(path, PACKAGE): (path.read_text(encoding="utf-8"), path.name == "__init__.py")
        for path in sorted(PACKAGE.rglob("*.py"))
    }


def test_drgpu_has_no_import_cycle() -> None:
    cycle = find_cycle(import_graph(drgpu_sources()))
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_graph_sees_every_kind_of_import() -> None:
    graph = import_graph(drgpu_sources())
    assert "drgpu.errors" in graph["drgpu.cli"]  # module level
    assert "drgpu.commands.preparation" in graph["drgpu.commands.compose_run"]
    assert "drgpu.host.engine" in graph["drgpu.commands.proving"]  # inside a function


PLANTED = {
    "pkg": ("", True),
    "pkg.a": ("from pkg import b\n", False),
    "pkg.b": ("def f():\n    from .c import g\n", False),
    "pkg.c": (
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.a\n",
        False,
    ),
    "pkg.d": ("import pkg.a\n", False),
}


def test_a_planted_cycle_is_found_with_its_path() -> None:
    """Through a module-level `from`, a relative import in a function, a TYPE_CHECKING one."""
    assert find_cycle(import_graph(PLANTED)) == ["pkg.a", "pkg.b", "pkg.c", "pkg.a"]


@pytest.mark.parametrize(
    ("changed", "source"),
    [
        ("pkg.c", "x = 1\n"),  # the edge back is gone
        ("pkg.b", "from pkg import c as unused\nimport pkg\n"),  # to c, and to the package
    ],
)
def test_without_the_edge_back_there_is_no_cycle(changed: str, source: str) -> None:
    sources = dict(PLANTED)
    sources["pkg.c"] = ("x = 1\n", False)
    sources[changed] = (source, False)
    assert find_cycle(import_graph(sources)) is None


def test_importing_a_name_of_a_module_is_an_edge_to_that_module() -> None:
    sources = {
        "pkg": ("", True),
        "pkg.a": ("from pkg.b import name\n", False),
        "pkg.b": ("from pkg.a import other\n", False),
    }
    assert find_cycle(import_graph(sources)) == ["pkg.a", "pkg.b", "pkg.a"]
