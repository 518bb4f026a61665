"""A discriminative reward model: a transformers sequence-classification model scored locally.

Configured by ``reward.reward_model`` with ``backend: discriminative``, ``model_path`` (a local
directory holding the model and its tokenizer) and ``kwargs`` (validated by
:class:`DiscriminativeSettings`). Each sample is rendered with the *reward model's own* chat
template (prompt messages plus the response as the assistant turn), tokenized, truncated, packed
into length-sorted micro-batches under a token budget and scored in one forward pass per batch.
torch and transformers are imported only when the backend is built.
"""

from __future__ import annotations

import asyncio
import difflib
import gc
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field, model_validator

from rewardkit.backends.base import RMBackend
from rewardkit.errors import ConfigError
from rewardkit.options import Options, validate_options
from rewardkit.result import SampleResult

if TYPE_CHECKING:
    from rewardkit.batch import Sample
    from rewardkit.config import RewardModelConfig


class DiscriminativeSettings(Options):
    """``reward_model.kwargs`` of the discriminative backend."""

    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="auto: the checkpoint's dtype on CUDA, float32 on CPU"
    )
    device: str = Field("auto", description="auto (cuda if available, else cpu) | cpu | cuda | cuda:N")
    trust_remote_code: bool = Field(False, description="let transformers run the checkpoint's own code")
    max_length: int | None = Field(
        None, gt=1, description="longest input in tokens; default: the model's max positions"
    )
    truncation_side: Literal["left", "right"] = Field(
        "left",
        description="left keeps the end of the conversation (the response); BOS/CLS and EOS/SEP are kept",
    )
    token_budget: int = Field(16384, gt=0, description="max padded tokens per micro-batch")
    max_batch_size: int | None = Field(None, gt=0, description="max samples per micro-batch")
    label: int | str | None = Field(
        None, description="which head of a multi-label model is the score (index or id2label name)"
    )
    score_fn: Literal["logit", "probability", "sigmoid", "softmax"] = Field(
        "logit", description="probability = softmax over labels, or sigmoid for a single head"
    )
    normalize: Literal["none", "fixed", "sigmoid"] = Field(
        "none", description="fixed: (s - mean) / std; sigmoid: sigmoid((s - mean) / std)"
    )
    mean: float = Field(0.0, description="subtracted from the score by normalize: fixed | sigmoid")
    std: float = Field(1.0, gt=0, description="divides the centred score by normalize: fixed | sigmoid")
    chat_template: str | None = Field(
        None, description="Jinja chat template (or a path to a .jinja file) replacing the tokenizer's"
    )
    use_chat_template: bool = Field(
        True, description="false: score prompt text + response as plain text, without a template"
    )

    @model_validator(mode="after")
    def _check(self) -> DiscriminativeSettings:
        if self.device != "auto" and not (self.device == "cpu" or self.device.startswith("cuda")):
            raise ValueError(f"device must be auto, cpu, cuda or cuda:N, got {self.device!r}")
        if self.normalize == "none" and (self.mean != 0.0 or self.std != 1.0):
            raise ValueError("mean/std are set but normalize is 'none'; set normalize: fixed or sigmoid")
        return self


def parse_settings(kwargs: dict[str, Any]) -> DiscriminativeSettings:
    """Validate ``reward_model.kwargs``; a :class:`ConfigError` lists every problem and the known keys."""
    return validate_options(
        DiscriminativeSettings, kwargs, "reward.reward_model.kwargs", "the discriminative backend"
    )


class _Encoded:
    """One sample after rendering and tokenizing."""

    __slots__ = ("pos", "ids", "truncated", "error")

    def __init__(self, pos: int, ids: list[int] | None = None, truncated: bool = False, error: str = ""):
        self.pos = pos
        self.ids = ids
        self.truncated = truncated
        self.error = error


def pack_batches(
    lengths: Sequence[int], token_budget: int, max_batch_size: int | None = None
) -> list[list[int]]:
    """Group positions into micro-batches, longest first, so ``len(batch) * longest <= token_budget``.

    Sorting by length keeps padding small; a sample longer than the budget gets a batch of its own.
    Returns lists of positions into ``lengths``.
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for i in order:
        n = lengths[i]
        width = max(longest, n)
        full = max_batch_size is not None and len(current) >= max_batch_size
        if current and (full or (len(current) + 1) * width > token_budget):
            batches.append(current)
            current, width = [], n
        current.append(i)
        longest = width
    if current:
        batches.append(current)
    return batches


class DiscriminativeRM(RMBackend):
    """Scores samples with a local ``AutoModelForSequenceClassification`` (see the module docstring).

    Lifecycle: ``load`` reads the model on CPU and moves it to the device (it stays on CPU with
    ``offload: true``); ``wake_up`` moves the weights to the device; ``sleep`` moves them to CPU and
    empties the CUDA cache. Per-sample extras: ``truncated``, ``num_tokens`` and ``rm_logit`` (the
    chosen head's raw logit, before ``score_fn`` and normalisation).
    """

    name: ClassVar[str] = "discriminative"
    Options: ClassVar[type[DiscriminativeSettings]] = DiscriminativeSettings
    options_key: ClassVar[str] = "kwargs"

    def __init__(self, config: RewardModelConfig):
        super().__init__(config)
        self.settings = parse_settings(config.kwargs)
        if not config.model_path:
            raise ConfigError("reward_model.model_path is required for the discriminative backend")
        self.model: Any = None
        self.tokenizer: Any = None
        self.device: str = "cpu"
        self.label_index = 0
        self.max_length = 0
        self._template: str | None = None
        self._pad_id = 0
        self._reset_metrics()

    # -- lifecycle -------------------------------------------------------------------------------
    def _resolve_device(self) -> str:
        import torch

        device = self.settings.device
        if device == "auto":
            return "cuda" if torch.cuda.is_available() else "cpu"
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise ConfigError(f"reward_model.kwargs.device is {device!r} but CUDA is not available")
        return device

    def _resolve_dtype(self):
        import torch

        if self.settings.dtype == "auto":
            return "auto" if self.device.startswith("cuda") else torch.float32
        return getattr(torch, self.settings.dtype)

    def _load(self) -> None:
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        path = Path(self.config.model_path or "")
        if not path.exists():
            raise ConfigError(
                f"reward_model.model_path {str(path)!r} does not exist (it must be a local directory "
                "holding the model and its tokenizer, as written by save_pretrained)"
            )
        s = self.settings
        self.device = self._resolve_device()
        tokenizer = AutoTokenizer.from_pretrained(str(path), trust_remote_code=s.trust_remote_code)
        model = AutoModelForSequenceClassification.from_pretrained(
            str(path), dtype=self._resolve_dtype(), trust_remote_code=s.trust_remote_code
        )
        model.eval()
        if tokenizer.pad_token_id is None:
            if tokenizer.eos_token is None:
                raise ConfigError(f"the tokenizer in {path} has neither a pad nor an eos token")
            tokenizer.pad_token = tokenizer.eos_token
        if model.config.pad_token_id is None:
            model.config.pad_token_id = tokenizer.pad_token_id
        # Sequence classifiers find each row's last token through the config's pad_token_id, so
        # rows are padded with that id even where the tokenizer's differs.
        self._pad_id = int(model.config.pad_token_id)
        self.label_index = self._resolve_label(model.config)
        self.max_length = s.max_length or self._default_max_length(model.config, tokenizer)
        self._template = self._resolve_template(tokenizer)
        self.tokenizer = tokenizer
        self.model = model
        if not self.config.offload:
            self.model.to(self.device)

    def _wake_up(self) -> None:
        self.model.to(self.device)

    def _sleep(self) -> None:
        import torch

        self.model.to("cpu")
        if torch.cuda.is_available():
            torch.cuda.synchronize()
            torch.cuda.empty_cache()

    def _close(self) -> None:
        import torch

        self.model = None
        self.tokenizer = None
        if torch.cuda.is_available():
            gc.collect()
            torch.cuda.empty_cache()

    # -- load-time resolution --------------------------------------------------------------------
    def _resolve_label(self, config: Any) -> int:
        num = int(config.num_labels)
        names = [str(config.id2label.get(i, i)) for i in range(num)] if config.id2label else []
        listed = f"{num} labels ({', '.join(names)})" if names else f"{num} labels"
        label = self.settings.label
        if self.settings.score_fn == "softmax" and num == 1:
            raise ConfigError("score_fn 'softmax' needs a model with more than one label; use 'sigmoid'")
        if label is None:
            if num != 1:
                raise ConfigError(f"the reward model has {listed}; set reward_model.kwargs.label to pick one")
            return 0
        if isinstance(label, int):
            if not 0 <= label < num:
                raise ConfigError(
                    f"reward_model.kwargs.label={label} is out of range: the model has {listed}"
                )
            return label
        if label in names:
            return names.index(label)
        close = difflib.get_close_matches(label, names, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ConfigError(
            f"reward_model.kwargs.label {label!r} is not a label of the model.{hint} It has {listed}"
        )

    @staticmethod
    def _default_max_length(config: Any, tokenizer: Any) -> int:
        candidates = [
            v
            for v in (
                getattr(config, "max_position_embeddings", None),
                getattr(config, "n_positions", None),
                getattr(tokenizer, "model_max_length", None),
            )
            if isinstance(v, int) and 1 < v < 10_000_000
        ]
        return min(candidates) if candidates else 4096

    def _resolve_template(self, tokenizer: Any) -> str | None:
        s = self.settings
        if not s.use_chat_template:
            return None
        if s.chat_template is not None:
            text = s.chat_template
            if "{" not in text and text.endswith(".jinja"):
                try:
                    return Path(text).read_text(encoding="utf-8")
                except OSError as e:
                    raise ConfigError(
                        f"reward_model.kwargs.chat_template: cannot read {text!r}: {e}"
                    ) from None
            return text
        return getattr(tokenizer, "chat_template", None) or None

    # -- rendering and tokenizing ----------------------------------------------------------------
    def render(self, sample: Sample) -> str:
        """The text the reward model reads: its chat template applied to prompt + response.

        Without a chat template (none in the tokenizer, or ``use_chat_template: false``) it is the
        prompt text followed by the response.
        """
        if self._template is None:
            return sample.prompt_text + sample.response
        if isinstance(sample.prompt, str):
            messages = [{"role": "user", "content": sample.prompt}] if sample.prompt else []
        else:
            messages = [dict(m) for m in sample.prompt]
        messages.append({"role": "assistant", "content": sample.response})
        return self.tokenizer.apply_chat_template(
            messages, chat_template=self._template, tokenize=False, add_generation_prompt=False
        )

    def encode(self, sample: Sample) -> tuple[list[int], bool]:
        """Token ids for one sample and whether they were truncated.

        A BOS that the template already wrote and the tokenizer adds again is dropped once.
        Truncation keeps ``max_length`` tokens from the configured side, always keeping a leading
        BOS / CLS and a trailing EOS / SEP (a BERT-style head reads the CLS position).
        """
        text = self.render(sample)
        ids = list(self.tokenizer(text, add_special_tokens=True)["input_ids"])
        bos = self.tokenizer.bos_token_id
        if bos is not None and len(ids) >= 2 and ids[0] == bos and ids[1] == bos:
            ids = ids[1:]
        if not ids:
            raise ValueError("nothing to score: the rendered input has no tokens")
        limit = self.max_length
        if len(ids) <= limit:
            return ids, False
        tok = self.tokenizer
        heads = {t for t in (bos, getattr(tok, "cls_token_id", None)) if t is not None}
        tails = {
            t
            for t in (getattr(tok, "eos_token_id", None), getattr(tok, "sep_token_id", None))
            if t is not None
        }
        head = ids[:1] if ids[0] in heads else []
        tail = ids[-1:] if ids[-1] in tails else []
        body = ids[len(head) : len(ids) - len(tail)]
        room = limit - len(head) - len(tail)  # >= 0: max_length is at least 2
        kept = body[:room] if self.settings.truncation_side == "right" else body[len(body) - room :]
        return [*head, *kept, *tail], True

    # -- scoring ---------------------------------------------------------------------------------
    async def ascore(self, samples: Sequence[Sample]) -> list[SampleResult]:
        """Score samples in a worker thread (the event loop stays free); wakes the model if needed."""
        if not samples:
            return []
        return await asyncio.to_thread(self.score, samples)

    def score(self, samples: Sequence[Sample]) -> list[SampleResult]:
        """Blocking scoring: one :class:`SampleResult` per sample, in input order."""
        if not samples:
            return []
        with self._lock:
            if self.state != "awake":
                self.wake_up()
            encoded = []
            for pos, sample in enumerate(samples):
                try:
                    ids, truncated = self.encode(sample)
                    encoded.append(_Encoded(pos, ids, truncated))
                except Exception as e:
                    encoded.append(
                        _Encoded(pos, error=f"could not render or tokenize: {type(e).__name__}: {e}")
                    )
            results: list[SampleResult | None] = [None] * len(samples)
            for enc in encoded:
                if enc.ids is None:
                    results[enc.pos] = SampleResult.failed("error", enc.error)
            good = [e for e in encoded if e.ids is not None]
            for batch in pack_batches(
                [len(e.ids) for e in good],  # type: ignore[arg-type]
                self.settings.token_budget,
                self.settings.max_batch_size,
            ):
                self._run_batch([good[i] for i in batch], results)
            self._m["samples"] += len(samples)
            self._m["truncated"] += sum(e.truncated for e in good)
            self._m["failed"] += sum(r is not None and r.status == "failed" for r in results)
        assert all(r is not None for r in results)
        return results  # type: ignore[return-value]

    def _run_batch(self, batch: list[_Encoded], results: list[SampleResult | None]) -> None:
        import torch

        try:
            logits = self._forward([e.ids for e in batch])  # type: ignore[misc]
        except torch.cuda.OutOfMemoryError as e:
            torch.cuda.empty_cache()
            if len(batch) > 1:
                half = len(batch) // 2
                self._run_batch(batch[:half], results)
                self._run_batch(batch[half:], results)
                return
            for enc in batch:
                results[enc.pos] = SampleResult.failed("error", f"out of accelerator memory: {e}")
            return
        except Exception as e:
            for enc in batch:
                results[enc.pos] = SampleResult.failed(
                    "error", f"forward pass failed: {type(e).__name__}: {e}"
                )
            return
        for enc, row in zip(batch, logits, strict=True):
            results[enc.pos] = self._to_result(row, enc)

    def _forward(self, rows: list[list[int]]):
        """One padded forward pass (right padding keeps positions equal to an unpadded pass)."""
        import torch

        width = max(len(r) for r in rows)
        input_ids = torch.full((len(rows), width), self._pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            input_ids[i, : len(r)] = torch.tensor(r, dtype=torch.long)
            mask[i, : len(r)] = 1
        start = time.perf_counter()
        with torch.inference_mode():
            out = self.model(input_ids=input_ids.to(self.device), attention_mask=mask.to(self.device))
            logits = out.logits.float().cpu()
        self._m["forward_s"] += time.perf_counter() - start
        self._m["batches"] += 1
        self._m["tokens"] += sum(len(r) for r in rows)
        self._m["padded_tokens"] += len(rows) * width
        return logits

    def _to_result(self, row: Any, enc: _Encoded) -> SampleResult:
        import torch

        s = self.settings
        raw = float(row[self.label_index])
        fn = s.score_fn
        if fn == "probability":
            fn = "softmax" if row.numel() > 1 else "sigmoid"
        if fn == "logit":
            value = raw
        elif fn == "sigmoid":
            value = float(torch.sigmoid(row[self.label_index]))
        else:
            value = float(torch.softmax(row, dim=-1)[self.label_index])
        if s.normalize != "none":
            value = (value - s.mean) / s.std
            if s.normalize == "sigmoid":
                value = (
                    1.0 / (1.0 + math.exp(-value))
                    if value >= 0
                    else math.exp(value) / (1.0 + math.exp(value))
                )
        extra = {"truncated": enc.truncated, "num_tokens": len(enc.ids), "rm_logit": raw}  # type: ignore[arg-type]
        if not math.isfinite(value):
            return SampleResult.failed(
                "invalid_return", f"the reward model produced a non-finite score ({value})", **extra
            )
        return SampleResult.ok(value, **extra)

    # -- metrics ---------------------------------------------------------------------------------
    def _reset_metrics(self) -> None:
        self._m: dict[str, float] = dict.fromkeys(
            ("samples", "batches", "tokens", "padded_tokens", "forward_s", "truncated", "failed"), 0.0
        )

    def metrics(self) -> dict[str, float]:
        """Counts since the last call: samples, batches, tokens, padding ratio, forward time, truncations."""
        m = dict(self._m)
        padded = m.pop("padded_tokens")
        m["padding_ratio"] = (padded - m["tokens"]) / padded if padded else 0.0
        if m["forward_s"] > 0:
            m["tokens_per_s"] = m["tokens"] / m["forward_s"]
        self._reset_metrics()
        return m
