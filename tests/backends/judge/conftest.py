"""Fixtures for the judge tests: a real scripted HTTP server on 127.0.0.1 and backend builders."""

from __future__ import annotations

import socket

import pytest

from rewardkit.config import RewardModelConfig

from .judge_server import ScriptedServer


@pytest.fixture(scope="session")
def _server_process_wide():
    server = ScriptedServer().start()
    yield server
    server.stop()


@pytest.fixture
def server(_server_process_wide):
    """The scripted OpenAI-compatible / OpenRLHF server, with its script and logs cleared."""
    _server_process_wide.reset()
    yield _server_process_wide
    _server_process_wide.reset()


@pytest.fixture
def dead_url():
    """A URL on 127.0.0.1 where nothing listens (connections are refused)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}"


FAST = {"backoff_base_s": 0.005, "backoff_cap_s": 0.05, "request_timeout_s": 2.0, "max_retries": 3}


@pytest.fixture
def make_judge(server):
    """Build a GenerativeRM against the scripted server: ``make_judge(**rollout_overrides)``."""
    from rewardkit.backends.generative import GenerativeRM

    made = []

    def make(**rollout):
        cfg = {"base_url": server.base_url, "model": "judge", **FAST, **rollout}
        rm = GenerativeRM(RewardModelConfig(enable=True, backend="generative", rollout=cfg))
        made.append(rm)
        return rm

    yield make
    for rm in made:
        rm.close()


@pytest.fixture
def make_remote(server):
    """Build a RemoteRM against the scripted server: ``make_remote(**rollout_overrides)``."""
    from rewardkit.backends.remote import RemoteRM

    made = []

    def make(**rollout):
        cfg = {"base_url": server.base_url, **FAST, **rollout}
        rm = RemoteRM(RewardModelConfig(enable=True, backend="remote", rollout=cfg))
        made.append(rm)
        return rm

    yield make
    for rm in made:
        rm.close()
