"""pytest collects the plugins' own tests (plugins/*/tests, see ``testpaths``) with the repository suite."""

import pytest


@pytest.fixture(autouse=True)
def _isolated_plugin_env(monkeypatch):
    """No test inherits plugin allow/block lists from the shell (as in tests/conftest.py)."""
    monkeypatch.delenv("REWARDKIT_LOAD_PLUGINS", raising=False)
    monkeypatch.delenv("REWARDKIT_DISABLE_PLUGINS", raising=False)
