"""DiscriminativeRM scoring: equality with a direct forward, order, truncation, templates, labels."""

from __future__ import annotations

import asyncio
import math
import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import rewardkit
from rewardkit.backends.discriminative import DiscriminativeRM, pack_batches
from rewardkit.batch import to_samples
from rewardkit.errors import ConfigError

WORDS = [
    "the",
    "answer",
    "is",
    "72",
    "because",
    "48",
    "plus",
    "24",
    "makes",
    "and",
    "Natalia",
    "sold",
    "clips",
]


def mixed_records(n: int, seed: int = 0, max_words: int = 120):
    """Records with prompts and responses of very different lengths, in shuffled order."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        words = rng.randint(0, max_words)
        prompt = (
            f"Question {i}: how many clips?"
            if i % 3
            else [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": f"Question {i}?"},
            ]
        )
        out.append({"prompt": prompt, "response": " ".join(rng.choice(WORDS) for _ in range(words))})
    rng.shuffle(out)
    return out


def rm_config(path, **kwargs):
    return {
        "executor": "inline",
        "reward_model": {"enable": True, "backend": "discriminative", "model_path": str(path), **kwargs},
    }


# -- end to end through the engine ---------------------------------------------------------------
def test_engine_scores_equal_direct_forward(tiny_rm_dir, reference):
    records = mixed_records(12, seed=1)
    with rewardkit.RewardEngine(rm_config(tiny_rm_dir, kwargs={"token_budget": 400})) as engine:
        result = engine.compute(records)
        assert isinstance(engine.backend, DiscriminativeRM)
    expected = [float(reference.logits(r["prompt"], r["response"])[0]) for r in records]
    assert result.status == ["ok"] * len(records)
    assert result.scores == pytest.approx(expected, abs=1e-4)
    assert result.components["rm"] == pytest.approx(expected, abs=1e-4)
    assert len(set(round(s, 4) for s in result.scores)) > 1, (
        "a model that scores everything alike proves nothing"
    )
    assert result.metrics["rm/batches"] >= 2
    assert result.metrics["rm/samples"] == len(records)
    assert result.extra["num_tokens"] == [len(reference.ids(r["prompt"], r["response"])) for r in records]


def test_engine_combines_rule_score_and_rm(tiny_rm_dir, reference, write_module):
    crf = write_module("crf.py", "def compute_score(solution_str, ground_truth):\n    return 10.0\n")
    cfg = rm_config(tiny_rm_dir, weight=0.5)
    cfg["custom_reward_function"] = {"path": str(crf)}
    records = [{"prompt": "2+2?", "response": "4", "ground_truth": "4"}]
    result = rewardkit.compute(records, cfg)
    rm = float(reference.logits("2+2?", "4")[0])
    assert result.scores[0] == pytest.approx(10.0 + 0.5 * rm, abs=1e-4)
    assert result.components["rm"][0] == pytest.approx(rm, abs=1e-4)


def test_engine_rejects_bad_kwargs_with_clear_error(tiny_rm_dir):
    engine = rewardkit.RewardEngine(rm_config(tiny_rm_dir, kwargs={"token_budjet": 10}))
    try:
        with pytest.raises(ConfigError, match=r"token_budjet: unknown key\. Did you mean 'token_budget'"):
            engine.compute([{"response": "x"}])
    finally:
        engine.close()


# -- the backend directly ------------------------------------------------------------------------
def test_order_preserved_under_length_sorting(make_backend, reference):
    records = mixed_records(24, seed=7, max_words=60)
    backend = make_backend(token_budget=256)
    results = backend.score(to_samples(records))
    lengths = [r.extra["num_tokens"] for r in results]
    assert lengths != sorted(lengths) and lengths != sorted(lengths, reverse=True)
    expected = [float(reference.logits(r["prompt"], r["response"])[0]) for r in records]
    assert [r.score for r in results] == pytest.approx(expected, abs=1e-4)
    # Each sample alone (no padding at all) gives the same score.
    for i in (0, 13, 23):
        (alone,) = backend.score(to_samples([records[i]]))
        assert alone.score == pytest.approx(results[i].score, abs=1e-4)
    m = backend.metrics()
    assert m["batches"] >= 4
    assert m["tokens"] == sum(lengths) + sum(lengths[i] for i in (0, 13, 23))
    assert 0.0 <= m["padding_ratio"] < 0.2
    assert backend.metrics()["batches"] == 0, "metrics reset after being read"


def test_length_sorting_pads_less_than_input_order(make_backend):
    records = mixed_records(48, seed=3)
    sorted_rm = make_backend(token_budget=600)
    sorted_rm.score(to_samples(records))
    naive = make_backend(token_budget=10**9, max_batch_size=8)
    # With max_batch_size only, batches still come length-sorted; compare with unsorted padding.
    naive.score(to_samples(records))
    lengths = [len(sorted_rm.encode(s)[0]) for s in to_samples(records)]
    unsorted_padded = sum(max(lengths[i : i + 8]) * len(lengths[i : i + 8]) for i in range(0, 48, 8))
    unsorted_ratio = 1 - sum(lengths) / unsorted_padded
    assert sorted_rm.metrics()["padding_ratio"] < unsorted_ratio / 2
    assert naive.metrics()["batches"] == 6


@settings(max_examples=200, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 300), max_size=60),
    budget=st.integers(1, 2000),
    max_batch=st.one_of(st.none(), st.integers(1, 10)),
)
def test_pack_batches_covers_each_sample_once_within_budget(lengths, budget, max_batch):
    batches = pack_batches(lengths, budget, max_batch)
    flat = [i for b in batches for i in b]
    assert sorted(flat) == list(range(len(lengths)))
    for b in batches:
        assert b
        width = max(lengths[i] for i in b)
        assert len(b) == 1 or len(b) * width <= budget
        assert max_batch is None or len(b) <= max_batch


def test_empty_batch_and_empty_response(make_backend, reference):
    backend = make_backend()
    assert backend.score([]) == []
    assert asyncio.run(backend.ascore([])) == []
    results = backend.score(to_samples([{"prompt": "Only a prompt", "response": ""}, {"response": ""}]))
    assert [r.status for r in results] == ["ok", "ok"]
    assert results[0].score == pytest.approx(float(reference.logits("Only a prompt", "")[0]), abs=1e-4)
    assert results[1].score == pytest.approx(float(reference.logits("", "")[0]), abs=1e-4)


def test_a_sample_that_cannot_render_fails_alone(make_backend, reference):
    records = [
        {"prompt": "fine", "response": "ok"},
        {"prompt": [{"role": "user", "content": 5}], "response": "x"},  # template concatenates str + int
        {"prompt": "also fine", "response": "yes"},
    ]
    results = make_backend().score(to_samples(records))
    assert [r.status for r in results] == ["ok", "failed", "ok"]
    assert results[1].reason == "error" and "TypeError" in results[1].error
    assert results[2].score == pytest.approx(float(reference.logits("also fine", "yes")[0]), abs=1e-4)


def test_unicode_and_huge_input_are_scored(make_backend):
    backend = make_backend(max_length=64)
    results = backend.score(
        to_samples([{"prompt": "数学 🙂?", "response": "Привет — café " * 3}, {"response": "x" * 50_000}])
    )
    assert [r.status for r in results] == ["ok", "ok"]
    assert results[1].extra == {"truncated": True, "num_tokens": 64, "rm_logit": results[1].score}
    assert all(math.isfinite(r.score) for r in results)


# -- truncation ----------------------------------------------------------------------------------
@pytest.mark.parametrize("side", ["left", "right"])
def test_truncation_is_reported_and_scored_on_the_kept_tokens(make_backend, reference, side):
    long_resp = " ".join(WORDS * 6)
    backend = make_backend(max_length=24, truncation_side=side)
    results = backend.score(
        to_samples([{"prompt": "q", "response": long_resp}, {"prompt": "q", "response": "4"}])
    )
    full = reference.ids("q", long_resp)
    assert len(full) > 24
    kept = [full[0], *full[-23:]] if side == "left" else full[:24]
    assert results[0].extra["truncated"] is True and results[0].extra["num_tokens"] == 24
    assert results[0].score == pytest.approx(float(reference.logits_of_ids(kept)[0]), abs=1e-4)
    assert results[1].extra["truncated"] is False
    assert results[1].extra["num_tokens"] == len(reference.ids("q", "4"))
    assert backend.metrics()["truncated"] == 1


def test_default_max_length_is_the_models_positions(make_backend):
    backend = make_backend()
    backend.load()
    assert backend.max_length == 2048


# -- rendering -----------------------------------------------------------------------------------
def test_string_and_message_prompts_render_with_the_rm_template(make_backend, reference):
    backend = make_backend()
    backend.load()
    tok = reference.tokenizer
    (s1, s2) = to_samples(
        [
            {"prompt": "What is 2+2?", "response": "4"},
            {
                "prompt": [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}],
                "response": "R",
            },
        ]
    )
    assert (
        backend.render(s1)
        == "<s><|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n"
    )
    assert backend.render(s2) == tok.apply_chat_template(
        [
            {"role": "system", "content": "S"},
            {"role": "user", "content": "U"},
            {"role": "assistant", "content": "R"},
        ],
        tokenize=False,
    )


def test_duplicated_bos_is_stripped(make_backend, reference):
    backend = make_backend()
    backend.load()
    (sample,) = to_samples([{"prompt": "hi", "response": "there"}])
    text = backend.render(sample)
    bos = reference.tokenizer.bos_token_id
    naive = reference.tokenizer(text)["input_ids"]
    assert naive[:2] == [bos, bos], "the fixture must reproduce the double-BOS trap"
    ids, _ = backend.encode(sample)
    assert ids[0] == bos and ids[1] != bos
    assert ids == naive[1:]


def test_chat_template_override_string_and_file(make_backend, reference, tmp_path):
    template = "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"
    (sample,) = to_samples([{"prompt": "hi", "response": "yo"}])
    backend = make_backend(chat_template=template)
    backend.load()
    assert backend.render(sample) == "[user] hi\n[assistant] yo\n"
    ids, _ = backend.encode(sample)
    # The override has no BOS, so the tokenizer's own BOS is the only one.
    assert ids == reference.tokenizer("[user] hi\n[assistant] yo\n")["input_ids"]
    path = tmp_path / "t.jinja"
    path.write_text(template, encoding="utf-8")
    from_file = make_backend(chat_template=str(path))
    assert from_file.score([sample])[0].score == pytest.approx(backend.score([sample])[0].score, abs=1e-6)


def test_plain_text_without_template(make_backend):
    backend = make_backend(use_chat_template=False)
    backend.load()
    (sample,) = to_samples(
        [{"prompt": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}], "response": "c"}]
    )
    assert backend.render(sample) == "a\nbc"


# -- heads, score functions, normalisation -------------------------------------------------------
@pytest.mark.parametrize("label", [2, "honest"])
def test_multi_label_head_selection(make_backend, multi_rm_dir, multi_reference, label):
    records = mixed_records(6, seed=5, max_words=20)
    results = make_backend(multi_rm_dir, label=label).score(to_samples(records))
    expected = [float(multi_reference.logits(r["prompt"], r["response"])[2]) for r in records]
    assert [r.score for r in results] == pytest.approx(expected, abs=1e-4)


@pytest.mark.parametrize("score_fn", ["softmax", "probability"])
def test_multi_label_probability(make_backend, multi_rm_dir, multi_reference, score_fn):
    (r,) = make_backend(multi_rm_dir, label="harmless", score_fn=score_fn).score(
        to_samples([{"prompt": "p", "response": "r"}])
    )
    assert r.score == pytest.approx(float(torch.softmax(multi_reference.logits("p", "r"), -1)[1]), abs=1e-5)
    assert r.extra["rm_logit"] == pytest.approx(float(multi_reference.logits("p", "r")[1]), abs=1e-4)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({}, r"has 3 labels \(helpful, harmless, honest\); set reward_model.kwargs.label"),
        ({"label": "honset"}, r"not a label of the model\. Did you mean 'honest'"),
        ({"label": 3}, r"out of range"),
    ],
)
def test_multi_label_errors(make_backend, multi_rm_dir, kwargs, match):
    with pytest.raises(ConfigError, match=match):
        make_backend(multi_rm_dir, **kwargs).load()


def test_single_head_sigmoid_and_normalisation(make_backend, reference):
    records = [{"prompt": "p", "response": "r"}, {"prompt": "q", "response": "a longer answer"}]
    raw = [float(reference.logits(r["prompt"], r["response"])[0]) for r in records]
    sig = make_backend(score_fn="probability").score(to_samples(records))
    assert [r.score for r in sig] == pytest.approx([1 / (1 + math.exp(-x)) for x in raw], abs=1e-5)
    fixed = make_backend(normalize="fixed", mean=1.5, std=2.0).score(to_samples(records))
    assert [r.score for r in fixed] == pytest.approx([(x - 1.5) / 2.0 for x in raw], abs=1e-4)
    squashed = make_backend(normalize="sigmoid", mean=1.5, std=2.0).score(to_samples(records))
    assert [r.score for r in squashed] == pytest.approx(
        [1 / (1 + math.exp(-(x - 1.5) / 2)) for x in raw], abs=1e-5
    )
    with pytest.raises(ConfigError, match="softmax' needs a model with more than one label"):
        make_backend(score_fn="softmax").load()


def test_dtype_and_gpt2_arch(make_backend, reference, tmp_path):
    from tiny_models import build_tiny_classifier

    records = [{"prompt": "p", "response": "a longer answer with 72"}]
    bf16 = make_backend(dtype="bfloat16")
    bf16.load()
    assert next(bf16.model.parameters()).dtype == torch.bfloat16
    assert bf16.score(to_samples(records))[0].score == pytest.approx(
        float(reference.logits("p", records[0]["response"])[0]), abs=0.1
    )
    gpt2 = make_backend(build_tiny_classifier(tmp_path / "g", arch="gpt2"))
    assert [r.status for r in gpt2.score(to_samples(records * 3))] == ["ok"] * 3


# -- settings ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"dtype": "fp8"}, r"dtype: Input should be 'auto', 'float32', 'bfloat16' or 'float16'"),
        ({"device": "tpu"}, r"device must be auto, cpu, cuda or cuda:N"),
        ({"mean": 1.0}, r"normalize is 'none'"),
        ({"token_budget": 0}, r"token_budget: Input should be greater than 0"),
        ({"truncation_side": "middle"}, r"truncation_side"),
    ],
)
def test_settings_validation(make_backend, kwargs, match):
    with pytest.raises(ConfigError, match=match):
        make_backend(**kwargs)


def test_missing_or_bad_model_path(make_backend, tmp_path):
    from rewardkit.config import RewardModelConfig

    with pytest.raises(ConfigError, match="model_path is required"):
        DiscriminativeRM(RewardModelConfig(enable=True, backend="discriminative"))
    with pytest.raises(ConfigError, match="does not exist"):
        make_backend(tmp_path / "nowhere").load()


# -- async ---------------------------------------------------------------------------------------
async def test_ascore_does_not_block_the_event_loop(make_backend):
    backend = make_backend(token_budget=512)
    backend.load()
    samples = to_samples(mixed_records(64, seed=11, max_words=200))
    ticks = 0
    done = asyncio.Event()

    async def heartbeat():
        nonlocal ticks
        while not done.is_set():
            ticks += 1
            await asyncio.sleep(0.001)

    beat = asyncio.create_task(heartbeat())
    await asyncio.sleep(0)
    results = await backend.ascore(samples)
    done.set()
    await beat
    assert [r.status for r in results] == ["ok"] * 64
    assert ticks >= 5, f"the event loop ticked only {ticks} times while scoring"


# -- accelerator out of memory (cannot happen on CPU: the forward is made to raise it) -------------
def test_out_of_memory_splits_the_batch_and_fails_only_what_does_not_fit(
    make_backend, reference, monkeypatch
):
    records = mixed_records(10, seed=2, max_words=30)
    records[4]["response"] = " ".join(WORDS * 8)  # the one row that "does not fit"
    backend = make_backend(token_budget=10**6)
    backend.load()
    original = backend._forward
    limit = len(backend.encode(to_samples([records[4]])[0])[0])
    seen = []

    def forward(rows):
        seen.append(len(rows))
        if len(rows) > 2 or max(len(r) for r in rows) >= limit:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated)")
        return original(rows)

    monkeypatch.setattr(backend, "_forward", forward)
    results = backend.score(to_samples(records))
    assert seen[0] == 10 and max(seen[1:]) <= 5
    assert [r.status for r in results] == ["ok"] * 4 + ["failed"] + ["ok"] * 5
    assert results[4].reason == "error" and "out of accelerator memory" in results[4].error
    expected = [float(reference.logits(r["prompt"], r["response"])[0]) for r in records]
    for i, r in enumerate(results):
        if i != 4:
            assert r.score == pytest.approx(expected[i], abs=1e-4)


def test_a_failing_forward_fails_its_batch_only(make_backend, monkeypatch):
    backend = make_backend(token_budget=64)
    backend.load()
    original = backend._forward

    def forward(rows):
        if any(len(r) > 40 for r in rows):
            raise RuntimeError("kernel exploded")
        return original(rows)

    monkeypatch.setattr(backend, "_forward", forward)
    results = backend.score(to_samples([{"response": "short"}, {"response": " ".join(WORDS * 4)}]))
    assert results[0].status == "ok"
    assert results[1].status == "failed" and "RuntimeError: kernel exploded" in results[1].error


@pytest.mark.parametrize("config_pad", ["eos", None])
def test_rows_are_padded_with_the_models_pad_id(make_backend, tmp_path, config_pad, reference_cls):
    from tiny_models import build_tiny_classifier

    path = build_tiny_classifier(tmp_path / "rm", pad_token_id=2 if config_pad == "eos" else None)
    ref = reference_cls(path)
    records = [{"prompt": "p", "response": "short"}, {"prompt": "q", "response": " ".join(WORDS * 2)}]
    results = make_backend(path).score(to_samples(records))
    if config_pad is None:
        ref.model.config.pad_token_id = ref.tokenizer.pad_token_id
    expected = [float(ref.logits(r["prompt"], r["response"])[0]) for r in records]
    assert [r.score for r in results] == pytest.approx(expected, abs=1e-4)


@pytest.mark.parametrize("side", ["left", "right"])
def test_bert_style_truncation_keeps_cls_and_sep(make_backend, tmp_path, side):
    from tiny_models import build_tiny_bert_classifier
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    path = build_tiny_bert_classifier(tmp_path / "bert")
    tok = AutoTokenizer.from_pretrained(str(path))
    model = AutoModelForSequenceClassification.from_pretrained(str(path)).eval()
    long = " ".join(WORDS * 8)
    records = [{"prompt": "how many clips? ", "response": long}, {"prompt": "q ", "response": "72"}]
    results = make_backend(path, max_length=20, truncation_side=side).score(to_samples(records))
    full = tok("how many clips? " + long)["input_ids"]
    assert full[0] == tok.cls_token_id and full[-1] == tok.sep_token_id and len(full) > 20
    body = full[1:-1]
    kept = [full[0], *(body[-18:] if side == "left" else body[:18]), full[-1]]
    with torch.no_grad():
        expected = [
            float(model(input_ids=torch.tensor([ids])).logits[0, 0])
            for ids in (kept, tok("q 72")["input_ids"])
        ]
    assert [r.status for r in results] == ["ok", "ok"]
    assert results[0].extra["truncated"] is True and results[0].extra["num_tokens"] == 20
    assert [r.score for r in results] == pytest.approx(expected, abs=1e-4)
    assert results[0].score != pytest.approx(results[1].score, abs=1e-4)
