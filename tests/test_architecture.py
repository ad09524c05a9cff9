"""The house rules of kwtree's packages, read from the source with ``ast``: no import cycles,
the layering each package's docstring states, a docstring on every package and modules
readable in one sitting.

Every ``import`` counts, at module level and inside functions alike: a function-level import
still ties two modules together (it only hides the tie until the call). Imports under
``if TYPE_CHECKING:`` count for the layering (an annotation that names an upper layer is a
dependency on it) but not for cycles: they never run, so they cannot make one module's import
wait for another's. The lazy names of ``kwtree/__init__.py`` (imported on first use from a
table of module names) count as imports of ``kwtree``.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import kwtree

PACKAGE = Path(kwtree.__file__).resolve().parent
GROUND_FLOOR = ("kwtree.errors", "kwtree.models", "kwtree.normalize", "kwtree.validate", "kwtree.limits",
                "kwtree.progress", "kwtree.memory_schema", "kwtree.heap")
MAX_LINES = 800
#: Modules allowed over MAX_LINES, each with the reason; a file may only leave this list.
OVER_THE_LIMIT: dict[str, str] = {}


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str
    line: int
    type_checking: bool


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


class _Imports(ast.NodeVisitor):
    """The kwtree modules one module imports, anywhere in it."""

    def __init__(self, name: str, is_package: bool) -> None:
        self.name, self.is_package = name, is_package
        self.found: list[Import] = []
        self._type_checking = 0

    def visit_If(self, node: ast.If) -> None:
        test = node.test
        if (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
                isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"):
            self._type_checking += 1
            for child in node.body:
                self.visit(child)
            self._type_checking -= 1
            for child in node.orelse:
                self.visit(child)
        else:
            self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(alias.name, node.lineno)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:  # relative: resolve against this module's package
            base = self.name.split(".") if self.is_package else self.name.split(".")[:-1]
            base = base[: len(base) - (node.level - 1)]
            module = ".".join(base + ([node.module] if node.module else []))
        else:
            module = node.module or ""
        for alias in node.names:
            submodule = f"{module}.{alias.name}"
            self._add(submodule if submodule in MODULES else module, node.lineno)

    def _add(self, module: str, line: int) -> None:
        while module and module not in MODULES:  # ``import kwtree.a.b`` of a name inside a module
            module = module.rpartition(".")[0]
        if module.startswith("kwtree") and module != self.name:
            self.found.append(Import(self.name, module, line, self._type_checking > 0))


def _all_imports() -> list[Import]:
    found: list[Import] = []
    for name, path in MODULES.items():
        visitor = _Imports(name, path.name == "__init__.py")
        visitor.visit(ast.parse(path.read_text(), str(path)))
        found += visitor.found
    lazy = {**kwtree._LAZY_NAMES, **kwtree._LAZY_MODULES}
    found += [Import("kwtree", module, 0, False) for module in sorted(set(lazy.values()))]
    return found


IMPORTS = _all_imports()


def _where(edge: Import) -> str:
    path = MODULES[edge.importer].relative_to(PACKAGE.parent)
    return f"{path}:{edge.line} {edge.importer} -> {edge.imported}"


# --- no cycles ---------------------------------------------------------------------------------


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle path (first module repeated at the end) per strongly connected component."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def connect(node: str) -> None:  # Tarjan; the module graph is shallow, recursion is fine
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph[node]):
            if other not in index:
                connect(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                other = stack.pop()
                on_stack.discard(other)
                component.append(other)
                if other == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return [_path_around(graph, component) for component in components]


def _path_around(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """A shortest path from the component's first module back to itself, inside it."""
    start, members = component[0], set(component)
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for other in sorted(graph[node] & members):
                if other == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [start, *reversed(path[:-1]), start] if node != start else [start, start]
                if other not in previous:
                    previous[other] = node
                    following.append(other)
        frontier = following
    raise AssertionError(f"{component} is not a cycle")


def test_no_import_cycles() -> None:
    graph: dict[str, set[str]] = {name: set() for name in MODULES}
    for edge in IMPORTS:
        if not edge.type_checking:
            graph[edge.importer].add(edge.imported)
    cycles = _cycles(graph)
    assert cycles == [], "import cycles:\n" + "\n".join(" -> ".join(cycle) for cycle in cycles)


def test_the_cycle_finder_reports_the_path() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}}
    assert _cycles(graph) == [["a", "b", "c", "a"]]  # a self-import is not a cycle between modules
    assert _cycles({"x": {"y"}, "y": {"x"}}) == [["x", "y", "x"]]


# --- the two rules DESIGN §1 names -------------------------------------------------------------


def _area(module: str) -> str:
    """The package a module belongs to (``ground`` for the ground floor, ``top`` for kwtree)."""
    if module in GROUND_FLOOR:
        return "ground"
    if module == "kwtree":
        return "top"
    return module.split(".")[1]


def test_the_agent_never_imports_storage_or_what_sits_above_it() -> None:
    forbidden = {"stores", "caches", "facade", "ops", "cli", "top", "testing"}
    bad = [_where(edge) for edge in IMPORTS if _area(edge.importer) == "agent" and _area(edge.imported) in forbidden]
    assert bad == []


def test_agent_memory_is_one_layer_composed_into_the_tree() -> None:
    # Issue 28: agent memory was three of KeywordTree's seven base classes, reaching into the
    # engine and the caches through attributes other bases set. It is one object now,
    # ``tree.memory``, over the port it declares; the tree's methods of the same names only
    # call it, and nothing in the memory package reaches the engine, the caches or storage.
    from kwtree.facade.tree import KeywordTree
    from kwtree.memory.layer import AgentMemory

    assert [cls for cls in KeywordTree.__mro__ if cls.__module__.startswith("kwtree.memory")] == []
    calls = sorted(name for name in vars(AgentMemory) if not name.startswith("_"))
    assert len(calls) == 11
    for name in calls:
        assert getattr(KeywordTree, name).__wrapped__ is getattr(AgentMemory, name), name
    outside = {"stores", "caches", "facade", "ops", "cli", "top", "integrations", "testing"}
    bad = [_where(edge) for edge in IMPORTS if _area(edge.importer) == "memory"
           and (_area(edge.imported) in outside or edge.imported == "kwtree.engine.engine")]
    assert bad == []


def test_stores_import_only_the_ground_floor_and_the_events_codec() -> None:
    allowed = {*GROUND_FLOOR, "kwtree.engine.events"}
    bad = [_where(edge) for edge in IMPORTS if _area(edge.importer) == "stores"
           and _area(edge.imported) != "stores" and edge.imported not in allowed]
    assert bad == []


# --- the layering the package docstrings state -------------------------------------------------

#: What each package may import besides itself: package names (``ground`` is the ground floor)
#: or single modules; each row says what its package's docstring says.
MAY_IMPORT: dict[str, set[str]] = {
    "ground": set(),  # errors, models, normalize, validate, limits, progress, memory_schema, heap: only each other
    # "the ground floor (errors, models, normalize, validate, limits, progress, memory_schema, heap) and kwtree.stores;
    # nothing above"
    "engine": {"ground", "stores"},
    # "the ground floor and the engine's State and codec; nothing else"
    "writes": {"ground", "kwtree.engine.state", "kwtree.engine.events"},
    # "imports only the ground floor ... and the events codec, never anything above"
    "stores": {"ground", "kwtree.engine.events"},
    # "the ground floor, the engine and kwtree.stores; not retrieval, the agent, ops, the facade or the CLI"
    "caches": {"ground", "engine", "stores"},
    # "it may import the ground floor, the engine and the agent's descent results ..., and never touches storage"
    "retrieval": {"ground", "engine", "kwtree.agent.descend"},
    # "It reads the State but never touches storage (kwtree.stores); the KeywordTree facade wires it in"
    "agent": {"ground", "kwtree.engine.state"},
    # "the ground floor, the engine, kwtree.stores, the write deciders and (verify ...) the caches"
    "ops": {"ground", "engine", "stores", "writes"},
    # "the ground floor, the engine's State and codec, the write deciders, retrieval ... and the agent"
    "memory": {"ground", "kwtree.engine.state", "kwtree.engine.events", "writes", "retrieval", "agent"},
    # "may import every package below it; only the CLI and kwtree/__init__.py import it"
    "facade": {"ground", "engine", "writes", "stores", "caches", "retrieval", "agent", "ops", "memory"},
    # "on the facade's public methods (and the scope paths and commit options they take) ...; only the CLI imports it"
    "integrations": {"ground", "retrieval", "memory", "agent", "facade"},
    # "It sits on top and may import anything; nothing in the library imports it"
    "cli": {"ground", "engine", "writes", "stores", "caches", "retrieval", "agent", "ops", "memory", "facade", "top",
            "integrations"},
    "top": {"ground", "engine", "writes", "stores", "caches", "retrieval", "agent", "ops", "memory", "facade", "git"},
    "__main__": {"cli"},  # python -m kwtree
    "git": {"ops"},  # kwtree/git.py: kwtree.ops.git under its public name
    # kwtree/testing.py: checkers and strategies for users' trees; the facade's docstring names it
    "testing": {"ground", "facade"},
}
#: Single modules with more than their package's row, as the docstring says.
MODULE_MAY_IMPORT: dict[str, set[str]] = {"kwtree.ops.verify_fulltext": {"caches"}}

#: Imports that break a docstring's rule today, each with what would mend it. The test fails
#: when one is added and when one is mended (then delete its line here).
KNOWN_VIOLATIONS: dict[tuple[str, str], str] = {
}


def _layering_violations() -> set[tuple[str, str]]:
    bad = set()
    for edge in IMPORTS:
        area, target = _area(edge.importer), _area(edge.imported)
        allowed = MAY_IMPORT[area] | MODULE_MAY_IMPORT.get(edge.importer, set())
        if target != area and target not in allowed and edge.imported not in allowed:
            bad.add((edge.importer, edge.imported))
    return bad


def test_every_package_has_a_row_in_the_layering_table() -> None:
    assert {_area(name) for name in MODULES} == set(MAY_IMPORT)


def test_every_import_keeps_the_layering_the_package_docstrings_state() -> None:
    bad = _layering_violations()
    new = sorted(bad - set(KNOWN_VIOLATIONS))
    mended = sorted(set(KNOWN_VIOLATIONS) - bad)
    shown = [_where(edge) for edge in IMPORTS if (edge.importer, edge.imported) in set(new)]
    assert new == [], "imports the package docstrings forbid:\n" + "\n".join(shown)
    assert mended == [], f"mended, so delete them from KNOWN_VIOLATIONS: {mended}"


# --- docstrings and size -----------------------------------------------------------------------


def test_every_package_says_what_lives_there_in_a_docstring() -> None:
    for path in sorted(PACKAGE.rglob("__init__.py")):
        docstring = ast.get_docstring(ast.parse(path.read_text()))
        assert docstring and len(docstring.split()) >= 15, f"{path.relative_to(PACKAGE.parent)} needs a docstring"


def test_no_module_is_longer_than_one_sitting() -> None:
    lines = {name: len(path.read_text().splitlines()) for name, path in MODULES.items()}
    over = sorted(name for name, count in lines.items() if count > MAX_LINES)
    assert over == sorted(OVER_THE_LIMIT), {name: lines[name] for name in set(over) ^ set(OVER_THE_LIMIT)}
