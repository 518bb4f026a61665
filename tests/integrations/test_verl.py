"""verl adapters against the installed verl: a real DataProto, verl's own loaders and managers."""

from __future__ import annotations

import asyncio
import json
import math

import pytest
from tiny_models import padded_rollout

from rewardkit.errors import ConfigError
from rewardkit.integrations import verl as rk_verl

torch = pytest.importorskip("torch")
_why = "needs verl's DataProto: pip install verl --no-deps, plus tensordict and omegaconf"
DataProto = pytest.importorskip("verl.protocol", reason=_why).DataProto
OmegaConf = pytest.importorskip("omegaconf", reason=_why).OmegaConf

import rewardkit  # noqa: E402

ROWS = [
    # (prompt, response, ground_truth, data_source)
    ("What is 6 * 7?", "42", "42", "toy/a"),
    ("Say hi in French", "salut", "bonjour", "toy/b"),
    ("Unicode: 数学 café?", "数学 café 🙂", "数学 café 🙂", "toy/a"),
    ("Fail please", "FAIL", "x", "toy/b"),
    ("Abstain please", "ABSTAIN", "x", "toy/a"),
    ("Empty answer", "", "", "toy/b"),
]


@pytest.fixture(autouse=True)
def _fresh_engines(monkeypatch):
    monkeypatch.delenv(rk_verl.ENV_CONFIG, raising=False)
    yield
    rk_verl.close_engines()


def make_dataproto(tokenizer, rows=ROWS, prompt_len=24, response_len=16) -> DataProto:
    """A verl DataProto as the rollout builds it: left-padded prompts, right-padded responses ending in EOS."""
    prompts, responses, masks = padded_rollout(
        tokenizer, [(r[0], r[1]) for r in rows], prompt_len, response_len
    )
    prompts_t, responses_t = torch.tensor(prompts), torch.tensor(responses)
    attention = torch.tensor(masks)
    import numpy as np

    return DataProto.from_dict(
        tensors={
            "prompts": prompts_t,
            "responses": responses_t,
            "input_ids": torch.cat([prompts_t, responses_t], dim=1),
            "attention_mask": attention,
        },
        non_tensors={
            "data_source": np.array([r[3] for r in rows], dtype=object),
            "reward_model": np.array([{"ground_truth": r[2], "style": "rule"} for r in rows], dtype=object),
            "extra_info": np.array([{"index": i} for i in range(len(rows))], dtype=object),
            "uid": np.array([f"u{i}" for i in range(len(rows))], dtype=object),
        },
    )


def test_import_does_not_pull_verl_or_torch():
    import subprocess
    import sys

    code = (
        "import sys, rewardkit.integrations.verl, rewardkit.integrations.trl, rewardkit.integrations; "
        "bad = [m for m in ('verl', 'torch', 'trl', 'transformers') if m in sys.modules]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_compute_score_matches_rewardkit(rk_config):
    ok = rk_verl.compute_score("toy", "42", "42", {"k": 1}, rewardkit_config=rk_config)
    assert ok["score"] == 1.0 and ok["status"] == "ok" and ok["reason"] == "" and ok["acc"] is True
    miss = rk_verl.compute_score("toy", "41", "42", rewardkit_config=rk_config, reward_router_address=None)
    assert miss["score"] == 0.0 and miss["status"] == "ok"
    own = rewardkit.compute([{"response": "42", "ground_truth": "42"}], rk_config)
    assert ok["score"] == own.scores[0]


def test_compute_score_failure_is_typed_not_silent(rk_config):
    failed = rk_verl.compute_score("toy", "FAIL", "x", rewardkit_config=rk_config)
    assert failed["status"] == "failed" and failed["reason"] == "error" and failed["score"] == 0.0
    abstained = rk_verl.compute_score("toy", "ABSTAIN", "x", rewardkit_config=rk_config)
    assert abstained["status"] == "abstained" and abstained["score"] == 0.0
    cfg = {**rk_config, "failure_score": -1.0, "abstain_score": 0.25}
    assert rk_verl.compute_score("toy", "FAIL", "x", rewardkit_config=cfg)["score"] == -1.0
    assert rk_verl.compute_score("toy", "ABSTAIN", "x", rewardkit_config=cfg)["score"] == 0.25


def test_engine_cache_and_env_config(rk_config, tmp_path, monkeypatch):
    assert rk_verl.get_engine(dict(rk_config)) is rk_verl.get_engine(dict(rk_config))
    path = tmp_path / "rk.yaml"
    path.write_text(
        f"reward:\n  executor: inline\n  failure_score: -2.0\n  custom_reward_function:\n"
        f"    path: {rk_config['custom_reward_function']['path']}\n",
        encoding="utf-8",
    )
    monkeypatch.setenv(rk_verl.ENV_CONFIG, str(path))
    assert rk_verl.compute_score("toy", "FAIL", "x")["score"] == -2.0
    engine = rk_verl.get_engine()
    assert engine is rk_verl.get_engine(str(path)) and engine is not rk_verl.get_engine(dict(rk_config))


def test_config_pointing_at_itself_is_refused():
    with pytest.raises(ConfigError, match="call itself"):
        rk_verl.get_engine(
            {"custom_reward_function": {"path": "pkg://rewardkit.integrations.verl", "name": "compute_score"}}
        )


def test_async_compute_score(rk_config):
    out = asyncio.run(rk_verl.acompute_score("toy", "42", "42", rewardkit_config=rk_config))
    assert out["score"] == 1.0


def test_loaded_by_verls_custom_reward_loader(rk_config):
    from verl.trainer.ppo.reward import get_custom_reward_fn

    cfg = OmegaConf.create(
        {
            "reward": {
                "custom_reward_function": {
                    "path": "pkg://rewardkit.integrations.verl",
                    "name": "compute_score",
                    "reward_kwargs": {"rewardkit_config": rk_config},
                }
            }
        }
    )
    fn = get_custom_reward_fn(cfg)
    out = fn(data_source="toy", solution_str="42", ground_truth="42", extra_info={})
    assert out["score"] == 1.0 and out["status"] == "ok"
    assert fn(data_source="toy", solution_str="FAIL", ground_truth="42", extra_info={})["status"] == "failed"


def test_manager_reward_tensor_matches_rewardkit(rk_config, tokenizer):
    data = make_dataproto(tokenizer)
    rk_config = {**rk_config, "extra_keys": ["ntok"]}
    manager = rk_verl.RewardKitRewardManager(tokenizer, num_examine=0, rewardkit_config=rk_config)
    out = manager(data, return_dict=True)
    tensor, info = out["reward_tensor"], out["reward_extra_info"]
    assert tensor.shape == data.batch["responses"].shape and tensor.dtype == torch.float32

    prompt_len = data.batch["prompts"].shape[-1]
    mask = data.batch["attention_mask"][:, prompt_len:]
    records = [{"response": r[1], "ground_truth": r[2], "data_source": r[3]} for r in ROWS]
    for rec, n in zip(records, mask.sum(-1).tolist(), strict=True):
        rec["response_length"] = n
    own = rewardkit.compute(records, rk_config)
    assert torch.equal(tensor, own.token_level_rewards(mask))
    assert info["status"] == ["ok", "ok", "ok", "failed", "abstained", "ok"]
    assert info["score"][:3] == [1.0, 0.0, 1.0]
    assert info["reason"][3] == "error"
    assert info["ntok"][:3] == mask.sum(-1).tolist()[:3]  # the response length in tokens reached the scorer
    for key, values in info.items():
        assert len(values) == len(data), key
    # the score sits on the last valid response token; the empty response writes nothing (never index -1)
    for i, n in enumerate(mask.sum(-1).tolist()):
        row = tensor[i]
        if n == 0:
            assert torch.count_nonzero(row) == 0
        else:
            assert row[n - 1].item() == own.scores[i] or math.isnan(own.scores[i])
            assert torch.count_nonzero(row[n:]) == 0
    assert torch.equal(manager(data), tensor)


def test_manager_agrees_with_verls_naive_manager(rk_config, tokenizer):
    from verl.workers.reward_manager.naive import NaiveRewardManager

    rows = [r for r in ROWS if r[1]]  # verl's own manager writes an empty response's score to index -1
    data = make_dataproto(tokenizer, rows)
    fn = lambda **kw: rk_verl.compute_score(**kw, rewardkit_config=rk_config)  # noqa: E731
    theirs = NaiveRewardManager(tokenizer, num_examine=0, compute_score=fn)(data, return_dict=True)
    ours = rk_verl.RewardKitRewardManager(tokenizer, 0, rewardkit_config=rk_config)(data, return_dict=True)
    assert torch.equal(theirs["reward_tensor"], ours["reward_tensor"])
    assert list(theirs["reward_extra_info"]["status"]) == ours["reward_extra_info"]["status"]


def test_manager_through_verls_reward_loop_loader(scorer_path, tokenizer):
    """verl's load_reward_manager builds our class from its config; run_single + assemble_rm_scores agree."""
    from verl.trainer.ppo.reward import load_reward_manager, resolve_reward_manager_cls

    cfg = OmegaConf.create(
        {
            "reward": {
                "custom_reward_function": {
                    "path": str(scorer_path),
                    "name": "compute_score",
                    "reward_kwargs": {},
                },
                "reward_manager": {
                    "source": "importlib",
                    "name": "RewardKitRewardManager",
                    "module": {"path": "pkg://rewardkit.integrations.verl", "name": None},
                },
                "sandbox_fusion": {"url": None},
            }
        }
    )
    assert resolve_reward_manager_cls(cfg) is rk_verl.RewardKitRewardManager
    manager = load_reward_manager(cfg, tokenizer, reward_router_address=None, reward_model_tokenizer=None)
    assert isinstance(manager, rk_verl.RewardKitRewardManager)
    # it scores with the user's function that verl named, loaded by rewardkit from the same file
    crf = manager.engine.config.custom_reward_function
    assert crf.path == str(scorer_path) and crf.name == "compute_score"

    data = make_dataproto(tokenizer)

    async def run_all():
        return await asyncio.gather(*(manager.run_single(data[i : i + 1]) for i in range(len(data))))

    outputs = asyncio.run(run_all())
    assert [o["reward_extra_info"]["status"] for o in outputs] == [
        "ok",
        "ok",
        "ok",
        "failed",
        "abstained",
        "ok",
    ]
    keys = manager.info_keys()
    assert all(list(o["reward_extra_info"]) == keys for o in outputs)
    assert {"acc", "pred", "error", "extra"} <= set(keys)
    assert [o["reward_extra_info"]["acc"] for o in outputs] == [True, False, True, None, None, True]
    assert "asked to fail" in outputs[3]["reward_extra_info"]["error"]
    rm_scores = rk_verl.RewardKitRewardManager.assemble_rm_scores(data, [o["reward_score"] for o in outputs])
    assert torch.equal(rm_scores, manager(data))


def test_manager_without_tokenizer_says_so(rk_config, tokenizer):
    data = make_dataproto(tokenizer, ROWS[:1])
    with pytest.raises(ValueError, match="tokenizer"):
        rk_verl.RewardKitRewardManager(None, 0, rewardkit_config=rk_config)(data)


def test_example_file_through_verls_loader():
    """examples/verl_custom_reward.py is a working verl custom_reward_function file."""
    from pathlib import Path

    from verl.trainer.ppo.reward import get_custom_reward_fn

    path = Path(__file__).resolve().parents[2] / "examples" / "verl_custom_reward.py"
    cfg = OmegaConf.create(
        {"reward": {"custom_reward_function": {"path": str(path), "name": "compute_score"}}}
    )
    fn = get_custom_reward_fn(cfg)
    right = fn(
        data_source="openai/gsm8k", solution_str="6 * 7 = 42\n#### 42", ground_truth="42", extra_info={}
    )
    wrong = fn(data_source="openai/gsm8k", solution_str="#### 41", ground_truth="42", extra_info={})
    assert (right["score"], right["status"]) == (1.0, "ok")
    assert (wrong["score"], wrong["status"]) == (0.0, "ok")


def test_manager_keeps_rewardkit_config_given_to_verls_compute_score(rk_config, tokenizer):
    """verl configured with both our compute_score (and its rewardkit_config) and our manager."""
    from verl.trainer.ppo.reward import load_reward_manager

    cfg = OmegaConf.create(
        {
            "reward": {
                "custom_reward_function": {
                    "path": "pkg://rewardkit.integrations.verl",
                    "name": "compute_score",
                    "reward_kwargs": {"rewardkit_config": {**rk_config, "failure_score": -3.0}},
                },
                "reward_manager": {
                    "source": "importlib",
                    "name": "RewardKitRewardManager",
                    "module": {"path": "pkg://rewardkit.integrations.verl"},
                },
            }
        }
    )
    manager = load_reward_manager(cfg, tokenizer)
    assert manager.engine.config.failure_score == -3.0
    out = manager(make_dataproto(tokenizer, ROWS[3:4]), return_dict=True)
    assert out["reward_extra_info"]["score"] == [-3.0] and out["reward_extra_info"]["status"] == ["failed"]
    assert out["reward_tensor"].sum().item() == -3.0


def test_manager_returns_rm_scores_already_computed(rk_config, tokenizer):
    """Like verl's managers: a batch scored during rollout (``rm_scores``) is not scored again."""
    import numpy as np

    data = make_dataproto(tokenizer, ROWS[:3])
    manager = rk_verl.RewardKitRewardManager(tokenizer, 0, rewardkit_config=rk_config)
    fresh = manager(data, return_dict=True)
    rm_scores = torch.full_like(fresh["reward_tensor"], 0.5)
    data.batch["rm_scores"] = rm_scores
    data.non_tensor_batch["status"] = np.array(["ok", "ok", "failed"], dtype=object)
    data.meta_info["reward_extra_keys"] = ["status"]
    assert manager(data) is rm_scores
    out = manager(data, return_dict=True)
    assert out["reward_tensor"] is rm_scores
    assert out["reward_extra_info"] == {"status": ["ok", "ok", "failed"]}


MIXED = [  # gsm8k samples: ok, unknown data source (unroutable), ok, missing data source
    ("q1", "#### 4", "4", "openai/gsm8k"),
    ("q2", "#### 4", "4", "no/such/source"),
    ("q3", "The answer is 5", "4", "openai/gsm8k"),
    ("q4", "#### 4", "4", None),
]


def _assert_uniform(infos: list[dict]) -> None:
    keys = list(infos[0])
    assert all(list(i) == keys for i in infos), [sorted(i) for i in infos]


def test_compute_score_same_keys_for_ok_failed_and_abstained(rk_config):
    """verl's reward loop takes the key set of the first sample: a failed one must not lack ``acc``."""
    outs = [
        rk_verl.compute_score("toy", text, "42", rewardkit_config=rk_config)
        for text in ("FAIL", "42", "ABSTAIN", "", "数学 🙂")
    ]
    _assert_uniform(outs)
    assert [o["status"] for o in outs] == ["failed", "ok", "abstained", "ok", "ok"]
    assert outs[0]["acc"] is None and outs[1]["acc"] is True and outs[2]["acc"] is None
    assert outs[0]["error"] == "ValueError: asked to fail" or "asked to fail" in outs[0]["error"]
    assert json.loads(outs[1]["extra"]) == {"ntok": None}  # undeclared extras travel as JSON text
    declared = rk_verl.compute_score(
        "toy", "FAIL", "42", rewardkit_config={**rk_config, "extra_keys": ["ntok"]}
    )
    assert declared["ntok"] is None and declared["extra"] == ""


def test_compute_score_unroutable_sample_fails_alone():
    outs = [rk_verl.compute_score(ds, resp, gt) for _, resp, gt, ds in MIXED]
    _assert_uniform(outs)
    assert [o["status"] for o in outs] == ["ok", "failed", "ok", "failed"]
    assert outs[1]["reason"] == "unroutable" and "unknown data source 'no/such/source'" in outs[1]["error"]
    assert outs[0]["acc"] is True and outs[0]["pred"] == "4" and outs[2]["acc"] is False


def test_verls_legacy_naive_manager_gets_no_ragged_extra_info(rk_config, tokenizer):
    """verl's own legacy NaiveRewardManager appends each returned key: every list must be full length."""
    from verl.workers.reward_manager.naive import NaiveRewardManager

    rows = [r for r in ROWS if r[1]]
    data = make_dataproto(tokenizer, rows)
    fn = lambda **kw: rk_verl.compute_score(**kw, rewardkit_config=rk_config)  # noqa: E731
    info = NaiveRewardManager(tokenizer, num_examine=0, compute_score=fn)(data, return_dict=True)[
        "reward_extra_info"
    ]
    assert {k: len(v) for k, v in info.items()} == {k: len(data) for k in info}
    assert list(info["status"]) == ["ok", "ok", "ok", "failed", "abstained"]
    assert list(info["acc"]) == [True, False, True, None, None]


def test_verls_reward_loop_naive_manager_and_aggregation(tokenizer):
    """verl's reward-loop NaiveRewardManager.run_single with our compute_score, then the exact
    aggregation of RewardLoopManager.compute_rm_score (keys from the first sample)."""
    import numpy as np
    from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager

    cfg = OmegaConf.create({"reward": {"reward_kwargs": {}}, "data": {"reward_fn_key": "data_source"}})
    manager = NaiveRewardManager(cfg, tokenizer, rk_verl.compute_score)
    rows = [MIXED[1], MIXED[0], MIXED[2], MIXED[3]]  # the first sample is the failed one
    data = make_dataproto(tokenizer, rows)

    async def run_all():
        return await asyncio.gather(*(manager.run_single(data[i : i + 1]) for i in range(len(data))))

    outputs = manager.loop.run_until_complete(run_all())  # verl's manager is bound to its own loop
    infos = [o.get("reward_extra_info", {}) for o in outputs]
    keys = list(infos[0].keys())
    columns = {key: np.array([info[key] for info in infos]) for key in keys}  # raised KeyError('acc') before
    assert list(columns["status"]) == ["failed", "ok", "ok", "failed"]
    assert list(columns["reason"]) == ["unroutable", "", "", "unroutable"]
    assert list(columns["acc"]) == [None, True, False, None]


def test_our_manager_keeps_acc_and_pred_for_verls_metrics(tokenizer):
    """run_single (the reward loop's only path) carries acc/pred, and verl's validation metrics read them."""
    from verl.trainer.ppo.metric_utils import process_validation_metrics

    manager = rk_verl.RewardKitRewardManager(tokenizer, rewardkit_config={"executor": "inline"})
    data = make_dataproto(tokenizer, MIXED)

    async def run_all():
        return await asyncio.gather(*(manager.run_single(data[i : i + 1]) for i in range(len(data))))

    infos = [o["reward_extra_info"] for o in asyncio.run(run_all())]
    _assert_uniform(infos)
    assert [i["acc"] for i in infos] == [True, None, False, None]
    assert [i["pred"] for i in infos] == ["4", None, "5", None]
    legacy = manager(data, return_dict=True)["reward_extra_info"]
    assert list(legacy) == list(infos[0]) and legacy["acc"] == [i["acc"] for i in infos]
    extra = {k: [i[k] for i in infos] for k in infos[0]}
    counts = {("openai/gsm8k", "u0"): 2, ("openai/gsm8k", "u1"): 2}
    metrics = process_validation_metrics(
        ["openai/gsm8k"] * 4, ["u0", "u0", "u1", "u1"], extra, expected_acc_counts=counts
    )
    # verl counts a None acc as a failed session (acc 0) and keeps the success-only mean apart
    assert metrics["openai/gsm8k"]["acc"]["mean@2"] == pytest.approx(0.25)
    assert metrics["openai/gsm8k"]["acc_success_only"]["mean@1"] == pytest.approx(0.5)
