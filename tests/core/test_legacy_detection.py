"""load_config's legacy-config gate lives in config.py (no import of migrate); it must agree with migrate."""

import pytest

from rewardkit import config as cfg
from rewardkit import migrate
from rewardkit.config import RewardModelConfig, load_config
from rewardkit.errors import ConfigError


def test_legacy_key_tables_match_the_migration_rules():
    assert migrate._LEGACY_RM_KEYS - set(RewardModelConfig.model_fields) == cfg._LEGACY_ONLY_RM_KEYS
    assert cfg._VERL_ONLY_ROLLOUT_KEYS == migrate._VERL_ONLY_ROLLOUT


def test_a_valid_config_is_not_checked_for_legacy_keys(monkeypatch):
    calls = []
    monkeypatch.setattr(cfg, "looks_legacy", lambda data: calls.append(data) or False)
    load_config({"custom_reward_function": {"path": "r.py"}, "reward_model": {"enable": False}})
    assert calls == []


@pytest.mark.parametrize(
    "legacy",
    [
        {"reward_model": {"reward_manager": "dapo"}},
        {"reward_model": {"enable": True, "rollout": {"gpu_memory_utilization": 0.5}}},
        {"reward_model": {"enable": False}, "trainer": {"n_gpus_per_node": 8}},
    ],
)
def test_legacy_configs_are_still_refused_with_the_migration_hint(legacy):
    with pytest.raises(ConfigError, match="migrate-config"):
        load_config(legacy)
