"""Samples: the validated input of every scorer, manager and backend.

A sample is built from a plain dict (a JSONL record) with :func:`to_samples`. Accepted layouts:

* rewardkit's own: ``prompt``, ``response``, ``data_source``, ``ground_truth``, ``extra_info``, ``uid``
* verl's: ``reward_model: {"ground_truth": ...}`` instead of ``ground_truth``, and
  ``solution_str`` as an alias of ``response``.

Errors name the sample index and the field.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from rewardkit.errors import SampleError

#: Chat messages: a list of ``{"role": ..., "content": ...}`` dicts.
Messages = list[dict[str, Any]]


@dataclass
class Sample:
    """One (prompt, response) pair to score.

    ``index`` is the position in the batch the caller passed; results come back in that order.
    ``response_length`` is the number of response tokens when the caller knows it (used by length
    penalties); ``None`` means "count it yourself if you need it".
    """

    index: int
    response: str
    prompt: str | Messages = ""
    data_source: str | None = None
    ground_truth: Any = None
    extra_info: dict[str, Any] = field(default_factory=dict)
    uid: str | None = None
    response_length: int | None = None

    @property
    def prompt_text(self) -> str:
        """The prompt as plain text (chat messages joined by newlines)."""
        if isinstance(self.prompt, str):
            return self.prompt
        return "\n".join(str(m.get("content", "")) for m in self.prompt)

    def to_dict(self) -> dict[str, Any]:
        """The sample as a JSON-serialisable dict (without ``index``)."""
        out: dict[str, Any] = {
            "prompt": self.prompt,
            "response": self.response,
            "data_source": self.data_source,
            "ground_truth": self.ground_truth,
            "extra_info": self.extra_info,
        }
        if self.uid is not None:
            out["uid"] = self.uid
        if self.response_length is not None:
            out["response_length"] = self.response_length
        return out


_KNOWN_FIELDS = {
    "prompt",
    "response",
    "solution_str",
    "data_source",
    "ground_truth",
    "reward_model",
    "extra_info",
    "uid",
    "response_length",
}


def _check_messages(index: int, value: list) -> Messages:
    for j, m in enumerate(value):
        if not isinstance(m, Mapping) or "content" not in m:
            raise SampleError(
                index, f"prompt[{j}]", f"chat messages must be dicts with 'role' and 'content', got {m!r:.80}"
            )
    return [dict(m) for m in value]


def to_sample(record: Any, index: int) -> Sample:
    """Validate one record and turn it into a :class:`Sample`.

    Raises :class:`~rewardkit.errors.SampleError` naming ``index`` and the bad field.
    Unknown fields are kept in ``extra_info`` rather than dropped.
    """
    if type(record) is dict:
        pass
    elif isinstance(record, Sample):
        if record.index == index:
            return record
        return Sample(**{f.name: getattr(record, f.name) for f in fields(Sample)} | {"index": index})
    elif not isinstance(record, Mapping):  # (the ABC check is slow: exact types first)
        raise SampleError(index, None, f"expected a dict, got {type(record).__name__}")

    if "response" in record:
        response = record["response"]
        rfield = "response"
    elif "solution_str" in record:
        response = record["solution_str"]
        rfield = "solution_str"
    else:
        raise SampleError(index, "response", "missing (every sample needs the model's response)")
    if response is None:  # a lost generation, not an empty one: scoring it would hide the bug
        raise SampleError(index, rfield, "is None (an empty response is the string '')")
    # (exact type checks first in this function: it runs once per sample of every batch)
    if type(response) is not str and not isinstance(response, str):
        raise SampleError(index, rfield, f"must be a string, got {type(response).__name__}")

    prompt = record.get("prompt", "")
    if prompt is None:
        prompt = ""
    if type(prompt) is str:
        pass
    elif isinstance(prompt, list):
        prompt = _check_messages(index, prompt)
    elif not isinstance(prompt, str):
        raise SampleError(index, "prompt", f"must be a string or chat messages, got {type(prompt).__name__}")

    data_source = record.get("data_source")
    if data_source is not None and type(data_source) is not str and not isinstance(data_source, str):
        raise SampleError(index, "data_source", f"must be a string, got {type(data_source).__name__}")

    if "ground_truth" in record:
        ground_truth = record["ground_truth"]
    else:
        rm = record.get("reward_model")
        if rm is None:
            ground_truth = None
        elif isinstance(rm, Mapping):
            ground_truth = rm.get("ground_truth")
        else:
            raise SampleError(
                index, "reward_model", f"must be a dict like {{'ground_truth': ...}}, got {type(rm).__name__}"
            )

    extra_info = record.get("extra_info")
    if extra_info is None:
        extra_info = {}
    elif type(extra_info) is dict:
        extra_info = extra_info.copy()
    elif not isinstance(extra_info, Mapping):
        raise SampleError(index, "extra_info", f"must be a dict, got {type(extra_info).__name__}")
    else:
        extra_info = dict(extra_info)
    if not record.keys() <= _KNOWN_FIELDS:
        for k, v in record.items():
            if k not in _KNOWN_FIELDS:
                extra_info.setdefault(k, v)

    uid = record.get("uid")
    if uid is not None and type(uid) is not str:
        if not isinstance(uid, str | int):
            raise SampleError(index, "uid", f"must be a string or int, got {type(uid).__name__}")
        uid = str(uid)

    length = record.get("response_length")
    if length is not None and (not isinstance(length, int) or isinstance(length, bool) or length < 0):
        raise SampleError(index, "response_length", f"must be a non-negative int, got {length!r}")

    # Sample(index, response, ...) without the call of its generated __init__ (once per sample)
    sample = _new(Sample)
    sample.index = index
    sample.response = response
    sample.prompt = prompt
    sample.data_source = data_source
    sample.ground_truth = ground_truth
    sample.extra_info = extra_info
    sample.uid = uid
    sample.response_length = length
    return sample


_new = object.__new__


def to_samples(records: Iterable[Any]) -> list[Sample]:
    """Validate a batch of records (dicts or :class:`Sample`) into samples indexed 0..n-1."""
    if isinstance(records, Mapping | str | bytes):
        raise SampleError(None, None, f"expected a list of samples, got {type(records).__name__}")
    return [to_sample(r, i) for i, r in enumerate(records)]


def iter_jsonl(path: str | Path) -> Iterator[dict[str, Any]]:
    """Yield the records of a JSONL file, skipping blank lines; errors name the line number."""
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise SampleError(None, None, f"{path}:{lineno}: not valid JSON ({e.msg})") from None
            if not isinstance(rec, dict):
                raise SampleError(
                    None, None, f"{path}:{lineno}: expected a JSON object, got {type(rec).__name__}"
                )
            yield rec


def read_jsonl(path: str | Path) -> list[Sample]:
    """Read and validate a JSONL file of samples."""
    return to_samples(iter_jsonl(path))
