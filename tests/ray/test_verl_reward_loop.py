"""verl 0.9.1's own RewardLoopManager / RewardLoopWorker (2 Ray actors) scoring through rewardkit.

The workers are verl's own class, created by verl's manager as Ray actors; they build rewardkit's
manager through verl's ``load_reward_manager``, with ``source: register`` (resolved in the worker
from verl's registry, filled by rewardkit's ``verl.plugins`` entry point) and ``source: importlib``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from tiny_models import padded_rollout

from rewardkit.errors import SampleError

torch = pytest.importorskip("torch")
OmegaConf = pytest.importorskip("omegaconf").OmegaConf
pytest.importorskip("verl.experimental.reward_loop", reason="verl 0.9.1's reward loop (codetiming, orjson)")

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

MIXED = [  # (prompt, response, ground_truth, data_source): the first sample fails (unroutable)
    ("q0", "#### 4", "4", "no/such/source"),
    ("q1", "#### 4", "4", "openai/gsm8k"),
    ("q2", "The answer is 5", "4", "openai/gsm8k"),
    ("q3 数学", "#### 7 🙂", "7", "openai/gsm8k"),
    ("q4", "", "4", "openai/gsm8k"),
]


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    from tiny_models import build_tokenizer

    path = tmp_path_factory.mktemp("verl_tok")
    build_tokenizer(path)
    return path


def make_dataproto(tokenizer, rows, prompt_len=16, response_len=12):
    from verl.protocol import DataProto

    prompts, responses, masks = padded_rollout(
        tokenizer, [(r[0], r[1]) for r in rows], prompt_len, response_len
    )
    prompts_t, responses_t = torch.tensor(prompts), torch.tensor(responses)
    return DataProto.from_dict(
        tensors={
            "prompts": prompts_t,
            "responses": responses_t,
            "input_ids": torch.cat([prompts_t, responses_t], dim=1),
            "attention_mask": torch.tensor(masks),
        },
        non_tensors={
            "data_source": np.array([r[3] for r in rows], dtype=object),
            "reward_model": np.array([{"ground_truth": r[2], "style": "rule"} for r in rows], dtype=object),
            "extra_info": np.array([{"index": i} for i in range(len(rows))], dtype=object),
        },
    )


def verl_config(tokenizer_dir, reward_manager: dict):
    """The parts of verl's trainer config that RewardLoopManager / RewardLoopWorker read."""
    return OmegaConf.create(
        {
            "actor_rollout_ref": {"model": {"path": str(tokenizer_dir), "tokenizer_path": None}},
            "data": {"reward_fn_key": "data_source"},
            "reward": {
                "num_workers": 2,
                "reward_manager": reward_manager,
                "custom_reward_function": {
                    # rewardkit's compute_score as verl's function: the manager takes its rewardkit_config
                    "path": "pkg://rewardkit.integrations.verl",
                    "name": "compute_score",
                    "reward_kwargs": {"rewardkit_config": '{"executor": "inline"}'},
                },
                "reward_model": {"enable": False, "enable_resource_pool": False},
                "sandbox_fusion": {"url": None},
            },
        }
    )


REGISTER = {"source": "register", "name": "rewardkit", "module": {"path": None, "name": None}}
VERL_NAIVE = {"source": "register", "name": "naive", "module": {"path": None, "name": None}}  # verl's own
IMPORTLIB = {
    "source": "importlib",
    "name": "RewardKitRewardManager",
    "module": {"path": "pkg://rewardkit.integrations.verl", "name": None},
}


def test_pyproject_declares_the_verl_plugin_the_fixture_mirrors():
    tomllib = pytest.importorskip("tomllib", reason="the standard library's TOML reader (Python 3.11+)")
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert meta["project"]["entry-points"]["verl.plugins"] == {
        "rewardkit": "rewardkit.integrations.verl_plugin"
    }


def test_import_verl_registers_rewardkit_in_a_fresh_ray_worker(ray_cluster):
    """A fresh worker process that imports only verl finds `rewardkit` in verl's registry."""

    @ray_cluster.remote(num_cpus=0)
    def lookup() -> str:
        import verl  # noqa: F401 - loads the verl.plugins entry points
        from verl.experimental.reward_loop.reward_manager import get_reward_manager_cls

        return get_reward_manager_cls("rewardkit").__qualname__

    assert ray_cluster.get(lookup.remote(), timeout=180) == "RewardKitRewardManager"


def test_every_rewardkit_error_crosses_a_ray_actor_with_its_fields(ray_cluster):
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "rk_error_cases", ROOT / "tests" / "core" / "test_errors.py"
    )
    cases = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cases)

    @ray_cluster.remote(num_cpus=0)
    class Raiser:
        def boom(self, err):
            raise err

    actor = Raiser.remote()
    try:
        for case in cases.CASES:
            with pytest.raises(type(case)) as info:  # not UnserializableException
                ray_cluster.get(actor.boom.remote(case), timeout=120)
            err = info.value
            assert str(case) in str(err)
            for key, value in vars(case).items():
                assert getattr(err, key) == value, (type(case).__name__, key)
        with pytest.raises(SampleError) as info:
            ray_cluster.get(
                actor.boom.remote(
                    SampleError(3, "data_source", "unknown data source 'x'", reason="unroutable")
                ),
                timeout=120,
            )
        err = info.value
        assert (err.index, err.field, err.reason, err.detail) == (
            3,
            "data_source",
            "unroutable",
            "unknown data source 'x'",
        )
    finally:
        ray_cluster.kill(actor)


@pytest.mark.parametrize(
    "reward_manager",
    [REGISTER, IMPORTLIB, VERL_NAIVE],
    ids=["register", "importlib", "verl-naive+compute_score"],
)
def test_verls_reward_loop_scores_a_mixed_batch(ray_cluster, tokenizer_dir, reward_manager):
    from tiny_models import build_tokenizer
    from verl.experimental.reward_loop import RewardLoopManager
    from verl.trainer.ppo.reward import extract_reward

    import rewardkit.integrations.verl_plugin  # noqa: F401 - the driver, as `import verl` would with rewardkit installed

    tokenizer = build_tokenizer(tokenizer_dir)
    data = make_dataproto(tokenizer, MIXED)
    manager = RewardLoopManager(verl_config(tokenizer_dir, reward_manager))
    try:
        assert len(manager.reward_loop_workers) == 2
        # verl-naive: raised KeyError('acc') with a failed first sample; ours lost acc/pred
        out = manager.compute_rm_score(data)
    finally:
        for w in manager.reward_loop_workers:
            ray_cluster.kill(w)
    rm_scores, info = extract_reward(out)
    assert list(info["status"]) == ["failed", "ok", "ok", "ok", "ok"]
    assert info["reason"][0] == "unroutable" and "no/such/source" in info["error"][0]
    assert list(info["acc"]) == [None, True, False, True, False]
    assert list(info["pred"]) == [None, "4", "5", "7", None]
    assert set(info) >= {"score", "status", "reason", "error", "acc", "pred", "extra"}
    if reward_manager is not VERL_NAIVE:  # verl's own manager calls our compute_score per sample
        assert list(info["empty_response"]) == [False, False, False, False, True]
    # one reward per row on its last valid response token; the failed sample gets failure_score (0.0)
    assert rm_scores.shape == data.batch["responses"].shape
    assert rm_scores.sum(-1).tolist() == [0.0, 1.0, 0.0, 1.0, 0.0]
    assert torch.count_nonzero(rm_scores[4]) == 0  # empty response: no reward token, never index -1
