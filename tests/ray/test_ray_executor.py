"""`executor: ray` through the ordinary RewardEngine."""

from __future__ import annotations

import pytest

from rewardkit import RewardEngine
from rewardkit.executors.base import ScoreTask
from rewardkit.scoring import ScorerSpec, resolve_ref

pytestmark = [pytest.mark.ray, pytest.mark.slow]


@pytest.fixture(scope="module")
def ray_engine(ray_cluster, crf):
    from rewardkit.executors.ray import RayExecutor

    saved = RayExecutor.worker_num_cpus
    RayExecutor.worker_num_cpus = 0.5  # leave room on the 2-CPU test cluster
    engine = RewardEngine(
        {"executor": "ray", "num_workers": 2, "custom_reward_function": crf(), "batch_timeout_s": 4.0}
    )
    yield engine
    engine.close()
    RayExecutor.worker_num_cpus = saved


def test_engine_with_ray_executor_matches_inline(ray_engine, crf, tmp_path):
    from rewardkit.executors.ray import RayExecutor

    batch = [{"response": str(i % 4), "ground_truth": "2", "extra_info": {"k": i}} for i in range(9)]
    batch[3]["extra_info"] = {"mode": "raise"}
    batch[6]["extra_info"] = {"mode": "crash_once", "marker": str(tmp_path / "m")}
    with RewardEngine({"executor": "inline", "custom_reward_function": crf()}) as inline:
        expected = inline.compute(
            [dict(b, extra_info={"k": i}) if i == 6 else b for i, b in enumerate(batch)]
        )
    got = ray_engine.compute(batch)
    assert isinstance(ray_engine.executor, RayExecutor) and len(ray_engine.executor.workers) == 2
    assert got.scores[:6] == expected.scores[:6] and got.scores[7:] == expected.scores[7:]
    assert got.status[6] == "ok"  # its worker died once; the shard was re-run
    assert got.reasons[3] == "error" and "ValueError" in got.errors[3]
    assert ray_engine.compute([]).scores == []


def test_config_batch_deadline_applies(ray_engine):
    batch = [{"response": "2", "ground_truth": "2", "extra_info": {"mode": "sleep", "seconds": 30}}]
    batch += [{"response": "2", "ground_truth": "2"}]
    result = ray_engine.compute(batch)
    assert result.status == ["failed", "ok"] and result.reasons[0] == "timeout"


async def test_batch_scorer_runs_once_on_a_worker(ray_engine, scorers_path):
    fn = resolve_ref(f"{scorers_path}:batch_lengths")
    spec = ScorerSpec("lengths", fn, f"{scorers_path}:batch_lengths", batch=True)
    from rewardkit.batch import to_samples

    samples = to_samples([{"response": "ab"}, {"response": ""}, {"response": "héllo"}])
    results = await ray_engine.executor.run_batch(spec, samples)
    assert [r.score for r in results] == [2.003, 0.003, 5.003]  # one call saw all three
    assert await ray_engine.executor.run_batch(spec, []) == []
    assert await ray_engine.executor.run([]) == []
    # per-sample tasks, sharded over the workers and gathered in input order
    ref = f"{scorers_path}:compute_score"
    exact = ScorerSpec("exact", resolve_ref(ref), ref)
    graded = to_samples(
        [{"response": str(i % 3), "ground_truth": "1", "extra_info": {"k": i}} for i in range(7)]
    )
    results = await ray_engine.executor.run([ScoreTask(exact, s) for s in graded])
    assert [r.score for r in results] == [float(i % 3 == 1) for i in range(7)]


def test_rewardkit_score_with_executor_ray(ray_cluster, crf, tmp_path, monkeypatch):
    import json

    import yaml
    from click.testing import CliRunner

    from rewardkit.cli import cli
    from rewardkit.executors.ray import RayExecutor

    monkeypatch.setattr(RayExecutor, "worker_num_cpus", 0.25)
    config = tmp_path / "reward.yaml"
    config.write_text(yaml.safe_dump({"reward": {"custom_reward_function": crf()}}))
    rollouts = tmp_path / "r.jsonl"
    rollouts.write_text(
        "".join(json.dumps({"response": str(i), "ground_truth": "1"}) + "\n" for i in range(5))
    )
    out = tmp_path / "out.jsonl"
    args = [
        "score",
        str(rollouts),
        "-c",
        str(config),
        "-o",
        str(out),
        "--executor",
        "ray",
        "--num-workers",
        "1",
    ]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    scored = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["score"] for r in scored] == [0.0, 1.0, 0.0, 0.0, 0.0]
    assert "5 samples in" in res.output
