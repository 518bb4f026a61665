"""Discovery through real entry points: throwaway distributions (``*.dist-info``) on sys.path."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import rewardkit
from rewardkit import plugins
from rewardkit.errors import BrokenPluginError, SampleError, UnknownNameError

from .conftest import make_dist

GOOD = """
import rewardkit

def shout_score(response, ground_truth):
    return float(response.upper() == str(ground_truth).upper())

@rewardkit.hookimpl
def register_scorers(register):
    register(shout_score, name="shout", data_sources=["shout/v1", "shout-*"])
"""

BROKEN_IMPORT = """
import a_dependency_that_is_not_installed
"""

MISSPELT = """
import rewardkit

@rewardkit.hookimpl
def register_scorer(register):  # missing the trailing s
    pass
"""

RAISES_IN_HOOK = """
import rewardkit

def half(response):
    return 0.5

@rewardkit.hookimpl
def register_scorers(register):
    register(half, name="half_registered")
    raise RuntimeError("config file missing")
"""

DUPLICATE = """
import rewardkit

def other_shout(response):
    return 0.0

@rewardkit.hookimpl
def register_scorers(register):
    register(other_shout, name="shout")
"""


def by_name(regs):
    return {p.name: p for p in regs.plugins}


def test_plugin_found_through_entry_point_and_scores(site):
    make_dist(site, "rewardkit-shout", "1.2.3", "shout", "rkt_shout", GOOD)
    regs = plugins.get_registries()
    info = by_name(regs)["shout"]
    assert (info.distribution, info.version, info.builtin, info.error) == (
        "rewardkit-shout",
        "1.2.3",
        False,
        None,
    )
    assert info.hooks == ["register_scorers"]
    assert info.registered == {"scorers": ["shout"]}
    assert regs.scorers.name_for("shout-2") == "shout"
    result = rewardkit.compute(
        [
            {"response": "Hello", "ground_truth": "HELLO", "data_source": "shout/v1"},
            {"response": "bye", "ground_truth": "HELLO", "data_source": "shout-x"},
        ],
        {"executor": "inline"},
    )
    assert result.scores == [1.0, 0.0]


def test_plugins_load_lazily_not_at_import():
    code = "import sys, rewardkit; print('rkt' in ''.join(sys.modules), 'pluggy' in sys.modules, 'torch' in sys.modules, 'ray' in sys.modules, 'transformers' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == ["False", "True", "False", "False", "False"]


def test_broken_plugins_are_collected_and_the_rest_keeps_working(site):
    make_dist(site, "rewardkit-shout", "1.2.3", "shout", "rkt_shout", GOOD)
    make_dist(site, "rewardkit-broken", "0.0.1", "broken", "rkt_broken", BROKEN_IMPORT)
    make_dist(site, "rewardkit-misspelt", "0.2", "misspelt", "rkt_misspelt", MISSPELT)
    make_dist(site, "rewardkit-raises", "0.3", "raises", "rkt_raises", RAISES_IN_HOOK)
    regs = plugins.get_registries()
    infos = by_name(regs)
    assert infos["broken"].error.startswith(
        "ModuleNotFoundError: No module named 'a_dependency_that_is_not_installed'"
    )
    assert (infos["broken"].distribution, infos["broken"].version) == ("rewardkit-broken", "0.0.1")
    assert infos["broken"].entry_point == "broken = rkt_broken"
    assert "unknown hook" in infos["misspelt"].error and "register_scorer" in infos["misspelt"].error
    assert infos["raises"].error.startswith("register_scorers failed: RuntimeError: config file missing")
    assert "half_registered" not in regs.scorers  # half a plugin is worse than none
    assert infos["shout"].error is None and "shout" in regs.scorers
    # Asking for something missing mentions the broken plugins.
    with pytest.raises(UnknownNameError, match="these plugins failed to load and may provide it: broken"):
        regs.scorers.get("something_from_broken")
    r = rewardkit.compute([{"response": "x", "data_source": "broken/ds"}], {"executor": "inline"})
    assert r.reasons == ["unroutable"] and re.search("field 'data_source'.*broken", r.errors[0])
    with pytest.raises(SampleError, match="sample 0, field 'data_source'.*broken"):
        rewardkit.compute(
            [{"response": "x", "data_source": "broken/ds"}], {"executor": "inline", "strict_routing": True}
        )


def test_duplicate_names_across_plugins_name_both(site):
    make_dist(site, "rewardkit-shout", "1.2.3", "shout", "rkt_shout", GOOD)
    make_dist(site, "rewardkit-dup", "9.9", "dup", "rkt_dup", DUPLICATE)
    regs = plugins.get_registries()
    infos = by_name(regs)
    # Entry points load in discovery order; whichever came second is the broken one, naming both.
    second = infos["dup"] if infos["dup"].error else infos["shout"]
    assert "scorer 'shout' is registered twice" in second.error
    assert "by plugin 'shout'" in second.error and "by plugin 'dup'" in second.error


@pytest.mark.parametrize(
    ("env", "config", "expected"),
    [
        ({}, None, {"shout", "broken"}),
        ({"REWARDKIT_LOAD_PLUGINS": ""}, None, set()),
        ({"REWARDKIT_LOAD_PLUGINS": "shout"}, None, {"shout"}),
        ({"REWARDKIT_LOAD_PLUGINS": "rewardkit-shout"}, None, {"shout"}),  # distribution names work too
        ({"REWARDKIT_DISABLE_PLUGINS": "broken"}, None, {"shout"}),
        ({}, {"load": ["broken"]}, {"broken"}),
        ({}, {"disable": ["shout", "broken"]}, set()),
        ({"REWARDKIT_DISABLE_PLUGINS": ""}, {"disable": ["shout"]}, {"shout", "broken"}),  # env wins
    ],
)
def test_allow_and_block_lists(site, monkeypatch, env, config, expected):
    make_dist(site, "rewardkit-shout", "1.2.3", "shout", "rkt_shout", GOOD)
    make_dist(site, "rewardkit-broken", "0.0.1", "broken", "rkt_broken", BROKEN_IMPORT)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    from rewardkit.config import PluginSettings

    regs = plugins.get_registries(PluginSettings(**config) if config else None)
    # Only this test's throwaway plugins count: the test environment may have real ones installed.
    assert {p.name for p in regs.plugins if p.name in ("shout", "broken")} == expected
    assert {p.name for p in regs.plugins if p.builtin} == set(plugins.BUILTIN_PLUGINS)


def test_plugin_settings_in_config_travel_with_the_engine(site):
    make_dist(site, "rewardkit-shout", "1.2.3", "shout", "rkt_shout", GOOD)
    engine_cfg = {"executor": "inline", "plugins": {"disable": ["shout"]}}
    r = rewardkit.compute([{"response": "a", "data_source": "shout/v1"}], engine_cfg)
    assert r.reasons == ["unroutable"] and "unknown data source 'shout/v1'" in r.errors[0]


def test_using_a_lazily_registered_class_from_a_broken_module(site):
    make_dist(
        site,
        "rewardkit-lazy",
        "1.0",
        "lazy",
        "rkt_lazy",
        "import rewardkit\n@rewardkit.hookimpl\ndef register_reward_managers(register):\n"
        "    register('rkt_lazy_impl:Manager', name='lazy_manager')\n",
    )
    with pytest.raises(
        BrokenPluginError, match="reward manager 'lazy_manager' from plugin 'lazy' cannot be loaded"
    ):
        rewardkit.RewardEngine({"reward_manager": {"name": "lazy_manager"}})


def run_cli(site: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), *sys.path])}
    env.pop("REWARDKIT_LOAD_PLUGINS", None)
    env.pop("REWARDKIT_DISABLE_PLUGINS", None)
    return subprocess.run(
        [sys.executable, "-m", "rewardkit.cli", *args], capture_output=True, text=True, env=env, timeout=120
    )


def test_list_plugins_json_in_a_subprocess(site):
    make_dist(site, "rewardkit-shout", "1.2.3", "shout", "rkt_shout", GOOD)
    proc = run_cli(site, "list-plugins", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    shout = next(p for p in data if p["name"] == "shout")
    assert shout == {
        "name": "shout",
        "version": "1.2.3",
        "distribution": "rewardkit-shout",
        "builtin": False,
        "kinds": ["scorers"],
        "hooks": ["register_scorers"],
        "registered": {"scorers": ["shout"]},
        "error": None,
    }
    assert not any(p["builtin"] for p in data)
    everything = json.loads(run_cli(site, "list-plugins", "--json", "--all").stdout)
    assert {"rewardkit.scorers", "rewardkit.managers"} <= {p["name"] for p in everything}
    assert [p["name"] for p in everything] == sorted(
        (p["name"] for p in everything), key=lambda n: (n.startswith("rewardkit."), n)
    )


def test_list_plugins_shows_broken_plugin_and_exits_1(site):
    make_dist(site, "rewardkit-shout", "1.2.3", "shout", "rkt_shout", GOOD)
    make_dist(site, "rewardkit-broken", "0.0.1", "broken", "rkt_broken", BROKEN_IMPORT)
    proc = run_cli(site, "list-plugins", "--json")
    assert proc.returncode == 1
    data = {p["name"]: p for p in json.loads(proc.stdout)}
    assert "a_dependency_that_is_not_installed" in data["broken"]["error"]
    assert data["shout"]["error"] is None
    assert "broken plugin(s): broken" in proc.stderr
    table = run_cli(site, "list-plugins")
    assert table.returncode == 1
    assert "broken" in table.stdout and "ModuleNotFoundError" in table.stdout
    # The rest of the CLI keeps working with a broken plugin installed.
    assert run_cli(site, "--help").returncode == 0
