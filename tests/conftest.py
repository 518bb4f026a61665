"""Shared fixtures. Heavy fixtures (tiny models, Ray) live in the conftest of the folder that needs them."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture(autouse=True)
def _isolated_plugin_env(monkeypatch):
    """No test inherits plugin allow/block lists from the shell."""
    monkeypatch.delenv("REWARDKIT_LOAD_PLUGINS", raising=False)
    monkeypatch.delenv("REWARDKIT_DISABLE_PLUGINS", raising=False)


@pytest.fixture(autouse=True)
def _close_shared_engines():
    """Engines that ``rewardkit.compute`` keeps for the process are closed after each test (no state
    or worker pools carried from one test into the next)."""
    yield
    cache = sys.modules.get("rewardkit.engine_cache")
    if cache is not None:
        cache.close_shared_engines()


@pytest.fixture(scope="session")
def gsm8k_test_path() -> Path:
    """The real GSM8K test split shipped in ../shared/data (skips if absent)."""
    path = SHARED_DATA / "gsm8k" / "test.jsonl"
    if not path.exists():
        pytest.skip(f"{path} not present")
    return path


@pytest.fixture
def write_module(tmp_path):
    """Write a Python file into tmp_path and return its path."""

    def write(name: str, source: str) -> Path:
        path = tmp_path / name
        path.write_text(source, encoding="utf-8")
        return path

    return write


def pytest_report_header(config):
    return f"rewardkit tests; shared data: {SHARED_DATA} ({'present' if SHARED_DATA.exists() else 'absent'}); cpus: {os.cpu_count()}"
