import pytest

from rewardkit.errors import BrokenPluginError, DuplicateNameError, UnknownNameError
from rewardkit.registry import Registry, ScorerRegistry


def test_duplicate_name_names_both_providers():
    reg = Registry("reward manager")
    reg.add("dapo", object, "plugin-a")
    with pytest.raises(DuplicateNameError) as info:
        reg.add("dapo", object, "plugin-b")
    msg = str(info.value)
    assert "'plugin-a'" in msg and "'plugin-b'" in msg and "reward manager 'dapo'" in msg


def test_unknown_name_lists_known_and_suggests_closest():
    reg = Registry("scorer")
    for n in ("gsm8k", "math", "math_dapo"):
        reg.add(n, object, "builtin")
    with pytest.raises(UnknownNameError) as info:
        reg.get("gsm8")
    msg = str(info.value)
    assert "unknown scorer 'gsm8'" in msg
    assert "Did you mean 'gsm8k'?" in msg
    assert "Known scorers: gsm8k, math, math_dapo." in msg
    assert isinstance(info.value, KeyError)
    with pytest.raises(UnknownNameError, match=r"Known scorers: gsm8k, math, math_dapo\.$"):
        reg.get("zzzzzz")


def test_lazy_reference_resolves_once_and_broken_reference_is_reported():
    reg = Registry("executor")
    reg.add("json", "json:JSONDecoder", "builtin")
    import json

    assert reg.get("json") is json.JSONDecoder
    reg.add("gone", "no_such_mod_abc:Thing", "some-plugin")
    with pytest.raises(BrokenPluginError, match="executor 'gone' from plugin 'some-plugin' cannot be loaded"):
        reg.get("gone")


def test_scorer_routing_exact_before_pattern_and_conflicts():
    reg = ScorerRegistry()
    reg.add("math", object, "builtin", data_sources=("math", "aime*"))
    reg.add("aime24", object, "plugin", data_sources=("aime24",))
    assert reg.name_for("aime24") == "aime24"
    assert reg.name_for("aime2025") == "math"
    assert reg.name_for("other") is None
    assert reg.data_sources() == ["aime*", "aime24", "math"]
    with pytest.raises(DuplicateNameError, match="data source 'math' is registered twice"):
        reg.add("math2", object, "plugin-x", data_sources=("math",))
    assert "math2" not in reg  # a failed registration leaves nothing behind


def test_remove_provider_clears_names_and_routes():
    reg = ScorerRegistry()
    reg.add("a", object, "p1", data_sources=("ds-a", "a*"))
    reg.add("b", object, "p2", data_sources=("ds-b",))
    reg.remove_provider("p1")
    assert reg.names() == ["b"]
    assert reg.name_for("ds-a") is None and reg.name_for("abc") is None
    assert reg.name_for("ds-b") == "b"
