"""Built-in scorers register through the real plugin manager and route verl's data sources."""

from __future__ import annotations

import subprocess
import sys

import pytest

import rewardkit
from rewardkit.plugins import get_registries

ROUTES = {
    "openai/gsm8k": "gsm8k",
    "gsm8k": "gsm8k",
    "lighteval/MATH": "math",
    "DigitalLearningGmbH/MATH-lighteval": "math",
    "HuggingFaceH4/MATH-500": "math",
    "math": "math",
    "aime2024": "math_dapo",  # as verl routes it
    "aime_2025": "math_dapo",
    "numina_olympiads": "math",
    "math_dapo": "math_dapo",
    "math_dapo_reasoning": "math_dapo",
    "codecontests": "code",
    "apps": "code",
    "taco": "code",
    "livecodebench/v5": "code",
}


@pytest.mark.parametrize(("data_source", "scorer"), sorted(ROUTES.items()))
def test_routes(data_source, scorer):
    assert get_registries().scorers.name_for(data_source) == scorer


def test_all_builtins_registered_by_reference():
    scorers = get_registries().scorers
    for name in (
        "gsm8k",
        "math",
        "math_dapo",
        "code",
        "think_format",
        "boxed_format",
        "regex_format",
        "cosine_length",
    ):
        entry = scorers.entry(name)
        assert entry.provider == "rewardkit.scorers"
        assert entry.obj.ref and entry.obj.ref.startswith("rewardkit.scorers.")  # travels to workers by name
    assert scorers.name_for("some/unknown") is None


def test_plugin_loading_stays_light():
    code = (
        "import sys, rewardkit.plugins as p\n"
        "p.get_registries()\n"
        "heavy = [m for m in ('math_verify', 'sympy', 'aiohttp', 'torch', 'transformers') if m in sys.modules]\n"
        "print(heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_compute_end_to_end_inline(gsm8k_records):
    batch = []
    for rec in gsm8k_records[:20]:
        batch.append({"data_source": "openai/gsm8k", "response": rec["answer"], "ground_truth": rec["final"]})
        batch.append({"data_source": "openai/gsm8k", "response": "#### -1", "ground_truth": rec["final"]})
    batch.append(
        {"data_source": "HuggingFaceH4/MATH-500", "response": "\\boxed{\\frac12}", "ground_truth": "0.5"}
    )
    batch.append({"data_source": "math_dapo", "response": "Answer: 3", "ground_truth": "4"})
    batch.append({"data_source": "openai/gsm8k", "response": "#### 1", "ground_truth": None})
    result = rewardkit.compute(batch, {"executor": "inline"})
    assert result.scores[:40] == [1.0, 0.0] * 20
    assert result.scores[40] == 1.0 and result.scores[41] == -1.0
    assert result.status[:42] == ["ok"] * 42
    assert result.status[42] == "failed"  # a bad ground truth is a typed failure, not a silent 0
    assert result.extra["acc"][:2] == [True, False] and result.extra["pred"][1] == "-1"


def test_format_and_length_as_composite_components():
    batch = [
        {"data_source": "openai/gsm8k", "response": "<think>9*2=18</think>#### 18", "ground_truth": "18"},
        {"data_source": "openai/gsm8k", "response": "#### 18", "ground_truth": "18"},
        {"data_source": "openai/gsm8k", "response": "<think>hm</think>#### 17", "ground_truth": "18"},
    ]
    cfg = {
        "executor": "inline",
        "reward_manager": {"name": "composite"},
        "scorers": [
            {"name": "gsm8k"},
            {"name": "think_format", "weight": 0.5},
            {"name": "regex_format", "weight": 0.25, "kwargs": {"pattern": r"<think>.*</think>.*####\s*\d+"}},
            {"name": "cosine_length", "weight": 0.0, "kwargs": {"max_length": 100}},
        ],
    }
    result = rewardkit.compute(batch, cfg)
    assert result.status == ["ok", "ok", "ok"]
    assert result.scores == [1.75, 1.0, 0.75]
    lengths = result.components["cosine_length"]
    assert lengths[1] > lengths[0] > 0 > lengths[2]
