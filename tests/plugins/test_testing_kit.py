"""Tests of rewardkit.testing: throwaway plugins found by real entry-point discovery, scoring through
the engine, and check_plugin's validation. Also the end-to-end test of every registration hook."""

from __future__ import annotations

import sys
import types
from collections.abc import Sequence

import pytest

import rewardkit
from rewardkit import hookimpl
from rewardkit.backends.base import RMBackend
from rewardkit.errors import UnknownNameError
from rewardkit.executors.inline import InlineExecutor
from rewardkit.managers.naive import NaiveRewardManager
from rewardkit.plugins import get_registries
from rewardkit.result import SampleResult
from rewardkit.testing import (
    PluginCheckError,
    check_plugin,
    hook_names,
    install_plugin,
    plugin_fixture,
    score_samples,
    write_dist_info,
)

# -- plugin objects used below (module level, so scorers and classes are importable by reference) --


def shout_score(response: str) -> float:
    """1.0 for an all-caps response."""
    return float(response.isupper())


class ShoutPlugin:
    """A plugin as an object with @hookimpl methods."""

    @hookimpl
    def register_scorers(self, register):
        register(shout_score, name="shout", data_sources=["shouting"])


class ClippedManager(NaiveRewardManager):
    """The naive manager, with scores clipped to [lo, hi] (kwargs from reward_manager.kwargs)."""

    name = "clipped"

    def __init__(self, context, lo: float = 0.0, hi: float = 1.0):
        super().__init__(context)
        self.lo, self.hi = lo, hi

    async def score_rules(self, samples):
        out = await super().score_rules(samples)
        for r in out:
            if r is not None and r.status == "ok":
                r.score = min(self.hi, max(self.lo, r.score))
        return out


class CountingExecutor(InlineExecutor):
    """The inline executor, counting the tasks it ran (class-level, to observe from the test)."""

    name = "counting"
    ran: list[int] = []

    async def run(self, tasks):
        CountingExecutor.ran.append(len(tasks))
        return await super().run(tasks)


class LengthRM(RMBackend):
    """A reward 'model' scoring len(response) / 10, with the lifecycle recorded."""

    name = "length"

    async def ascore(self, samples: Sequence) -> list[SampleResult]:
        return [SampleResult.ok(len(s.response) / 10) for s in samples]


def identity_score(response: str) -> float:
    return float(response)


class EverythingPlugin:
    """One plugin using every registration hook."""

    @hookimpl
    def register_scorers(self, register):
        register(identity_score, name="identity", data_sources=["numbers"])

    @hookimpl
    def register_reward_managers(self, register):
        register(ClippedManager, name="clipped")

    @hookimpl
    def register_executors(self, register):
        register(CountingExecutor, name="counting")

    @hookimpl
    def register_rm_backends(self, register):
        register(LengthRM, name="length")


# -- install_plugin ----------------------------------------------------------------------------


def test_install_plugin_object_is_discovered_and_removed():
    path_before = list(sys.path)
    with install_plugin(ShoutPlugin(), name="shout", version="1.2.3") as installed:
        regs = get_registries()
        info = next(p for p in regs.plugins if p.name == "shout")
        assert (info.distribution, info.version, info.builtin) == ("rewardkit-shout", "1.2.3", False)
        assert info.hooks == ["register_scorers"] and info.registered == {"scorers": ["shout"]}
        assert regs.scorers.name_for("shouting") == "shout"
        assert (installed.path / "rewardkit_shout-1.2.3.dist-info" / "entry_points.txt").is_file()
        assert installed.module in sys.modules
    assert sys.path == path_before and installed.module not in sys.modules
    assert not installed.path.exists()
    assert "shout" not in get_registries().scorers


def test_install_plugin_module_and_source():
    mod = types.ModuleType("in_memory_plugin")

    @hookimpl
    def register_scorers(register):
        register(shout_score, name="shout_mod", data_sources=["mod"])

    mod.register_scorers = register_scorers
    source = """
        from rewardkit import hookimpl

        def always_one(response):
            return 1

        @hookimpl
        def register_scorers(register):
            register(always_one, name="always_one", data_sources=["src"])
    """
    with install_plugin(mod, name="frommodule"), install_plugin(source, name="fromsource") as src:
        regs = get_registries()
        assert {"shout_mod", "always_one"} <= set(regs.scorers.names())
        assert (src.path / f"{src.module}.py").is_file()
        result = rewardkit.compute(
            [{"data_source": "mod", "response": "HI"}, {"data_source": "src", "response": "x"}],
            {"executor": "inline"},
        )
        assert result.scores == [1.0, 1.0]


def test_install_plugin_source_needs_a_name():
    with pytest.raises(TypeError, match="name"), install_plugin("x = 1"):
        pass


def test_broken_plugin_is_reported_and_does_not_take_others_down():
    with (
        install_plugin("raise RuntimeError('boom on import')", name="broken") as broken,
        install_plugin(ShoutPlugin(), name="shout"),
    ):
        regs = get_registries()
        info = next(p for p in regs.plugins if p.name == "broken")
        assert "RuntimeError: boom on import" in info.error
        assert info.distribution == broken.distribution
        assert "shout" in regs.scorers  # the healthy plugin still loaded
        with pytest.raises(UnknownNameError, match="broken"):  # the hint names the broken plugin
            regs.scorers.get("something_broken_might_provide")


def test_write_dist_info_layout(tmp_path):
    path = write_dist_info(tmp_path, "rewardkit-x", "0.3", {"x": "x_mod", "y": "y_mod:plugin"})
    assert path.name == "rewardkit_x-0.3.dist-info"
    assert (path / "entry_points.txt").read_text().splitlines() == [
        "[rewardkit]",
        "x = x_mod",
        "y = y_mod:plugin",
    ]
    assert "Version: 0.3" in (path / "METADATA").read_text()


kit_plugin = plugin_fixture(ShoutPlugin(), name="shoutfixture")


def test_plugin_fixture_installs_for_the_test(kit_plugin):
    assert kit_plugin.name == "shoutfixture"
    assert "shout" in get_registries().scorers


def test_plugin_fixture_is_gone_afterwards():
    assert "shout" not in get_registries().scorers


# -- score_samples and every registration hook end to end --------------------------------------


def test_score_samples_through_every_hook():
    CountingExecutor.ran.clear()
    config = {
        "executor": "counting",
        "reward_manager": {"name": "clipped", "kwargs": {"hi": 5.0}},
        "reward_model": {"enable": True, "backend": "length", "weight": 0.0},
    }
    samples = [{"data_source": "numbers", "response": r} for r in ("0.5", "7", "-3", "oops")]
    result = score_samples(samples, config, plugins={"everything": EverythingPlugin()})
    assert result.status == ["ok", "ok", "ok", "failed"]
    assert result.scores[:3] == [0.5, 5.0, 0.0]  # clipped by the plugin's manager
    assert result.components["rm"] == [0.3, 0.1, 0.2, 0.4]  # the plugin's backend, weight 0
    assert result.reasons[3] == "component_failed" and "rule: error: ValueError" in result.errors[3]
    assert CountingExecutor.ran == [4]  # the plugin's executor ran the rule scorer


def test_score_samples_accepts_a_reward_section_and_plain_lists():
    result = score_samples(
        [{"data_source": "shouting", "response": "YES"}, {"data_source": "shouting", "response": "no"}],
        {"reward": {"dedup": False}},
        plugins=[ShoutPlugin()],
    )
    assert result.scores == [1.0, 0.0]


def test_score_samples_without_plugins_uses_what_is_installed():
    r = score_samples([{"data_source": "shouting", "response": "YES"}])
    assert r.reasons == ["unroutable"] and "shouting" in r.errors[0]
    with pytest.raises(rewardkit.SampleError, match="shouting"):
        score_samples([{"data_source": "shouting", "response": "YES"}], {"strict_routing": True})


# -- check_plugin ------------------------------------------------------------------------------


def test_check_plugin_reports_every_kind():
    check = check_plugin(EverythingPlugin())
    assert check.hooks == [
        "register_executors",
        "register_reward_managers",
        "register_rm_backends",
        "register_scorers",
    ]
    assert check.registered == {
        "backends": ["length"],
        "executors": ["counting"],
        "managers": ["clipped"],
        "scorers": ["identity"],
    }
    assert check.objects["managers"]["clipped"] is ClippedManager
    assert check.warnings == []


def test_check_plugin_rejects_a_misspelt_hook():
    class Typo:
        @hookimpl
        def register_scorer(self, register):
            pass

    with pytest.raises(
        PluginCheckError, match="unknown hook.*'register_scorer'.*did you mean 'register_scorers'"
    ):
        check_plugin(Typo())


def test_check_plugin_rejects_wrong_hook_arguments():
    class WrongArg:
        @hookimpl
        def register_scorers(self, reg):
            pass

    with pytest.raises(PluginCheckError, match="reg"):
        check_plugin(WrongArg())


def _plugin(hook: str, body):
    cls = type("P", (), {hook: hookimpl(lambda self, register: body(register))})
    return cls()


@pytest.mark.parametrize(
    "hook, body, message",
    [
        ("register_scorers", lambda r: r("not callable", name="x"), "not callable"),
        ("register_scorers", lambda r: (r(shout_score), r(shout_score)), "registered twice"),
        ("register_scorers", lambda r: r(shout_score, data_sources=[""]), "data_sources"),
        (
            "register_reward_managers",
            lambda r: r(ClippedManager, name="naive"),
            "clashes with a rewardkit built-in",
        ),
        (
            "register_reward_managers",
            lambda r: r(LengthRM, name="m"),
            "not a subclass of rewardkit.managers.base",
        ),
        ("register_rm_backends", lambda r: r(RMBackend, name="abstract"), "abstract method.*ascore"),
        ("register_rm_backends", lambda r: r("no_such_module_xyz:Cls", name="lazy"), "cannot import"),
        ("register_rm_backends", lambda r: r("no_such_module_xyz:Cls"), "needs a name"),
        ("register_executors", lambda r: 1 / 0, "register_executors raised ZeroDivisionError"),
    ],
)
def test_check_plugin_rejects_bad_registrations(hook, body, message):
    with pytest.raises(PluginCheckError, match=message):
        check_plugin(_plugin(hook, body))


def test_check_plugin_resolves_lazy_references():
    check = check_plugin(_plugin("register_rm_backends", lambda r: r(f"{__name__}:LengthRM", name="len2")))
    assert check.objects["backends"]["len2"] is LengthRM


def test_check_plugin_warns_about_closures_and_unknown_parameters():
    def needs_threshold(response, threshold):
        return 1.0

    check = check_plugin(_plugin("register_scorers", lambda r: r(needs_threshold)))
    assert check.registered == {"scorers": ["needs_threshold"]}
    assert any("threshold" in w for w in check.warnings)
    assert any("worker processes" in w for w in check.warnings)


def test_check_plugin_runs_register_commands():
    import click

    class Commands:
        @hookimpl
        def register_commands(self, cli):
            @cli.command()
            def hello():
                click.echo("hello")

    assert check_plugin(Commands()).registered == {"commands": ["hello"]}

    class Clash:
        @hookimpl
        def register_commands(self, cli):
            @cli.command(name="list-plugins")
            def mine():
                pass

    with pytest.raises(PluginCheckError, match="already has"):  # checked against rewardkit.cli's commands
        check_plugin(Clash())


def test_hook_names_match_the_specs():
    assert hook_names() == sorted(
        n
        for n in dir(rewardkit.hookspecs)
        if n.startswith("register_") and callable(getattr(rewardkit.hookspecs, n))
    )
    assert "register_scorers" in hook_names()


def test_check_plugin_accepts_optional_hooks_from_the_future():
    class Future:
        @hookimpl(optionalhook=True)
        def register_something_newer(self, register):
            pass

        @hookimpl
        def register_scorers(self, register):
            register(shout_score, name="shout")

    assert check_plugin(Future()).registered == {"scorers": ["shout"]}


def test_module_docstring_example_runs():
    import doctest

    import rewardkit.testing

    failures, tried = doctest.testmod(rewardkit.testing)
    assert tried >= 3 and failures == 0
