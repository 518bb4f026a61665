"""``rewardkit serve`` started as the docs say (a real process on loopback), spoken to by real clients:
OpenRLHF 0.11's own remote-reward client code and rewardkit's ``remote`` backend."""

from __future__ import annotations

import asyncio
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

import rewardkit
from rewardkit.backends.remote import RemoteRM
from rewardkit.batch import to_samples
from rewardkit.config import RewardModelConfig

BIN = Path(sys.executable).parent


class Served:
    """A ``rewardkit serve`` process: its base URL, and its stderr log so far."""

    def __init__(self, args: list[str], tmp: Path):
        self.log_path = tmp / "serve.log"
        self.log = self.log_path.open("w+", encoding="utf-8")
        cmd = [str(BIN / "rewardkit"), "serve", "--host", "127.0.0.1", "--port", "0", *args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self.log, env=os.environ.copy())
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            m = re.search(r"listening on (http://127\.0\.0\.1:\d+)", self.text())
            if m:
                self.url = m.group(1)
                return
            if self.proc.poll() is not None:
                raise RuntimeError(f"rewardkit serve exited: {self.text()}")
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"rewardkit serve did not start: {self.text()}")

    def text(self) -> str:
        return self.log_path.read_text(encoding="utf-8")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


@pytest.fixture(scope="module")
def gsm8k_server(tmp_path_factory):
    """As docs/integrations.md says for OpenRLHF: ``rewardkit serve --default-scorer gsm8k``."""
    served = Served(["--default-scorer", "gsm8k"], tmp_path_factory.mktemp("serve_gsm8k"))
    yield served
    served.stop()


@pytest.fixture(scope="module")
def control_server(tmp_path_factory, rk_config):
    """A server whose scorer fails on FAIL and abstains on ABSTAIN (tests/integrations/conftest.py)."""
    tmp = tmp_path_factory.mktemp("serve_control")
    config = tmp / "reward.yaml"
    config.write_text(yaml.safe_dump({"reward": {**rk_config, "extra_keys": ["ntok"]}}), encoding="utf-8")
    served = Served(["--config", str(config)], tmp)
    yield served
    served.stop()


def _openrlhf_fetch(url: str, queries: list[str], prompts: list[str], labels: list[str]) -> list[dict]:
    from openrlhf.utils.agent import SingleTurnAgentExecutor

    executor = SingleTurnAgentExecutor(url)  # what OpenRLHF builds from --remote_rm_url
    return asyncio.run(executor._fetch_rewards_via_http(queries, prompts, labels))


def test_openrlhf_client_against_default_serve(gsm8k_server):
    pytest.importorskip(
        "openrlhf.utils.agent", reason="OpenRLHF 0.11.2 (pip install --no-deps openrlhf==0.11.2)"
    )
    prompts = [
        "<|user|>What is 2+2?<|assistant|>",
        "<|user|>数学: 3+4?<|assistant|>",
        "<|user|>5-1?<|assistant|>",
    ]
    responses = ["2+2 = 4. #### 4", "#### 8 🙂", ""]
    queries = [p + r for p, r in zip(prompts, responses, strict=True)]
    replies = _openrlhf_fetch(gsm8k_server.url + "/get_reward", queries, prompts, ["4", "7", "4"])
    assert len(replies) == 1  # one server: one shard
    reply = replies[0]
    assert reply["rewards"] == [1.0, 0.0, 0.0]
    assert reply["status"] == ["ok", "ok", "ok"]
    assert reply["scores"] == [1.0, 0.0, 0.0]
    assert reply["extra_logs"]["acc"] == [1.0, 0.0, 0.0]
    assert reply["extra_logs"]["failed"] == [0.0, 0.0, 0.0]


def test_openrlhf_executor_turns_the_reply_into_its_experience_fields(gsm8k_server):
    """The exact code OpenRLHF runs after a rollout: reward, scores and extra_logs as tensors."""
    pytest.importorskip("openrlhf.utils.agent", reason="OpenRLHF 0.11.2")
    import torch

    prompt = "Q: 6*7? A: "
    # a second query whose text lacks its prompt: unroutable, alone; the first still scores
    reply = _openrlhf_fetch(
        gsm8k_server.url + "/get_reward", [prompt + "#### 42", "garbled"], [prompt, "Q: other"], ["42", "1"]
    )[0]
    assert reply["status"] == ["ok", "failed"] and reply["reasons"] == [None, "unroutable"]
    assert "does not contain its prompt" in reply["errors"][1]
    assert reply["extra_logs"]["failed"] == [0.0, 1.0]
    # samples_generator.py: info["reward"] = torch.tensor([reward_val]); extra logs likewise
    info = {"reward": torch.tensor([reply["rewards"]]), "score": torch.tensor([reply["scores"]])}
    info.update({k: torch.tensor([v]) for k, v in reply["extra_logs"].items()})
    assert info["reward"].tolist() == [[1.0, 0.0]] and info["failed"].tolist() == [[0.0, 1.0]]
    assert "/get_reward: 1 of 2 sample(s) failed (unroutable: 1)" in gsm8k_server.text()


def test_serve_logs_every_http_error_with_its_reason(gsm8k_server):
    import urllib.error
    import urllib.request

    req = urllib.request.Request(
        gsm8k_server.url + "/get_reward", data=b"{not json", headers={"Content-Type": "application/json"}
    )
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(req, timeout=30)
    assert info.value.code == 400
    deadline = time.monotonic() + 10
    while "POST /get_reward -> 400" not in gsm8k_server.text() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "POST /get_reward -> 400: request body is not valid JSON" in gsm8k_server.text()


async def test_remote_backend_keeps_the_servers_failures(control_server, rk_config):
    """Failed and abstained samples from `rewardkit serve` stay failed / abstained through `remote`."""
    records = [
        {"prompt": "Q: ", "response": "FAIL", "ground_truth": "x"},
        {"prompt": "Q: ", "response": "ABSTAIN", "ground_truth": "x"},
        {"prompt": "Q: ", "response": "42", "ground_truth": "42"},
        {"prompt": "Q: ", "response": "41", "ground_truth": "42"},
    ]
    direct = rewardkit.compute(records, rk_config)
    assert direct.status == ["failed", "abstained", "ok", "ok"]
    rm = RemoteRM(RewardModelConfig(enable=True, backend="remote", rollout={"base_url": control_server.url}))
    try:
        through = await rm.ascore(to_samples(records))
    finally:
        await rm.aclose()
    assert [r.status for r in through] == direct.status  # was all "ok" with 0.0 before
    assert through[0].reason == "error" and "asked to fail" in through[0].error
    assert through[0].score is None and through[1].score is None
    assert [r.score for r in through[2:]] == [1.0, 0.0]


def test_remote_backend_through_the_engine(control_server):
    config = {
        "executor": "inline",
        "reward_model": {"enable": True, "backend": "remote", "rollout": {"base_url": control_server.url}},
    }
    res = rewardkit.compute(
        [
            {"prompt": "p", "response": "FAIL"},
            {"prompt": "p", "response": "ABSTAIN"},
            {"prompt": "p", "response": "x", "ground_truth": "x"},
        ],
        config,
    )
    assert res.status == ["failed", "abstained", "ok"]
    assert math.isnan(res.scores[0]) and math.isnan(res.scores[1]) and res.scores[2] == 1.0
    assert res.metrics["reward/failed/error"] == 1.0
