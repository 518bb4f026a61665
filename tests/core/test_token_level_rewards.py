"""The vectorised ``token_level_rewards`` gives exactly what the per-row implementation gave."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rewardkit.result import RewardResult, SampleResult

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")


def old_torch(scores, response_mask):
    """The implementation before vectorising: one ``torch.nonzero`` per row."""
    mask = response_mask.to(torch.long)
    out = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)
    lengths = mask.sum(dim=-1)
    empty = []
    for i, s in enumerate(scores):
        if int(lengths[i]) == 0:
            empty.append(i)
            continue
        out[i, int(torch.nonzero(mask[i]).max())] = s
    return out, empty


def old_numpy(scores, response_mask):
    mask = np.asarray(response_mask)
    out = np.zeros(mask.shape, dtype=np.float32)
    empty = []
    for i, s in enumerate(scores):
        nz = np.flatnonzero(mask[i])
        if nz.size == 0:
            empty.append(i)
            continue
        out[i, nz[-1]] = s
    return out, empty


def result_of(statuses, values):
    samples = []
    for status, v in zip(statuses, values, strict=True):
        if status == "ok":
            samples.append(SampleResult.ok(v))
        elif status == "failed":
            samples.append(SampleResult.failed("error"))
        else:
            samples.append(SampleResult.abstained())
    return RewardResult(samples=samples, data_sources=[None] * len(samples))


# A batch: rows of 0/1 (any padding pattern, holes, all-zero rows), and one status + score per row.
batches = st.integers(0, 12).flatmap(
    lambda n: st.tuples(
        st.integers(0, 9).flatmap(
            lambda w: st.lists(st.lists(st.integers(0, 1), min_size=w, max_size=w), min_size=n, max_size=n)
        ),
        st.lists(st.sampled_from(["ok", "ok", "failed", "abstained"]), min_size=n, max_size=n),
        st.lists(
            st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False, width=64), min_size=n, max_size=n
        ),
        st.sampled_from([torch.long, torch.int32, torch.bool, torch.float32]),
        st.floats(-2.0, 2.0, allow_nan=False),
    )
)


@settings(max_examples=300, deadline=None)
@given(batches)
def test_torch_matches_the_per_row_implementation(batch):
    rows, statuses, values, dtype, missing = batch
    width = len(rows[0]) if rows else 3
    mask = torch.tensor(rows, dtype=dtype).reshape(len(rows), width)
    result = result_of(statuses, values)
    scores = [missing if math.isnan(s) else s for s in result.scores]
    expected, empty = old_torch(scores, mask)
    got = result.token_level_rewards(mask, missing=missing)
    assert got.dtype == torch.float32 and got.shape == mask.shape
    assert torch.equal(got, expected)
    assert result.empty_response_indices == empty
    for i in empty:  # an empty response writes nothing: not index -1, not index 0
        assert not bool(got[i].any()) if got.shape[-1] else True


@settings(max_examples=200, deadline=None)
@given(batches)
def test_numpy_matches_the_per_row_implementation(batch):
    rows, statuses, values, _, missing = batch
    width = len(rows[0]) if rows else 3
    mask = np.array(rows, dtype=np.int64).reshape(len(rows), width)
    result = result_of(statuses, values)
    scores = [missing if math.isnan(s) else s for s in result.scores]
    expected, empty = old_numpy(scores, mask)
    got = result.token_level_rewards(mask, missing=missing)
    assert got.dtype == np.float32 and got.shape == mask.shape
    assert np.array_equal(got, expected)
    assert result.empty_response_indices == empty


def test_every_row_empty_and_zero_width():
    r = result_of(["ok", "ok"], [1.0, 2.0])
    out = r.token_level_rewards(torch.zeros(2, 4, dtype=torch.long))
    assert not bool(out.any()) and r.empty_response_indices == [0, 1]
    out = r.token_level_rewards(torch.zeros(2, 0, dtype=torch.long))
    assert out.shape == (2, 0) and r.empty_response_indices == [0, 1]
    out = r.token_level_rewards(np.zeros((2, 0)))
    assert out.shape == (2, 0) and r.empty_response_indices == [0, 1]
    empty = result_of([], [])
    assert empty.token_level_rewards(torch.zeros(0, 5)).shape == (0, 5)


def test_large_batch_uses_no_per_row_nonzero(monkeypatch):
    """One scatter for the whole batch: ``torch.nonzero`` is called a constant number of times."""
    calls = []
    real = torch.nonzero
    monkeypatch.setattr(torch, "nonzero", lambda *a, **k: calls.append(1) or real(*a, **k))
    n = 2048
    mask = torch.ones(n, 16, dtype=torch.long)
    mask[::7, 10:] = 0
    mask[::11] = 0
    r = result_of(["ok"] * n, [float(i) for i in range(n)])
    out = r.token_level_rewards(mask)
    assert len(calls) <= 2
    assert out[1, 15] == 1.0 and out[7, 9] == 7.0 and not bool(out[11].any())
    assert r.empty_response_indices == list(range(0, n, 11))
