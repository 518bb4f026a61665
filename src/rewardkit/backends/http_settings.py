"""Client settings common to the HTTP backends (``reward_model.rollout``) and their validation."""

from __future__ import annotations

import os
from typing import Any, ClassVar

from pydantic import BaseModel, Field, model_validator

from rewardkit.options import Options, validate_options


class HTTPSettings(Options):
    """Client settings common to the HTTP backends (``reward_model.rollout``)."""

    RENAMED: ClassVar[dict[str, str]] = {
        "max_in_flight": "max_concurrency",
        "min_in_flight": "min_concurrency",
        "deadline_s": "batch_timeout_s",
    }

    base_url: str | list[str] = Field(
        description="server root, e.g. http://127.0.0.1:8000, or a list of replicas' roots"
    )
    api_key: str | None = Field(None, description="bearer token sent as Authorization header")
    api_key_env: str | None = Field(None, description="name of an environment variable holding the key")
    headers: dict[str, str] = Field(default_factory=dict, description="extra request headers")
    max_connections: int = Field(64, ge=1, description="requests counted in flight per replica, at most")
    max_concurrency: int = Field(64, ge=1, description="requests in flight at once per replica")
    min_concurrency: int | None = Field(
        None,
        ge=1,
        description="floor of the adaptive in-flight limit (default: a quarter of max_concurrency)",
    )
    rpm: float | None = Field(None, gt=0, description="requests-per-minute budget")
    tpm: float | None = Field(None, gt=0, description="tokens-per-minute budget (estimated, then corrected)")
    request_timeout_s: float = Field(60.0, gt=0, description="timeout of one HTTP attempt")
    stall_after_s: float | None = Field(
        None,
        gt=0,
        description="an attempt slower than this stops counting against the in-flight limit "
        "(default: 4x the recent p90 latency, at least 1 s)",
    )
    hedge: bool = Field(
        True,
        description="when an attempt stalls past stall_after_s, race a second one (another replica if any)",
    )
    batch_timeout_s: float | None = Field(None, gt=0, description="deadline for the whole batch")
    max_retries: int | None = Field(
        8, ge=0, description="retries per request after the first attempt (null: until the deadline)"
    )
    backoff_base_s: float = Field(0.05, ge=0, description="first backoff ceiling; doubles per retry")
    backoff_cap_s: float = Field(5.0, ge=0, description="largest backoff ceiling")
    retry_after_cap_s: float = Field(60.0, ge=0, description="longest Retry-After honoured")
    breaker_threshold: int = Field(
        5, ge=1, description="failures within breaker_window_s, with no success, that open the circuit"
    )
    breaker_window_s: float = Field(
        2.0, gt=0, description="the breaker's window: no success in it means down"
    )
    breaker_cooldown_s: float = Field(
        10.0, ge=0, description="how long requests wait for a down server before failing circuit_open"
    )
    adaptive_concurrency: bool = Field(
        True, description="cut the in-flight limit on 429/503, grow it back by one per round of successes"
    )

    @model_validator(mode="after")
    def _check(self):
        urls = self.urls()
        if not urls:
            raise ValueError("base_url: give at least one URL")
        for url in urls:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"base_url must start with http:// or https://, got {url!r}")
        if len(set(urls)) != len(urls):
            raise ValueError(f"base_url lists a replica twice: {urls}")
        if self.api_key_env is not None and not os.environ.get(self.api_key_env):
            raise ValueError(
                f"api_key_env names {self.api_key_env!r} but that environment variable is not set"
            )
        return self

    def urls(self) -> list[str]:
        """The replicas' roots, without trailing slashes."""
        raw = [self.base_url] if isinstance(self.base_url, str) else list(self.base_url)
        return [u.rstrip("/") for u in raw]

    def resolved_api_key(self) -> str | None:
        """The API key, from ``api_key`` or the variable ``api_key_env`` names."""
        if self.api_key:
            return self.api_key
        if self.api_key_env:
            return os.environ.get(self.api_key_env)
        return None


def parse_settings(cls: type[BaseModel], data: dict[str, Any], backend: str) -> Any:
    """Validate ``reward_model.rollout`` into ``cls``; raise :class:`ConfigError` with one line per problem."""
    return validate_options(cls, data, "reward.reward_model.rollout", f"backend {backend!r}")
