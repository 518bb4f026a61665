"""Settings of the ``generative`` judge backend (``reward_model.rollout``): HTTP plus the judge's own."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from rewardkit.backends.http_settings import HTTPSettings


class GenerativeSettings(HTTPSettings):
    """``reward_model.rollout`` for the ``generative`` backend (HTTP settings plus the judge's)."""

    model: str | None = Field(
        None, description="model name sent to the server; default reward_model.model_path"
    )
    api: Literal["chat", "completions"] = Field("chat", description="/v1/chat/completions or /v1/completions")
    temperature: float = Field(0.0, ge=0, description="judge sampling temperature")
    max_tokens: int = Field(512, ge=1, description="judge's answer length (also reserved from context)")
    top_p: float | None = Field(None, gt=0, le=1, description="judge nucleus sampling; default the server's")
    stop: list[str] | None = Field(None, description="stop strings of the judge's answer")
    seed: int | None = Field(None, description="sampling seed sent with every request")
    extra_body: dict[str, Any] = Field(default_factory=dict, description="merged into every request body")
    template: str = Field("rubric", description="built-in template name or a literal template")
    system_prompt: str | None = Field(None, description="overrides the template's system text")
    parser: str | dict[str, Any] | None = Field(None, description="default: the template's parser")
    score_range: tuple[float, float] | None = Field(None, description="default: the template's range")
    normalize_to: tuple[float, float] | None = Field((0.0, 1.0), description="null keeps the raw score")
    context_length: int | None = Field(None, gt=0, description="judge context in tokens")
    chars_per_token: float = Field(3.0, gt=0, description="used with context_length to budget characters")
    max_prompt_chars: int | None = Field(
        None, gt=0, description="character budget (overrides context_length)"
    )
    truncate: Literal["middle", "tail"] = Field(
        "middle", description="which part of an over-long response is cut to fit the budget"
    )
    cache_path: str | None = Field(None, description="SQLite file caching judge answers")
    dedup: bool = Field(True, description="judge identical (prompt, response, reference) samples once")
    reask: bool | None = Field(
        None,
        description="ask again after an unparseable or cut-off judgement (default: on when temperature > 0)",
    )
    max_reasks: int = Field(2, ge=0, description="how many times one sample's judgement is asked again")

    @model_validator(mode="after")
    def _check_judge(self):
        if self.context_length is not None and self.context_length <= self.max_tokens:
            raise ValueError(
                f"context_length ({self.context_length}) must exceed max_tokens ({self.max_tokens})"
            )
        if self.score_range is not None and not self.score_range[0] < self.score_range[1]:
            raise ValueError(f"score_range must be [low, high] with low < high, got {list(self.score_range)}")
        return self

    def reasks(self) -> int:
        """How many times an unparseable or cut-off judgement is asked again."""
        on = self.reask if self.reask is not None else self.temperature > 0
        return self.max_reasks if on else 0

    def prompt_budget(self) -> int | None:
        """Characters the rendered prompt may take."""
        if self.max_prompt_chars is not None:
            return self.max_prompt_chars
        if self.context_length is not None:
            return int((self.context_length - self.max_tokens) * self.chars_per_token)
        return None
