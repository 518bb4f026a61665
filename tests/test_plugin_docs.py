"""Docs that cannot drift from the plugin contract (after datasette's test_docs):

* every hook in rewardkit/hookspecs.py has a section in docs/plugins/hooks.md naming each of its
  arguments, and no section documents a hook that does not exist;
* every section's example is a complete plugin that passes rewardkit.testing.check_plugin;
* every hook is implemented by at least one test (a ``def <hook>(`` in tests/ or plugins/*/tests/).
"""

from __future__ import annotations

import inspect
import re
import sys
import types
from pathlib import Path

import pytest

from rewardkit import hookspecs
from rewardkit.testing import check_plugin, hook_names

REPO = Path(__file__).resolve().parent.parent
HOOKS_MD = REPO / "docs" / "plugins" / "hooks.md"
HOOK_KINDS = {
    "register_scorers": "scorers",
    "register_reward_managers": "managers",
    "register_rm_backends": "backends",
    "register_executors": "executors",
    "register_commands": "commands",
}


def hook_sections() -> dict[str, str]:
    """``## `name` `` sections of hooks.md: name → section text."""
    text = HOOKS_MD.read_text(encoding="utf-8")
    parts = re.split(r"^## ", text, flags=re.MULTILINE)[1:]
    out = {}
    for part in parts:
        title, _, body = part.partition("\n")
        m = re.fullmatch(r"`(\w+)`", title.strip())
        if m:
            out[m.group(1)] = body
    return out


def test_hookspecs_has_hooks():
    assert "register_scorers" in hook_names()
    assert len(hook_names()) >= 5


@pytest.mark.parametrize("hook", hook_names())
def test_every_hook_has_a_section_naming_its_arguments(hook):
    sections = hook_sections()
    assert hook in sections, f"docs/plugins/hooks.md has no '## `{hook}`' section"
    for param in inspect.signature(getattr(hookspecs, hook)).parameters:
        assert f"`{param}" in sections[hook], f"the {hook} section does not mention its argument {param!r}"


def test_no_section_for_a_hook_that_does_not_exist():
    stale = sorted(set(hook_sections()) - set(hook_names()))
    assert not stale, f"docs/plugins/hooks.md documents hooks that hookspecs.py lacks: {stale}"


@pytest.mark.parametrize("hook", hook_names())
def test_every_hook_section_example_is_a_working_plugin(hook):
    body = hook_sections().get(hook)
    if body is None:
        pytest.fail(f"no section for {hook}")
    examples = re.findall(r"^```python\n(.*?)^```", body, flags=re.MULTILINE | re.DOTALL)
    assert examples, f"the {hook} section has no python example"
    name = f"_rewardkit_hooks_md_{hook}"
    module = types.ModuleType(name)
    sys.modules[name] = module
    try:
        exec(compile(examples[0], f"{HOOKS_MD}:{hook}", "exec"), module.__dict__)
        check = check_plugin(module, name=hook)
    finally:
        del sys.modules[name]
    assert check.hooks == [hook]
    assert check.registered.get(HOOK_KINDS.get(hook, "")), f"the {hook} example registers nothing"
    assert check.warnings == []


def _test_sources() -> dict[Path, str]:
    files = [*REPO.joinpath("tests").rglob("*.py"), *REPO.glob("plugins/*/tests/*.py")]
    return {f: f.read_text(encoding="utf-8") for f in files if f.resolve() != Path(__file__).resolve()}


@pytest.mark.parametrize("hook", hook_names())
def test_every_hook_is_implemented_by_a_test(hook):
    pattern = re.compile(rf"\bdef {hook}\(")
    users = [p for p, text in _test_sources().items() if pattern.search(text)]
    assert users, f"no test implements the {hook} hook (no 'def {hook}(' under tests/ or plugins/*/tests/)"
