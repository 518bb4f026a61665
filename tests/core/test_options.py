"""The one options pattern: Options models, the shared error formatter, deprecated key names."""

from __future__ import annotations

import warnings

import pytest

from rewardkit.backends.http_settings import HTTPSettings, parse_settings
from rewardkit.backends.served_classifier import ServedClassifierSettings
from rewardkit.config import load_config
from rewardkit.errors import ConfigError
from rewardkit.managers.dapo import DAPOOptions
from rewardkit.options import validate_options


def test_error_names_the_full_key_path_and_suggests_the_close_key():
    with pytest.raises(ConfigError) as e:
        validate_options(DAPOOptions, {"overlong_buffer_cfg": {"lenn": 3}}, "reward.reward_manager.kwargs")
    msg = str(e.value)
    assert "reward.reward_manager.kwargs.overlong_buffer_cfg.lenn: unknown key. Did you mean 'len'?" in msg
    assert "Known keys here: enable, len, log, penalty_factor." in msg


def test_http_settings_errors_use_the_same_formatter():
    with pytest.raises(ConfigError) as e:
        parse_settings(HTTPSettings, {"base_url": "http://127.0.0.1:1", "max_retrys": 2}, "remote")
    assert "reward.reward_model.rollout.max_retrys: unknown key. Did you mean 'max_retries'?" in str(e.value)


@pytest.mark.parametrize(
    ("section", "old", "new", "read"),
    [
        (
            {"sandbox_fusion": {"max_concurrent": 7}},
            "max_concurrent",
            "max_concurrency",
            lambda c: c.sandbox_fusion.max_concurrency,
        ),
    ],
)
def test_old_config_spelling_works_with_a_warning_naming_both(section, old, new, read):
    with pytest.warns(DeprecationWarning, match=f"'{old}' is deprecated, use '{new}'"):
        config = load_config({"reward": section})
    assert read(config) == 7
    assert old not in config.to_dict()["sandbox_fusion"]  # dumped under the one name


@pytest.mark.parametrize(
    ("model", "extra", "old", "new", "value"),
    [
        (HTTPSettings, {"base_url": "http://127.0.0.1:1"}, "max_in_flight", "max_concurrency", 5),
        (HTTPSettings, {"base_url": "http://127.0.0.1:1"}, "min_in_flight", "min_concurrency", 2),
        (HTTPSettings, {"base_url": "http://127.0.0.1:1"}, "deadline_s", "batch_timeout_s", 9.0),
        (ServedClassifierSettings, {"base_url": "http://127.0.0.1:1"}, "max_in_flight", "max_concurrency", 3),
    ],
)
def test_old_backend_spelling_works_with_a_warning(model, extra, old, new, value):
    with pytest.warns(DeprecationWarning, match=f"'{old}' is deprecated, use '{new}'"):
        settings = model.model_validate({**extra, old: value})
    assert getattr(settings, new) == value


def test_old_and_new_spelling_together_is_an_error():
    with pytest.raises(ConfigError, match="'max_concurrent' is the deprecated name of 'max_concurrency'"):
        load_config({"reward": {"sandbox_fusion": {"max_concurrent": 1, "max_concurrency": 2}}})


def test_new_spelling_warns_nothing():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert (
            load_config({"reward": {"sandbox_fusion": {"max_concurrency": 3}}}).sandbox_fusion.max_concurrency
            == 3
        )
