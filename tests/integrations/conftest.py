"""Fixtures for the trainer-integration and server tests: a scorer file, configs, a tiny tokenizer."""

from __future__ import annotations

from pathlib import Path

import pytest

SCORER_SOURCE = '''
"""Test scorers: exact match with side information, plus control words that abstain, fail or sleep."""
import time


def compute_score(solution_str, ground_truth, sample):
    text = solution_str.strip()
    if text == "ABSTAIN":
        return None
    if text == "FAIL":
        raise ValueError("asked to fail")
    if text.startswith("SLEEP "):
        time.sleep(float(text.split()[1]))
        return 1.0
    hit = text == str(ground_truth).strip()
    return {"score": float(hit), "acc": hit, "ntok": sample.response_length}


def length_score(solution_str):
    return min(len(solution_str), 40) / 40.0


def always_fail(solution_str):
    raise RuntimeError("this scorer always fails")
'''


@pytest.fixture(scope="session")
def scorer_path(tmp_path_factory) -> Path:
    """A Python file of test scorers (see SCORER_SOURCE)."""
    path = tmp_path_factory.mktemp("scorers") / "scorers.py"
    path.write_text(SCORER_SOURCE, encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def rk_config(scorer_path) -> dict:
    """A rewardkit config that scores with ``compute_score`` from the scorer file, in-process."""
    return {
        "executor": "inline",
        "custom_reward_function": {"path": str(scorer_path), "name": "compute_score"},
    }


@pytest.fixture(scope="session")
def tokenizer():
    """The tiny byte-level BPE tokenizer shared by the model tests."""
    from tiny_models import build_tokenizer

    return build_tokenizer()
