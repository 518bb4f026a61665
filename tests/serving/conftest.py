"""Fixtures for served-model tests; the helpers live in standin_helpers.py (tests/ray imports them too)."""

from __future__ import annotations

import pytest


@pytest.fixture
def samples():
    """Twelve samples, unicode and an empty response among them."""
    out = [{"prompt": f"question {i}?", "response": f"answer {i} " * (i + 1)} for i in range(10)]
    out.append({"prompt": "ünïcødé ✓", "response": "日本語の答え"})
    out.append({"prompt": "empty response", "response": ""})
    return out
