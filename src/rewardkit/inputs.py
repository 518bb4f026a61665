"""Trainer batch objects as rewardkit samples: verl's ``DataProto``, TRL-style columns, records.

:func:`as_samples` is what :meth:`RewardEngine.compute <rewardkit.engine.RewardEngine.compute>` and
:func:`rewardkit.compute` call on their input:

* a verl ``DataProto`` (recognised by its type name and attributes, so verl is never imported here):
  padding is stripped with the attention mask as tensor operations, responses are decoded with the
  fast tokenizer's Rust ``decode_batch`` on plain id lists, and prompts are decoded (all at once)
  only when a scorer or backend first reads one;
* TRL-style columns: a mapping with ``completions`` (and ``prompts``), plus one list per dataset
  column, as TRL passes them to reward functions;
* anything else: records (dicts or :class:`~rewardkit.batch.Sample`), validated by
  :func:`~rewardkit.batch.to_samples`.

Neither torch nor verl is imported unless the caller passes one of their objects.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rewardkit.batch import Sample, to_samples
from rewardkit.errors import SampleError
from rewardkit.gcpause import paused_gc

_LAZY = object()  # "prompt not decoded yet"


class _PromptIds:
    """The prompt ids of one batch, taken from the tensors and decoded together on the first read."""

    def __init__(self, ids: Any, mask: Any, decode: Callable[[list[list[int]]], list[str]]):
        """``mask`` may be wider than ``ids`` (the whole attention mask): its first columns are the prompt's."""
        self._tensors: tuple[Any, Any] | None = (ids, mask)
        self._decode = decode
        self._texts: list[str] | None = None
        self._lock = threading.Lock()

    def text(self, i: int) -> str:
        if self._texts is None:
            with self._lock:
                if self._texts is None:
                    assert self._tensors is not None
                    ids, mask = self._tensors
                    self._texts = self._decode(_valid_ids(ids, mask[:, : ids.shape[-1]])[0])
                    self._tensors = None
        return self._texts[i]


class DecodedSample(Sample):
    """A :class:`~rewardkit.batch.Sample` whose ``prompt`` is decoded from token ids on first read.

    It pickles as a plain :class:`~rewardkit.batch.Sample` (prompt decoded), so worker processes
    never receive the batch's token ids.
    """

    _prompts: _PromptIds
    _row: int

    def _get_prompt(self) -> Any:
        value = self.__dict__["_prompt"]
        if value is _LAZY:
            value = self.__dict__["_prompt"] = self._prompts.text(self._row)
        return value

    def _set_prompt(self, value: Any) -> None:
        self.__dict__["_prompt"] = value

    prompt = property(_get_prompt, _set_prompt)

    def __reduce__(self):
        return (
            Sample,
            (
                self.index,
                self.response,
                self.prompt,
                self.data_source,
                self.ground_truth,
                self.extra_info,
                self.uid,
                self.response_length,
            ),
        )


_PRIMITIVE = (str, int, float, bool, type(None))


def plain(value: Any) -> Any:
    """numpy scalars/arrays and nested mappings as plain Python data (lists, dicts, floats)."""
    cls = type(value)
    if cls in _PRIMITIVE:
        return value
    if cls is dict:
        for k, v in value.items():  # (a loop: cheaper than all() over a generator for a few keys)
            if type(v) not in _PRIMITIVE or type(k) is not str:
                return {str(k): plain(v) for k, v in value.items()}
        return value.copy()
    mod = cls.__module__.split(".")[0]
    if mod == "numpy":
        return value.tolist() if hasattr(value, "tolist") else value
    if mod == "omegaconf":
        from omegaconf import OmegaConf

        return OmegaConf.to_container(value, resolve=True)
    if isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


# -- decoding --------------------------------------------------------------------------------------
def batch_decoder(tokenizer: Any) -> Callable[[list[list[int]]], list[str]]:
    """A function decoding many id lists at once, as ``tokenizer.decode(ids, skip_special_tokens=True)``.

    A transformers fast tokenizer (without clean-up of tokenization spaces) decodes through its
    Rust ``decode_batch``; a ``tokenizers.Tokenizer`` likewise; others through ``batch_decode``
    or one ``decode`` per row.
    """
    if tokenizer is None:
        raise ValueError("decoding token ids needs a tokenizer: pass tokenizer= (or give the engine one)")
    clean = getattr(tokenizer, "clean_up_tokenization_spaces", False)
    hit = _DECODERS.get(id(tokenizer))
    if hit is not None and hit[0] is tokenizer and hit[1] == clean:
        return hit[2]
    decode = _batch_decoder(tokenizer)
    if len(_DECODERS) >= 16:
        _DECODERS.clear()
    _DECODERS[id(tokenizer)] = (tokenizer, clean, decode)
    return decode


#: ``id(tokenizer)`` → ``(tokenizer, its clean_up_tokenization_spaces, decoder)`` (per-sample calls reuse it).
_DECODERS: dict[int, tuple[Any, Any, Callable[[list[list[int]]], list[str]]]] = {}


def _batch_decoder(tokenizer: Any) -> Callable[[list[list[int]]], list[str]]:
    backend = None
    if hasattr(tokenizer, "decode_batch"):  # a tokenizers.Tokenizer itself
        backend = tokenizer
    elif not getattr(tokenizer, "clean_up_tokenization_spaces", False):
        for attr in ("backend_tokenizer", "_tokenizer"):
            candidate = getattr(tokenizer, attr, None)
            if hasattr(candidate, "decode_batch"):
                backend = candidate
                break
    if backend is not None:
        return lambda ids: backend.decode_batch(ids, skip_special_tokens=True)
    if hasattr(tokenizer, "batch_decode"):
        return lambda ids: list(tokenizer.batch_decode(ids, skip_special_tokens=True))
    return lambda ids: [tokenizer.decode(x, skip_special_tokens=True) for x in ids]


def _valid_ids(ids: Any, mask: Any) -> tuple[list[list[int]], list[int]]:
    """The ids where ``mask`` is set, one list per row (any padding side), and the row lengths."""
    if len(ids) == 1:  # verl's per-sample calls: two tolist() and C-level list scans beat tensor ops
        row = _kept(ids.tolist()[0], mask.tolist()[0])  # (no row-indexing op: it costs more)
        return [row], [len(row)]
    keep = mask != 0
    lengths = keep.sum(dim=-1).tolist()
    return [row.tolist() for row in ids[keep].split(lengths)], lengths


def _kept(row: list[int], flags: list[Any]) -> list[int]:
    """The ids of one row where its mask is set, by C-level list scans (any padding side)."""
    if len(row) != len(flags):
        raise ValueError(f"ids have {len(row)} columns but the mask has {len(flags)}")
    kept = len(flags) - flags.count(0)
    if 0 not in flags[:kept]:  # right padding (or none)
        return row[:kept]
    if 0 not in flags[len(flags) - kept :]:  # left padding
        return row[len(flags) - kept :]
    return [t for t, m in zip(row, flags, strict=True) if m != 0]


# -- verl DataProto ----------------------------------------------------------------------------
def is_dataproto(obj: Any) -> bool:
    """Whether ``obj`` looks like a verl ``DataProto`` (checked without importing verl)."""
    return type(obj).__name__ == "DataProto" and hasattr(obj, "batch") and hasattr(obj, "non_tensor_batch")


def dataproto_samples(
    data: Any, tokenizer: Any, *, reward_fn_key: str = "data_source"
) -> tuple[list[Sample], Any]:
    """The samples of a verl ``DataProto`` and its response mask (``attention_mask[:, prompt_len:]``).

    Reads ``prompts``, ``responses`` and ``attention_mask`` from ``data.batch`` and, per sample,
    ``data_source`` (``reward_fn_key``), ``reward_model.ground_truth`` (or ``ground_truth``),
    ``extra_info`` and ``uid`` from ``data.non_tensor_batch``. ``response_length`` is the number of
    valid response tokens. Prompts are decoded lazily (see :class:`DecodedSample`).
    """
    batch = data.batch
    prompts, responses = batch["prompts"], batch["responses"]
    mask = batch["attention_mask"]
    response_mask = mask[:, prompts.shape[-1] :]
    if response_mask.shape != responses.shape:
        raise _mask_mismatch(tuple(response_mask.shape), responses)
    with paused_gc(len(responses)):
        decode = batch_decoder(tokenizer)
        response_ids, response_lens = _valid_ids(responses, response_mask)
        texts = decode(response_ids)
        del response_ids
        samples = _decoded_samples(
            data, texts, response_lens, _PromptIds(prompts, mask, decode), reward_fn_key
        )
    return samples, response_mask


def dataproto_row(data: Any, tokenizer: Any, *, reward_fn_key: str = "data_source") -> Sample:
    """The sample of a one-row ``DataProto`` (verl's per-sample ``run_single``): what
    :func:`dataproto_samples` gives for it, without the tensor operations a batch needs."""
    batch = data.batch
    prompts, responses = batch["prompts"], batch["responses"]
    if len(responses) != 1:
        raise ValueError(f"dataproto_row takes a DataProto of one row, got {len(responses)}")
    flags = batch["attention_mask"].tolist()[0]
    prompt_len = prompts.shape[-1]
    if len(flags) - prompt_len != responses.shape[-1]:
        raise _mask_mismatch((1, len(flags) - prompt_len), responses)
    decode = batch_decoder(tokenizer)
    ids = _kept(responses.tolist()[0], flags[prompt_len:])
    prompt_ids = _PromptIds(prompts, batch["attention_mask"], decode)
    return _decoded_samples(data, decode([ids]), [len(ids)], prompt_ids, reward_fn_key)[0]


def _mask_mismatch(shape: tuple[int, ...], responses: Any) -> ValueError:
    return ValueError(
        f"attention_mask[:, prompt_len:] has shape {shape} but responses has {tuple(responses.shape)}"
    )


def _decoded_samples(
    data: Any, texts: list[str], lengths: list[int], prompt_ids: _PromptIds, reward_fn_key: str
) -> list[Sample]:
    nt = data.non_tensor_batch
    n = len(texts)
    none = [None] * n
    sources = _column(nt.get(reward_fn_key), none)
    rms = nt.get("reward_model")
    gts = _column(nt.get("ground_truth") if rms is None else None, none)
    rms = _column(rms, none)
    extras = _column(nt.get("extra_info"), none)
    uids = _column(nt.get("uid"), none)
    samples: list[Sample] = []
    append = samples.append
    new = object.__new__
    for i in range(n):
        ds, rm, extra, uid = sources[i], rms[i], extras[i], uids[i]
        if rm is not None:
            gt = rm.get("ground_truth") if type(rm) is dict or isinstance(rm, Mapping) else None
        else:
            gt = gts[i]
        if type(gt) is not str:  # (the common gold, text, needs no conversion)
            gt = plain(gt)
        s = new(DecodedSample)
        # The fields of Sample, set directly (this loop runs once per sample of every batch).
        s.__dict__ = {
            "index": i,
            "response": texts[i],
            "_prompt": _LAZY,
            "data_source": None if ds is None else ds if type(ds) is str else str(ds),
            "ground_truth": gt,
            "extra_info": plain(extra) if type(extra) is dict or isinstance(extra, Mapping) else {},
            "uid": None if uid is None else uid if type(uid) is str else str(uid),
            "response_length": lengths[i],
            "_prompts": prompt_ids,
            "_row": i,
        }
        append(s)
    return samples


def _column(values: Any, default: list[None]) -> list[Any]:
    """A non-tensor column (numpy object array, list) as a Python list; ``default`` when absent."""
    if values is None:
        return default
    return values.tolist() if hasattr(values, "tolist") else list(values)


# -- TRL columns -------------------------------------------------------------------------------
#: Keys of a TRL reward-function call that are not dataset columns.
TRL_CALL_KEYS = frozenset(
    {"prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric", "environments"}
)
_SAMPLE_COLUMNS = ("ground_truth", "data_source", "extra_info", "uid", "reward_model", "response_length")


def is_trl_columns(obj: Any) -> bool:
    """Whether ``obj`` is TRL-style columns: a mapping with a ``completions`` list."""
    return (
        isinstance(obj, Mapping)
        and "completions" in obj
        and isinstance(obj["completions"], Sequence)
        and not isinstance(obj["completions"], str | bytes)
    )


def trl_records(columns: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One record per completion of TRL-style columns.

    ``completions`` are strings or chat messages (the last assistant message is the response);
    ``prompts`` strings or chat messages; ``completion_ids`` gives ``response_length``; columns named
    like sample fields (``ground_truth``, ``data_source``, ``reward_model``, ...) fill them, and any
    other column with one value per completion goes into ``extra_info``.
    """

    completions = columns["completions"]
    n = len(completions)
    prompts = columns.get("prompts")
    if prompts is not None and len(prompts) != n:
        raise SampleError(None, "prompts", f"{len(prompts)} prompts for {n} completions")
    per_row = {
        k: v
        for k, v in columns.items()
        if k not in TRL_CALL_KEYS
        and isinstance(v, Sequence)
        and not isinstance(v, str | bytes)
        and len(v) == n
    }
    ids = columns.get("completion_ids")
    out = []
    for i in range(n):
        rec: dict[str, Any] = {"response": completion_text(completions[i])}
        if prompts is not None:
            p = prompts[i]
            if isinstance(p, Sequence) and not isinstance(p, str):
                p = [
                    {"role": m.get("role", "user"), "content": content_text(m.get("content"))}
                    if isinstance(m, Mapping)
                    else {"role": "user", "content": str(m)}
                    for m in p
                ]
            rec["prompt"] = p
        extra: dict[str, Any] = {}
        for k, values in per_row.items():
            if k in _SAMPLE_COLUMNS:
                rec[k] = values[i]
            else:
                extra[k] = values[i]
        if extra:
            base = rec.get("extra_info")
            rec["extra_info"] = {**extra, **base} if isinstance(base, Mapping) else extra
        if ids is not None and i < len(ids) and ids[i] is not None and "response_length" not in rec:
            rec["response_length"] = len(ids[i])
        out.append(rec)
    return out


# -- the entry point -----------------------------------------------------------------------------
def as_samples(batch: Any, *, tokenizer: Any = None, reward_fn_key: str = "data_source") -> list[Sample]:
    """Samples from a verl ``DataProto`` (needs ``tokenizer``), TRL-style columns, or records."""
    if type(batch) is list:  # records: the common case, without the slower checks below
        return to_samples(batch)
    if is_dataproto(batch):
        return dataproto_samples(batch, tokenizer, reward_fn_key=reward_fn_key)[0]
    if is_trl_columns(batch):
        return to_samples(trl_records(batch))
    return to_samples(batch)


def content_text(content: Any) -> str:
    """The text of a message's ``content``: a string, or the ``text`` parts of a multimodal list."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, Mapping) and part.get("type", "text") == "text":
                parts.append(str(part.get("text", "")))
        return "".join(parts)
    return str(content)


def completion_text(completion: Any) -> str:
    """The response text of one TRL completion.

    A string is returned as is. Conversational completions (a list of message dicts) give the
    content of their *last* assistant message (after tool calls, that is the final answer); a
    list without assistant messages gives all contents joined by newlines.
    """
    if completion is None:
        return ""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Mapping):
        return content_text(completion.get("content"))
    if isinstance(completion, Sequence):
        messages = [m for m in completion if isinstance(m, Mapping)]
        assistant = [m for m in messages if m.get("role") == "assistant"]
        if assistant:
            return content_text(assistant[-1].get("content"))
        return "\n".join(content_text(m.get("content")) for m in messages)
    raise TypeError(f"a TRL completion must be a string or chat messages, got {type(completion).__name__}")
