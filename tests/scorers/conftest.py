"""Fixtures for the built-in scorer tests: the real GSM8K test split, parsed once."""

from __future__ import annotations

import json
import re

import pytest


@pytest.fixture(scope="session")
def gsm8k_records(gsm8k_test_path) -> list[dict]:
    """Every record of GSM8K's test split, with ``final`` (the number after ``####``) added."""
    records = []
    with open(gsm8k_test_path, encoding="utf-8") as f:
        for line in f:
            rec = json.loads(line)
            rec["final"] = rec["answer"].rsplit("####", 1)[1].strip()
            records.append(rec)
    assert len(records) > 1000
    return records


def perturb(number: str) -> str:
    """A different number: the reference plus one (keeps the sign and thousands separators out)."""
    value = int(re.sub(r"[,$]", "", number))
    return str(value + 1)
