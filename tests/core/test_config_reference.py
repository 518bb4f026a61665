"""docs/config-reference.md is what the models say: regenerate it with `python -m rewardkit.config_reference`."""

from __future__ import annotations

from rewardkit import config_reference
from rewardkit.config import RewardConfig
from rewardkit.managers.dapo import DAPOOptions, OverlongBufferOptions
from rewardkit.plugins import get_registries


def test_committed_reference_matches_the_models():
    committed = config_reference.DOC_PATH.read_text(encoding="utf-8")
    assert committed == config_reference.render(), (
        "docs/config-reference.md is out of date: run `python -m rewardkit.config_reference`"
    )


def test_reference_lists_every_field_of_config_and_builtin_options():
    text = config_reference.render()
    for name in RewardConfig.model_fields:
        assert f"| `{name}` |" in text
    for model in (DAPOOptions, OverlongBufferOptions):
        for name in model.model_fields:
            assert f"| `{name}` |" in text
    regs = get_registries()
    for name in ("naive", "batch", "dapo", "composite"):
        assert f"(manager `{name}`)" in text and regs.managers.get(name).Options is not None


def test_every_documented_field_has_a_description():
    missing = [line for line in config_reference.render().splitlines() if line.endswith("|  |")]
    assert missing == []
