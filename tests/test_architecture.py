"""The import direction of docs/architecture.md, checked on the source: no upward import, no cycle,
and every module listed in the module table."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "rewardkit"
DOC = ROOT / "docs" / "architecture.md"

#: Layers, lowest first; a module may import its own layer and those below it.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "core",
        (
            "rewardkit",
            "rewardkit.errors",
            "rewardkit.batch",
            "rewardkit.result",
            "rewardkit.scoring",
            "rewardkit.options",
            "rewardkit.config",
            "rewardkit.migrate_rules",
            "rewardkit.migrate",
            "rewardkit.hydra_overrides",
            "rewardkit.hookspecs",
            "rewardkit.registry",
            "rewardkit.plugins",
            "rewardkit.inputs",
            "rewardkit.gcpause",
        ),
    ),
    ("runtime", ("rewardkit.runtime",)),
    # executors, backends and scorers are peers: each uses core and runtime, none imports another
    ("components", ("rewardkit.executors", "rewardkit.backends", "rewardkit.scorers")),
    ("managers", ("rewardkit.managers",)),
    # launched reward-model servers, pointed at by the backends
    ("serving", ("rewardkit.serving",)),
    ("engine", ("rewardkit.engine", "rewardkit.engine_cache")),
    (
        "apps",
        (
            "rewardkit.cli",
            "rewardkit.cli_overrides",
            "rewardkit.server",
            "rewardkit.server_app",
            "rewardkit.server_limits",
            "rewardkit.scorejob",
            "rewardkit.integrations",
            "rewardkit.ray",
            "rewardkit.testing",
            "rewardkit.config_reference",
            # The Ray executor drives rewardkit.ray's worker group; registered by name, imported by nobody.
            "rewardkit.executors.ray",
        ),
    ),
)


def module_name(path: Path, src: Path = SRC) -> str:
    parts = list(path.relative_to(src.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


#: Layers whose packages must not import one another.
PEER_LAYERS = {"components"}


def _prefix_of(module: str) -> str:
    """The layer entry that names ``module`` (the longest matching prefix)."""
    return max(
        (p for _, ps in LAYERS for p in ps if module == p or module.startswith(p + ".")), key=len, default=""
    )


def layer_of(module: str) -> int:
    """Index into LAYERS of the longest prefix that names ``module`` (or a package above it)."""
    best, best_len = -1, -1
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best_len:
                best, best_len = i, len(p)
    if best < 0:
        raise AssertionError(f"{module} is in no layer of tests/test_architecture.py::LAYERS")
    return best


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"
    )


def imports_of(path: Path, modules: set[str], src: Path = SRC) -> set[tuple[str, int]]:
    """The rewardkit modules ``path`` imports at run time (module level or inside functions), with the line;
    ``if TYPE_CHECKING:`` blocks are left out. ``from pkg import name`` counts ``pkg.name`` when that is a module."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    me = module_name(path, src)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    found: set[tuple[str, int]] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "rewardkit" or a.name.startswith("rewardkit."):
                    found.add((a.name, node.lineno))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target == "rewardkit" or target.startswith("rewardkit."):
                for a in node.names:
                    sub = f"{target}.{a.name}"
                    found.add((sub if sub in modules else target, node.lineno))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return {(m, line) for m, line in found if m != me}


def all_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(SRC.rglob("*.py"))}


def import_graph() -> dict[str, set[tuple[str, int]]]:
    mods = all_modules()
    names = set(mods)
    graph = {}
    for name, path in mods.items():
        # importing a.b.c also runs a and a.b: only the named module is the dependency we check
        graph[name] = {(m, line) for m, line in imports_of(path, names) if m in names}
    return graph


def upward_imports(graph: dict[str, set[tuple[str, int]]]) -> list[str]:
    bad = []
    for mod, deps in sorted(graph.items()):
        for dep, line in sorted(deps):
            mine, theirs = layer_of(mod), layer_of(dep)
            if theirs > mine:
                bad.append(f"{mod}:{line} imports {dep} ({LAYERS[mine][0]} -> {LAYERS[theirs][0]})")
            elif theirs == mine and LAYERS[mine][0] in PEER_LAYERS and _prefix_of(mod) != _prefix_of(dep):
                bad.append(f"{mod}:{line} imports {dep} (peers in {LAYERS[mine][0]})")
    return bad


def cycles(graph: dict[str, set[tuple[str, int]]]) -> list[list[str]]:
    """Every strongly connected component with more than one module (Tarjan)."""
    edges = {m: sorted({d for d, _ in deps}) for m, deps in graph.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            strong(v)
    return found


def test_every_module_is_in_a_layer():
    layers = {name: layer_of(name) for name in all_modules()}  # raises naming a module in none
    assert layers["rewardkit.runtime.loop"] == 1 and layers["rewardkit.executors.ray"] == len(LAYERS) - 1


def test_no_upward_import():
    assert upward_imports(import_graph()) == []


def test_no_import_cycle():
    assert cycles(import_graph()) == []


def test_the_checks_catch_what_they_are_for():
    # A scorer importing a runtime helper is fine; an executor importing a scorer helper (peers), a
    # runtime module importing an executor, or a manager importing the engine is not; a loop is a cycle.
    assert upward_imports({"rewardkit.scorers.code": {("rewardkit.runtime.limits", 1)}}) == []
    assert upward_imports({"rewardkit.executors.inline": {("rewardkit.scorers.sandbox", 37)}}) == [
        "rewardkit.executors.inline:37 imports rewardkit.scorers.sandbox (peers in components)"
    ]
    assert upward_imports({"rewardkit.runtime.loop": {("rewardkit.executors.process", 7)}}) == [
        "rewardkit.runtime.loop:7 imports rewardkit.executors.process (runtime -> components)"
    ]
    assert upward_imports({"rewardkit.managers.base": {("rewardkit.engine", 3)}})
    assert cycles({"rewardkit.a": {("rewardkit.b", 1)}, "rewardkit.b": {("rewardkit.a", 2)}}) == [
        ["rewardkit.a", "rewardkit.b"]
    ]


def test_function_level_and_relative_imports_are_seen(tmp_path):
    pkg = tmp_path / "rewardkit"
    (pkg / "scorers").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "scorers" / "__init__.py").write_text("")
    (pkg / "engine.py").write_text("")
    (pkg / "scorers" / "x.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from rewardkit import cli\n"
        "def f():\n    from ..engine import compute\n    import rewardkit.plugins\n"
    )
    found = imports_of(pkg / "scorers" / "x.py", {"rewardkit.engine", "rewardkit.plugins"}, src=pkg)
    assert {m for m, _ in found} == {"rewardkit.engine", "rewardkit.plugins"}


def _documented_modules() -> set[str]:
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## Modules", 1)[1].split("\n## ", 1)[0]
    rows = [ln for ln in section.splitlines() if ln.startswith("| `")]
    return {m for ln in rows for m in re.findall(r"`([\w/]+\.py)`", ln.split("|")[1])}


def test_every_module_is_in_the_architecture_table():
    documented = _documented_modules()
    on_disk = {p.relative_to(SRC).as_posix() for p in SRC.rglob("*.py")}
    assert sorted(on_disk - documented) == [], "modules missing from docs/architecture.md's table"
    assert sorted(documented - on_disk) == [], "docs/architecture.md lists modules that do not exist"


@pytest.mark.parametrize("path", sorted(SRC.rglob("*.py")), ids=lambda p: p.relative_to(SRC).as_posix())
def test_modules_stay_small(path):
    # docs/architecture.md: one concept per module, about 500 lines at most; the exceptions say why there.
    allowed = {"migrate.py": 650, "server_app.py": 560}
    limit = allowed.get(path.relative_to(SRC).as_posix(), 520)
    assert len(path.read_text(encoding="utf-8").splitlines()) <= limit
