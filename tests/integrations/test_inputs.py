"""Trainer batches straight into rewardkit: a real verl DataProto, TRL-style columns, records."""

from __future__ import annotations

import pickle
import subprocess
import sys

import pytest

import rewardkit
from rewardkit.batch import Sample
from rewardkit.engine import RewardEngine
from rewardkit.inputs import as_samples, batch_decoder, dataproto_samples, is_dataproto, trl_records

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")
_why = "needs verl's DataProto: pip install verl --no-deps, plus tensordict"
DataProto = pytest.importorskip("verl.protocol", reason=_why).DataProto

ROWS = [
    # (prompt, response, ground_truth)
    ("What is 6 * 7?", "42", "42"),
    ("Unicode: 数学 café?", "数学 café 🙂 Привет", "数学 café 🙂 Привет"),
    ("Empty answer", "", ""),
    ("Say hi in French", "salut", "bonjour"),
    ("Fail please", "FAIL", "x"),
]


def _pad(ids, width, pad, left):
    return [pad] * (width - len(ids)) + ids if left else ids + [pad] * (width - len(ids))


def make_dataproto(tokenizer, rows=ROWS, *, response_left=False, prompt_left=True, width=48) -> DataProto:
    """A real verl DataProto with padding on the chosen sides; responses end in EOS (a special token)."""
    pad, eos = tokenizer.pad_token_id, tokenizer.eos_token_id
    p_ids = [tokenizer(p)["input_ids"] for p, _, _ in rows]
    r_ids = [tokenizer(r, add_special_tokens=False)["input_ids"] + [eos] if r else [] for _, r, _ in rows]
    pw = max(len(x) for x in p_ids)
    prompts = [_pad(x, pw, pad, prompt_left) for x in p_ids]
    responses = [_pad(x, width, pad, response_left) for x in r_ids]
    mask = [
        _pad([1] * len(p), pw, 0, prompt_left) + _pad([1] * len(r), width, 0, response_left)
        for p, r in zip(p_ids, r_ids, strict=True)
    ]
    prompts_t, responses_t = torch.tensor(prompts), torch.tensor(responses)
    return DataProto.from_dict(
        tensors={
            "prompts": prompts_t,
            "responses": responses_t,
            "input_ids": torch.cat([prompts_t, responses_t], dim=1),
            "attention_mask": torch.tensor(mask),
        },
        non_tensors={
            "data_source": np.array(["toy"] * len(rows), dtype=object),
            "reward_model": np.array(
                [{"ground_truth": g, "style": "rule"} for _, _, g in rows], dtype=object
            ),
            "extra_info": np.array(
                [{"index": i, "arr": np.arange(2)} for i in range(len(rows))], dtype=object
            ),
            "uid": np.array([f"u{i}" for i in range(len(rows))], dtype=object),
        },
    )


def per_item_decode(tokenizer, ids, mask):
    """What verl's NaiveRewardManager does per sample: the masked ids through ``tokenizer.decode``."""
    return [
        tokenizer.decode([t for t, m in zip(row, keep, strict=True) if m], skip_special_tokens=True)
        for row, keep in zip(ids.tolist(), mask.tolist(), strict=True)
    ]


@pytest.mark.parametrize(
    "response_left", [False, True], ids=["responses-right-padded", "responses-left-padded"]
)
@pytest.mark.parametrize("prompt_left", [True, False], ids=["prompts-left-padded", "prompts-right-padded"])
def test_dataproto_decodes_like_per_item_decode(tokenizer, response_left, prompt_left):
    data = make_dataproto(tokenizer, response_left=response_left, prompt_left=prompt_left)
    assert is_dataproto(data)
    samples, response_mask = dataproto_samples(data, tokenizer)
    pl = data.batch["prompts"].shape[-1]
    mask = data.batch["attention_mask"]
    assert torch.equal(response_mask, mask[:, pl:])
    assert [s.response for s in samples] == per_item_decode(tokenizer, data.batch["responses"], mask[:, pl:])
    assert [s.response for s in samples] == [r for _, r, _ in ROWS]  # unicode round-trips, EOS dropped
    assert [s.response_length for s in samples] == mask[:, pl:].sum(-1).tolist()
    assert samples[2].response == "" and samples[2].response_length == 0  # the empty response
    assert [s.ground_truth for s in samples] == [g for _, _, g in ROWS]
    assert [s.uid for s in samples] == [f"u{i}" for i in range(len(ROWS))]
    assert samples[1].extra_info == {"index": 1, "arr": [0, 1]}  # numpy made plain
    assert [s.index for s in samples] == list(range(len(ROWS)))
    assert [s.prompt for s in samples] == per_item_decode(tokenizer, data.batch["prompts"], mask[:, :pl])
    assert [s.prompt for s in samples] == [p for p, _, _ in ROWS]


def test_prompts_are_decoded_lazily_and_once(tokenizer):
    data = make_dataproto(tokenizer)
    samples, _ = dataproto_samples(data, tokenizer)
    source = samples[0]._prompts
    assert source._texts is None  # nothing decoded until a prompt is read
    assert samples[3].prompt == "Say hi in French"
    assert source._texts is not None and source._tensors is None  # the whole batch at once, ids dropped
    assert samples[1].prompt_text == "Unicode: 数学 café?"
    samples[0].prompt = "overridden"
    assert samples[0].prompt == "overridden"


def test_decoded_sample_pickles_as_a_plain_sample(tokenizer):
    samples, _ = dataproto_samples(make_dataproto(tokenizer), tokenizer)
    copy = pickle.loads(pickle.dumps(samples[1]))
    assert type(copy) is Sample
    assert copy == Sample(**{f: getattr(samples[1], f) for f in Sample.__dataclass_fields__})
    assert copy.prompt == "Unicode: 数学 café?" and copy.response_length == samples[1].response_length
    assert len(pickle.dumps(samples[1])) < 1000  # no token ids travel with it


def test_engine_scores_a_dataproto_like_the_legacy_manager(rk_config, tokenizer):
    from rewardkit.integrations.verl import RewardKitRewardManager, close_engines

    data = make_dataproto(tokenizer)
    try:
        manager_out = RewardKitRewardManager(tokenizer, rewardkit_config=rk_config)(data, return_dict=True)
    finally:
        close_engines()
    with RewardEngine(rk_config) as engine:
        result = engine.compute(data, tokenizer=tokenizer)
    assert result.status == ["ok", "ok", "ok", "ok", "failed"]
    assert result.scores[:4] == [1.0, 1.0, 1.0, 0.0] and result.reasons[4] == "error"
    pl = data.batch["prompts"].shape[-1]
    tensor = result.token_level_rewards(data.batch["attention_mask"][:, pl:])
    assert torch.equal(tensor, manager_out["reward_tensor"])
    assert result.empty_response_indices == [2] and not bool(tensor[2].any())
    assert result.extra["ntok"] == data.batch["attention_mask"][:, pl:].sum(-1).tolist()[:4] + [None]

    with RewardEngine(rk_config, tokenizer=tokenizer) as engine:  # a tokenizer given to the engine
        assert engine.compute(data).scores == result.scores
    assert rewardkit.compute(data, rk_config, tokenizer=tokenizer).scores == result.scores


def test_dataproto_without_a_tokenizer_is_refused(rk_config, tokenizer):
    with RewardEngine(rk_config) as engine, pytest.raises(ValueError, match="needs a tokenizer"):
        engine.compute(make_dataproto(tokenizer))


def test_scorer_reading_the_prompt_in_worker_processes(tokenizer, tmp_path):
    path = tmp_path / "prompt_scorer.py"
    path.write_text("def compute_score(sample):\n    return float(len(sample.prompt_text))\n")
    cfg = {"executor": "process", "num_workers": 1, "custom_reward_function": {"path": str(path)}}
    with RewardEngine(cfg) as engine:
        result = engine.compute(make_dataproto(tokenizer), tokenizer=tokenizer)
    assert result.scores == [float(len(p)) for p, _, _ in ROWS]


def test_batch_decoder_kinds(tokenizer):
    ids = [tokenizer("数学 café 🙂", add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id], []]
    expected = ["数学 café 🙂", ""]
    assert batch_decoder(tokenizer)(ids) == expected  # Rust decode_batch of the fast tokenizer
    assert batch_decoder(tokenizer.backend_tokenizer)(ids) == expected  # a tokenizers.Tokenizer

    class Slow:  # anything with decode only
        def decode(self, x, skip_special_tokens=False):
            return tokenizer.decode(x, skip_special_tokens=skip_special_tokens)

    assert batch_decoder(Slow())(ids) == expected
    with pytest.raises(ValueError, match="needs a tokenizer"):
        batch_decoder(None)


def test_trl_columns(rk_config):
    columns = {
        "prompts": [[{"role": "user", "content": "6*7?"}], "plain prompt", "p3"],
        "completions": [[{"role": "assistant", "content": "42"}], "41", ""],
        "completion_ids": [[5, 6], [7], []],
        "ground_truth": ["42", "42", ""],
        "level": [1, 2, 3],
        "trainer_state": object(),
    }
    recs = trl_records(columns)
    assert [r["response"] for r in recs] == ["42", "41", ""]
    assert [r["response_length"] for r in recs] == [2, 1, 0]
    assert recs[0]["prompt"] == [{"role": "user", "content": "6*7?"}]
    assert [r["extra_info"] for r in recs] == [{"level": 1}, {"level": 2}, {"level": 3}]
    samples = as_samples(columns)
    assert [s.index for s in samples] == [0, 1, 2]
    assert rewardkit.compute(columns, rk_config).scores == [1.0, 0.0, 1.0]
    with pytest.raises(rewardkit.SampleError, match="2 prompts for 3 completions"):
        as_samples({**columns, "prompts": ["a", "b"]})
    assert rewardkit.compute({"completions": []}, rk_config).scores == []


def test_records_and_empty_batches_still_work(rk_config):
    assert as_samples([]) == []
    assert rewardkit.compute([{"response": "42", "ground_truth": "42"}], rk_config).scores == [1.0]
    with pytest.raises(rewardkit.SampleError):
        as_samples({"response": "a mapping that is not TRL columns"})


def test_adapters_import_neither_torch_nor_verl():
    code = (
        "import sys, rewardkit, rewardkit.inputs, rewardkit.engine_cache, rewardkit.engine\n"
        "from rewardkit.inputs import as_samples\n"
        "as_samples([{'response': 'x'}]); as_samples({'completions': ['y'], 'prompts': ['p']})\n"
        "bad = [m for m in ('verl', 'torch', 'transformers', 'ray', 'trl', 'numpy') if m in sys.modules]\n"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_decoded_samples_reindexed_or_subset_score_like_the_whole_batch(rk_config, tokenizer):
    samples, _ = dataproto_samples(make_dataproto(tokenizer), tokenizer)
    with RewardEngine(rk_config) as engine:
        whole = engine.compute(samples)
        last = engine.compute(samples[-2:])  # indices 3, 4 become 0, 1
    assert last.scores[0] == whole.scores[3] and last.status == whole.status[3:]
    again = as_samples(samples[1:2])
    assert again[0].index == 0 and again[0].prompt == "Unicode: 数学 café?"


@pytest.mark.parametrize(
    "flags",
    [
        [1, 1, 1, 0, 0],  # right padding
        [0, 0, 1, 1, 1],  # left padding
        [1, 1, 1, 1, 1],  # none
        [0, 0, 0, 0, 0],  # all padding: an empty response
        [1, 0, 1, 0, 1],  # holes: only the kept tokens, in order
        [0, 1, 1, 0, 0],  # both sides
        [2, 1, 0, 0, 0],  # a mask that is not 0/1: nonzero means kept
    ],
)
@pytest.mark.parametrize("dtype", [torch.long, torch.bool])
def test_one_row_valid_ids_match_the_batch_rule(flags, dtype):
    """verl's per-sample calls take a list fast path: it keeps exactly what the tensor rule keeps."""
    from rewardkit.inputs import _valid_ids

    ids = torch.tensor([[11, 12, 13, 14, 15]])
    mask = torch.tensor([flags]).to(dtype)
    rows, lengths = _valid_ids(ids, mask)
    expected = [t for t, m in zip(ids[0].tolist(), mask[0].tolist(), strict=True) if m]
    assert rows == [expected] and lengths == [len(expected)]
    two_rows, _ = _valid_ids(ids.repeat(2, 1), mask.repeat(2, 1))  # the tensor path agrees
    assert two_rows == [expected, expected]


@pytest.mark.parametrize("response_left", [False, True], ids=["right-padded", "left-padded"])
def test_dataproto_row_is_the_sample_dataproto_samples_gives(tokenizer, response_left):
    """verl's run_single path reads one row without the batch's tensor operations: every field of
    its sample (prompt, numpy extras made plain, the empty response) is what the batch path gives."""
    from rewardkit.inputs import dataproto_row

    data = make_dataproto(tokenizer, response_left=response_left)
    batch, _ = dataproto_samples(data, tokenizer)
    for i, expected in enumerate(batch):
        row = dataproto_row(data[i : i + 1], tokenizer)
        assert row.to_dict() == {**expected.to_dict(), "response_length": expected.response_length}
        assert (row.index, row.prompt, row.response_length) == (0, ROWS[i][0], expected.response_length)
    with pytest.raises(ValueError, match="one row"):
        dataproto_row(data, tokenizer)
    narrow = data[:1]
    narrow.batch["attention_mask"] = narrow.batch["attention_mask"][:, :-1]
    with pytest.raises(ValueError, match="attention_mask"):
        dataproto_row(narrow, tokenizer)
