"""Docs that cannot drift from the plugin contract (after datasette's test_docs):

* every hook in rewardkit/hookspecs.py has a section in docs/plugins/hooks.md with its arguments
  (naming each one), what it returns and an example, and no section documents a hook that does not exist;
* every section's example is a complete plugin that passes rewardkit.testing.check_plugin, and the
  examples run: through the real engine (scorers, manager, executor, RM backend on a tiny model) or
  click (the command);
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
    "register_server_launchers": "launchers",
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


def test_hookspecs_has_exactly_the_documented_hooks():
    # Adding or removing a hook is a change of the plugin contract: update HOOK_KINDS and hooks.md with it.
    assert (
        hook_names()
        == sorted(HOOK_KINDS)
        == [
            "register_commands",
            "register_executors",
            "register_reward_managers",
            "register_rm_backends",
            "register_scorers",
            "register_server_launchers",
        ]
    )


@pytest.mark.parametrize("hook", hook_names())
def test_every_hook_has_a_section_naming_its_arguments(hook):
    sections = hook_sections()
    assert hook in sections, f"docs/plugins/hooks.md has no '## `{hook}`' section"
    for part in ("**Arguments.**", "**Returns.**", "**Example.**"):
        assert part in sections[hook], f"the {hook} section has no {part} paragraph"
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


def _example_module(hook: str) -> types.ModuleType:
    """The hook section's example, executed as an importable module (kept in sys.modules)."""
    body = hook_sections()[hook]
    source = re.findall(r"^```python\n(.*?)^```", body, flags=re.MULTILINE | re.DOTALL)[0]
    module = types.ModuleType(f"_rewardkit_hooks_md_run_{hook}")
    sys.modules[module.__name__] = module
    exec(compile(source, f"{HOOKS_MD}:{hook}", "exec"), module.__dict__)
    return module


@pytest.fixture
def examples():
    made: list[str] = []

    def load(hook: str) -> types.ModuleType:
        module = _example_module(hook)
        made.append(module.__name__)
        return module

    yield load
    for name in made:
        sys.modules.pop(name, None)


def test_the_examples_score_as_their_sections_say(examples):
    """The scorer, manager and executor examples do what their sections say, through the real engine."""
    from rewardkit.testing import score_samples

    samples = [
        {"data_source": "my_org/qa", "response": " Paris ", "ground_truth": "Paris"},
        {"data_source": "my_org/qa_hard", "response": "Lyon", "ground_truth": "Paris"},
        {"data_source": "my_org/qa", "response": "x", "ground_truth": None},
    ]
    plugins = {
        "scorers": examples("register_scorers"),
        "clipped": examples("register_reward_managers"),
        "threads": examples("register_executors"),
    }
    config = {
        "executor": "threads",
        "reward_manager": {"name": "clipped", "kwargs": {"low": 0.0, "high": 0.5}},
    }
    result = score_samples(samples, config, plugins=plugins)
    assert result.status == ["ok", "ok", "abstained"]
    assert result.scores[:2] == [0.5, 0.0]  # exact_match 1.0 clipped to high=0.5; the pattern routes qa_hard

    essays = [
        {"data_source": "essays", "response": "one two three"},
        {"data_source": "essays", "response": ""},
    ]
    batch = {"reward_manager": {"name": "batch", "kwargs": {"scorer": "word_count"}}}
    result = score_samples(essays, batch, plugins={"scorers": plugins["scorers"]})
    assert result.status == ["ok", "ok"] and result.scores == pytest.approx([0.03, 0.0])  # 3 words / 100


def test_a_batch_scorer_routed_by_data_source(examples):
    from rewardkit.testing import score_samples

    essays = [
        {"data_source": "essays", "response": "one two three"},
        {"data_source": "essays", "response": ""},
    ]
    result = score_samples(essays, plugins={"scorers": examples("register_scorers")})
    assert result.status == ["ok", "ok"] and result.scores == pytest.approx([0.03, 0.0])


def test_the_command_example_counts_failed_samples(examples, tmp_path):
    import json

    import click
    from click.testing import CliRunner

    group = click.Group("rewardkit")
    examples("register_commands").register_commands(cli=group)
    scored = tmp_path / "scored.jsonl"
    records = [
        {"status": "ok", "score": 1.0},
        {"status": "failed", "reason": "timeout"},
        {"status": "failed", "reason": "error"},
        {"status": "failed", "reason": "timeout"},
    ]
    scored.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = CliRunner().invoke(group, ["count-failed", str(scored)])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output) == {"error": 1, "timeout": 2}


@pytest.mark.slow
def test_the_rm_backend_example_scores_with_a_tiny_model(examples, tmp_path):
    """The register_rm_backends example, on a tiny BERT classifier, through the real engine and lifecycle."""
    import math

    from tiny_models import build_tiny_bert_classifier

    import rewardkit
    from rewardkit.testing import install_plugin

    path = build_tiny_bert_classifier(tmp_path / "rm")
    config = {"executor": "inline", "reward_model": {"enable": True, "backend": "classifier"}}
    config["reward_model"]["model_path"] = str(path)
    samples = [{"prompt": "what is two plus two", "response": r} for r in ("four", "five", "")]
    plugin = examples("register_rm_backends")
    with install_plugin(plugin, name="classifier"), rewardkit.RewardEngine(config) as engine:
        result = engine.compute(samples)
        engine.sleep()
        again = engine.compute(samples)
        transitions = list(engine.backend.transitions)
    assert result.status == ["ok", "ok", "ok"]
    assert all(math.isfinite(s) for s in result.scores) and result.components["rm"] == result.scores
    assert again.scores == pytest.approx(result.scores, abs=1e-5)
    assert transitions == ["load", "sleep", "wake_up"]


def test_the_launcher_example_builds_its_command_line_and_has_no_sleep(examples):
    """The register_server_launchers example, built from a real server config."""
    from rewardkit.config import ServerConfig

    module = examples("register_server_launchers")
    launcher = module.LlamaCppLauncher(ServerConfig(engine="llama-cpp", engine_args={"ctx_size": 4096}))
    argv = launcher.command("127.0.0.1", 8080, "/models/rm.gguf")
    assert argv[:3] == ["llama-server", "-m", "/models/rm.gguf"]
    assert argv[argv.index("--port") + 1] == "8080" and argv[argv.index("--ctx-size") + 1] == "4096"
    assert launcher.sleep_call(1) is None and not launcher.can_sleep
