"""Process-wide engines for the module-level :func:`rewardkit.compute`: one per distinct config.

A trainer that calls ``rewardkit.compute(batch, config)`` every step pays for plugins, worker
pools and reward models once: the first call builds a :class:`~rewardkit.engine.RewardEngine`,
later calls with an equal config (same validated content, however it was given) reuse it. The
engines are closed when the interpreter exits, or earlier by :func:`close_shared_engines`.
"""

from __future__ import annotations

import atexit
import json
import logging
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from rewardkit.config import RewardConfig, load_config
from rewardkit.engine import ConfigLike
from rewardkit.result import RewardResult

if TYPE_CHECKING:
    from rewardkit.engine import RewardEngine

log = logging.getLogger(__name__)

_ENGINES: dict[str, RewardEngine] = {}
_LOCK = threading.Lock()
_RETIRED: list[RewardEngine] = []  # built before a plugin reset; closed with the others
_AT_EXIT: list[bool] = []
_DEFAULTS: tuple[RewardConfig, str] | None = None  # RewardConfig() and its config_key


def config_key(config: RewardConfig) -> str:
    """The identity of a validated config: its full content as canonical JSON (``repr`` where a
    value, e.g. an object in ``reward_kwargs``, has no JSON form)."""
    data = config.model_dump(mode="python")
    try:
        return json.dumps(data, sort_keys=True, default=repr)
    except (TypeError, ValueError):  # keys that cannot be sorted or written
        return repr(data)


def shared_engine(config: Any = None) -> RewardEngine:
    """The process-wide engine for ``config`` (``None``: the defaults), built on first use.

    Thread-safe: concurrent first calls with one config build one engine. An engine that was
    closed (by :func:`close_shared_engines` or by hand) is replaced by a new one, and so is one
    built before :func:`rewardkit.plugins.reset` (it would not see newly installed plugins; it
    stays open for callers still holding it and is closed at exit).
    """
    from rewardkit.engine import RewardEngine
    from rewardkit.plugins import get_registries

    global _DEFAULTS
    if config is None:  # the defaults: validated and keyed once (a trainer calls this every step)
        if _DEFAULTS is None:
            defaults = load_config(None)
            _DEFAULTS = (defaults, config_key(defaults))
        cfg, key = _DEFAULTS
    else:
        cfg = load_config(config)
        key = config_key(cfg)
    registries = get_registries(cfg.plugins)
    with _LOCK:
        engine = _ENGINES.get(key)
        if engine is not None and not engine._closed and engine.registries is not registries:
            _RETIRED.append(engine)
            engine = None
        if engine is None or engine._closed:
            engine = _ENGINES[key] = RewardEngine(cfg, registries=registries)
            if not _AT_EXIT:
                # Registered after the engine's executor module is imported, so it runs before
                # multiprocessing's own exit handler (atexit is last-in, first-out).
                atexit.register(close_shared_engines)
                _AT_EXIT.append(True)
        return engine


def shared_engines() -> list[RewardEngine]:
    """The engines built so far (oldest first)."""
    with _LOCK:
        return list(_ENGINES.values())


def close_shared_engines() -> None:
    """Close every shared engine (workers stop); a later :func:`rewardkit.compute` builds anew."""
    with _LOCK:
        engines = _RETIRED + list(_ENGINES.values())
        _ENGINES.clear()
        _RETIRED.clear()
    for engine in reversed(engines):
        try:
            engine.close()
        except Exception:  # noqa: BLE001 - one engine failing to close must not keep the others open
            log.exception("closing a shared rewardkit engine failed")


def compute(
    samples: Iterable[Any] | Any, config: ConfigLike = None, *, tokenizer: Any = None
) -> RewardResult:
    """Score a batch: ``rewardkit.compute(samples, config)``.

    The engine for ``config`` is built on the first call and reused by later calls with an equal
    config, for the life of the process (see :mod:`rewardkit.engine_cache`).
    """
    return shared_engine(config).compute(samples, tokenizer=tokenizer)


async def acompute(
    samples: Iterable[Any] | Any, config: ConfigLike = None, *, tokenizer: Any = None
) -> RewardResult:
    """Async :func:`compute` (runs on the shared engine's own loop)."""
    return await shared_engine(config).acompute(samples, tokenizer=tokenizer)
