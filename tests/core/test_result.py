import math

import pytest

from rewardkit.result import RewardResult, SampleResult, compute_metrics


def _result(**kw):
    return RewardResult(
        samples=[
            SampleResult.ok(1.0, acc=True),
            SampleResult.failed("timeout", "took too long"),
            SampleResult.abstained(),
            SampleResult(0.25, components={"a": 0.5, "b": None}),
        ],
        data_sources=["gsm8k", "gsm8k", "math", "math"],
        **kw,
    )


def test_scores_use_nan_for_failed_and_abstained_by_default():
    r = _result()
    s = r.scores
    assert s[0] == 1.0 and s[3] == 0.25
    assert math.isnan(s[1]) and math.isnan(s[2])
    assert r.status == ["ok", "failed", "abstained", "ok"]
    assert r.reasons == [None, "timeout", None, None]
    assert r.num_failed == 1


def test_configured_failure_and_abstain_scores():
    r = _result(failure_score=-1.0, abstain_score=0.0)
    assert r.scores == [1.0, -1.0, 0.0, 0.25]
    assert r.status[1] == "failed"  # the status still tells the truth


def test_extra_and_components_are_per_sample_lists():
    r = _result()
    assert r.extra == {"acc": [True, None, None, None]}
    assert r.components == {"a": [None, None, None, 0.5], "b": [None, None, None, None]}


def test_token_level_rewards_lists_last_valid_token_and_empty_rows():
    r = _result(failure_score=-1.0)
    mask = [[1, 1, 0], [1, 0, 0], [0, 0, 0], [0, 1, 1]]
    out = r.token_level_rewards(mask)
    assert out == [[0.0, 1.0, 0.0], [-1.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.25]]
    assert r.empty_response_indices == [2]


def test_token_level_rewards_torch_never_writes_index_minus_one():
    torch = pytest.importorskip("torch")
    r = RewardResult(samples=[SampleResult.ok(2.0), SampleResult.ok(3.0)], data_sources=[None, None])
    mask = torch.tensor([[1, 1, 1, 0], [0, 0, 0, 0]])
    out = r.token_level_rewards(mask)
    assert out.dtype == torch.float32 and out.shape == (2, 4)
    assert out[0].tolist() == [0.0, 0.0, 2.0, 0.0]
    assert out[1].tolist() == [0.0, 0.0, 0.0, 0.0]  # empty response: nothing written, not index -1
    assert r.empty_response_indices == [1]


def test_token_level_rewards_numpy_and_nan_to_missing():
    np = pytest.importorskip("numpy")
    r = RewardResult(samples=[SampleResult.failed("error"), SampleResult.ok(1.5)], data_sources=[None, None])
    out = r.token_level_rewards(np.array([[1, 1], [1, 0]]), missing=-5.0)
    assert out.tolist() == [[0.0, -5.0], [1.5, 0.0]]


def test_token_level_rewards_shape_mismatch():
    r = _result()
    with pytest.raises(ValueError, match="3 rows but the result has 4 samples"):
        r.token_level_rewards([[1], [1], [1]])


def test_metrics_count_status_reasons_and_means_per_source():
    r = _result()
    m = compute_metrics(r.samples, r.data_sources, elapsed_s=2.0)
    assert m["reward/num_samples"] == 4
    assert m["reward/num_ok"] == 2 and m["reward/num_failed"] == 1 and m["reward/num_abstained"] == 1
    assert m["reward/failed/timeout"] == 1
    assert m["reward/gsm8k/mean"] == 1.0 and m["reward/math/mean"] == 0.25
    assert m["reward/mean"] == pytest.approx(0.625)
    assert m["reward/component/a/mean"] == 0.5
    assert m["reward/math/component/a/mean"] == 0.5
    assert "reward/math/component/b/mean" not in m  # an absent component is not averaged as 0
    assert m["timing/samples_per_s"] == 2.0


def test_to_records_is_json_friendly():
    import json

    recs = _result().to_records()
    json.dumps(recs)
    assert recs[1] == {"score": None, "status": "failed", "reason": "timeout", "error": "took too long"}


def test_all_filled_returns_the_results_and_raises_on_an_empty_slot():
    from rewardkit.result import all_filled

    done = [SampleResult.ok(1.0), SampleResult.failed("error", "boom")]
    assert all_filled(done, "x") == done
    assert all_filled([], "x") == []
    with pytest.raises(RuntimeError, match=r"the executor lost samples \[1\]"):
        all_filled([done[0], None, done[1]], "the executor")


def test_metrics_of_a_mixed_batch_equal_their_definition():
    """compute_metrics makes one pass over the batch: on a random mix of statuses, reasons, data
    sources (``None`` and ``""`` both count as ``unknown``) and components, every metric is what
    its definition gives, and a failed result without a reason does not break the sorting."""
    import random
    import statistics

    rng = random.Random(3)
    results, sources = [], []
    for _ in range(2000):
        kind = rng.choice(["ok", "ok", "failed", "abstained"])
        if kind == "ok":
            comps = {"a": rng.random()} if rng.random() < 0.3 else {}
            results.append(SampleResult(rng.choice([0.0, 1.0, rng.random()]), components=comps))
        elif kind == "failed":
            results.append(SampleResult(None, "failed", rng.choice(["timeout", "error", None])))
        else:
            results.append(SampleResult.abstained())
        sources.append(rng.choice(["gsm8k", "math", None, ""]))
    m = compute_metrics(results, sources)
    ok = [(r.score, ds or "unknown") for r, ds in zip(results, sources, strict=True) if r.status == "ok"]
    assert m["reward/num_ok"] == len(ok)
    assert m["reward/num_failed"] == sum(r.status == "failed" for r in results)
    assert m["reward/failed/None"] == sum(r.status == "failed" and r.reason is None for r in results)
    assert m["reward/mean"] == statistics.fmean(s for s, _ in ok)
    assert (m["reward/max"], m["reward/min"]) == (max(s for s, _ in ok), min(s for s, _ in ok))
    for ds in ("gsm8k", "math", "unknown"):
        assert m[f"reward/{ds}/mean"] == statistics.fmean(s for s, d in ok if d == ds)
    comps = [r.components["a"] for r in results if "a" in r.components]
    assert m["reward/component/a/mean"] == statistics.fmean(comps)
    assert compute_metrics([], []) == {
        "reward/num_samples": 0.0,
        "reward/num_ok": 0.0,
        "reward/num_abstained": 0.0,
        "reward/num_failed": 0.0,
    }
