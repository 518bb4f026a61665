"""Pointing an RM backend at launched replicas: ``rollout.base_url`` becomes their URL list.

A backend that routes across replicas declares ``accepts_url_list = True``: every HTTP backend
does (:class:`~rewardkit.backends.http.HTTPCore` routes least-loaded, sticky by prompt prefix), and
so does ``served-classifier``. Any other backend gets the first replica's URL, and a warning says
the others idle.
"""

from __future__ import annotations

import warnings
from typing import Any

from rewardkit.config import RewardModelConfig
from rewardkit.errors import ConfigError


def accepts_url_list(backend_cls: Any) -> bool:
    """Whether ``backend_cls`` can be given every replica's URL."""
    return bool(getattr(backend_cls, "accepts_url_list", False))


def check_backend(rm: RewardModelConfig, backend_cls: Any = None) -> None:
    """Refuse, before anything is launched, a backend that cannot use launched servers."""
    if getattr(backend_cls, "name", None) == "discriminative":
        raise ConfigError(
            "reward_model.backend 'discriminative' runs the model in this process and would ignore the "
            "servers reward_model.server launches; use backend: served-classifier"
        )
    if "base_url" in rm.rollout:
        raise ConfigError(
            "reward_model.rollout.base_url and reward_model.server are both set: rewardkit points the "
            "backend at the servers it launches; remove rollout.base_url"
        )


def backend_config(rm: RewardModelConfig, urls: list[str], backend_cls: Any = None) -> RewardModelConfig:
    """A copy of ``rm`` whose ``rollout.base_url`` is the replicas' URLs (one URL, or the list).

    ``rollout.base_url`` set by hand next to ``server`` is a :class:`ConfigError` (which one wins
    would be a guess). ``model_path`` defaults to the served model, the name vLLM/SGLang serve it under.
    """
    check_backend(rm, backend_cls)
    if not urls:
        raise ConfigError("no server replica is running")
    rollout = dict(rm.rollout)
    if len(urls) == 1:
        rollout["base_url"] = urls[0]
    elif accepts_url_list(backend_cls):
        rollout["base_url"] = list(urls)
    else:
        rollout["base_url"] = urls[0]
        warnings.warn(
            f"{len(urls)} server replicas are running but the {rm.backend!r} backend takes one base_url: "
            "only the first replica gets requests",
            RuntimeWarning,
            stacklevel=2,
        )
    update: dict[str, Any] = {"rollout": rollout}
    if rm.model_path is None and rm.server is not None and rm.server.model_path:
        update["model_path"] = rm.server.model_path
    return rm.model_copy(update=update)
