"""Test-suite hygiene: an import error of rewardkit's own code fails (never skips), and every test asserts."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEST_FILES = sorted([*ROOT.glob("tests/**/*.py"), *ROOT.glob("plugins/*/tests/**/*.py")])


def _calls(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            yield node, (f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", ""))


def test_no_importorskip_of_rewardkits_own_modules():
    bad = []
    for path in TEST_FILES:
        for node, name in _calls(ast.parse(path.read_text(encoding="utf-8"))):
            if name == "importorskip" and node.args and isinstance(node.args[0], ast.Constant):
                mod = str(node.args[0].value)
                if mod == "rewardkit" or mod.startswith(("rewardkit.", "rewardkit_")):
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno} importorskip({mod!r})")
    assert bad == []


def _asserts(fn: ast.AST, helpers: set[str]) -> bool:
    """An ``assert``, ``pytest.raises`` / ``warns`` / ``fail``, or a call of a helper that asserts."""
    for node in ast.walk(fn):
        if isinstance(node, ast.Assert):
            return True
    for _, name in _calls(fn):
        if name in {"raises", "warns", "fail", "approx", "deprecated_call"} or name in helpers:
            return True
        if name.startswith(("assert", "check_", "expect")):
            return True
    return False


def test_every_test_asserts_something():
    bad = []
    for path in (p for p in TEST_FILES if p.name.startswith("test_")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        funcs = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
        helpers = {f.name for f in funcs if not f.name.startswith("test_") and _asserts(f, set())}
        for f in funcs:
            fixture = any("fixture" in ast.unparse(d) for d in f.decorator_list)
            if f.name.startswith("test_") and not fixture and not _asserts(f, helpers):
                bad.append(f"{path.relative_to(ROOT)}:{f.lineno} {f.name}")
    assert bad == []
