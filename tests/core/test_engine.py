"""End to end through rewardkit.compute / RewardEngine with the naive manager and inline executor."""

import asyncio
import math

import pytest

import rewardkit
from rewardkit.errors import ConfigError, SampleError, UnknownNameError

from .conftest import make_dist

REWARD_FILE = """
import asyncio, os

CALLS = os.environ.get("RK_CALLS_FILE")

def compute_score(data_source, solution_str, ground_truth, extra_info=None, bonus=0.0):
    if CALLS:
        with open(CALLS, "a") as f:
            f.write(solution_str + "\\n")
    if solution_str == "boom":
        raise ValueError("cannot score boom")
    if solution_str == "abstain":
        return None
    return {"score": float(solution_str.strip() == str(ground_truth)) + bonus, "acc": solution_str == ground_truth}

IN_FLIGHT = [0, 0]  # now, peak


async def slow_async(response, ground_truth):
    IN_FLIGHT[0] += 1
    IN_FLIGHT[1] = max(IN_FLIGHT)
    await asyncio.sleep(0.05)
    IN_FLIGHT[0] -= 1
    return {"score": float(response == ground_truth), "peak": IN_FLIGHT[1]}

async def hangs(response):
    await asyncio.sleep(3600)

def batch_only(responses):
    return [1.0] * len(responses)
"""


@pytest.fixture
def reward_file(write_module):
    return str(write_module("my_reward.py", REWARD_FILE))


def cfg(path, **kw):
    return {"executor": "inline", "custom_reward_function": {"path": path, **kw.pop("crf", {})}, **kw}


def test_compute_with_custom_reward_function_and_reward_kwargs(reward_file):
    samples = [
        {"response": "42", "ground_truth": "42", "data_source": "anything"},
        {"response": "41", "reward_model": {"ground_truth": "42"}},
    ]
    r = rewardkit.compute(samples, cfg(reward_file, crf={"reward_kwargs": {"bonus": 0.5}}))
    assert r.scores == [1.5, 0.5]
    assert r.extra["acc"] == [True, False]
    assert r.metrics["reward/num_ok"] == 2
    assert r.metrics["reward/anything/mean"] == 1.5


def test_failures_and_abstentions_are_never_zero(reward_file):
    r = rewardkit.compute(
        [
            {"response": "boom", "ground_truth": "1"},
            {"response": "abstain"},
            {"response": "1", "ground_truth": "1"},
        ],
        cfg(reward_file),
    )
    assert r.status == ["failed", "abstained", "ok"]
    assert r.reasons[0] == "error" and "cannot score boom" in r.errors[0]
    assert math.isnan(r.scores[0]) and math.isnan(r.scores[1]) and r.scores[2] == 1.0
    assert r.metrics["reward/failed/error"] == 1 and r.metrics["reward/num_abstained"] == 1
    r2 = rewardkit.compute([{"response": "boom"}], cfg(reward_file, failure_score=-1.0))
    assert r2.scores == [-1.0] and r2.status == ["failed"]


def test_async_scorers_run_concurrently_up_to_the_limit(reward_file):
    engine_cfg = cfg(reward_file, crf={"name": "slow_async"}, dedup=False, max_concurrency=8)
    samples = [{"response": str(i), "ground_truth": str(i % 2)} for i in range(40)]
    r = rewardkit.compute(samples, engine_cfg)
    assert r.scores[:4] == [1.0, 1.0, 0.0, 0.0]
    assert max(r.extra["peak"]) == 8  # concurrent, and never past max_concurrency


def test_async_scorer_deadline_in_inline_executor(reward_file):
    r = rewardkit.compute([{"response": "x"}], cfg(reward_file, crf={"name": "hangs"}, timeout_s=0.2))
    assert r.status == ["failed"] and r.reasons == ["timeout"]


def test_empty_batch(reward_file):
    r = rewardkit.compute([], cfg(reward_file))
    assert (r.scores, r.status, len(r)) == ([], [], 0)
    assert r.metrics["reward/num_samples"] == 0


def test_unicode_and_empty_response(reward_file):
    r = rewardkit.compute(
        [{"response": "héllo ☃ 你好", "ground_truth": "héllo ☃ 你好"}, {"response": "", "ground_truth": ""}],
        cfg(reward_file),
    )
    assert r.scores == [1.0, 1.0]


def test_unknown_data_source_lists_known_ones_and_default_scorer(reward_file, site):
    make_dist(
        site,
        "rk-echo",
        "1.0",
        "echo",
        "rkt_echo",
        "import rewardkit\n\ndef echo(response):\n    return len(response)\n\n"
        "@rewardkit.hookimpl\ndef register_scorers(register):\n    register(echo, data_sources=['echo/v1'])\n",
    )
    # One unroutable sample fails alone (reason unroutable, the routing error as text); the rest score.
    r = rewardkit.compute(
        [{"response": "a", "data_source": "echo/v1"}, {"response": "b", "data_source": "echo/v2"}],
        {"executor": "inline"},
    )
    assert r.status == ["ok", "failed"] and r.reasons == [None, "unroutable"]
    assert r.scores[0] == 1.0 and math.isnan(r.scores[1])
    msg = r.errors[1]
    assert msg.startswith("field 'data_source': unknown data source 'echo/v2'. Did you mean 'echo/v1'?")
    assert "echo/v1" in msg and "default_scorer" in msg
    assert r.metrics["reward/failed/unroutable"] == 1.0 and r.metrics["reward/num_ok"] == 1.0
    # strict_routing: the first unroutable sample raises for the batch
    with pytest.raises(SampleError) as info:
        rewardkit.compute(
            [{"response": "a", "data_source": "echo/v1"}, {"response": "b", "data_source": "echo/v2"}],
            {"executor": "inline", "strict_routing": True},
        )
    assert (
        info.value.index == 1 and info.value.reason == "unroutable" and str(info.value) == "sample 1, " + msg
    )
    r = rewardkit.compute(
        [{"response": "abc", "data_source": "echo/v2"}, {"response": "a"}],
        {"executor": "inline", "default_scorer": "echo"},
    )
    assert r.scores == [3.0, 1.0]
    r = rewardkit.compute([{"response": "a"}, {"response": ""}], {"executor": "inline"})
    assert r.reasons == ["unroutable", "unroutable"]
    assert r.errors[0].startswith("field 'data_source': missing")
    with pytest.raises(SampleError, match="sample 0, field 'data_source': missing"):
        rewardkit.compute([{"response": "a"}], {"executor": "inline", "strict_routing": True})


def test_unknown_default_scorer_is_a_config_error_at_once():
    with pytest.raises(UnknownNameError, match="unknown scorer 'gsm8kk'. Did you mean 'gsm8k'"):
        rewardkit.RewardEngine({"executor": "inline", "default_scorer": "gsm8kk"})


def test_unroutable_sample_with_composite_and_process_executor():
    """Routing failures never reach the executor: the other samples of a process-pool batch score."""
    r = rewardkit.compute(
        [
            {"response": "#### 4", "ground_truth": "4", "data_source": "openai/gsm8k"},
            {"response": "数学", "data_source": "no/such"},
            {"response": "#### 5", "ground_truth": "4", "data_source": "openai/gsm8k"},
        ],
        {"executor": "process", "num_workers": 1, "reward_manager": {"name": "composite"}},
    )
    assert r.status == ["ok", "failed", "ok"] and r.reasons[1] == "unroutable"
    assert r.scores[0] == 1.0 and r.scores[2] == 0.0


def test_engine_reuse_sync_and_async_and_dedup(reward_file, tmp_path, monkeypatch):
    calls = tmp_path / "calls.txt"
    monkeypatch.setenv("RK_CALLS_FILE", str(calls))
    group = [{"response": "7", "ground_truth": "7", "data_source": "d"}] * 4 + [
        {"response": "8", "ground_truth": "7"}
    ]
    with rewardkit.RewardEngine(cfg(reward_file)) as engine:
        first = engine.compute(group)
        second = asyncio.run(engine.acompute(group))
    assert first.scores == second.scores == [1.0, 1.0, 1.0, 1.0, 0.0]
    # GRPO groups: identical samples are scored once per batch.
    assert calls.read_text().splitlines() == ["7", "8", "7", "8"]
    first.samples[0].extra["acc"] = "mutated"
    assert first.samples[1].extra["acc"] is True  # duplicates get their own copies
    with pytest.raises(RuntimeError, match="closed"):
        engine.compute(group)


def test_compute_called_from_inside_a_running_loop(reward_file):
    async def main():
        return rewardkit.compute([{"response": "1", "ground_truth": "1"}], cfg(reward_file))

    assert asyncio.run(main()).scores == [1.0]
    assert asyncio.run(
        rewardkit.acompute([{"response": "1", "ground_truth": "2"}], cfg(reward_file))
    ).scores == [0.0]


def test_config_errors_are_clear(reward_file, tmp_path):
    with pytest.raises(ConfigError, match=r"reward.executr: unknown key. Did you mean 'executor'\?"):
        rewardkit.compute([], {"executr": "inline"})
    with pytest.raises(ConfigError, match="custom reward function file not found"):
        rewardkit.compute([], cfg(str(tmp_path / "nope.py")))
    with pytest.raises(ConfigError, match=r"does not accept keyword argument\(s\) nope"):
        rewardkit.compute([], cfg(reward_file, crf={"reward_kwargs": {"nope": 1}}))
    with pytest.raises(
        rewardkit.UnknownNameError, match="unknown reward manager 'naiv'. Did you mean 'naive'"
    ):
        rewardkit.RewardEngine({"reward_manager": {"name": "naiv"}})
    with pytest.raises(ConfigError, match="legacy flat config"):
        rewardkit.compute([], {"reward_model": {"reward_manager": "naive"}})


def test_config_from_yaml_file(reward_file, tmp_path):
    path = tmp_path / "reward.yaml"
    rewardkit.RewardConfig.model_validate(cfg(reward_file)).to_yaml(path)
    assert path.read_text().startswith("reward:\n")
    assert rewardkit.compute([{"response": "1", "ground_truth": "1"}], str(path)).scores == [1.0]
    bad = tmp_path / "bad.yaml"
    bad.write_text("reward: [1, 2\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        rewardkit.compute([], str(bad))


CUSTOM_MANAGER = """
from rewardkit.managers.base import RewardManager
from rewardkit.result import SampleResult

class ConstantManager(RewardManager):
    def __init__(self, context, value=0.0):
        super().__init__(context)
        self.value = value

    async def score_rules(self, samples):
        return [SampleResult.ok(self.value) for _ in samples]
"""


def test_custom_manager_class_loaded_by_importlib(write_module):
    path = write_module("my_manager.py", CUSTOM_MANAGER)
    config = {
        "executor": "inline",
        "reward_manager": {
            "source": "importlib",
            "module": {"path": str(path), "name": "ConstantManager"},
            "kwargs": {"value": 0.25},
        },
    }
    assert rewardkit.compute([{"response": "a"}, {"response": "b"}], config).scores == [0.25, 0.25]
    config["reward_manager"]["kwargs"] = {"valu": 1}
    with pytest.raises(ConfigError, match="unexpected keyword argument 'valu'"):
        rewardkit.compute([{"response": "a"}], config)


BACKEND_PLUGIN = """
import rewardkit
from rewardkit.backends.base import RMBackend
from rewardkit.result import SampleResult

class LengthRM(RMBackend):
    name = "length_rm"

    async def ascore(self, samples):
        out = []
        for s in samples:
            if s.response == "rm-fail":
                out.append(SampleResult.failed("http", "judge down"))
            else:
                out.append(SampleResult.ok(len(s.response) / 10))
        return out

@rewardkit.hookimpl
def register_rm_backends(register):
    register(LengthRM, name="length_rm")
"""


def test_reward_model_combines_with_rule_scores_and_lifecycle(site, reward_file):
    make_dist(site, "rk-lenrm", "0.1", "lenrm", "rkt_lenrm", BACKEND_PLUGIN)
    config = {
        "executor": "inline",
        "reward_model": {"enable": True, "backend": "length_rm", "weight": 0.5, "offload": True},
    }
    with rewardkit.RewardEngine(config) as engine:
        r = engine.compute([{"response": "abcd"}, {"response": "rm-fail"}])
        backend = engine.backend
        assert backend.transitions == ["load", "sleep", "wake_up", "sleep"]
        assert backend.state == "asleep"
    assert backend.state == "closed"
    assert r.scores[0] == pytest.approx(0.2)  # RM alone, weighted
    assert r.components["rm"] == [0.4, None]
    assert r.status[1] == "failed" and r.reasons[1] == "http"
    both = rewardkit.compute(
        [{"response": "12345", "ground_truth": "12345"}],
        {**config, "custom_reward_function": {"path": reward_file}},
    )
    assert both.scores == [pytest.approx(1.0 + 0.25)]
    assert both.components == {"rule": [1.0], "rm": [0.5]}


MIXED_PLUGIN = """
import os
import rewardkit

def lengths(responses):
    with open(os.environ["RK_BATCH_CALLS"], "a") as f:
        f.write(str(len(responses)) + "\\n")
    return [len(r) for r in responses]

def exact(response, ground_truth):
    return float(response == ground_truth)

@rewardkit.hookimpl
def register_scorers(register):
    register(lengths, name="lengths", data_sources=["len/v1"], batch=True)
    register(exact, name="exact", data_sources=["exact/v1"])
"""


@pytest.mark.parametrize("executor", ["inline", "process"])
def test_naive_manager_calls_a_routed_batch_scorer_once_and_keeps_order(
    site, tmp_path, monkeypatch, executor
):
    make_dist(site, "rk-mixed", "1.0", "mixed", "rkt_mixed", MIXED_PLUGIN)
    calls = tmp_path / "batch_calls.txt"
    monkeypatch.setenv("RK_BATCH_CALLS", str(calls))
    samples = [
        {"data_source": "len/v1", "response": "abc"},
        {"data_source": "exact/v1", "response": "x", "ground_truth": "x"},
        {"data_source": "len/v1", "response": ""},
        {"data_source": "exact/v1", "response": "x", "ground_truth": "y"},
        {"data_source": "len/v1", "response": "héllo"},
    ]
    r = rewardkit.compute(samples, {"executor": executor, "num_workers": 1})
    assert r.scores == [3.0, 1.0, 0.0, 0.0, 5.0]
    assert calls.read_text().splitlines() == ["3"]  # one call for the three len/v1 samples


LOOP_RM_PLUGIN = """
import asyncio
import rewardkit
from rewardkit.backends.base import RMBackend
from rewardkit.result import SampleResult

class LoopRM(RMBackend):
    name = "loop_rm"
    loops = []

    async def ascore(self, samples):
        LoopRM.loops.append(asyncio.get_running_loop())
        return [SampleResult.ok(1.0) for _ in samples]

    async def aclose(self):
        LoopRM.loops.append(asyncio.get_running_loop())
        await super().aclose()

@rewardkit.hookimpl
def register_rm_backends(register):
    register(LoopRM, name="loop_rm")
"""


def test_compute_and_acompute_share_the_engines_one_loop(site):
    # The HTTP backends keep sessions bound to a loop: every call into the backend, sync or async,
    # from any caller's loop, must run on the engine's own loop (and close there too).
    make_dist(site, "rk-looprm", "0.1", "looprm", "rkt_looprm", LOOP_RM_PLUGIN)
    config = {"executor": "inline", "reward_model": {"enable": True, "backend": "loop_rm"}}
    batch = [{"response": "a"}]

    async def from_a_caller_loop(engine):
        return await engine.acompute(batch), asyncio.get_running_loop()

    with rewardkit.RewardEngine(config) as engine:
        assert engine.compute(batch).scores == [1.0]
        r1, caller1 = asyncio.run(from_a_caller_loop(engine))
        r2, caller2 = asyncio.run(from_a_caller_loop(engine))
        assert r1.scores == r2.scores == [1.0]
        loops = type(engine.backend).loops
    assert len(loops) == 4  # three batches and the close
    assert len({id(lp) for lp in loops}) == 1
    assert loops[0] is not caller1 and loops[0] is not caller2


def test_acompute_cancelled_by_the_caller_cancels_the_work_on_the_engine_loop(reward_file):
    async def cancel_midway(engine):
        task = asyncio.ensure_future(engine.acompute([{"response": "x"}]))
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    async def others_left():
        await asyncio.sleep(0.2)
        return [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]

    with rewardkit.RewardEngine(cfg(reward_file, crf={"name": "hangs"})) as engine:
        asyncio.run(cancel_midway(engine))
        assert engine._loop.run(others_left()) == []
