"""A real vLLM server launched by rewardkit: a tiny sequence classifier, scored through /classify,
put to sleep and woken. Runs only where a CUDA GPU and vLLM are present (skips elsewhere)."""

from __future__ import annotations

import importlib.util
import shutil

import pytest

pytestmark = pytest.mark.cuda


def _has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:  # noqa: BLE001
        return False


cuda_and_vllm = pytest.mark.skipif(
    not (_has_cuda() and importlib.util.find_spec("vllm") is not None and shutil.which("vllm")),
    reason="needs a CUDA GPU and vLLM",
)


@cuda_and_vllm
def test_real_vllm_serves_the_tiny_classifier_sleeps_and_wakes(tmp_path):
    from tiny_models import build_tiny_classifier

    from rewardkit import RewardEngine
    from rewardkit.backends.discriminative import DiscriminativeRM
    from rewardkit.batch import to_samples
    from rewardkit.config import RewardModelConfig

    path = str(build_tiny_classifier(tmp_path / "rm"))
    samples = [{"prompt": "two plus two?", "response": r} for r in ("four", "five", "", "ünïcødé")]
    config = {
        "executor": "inline",
        "reward_model": {
            "enable": True,
            "backend": "served-classifier",
            "model_path": path,
            "server": {
                "engine": "vllm",
                "gpus_per_replica": 1,
                "placement": "colocated",
                "startup_timeout_s": 900,
                "engine_args": {
                    "runner": "pooling",
                    "dtype": "float32",
                    "gpu_memory_utilization": 0.2,
                    "max_model_len": 512,
                    "enforce_eager": True,
                },
            },
        },
    }
    with RewardEngine(config) as engine:
        result = engine.compute(samples)
        assert engine.servers.asleep  # colocated: woken for the batch, asleep again
        assert engine.wake_up().keys() == {"r0"}
        again = engine.compute(samples)
        pids = engine.servers.pids
    assert result.status == ["ok"] * 4
    assert again.scores == pytest.approx(result.scores, abs=1e-4)
    assert result.metrics["rm/server/wake_up_s/r0"] >= 0
    local = DiscriminativeRM(RewardModelConfig(model_path=path, kwargs={"device": "cpu"})).score(
        to_samples(samples)
    )
    assert result.scores == pytest.approx([r.score for r in local], abs=1e-2)
    import os

    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.killpg(pid, 0)
