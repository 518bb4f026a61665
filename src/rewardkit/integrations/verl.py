"""verl adapters: a ``custom_reward_function`` entry and a reward manager.

As verl's custom reward function (every sample goes through rewardkit's registries)::

    reward:
      custom_reward_function:
        path: pkg://rewardkit.integrations.verl
        name: compute_score
        reward_kwargs: {rewardkit_config: /path/to/rewardkit.yaml}   # or env REWARDKIT_CONFIG

As verl's reward manager (whole batches at once: process pools, DAPO length penalty on token
counts, typed failures in ``reward_extra_info``), registered as ``rewardkit`` by the
``verl.plugins`` entry point (:mod:`rewardkit.integrations.verl_plugin`)::

    reward:
      reward_manager: {source: register, name: rewardkit}

or without the entry point::

    reward:
      reward_manager:
        source: importlib
        name: RewardKitRewardManager
        module: {path: pkg://rewardkit.integrations.verl}

The manager speaks both verl protocols: the legacy ``manager(data, return_dict=True)`` and the
reward loop's ``await manager.run_single(data)`` + ``assemble_rm_scores``. Importing this module
imports neither verl nor torch.
"""

from __future__ import annotations

import functools
import inspect
import json
import math
import os
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rewardkit.config import RewardConfig, load_config
from rewardkit.errors import ConfigError
from rewardkit.inputs import dataproto_row
from rewardkit.inputs import plain as _plain
from rewardkit.integrations.sample_info import component_keys, info_keys, reported_score, sample_info

if TYPE_CHECKING:
    from rewardkit.engine import RewardEngine
    from rewardkit.result import RewardResult, SampleResult

#: Environment variable holding a rewardkit config path (or inline JSON) for the verl adapters.
ENV_CONFIG = "REWARDKIT_CONFIG"

_ENGINES: dict[str, RewardEngine] = {}
_ENGINES_LOCK = threading.Lock()


def _resolve_config_arg(config: Any) -> RewardConfig | dict[str, Any] | str | None:
    if config is None:
        config = os.environ.get(ENV_CONFIG) or None
    if isinstance(config, str) and config.lstrip().startswith("{"):
        try:
            return json.loads(config)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{ENV_CONFIG} / rewardkit_config holds invalid JSON: {e}") from None
    if config is None or isinstance(config, RewardConfig | str | os.PathLike):
        return config if not isinstance(config, os.PathLike) else os.fspath(config)
    return _plain(config)


def _cache_key(config: RewardConfig | dict[str, Any] | str | None) -> str:
    if config is None:
        return "defaults"
    if isinstance(config, str):
        return "path:" + os.path.abspath(os.path.expanduser(config))
    if isinstance(config, RewardConfig):
        return "config:" + json.dumps(config.to_dict(), sort_keys=True)
    return "dict:" + json.dumps(config, sort_keys=True, default=repr)


def _check_not_self(config: RewardConfig) -> None:
    crf = config.custom_reward_function
    if not crf.path:
        return
    from rewardkit.scoring import load_function

    fn, _ = load_function(crf.path, crf.name)
    if fn is compute_score:
        raise ConfigError(
            "the rewardkit config's custom_reward_function is rewardkit.integrations.verl.compute_score "
            "itself, which would call itself forever; point verl (not rewardkit) at it, and give rewardkit "
            "the real scorer or leave custom_reward_function unset to route by data_source"
        )


def get_engine(config: Any = None) -> RewardEngine:
    """The process-wide engine for ``config``, created once and reused (one per distinct config).

    ``config`` is a rewardkit config (dict, YAML path, inline JSON, :class:`RewardConfig`); ``None``
    reads the ``REWARDKIT_CONFIG`` environment variable, and without it uses the defaults
    (routing by ``data_source`` through the registered scorers).
    """
    from rewardkit.engine import RewardEngine

    resolved = _resolve_config_arg(config)
    key = _cache_key(resolved)
    with _ENGINES_LOCK:
        engine = _ENGINES.get(key)
        if engine is None:
            cfg = load_config(resolved)
            _check_not_self(cfg)
            engine = _ENGINES[key] = RewardEngine(cfg)
        return engine


#: Per-call lookups of :func:`compute_score`: the config object verl passes every call (or the
#: ``REWARDKIT_CONFIG`` text) → ``(a snapshot of it, its engine)``; no hashing of configs per call.
_RECENT: dict[Any, tuple[Any, RewardEngine]] = {}


def _engine_for(config: Any) -> RewardEngine:
    """:func:`get_engine` for per-sample calls: the same engine, found without re-reading the config.

    A ``str`` config (path, inline JSON, the environment variable) is looked up by its text (and
    the working directory, for relative paths); a dict or other object by identity, checked against
    a copy taken when it was first seen, so a config edited in place gets its own engine.
    """
    global _LAST
    last = _LAST
    if last is not None and config is last[0] and not last[2]._closed and _same(last[:2], config):
        return last[2]  # the config object of the previous call, unchanged
    if config is None:
        config = os.environ.get(ENV_CONFIG) or None
    if config is None or isinstance(config, str):
        key: Any = (config, os.getcwd() if config and not _absolute_or_json(config) else None)
        snapshot: Any = None
    else:
        key, snapshot = id(config), config
    hit = _RECENT.get(key)
    if hit is None or hit[1]._closed or not (snapshot is None or _same(hit[0], snapshot)):
        if len(_RECENT) > 64:  # many distinct config objects: forget the old ones
            _RECENT.clear()
        hit = _RECENT[key] = (_copy(snapshot) if snapshot is not None else None, get_engine(config))
    if snapshot is not None:  # (None and text may mean another config next time: the env, the cwd)
        _LAST = (*hit[0], hit[1])
    return hit[1]


#: ``(config, a copy of it, engine)`` of the last :func:`_engine_for` call given a config object.
_LAST: tuple[Any, Any, RewardEngine] | None = None


def _absolute_or_json(text: str) -> bool:
    return os.path.isabs(text) or text.lstrip().startswith("{")


def _copy(config: Any) -> Any:
    import copy

    try:
        return (config, copy.deepcopy(config))
    except Exception:  # noqa: BLE001 - cannot be copied: identity alone
        return (config, None)


def _same(seen: tuple[Any, Any], config: Any) -> bool:
    obj, copied = seen
    if obj is not config:
        return False
    if copied is None:
        return False
    try:
        return bool(copied == config)
    except Exception:  # noqa: BLE001
        return False


def close_engines() -> None:
    """Close every cached engine (their worker pools stop); later calls create new ones."""
    global _LAST
    with _ENGINES_LOCK:
        engines = list(_ENGINES.values())
        _ENGINES.clear()
        _RECENT.clear()
        _LAST = None
    for engine in engines:
        engine.close()


def compute_score(
    data_source: str | None = None,
    solution_str: str = "",
    ground_truth: Any = None,
    extra_info: dict[str, Any] | None = None,
    rewardkit_config: Any = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """verl's ``custom_reward_function``: score one response through rewardkit.

    Returns the same keys for every sample, whatever its status (verl's reward loop takes the
    keys from the first sample, its legacy manager appends per-key lists): ``score`` (a float: the
    rewardkit score, or the config's ``failure_score`` / ``abstain_score``, default ``0.0``, where
    the sample failed or abstained, since verl's reward tensor cannot hold ``nan``), ``status``
    (``ok | abstained | failed``), ``reason`` and ``error`` (``""`` unless failed), ``acc`` and
    ``pred`` (``None`` where the scorer gave none), the ``reward.extra_keys`` extras, and the other
    extras as JSON text under ``extra`` (see :mod:`rewardkit.integrations.sample_info`). verl puts
    them all in ``reward_extra_info``, so a failure is visible, never a silent 0. Keyword arguments
    verl adds (``reward_router_address``, ...) are ignored; ``rewardkit_config`` (or env
    ``REWARDKIT_CONFIG``) selects the config.
    """
    engine = _engine_for(rewardkit_config)
    result = None
    if type(solution_str) is str and (extra_info is None or isinstance(extra_info, Mapping)):
        ds = data_source if data_source is None or type(data_source) is str else str(data_source)
        result = engine.score_fields_here(ds, solution_str, ground_truth, extra_info)  # (made plain there)
    if result is None:
        record = _record(data_source, solution_str, ground_truth, extra_info)
        result = _score_here(engine, record)
        if result is None:
            result = engine.compute([record]).samples[0]
    return sample_info(result, engine.config, _component_keys(engine.config))


def _score_here(engine: RewardEngine, record: Any) -> SampleResult | None:
    if type(record) is dict:
        results = engine.score_here([record])
        return None if results is None else results[0]
    return engine.score_one_here(record)


def _record(data_source: Any, solution_str: str, ground_truth: Any, extra_info: Any) -> Any:
    """The sample of one ``compute_score`` call: a :class:`Sample` built at once for the usual
    arguments (a text response), else a record that the engine validates (and names what is wrong)."""
    ds = None if data_source is None else str(data_source)
    extra = _plain(extra_info) if isinstance(extra_info, Mapping) else {}
    if type(solution_str) is str and type(extra) is dict:
        from rewardkit.batch import Sample

        return Sample(0, solution_str, data_source=ds, ground_truth=_plain(ground_truth), extra_info=extra)
    return {
        "data_source": ds,
        "response": solution_str,
        "ground_truth": _plain(ground_truth),
        "extra_info": extra,
    }


_COMPONENTS: dict[int, tuple[RewardConfig, list[str]]] = {}


def _component_keys(config: RewardConfig) -> list[str]:
    """:func:`component_keys` of an engine's config, computed once per config."""
    hit = _COMPONENTS.get(id(config))
    if hit is None or hit[0] is not config:
        if len(_COMPONENTS) > 64:
            _COMPONENTS.clear()
        hit = _COMPONENTS[id(config)] = (config, component_keys(config))
    return hit[1]


async def acompute_score(
    data_source: str | None = None,
    solution_str: str = "",
    ground_truth: Any = None,
    extra_info: dict[str, Any] | None = None,
    rewardkit_config: Any = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """Async :func:`compute_score`, for verl's reward loop (which awaits async reward functions).

    Cheap scorers run right here (:meth:`RewardEngine.compute_here`); the others on the engine's loop.
    """
    engine = _engine_for(rewardkit_config)
    record = _record(data_source, solution_str, ground_truth, extra_info)
    result = _score_here(engine, record)
    if result is None:
        result = (await engine.acompute([record])).samples[0]
    return sample_info(result, engine.config, _component_keys(engine.config))


# ---------------------------------------------------------------------------------------------
# The reward manager
# ---------------------------------------------------------------------------------------------


def _config_from_compute_score(compute_score_fn: Any) -> Any:
    """A rewardkit config that calls the same user function verl loaded, or ``None``.

    verl wraps the user's ``custom_reward_function`` as ``partial(_call_with_kwargs, fn, kwargs)``;
    rewardkit loads the same function from its file so it can run in worker processes. When the
    function is rewardkit's own :func:`compute_score`, its ``rewardkit_config`` keyword is returned.
    """
    if compute_score_fn is None:
        return None
    fn: Any = compute_score_fn
    kwargs: dict[str, Any] = {}
    while isinstance(fn, functools.partial):
        kwargs = {**fn.keywords, **kwargs}
        if getattr(fn.func, "__name__", "") in ("_call_with_kwargs", "_call_with_kwargs_async") and fn.args:
            if len(fn.args) > 1 and isinstance(fn.args[1], Mapping):
                kwargs = {**kwargs, **fn.args[1]}
            fn = fn.args[0]
        else:
            fn = fn.func
    if fn in (compute_score, acompute_score):  # verl calls rewardkit already: keep its rewardkit_config
        return kwargs.get("rewardkit_config")
    module = getattr(fn, "__module__", "") or ""
    if module.split(".")[0] == "verl":  # verl's default_compute_score: rewardkit's routing replaces it
        return None
    try:
        path = inspect.getsourcefile(fn)
    except TypeError:
        path = None
    name = getattr(fn, "__name__", None)
    if not path or not name:
        raise ConfigError(
            f"RewardKitRewardManager cannot move compute_score {fn!r} into rewardkit (no source file); "
            "set custom_reward_function in the rewardkit config instead"
        )
    return {"custom_reward_function": {"path": path, "name": name, "reward_kwargs": _plain(dict(kwargs))}}


def _verl_custom_reward_config(config: Any) -> Any:
    """rewardkit's ``custom_reward_function`` from verl's trainer config, when it names a user function."""
    try:
        crf = config.reward.get("custom_reward_function") if hasattr(config, "reward") else None
    except Exception:  # noqa: BLE001 - any shape of foreign config
        return None
    if not crf or not crf.get("path"):
        return None
    path = str(crf.get("path"))
    if path.startswith("pkg://") and path[len("pkg://") :].replace("/", ".") == __name__:
        return _plain(crf.get("reward_kwargs") or {}).get("rewardkit_config")
    if path.startswith("file://"):
        path = path[len("file://") :]
    return {
        "custom_reward_function": {
            "path": path,
            "name": crf.get("name") or "compute_score",
            "reward_kwargs": _plain(crf.get("reward_kwargs") or {}),
        }
    }


def _is_rewardkit_config(config: Any) -> bool:
    if isinstance(config, RewardConfig | str | os.PathLike):
        return True
    if type(config).__module__.split(".")[0] == "omegaconf":
        return False
    return isinstance(config, Mapping) and not ({"actor_rollout_ref", "trainer", "data"} & set(config))


class RewardKitRewardManager:
    """A verl reward manager that scores batches through rewardkit.

    Built by verl as ``cls(tokenizer=..., num_examine=..., compute_score=..., reward_fn_key=...)``
    (legacy trainer) or ``cls(config=verl_config, tokenizer=..., compute_score=...)`` (reward loop).
    The rewardkit config comes from, in order: ``rewardkit_config``; ``config`` when it is a
    rewardkit config rather than verl's; env ``REWARDKIT_CONFIG``; the user function verl loaded
    as ``compute_score`` (or named in verl's ``reward.custom_reward_function``); else the defaults
    (routing by ``data_source``).

    Each score lands on the last valid response token (an empty response gets no reward token,
    never index ``-1``); the response's token count travels as ``response_length`` so length
    penalties (DAPO) count tokens, not characters.
    """

    def __init__(
        self,
        tokenizer: Any = None,
        num_examine: int = 0,
        compute_score: Any = None,
        reward_fn_key: str = "data_source",
        config: Any = None,
        rewardkit_config: Any = None,
        **kwargs: Any,
    ):
        self.tokenizer = tokenizer
        self.num_examine = num_examine
        self.reward_fn_key = reward_fn_key
        self.verl_config = None if _is_rewardkit_config(config) else config
        chosen = rewardkit_config
        if chosen is None and config is not None and _is_rewardkit_config(config):
            chosen = config
        if chosen is None:
            chosen = os.environ.get(ENV_CONFIG) or None
        if chosen is None:
            chosen = _config_from_compute_score(compute_score)
        if chosen is None and self.verl_config is not None:
            chosen = _verl_custom_reward_config(self.verl_config)
        self.engine = get_engine(chosen)
        self._printed: dict[str, int] = {}

    # -- decoding --------------------------------------------------------------------------------
    def records(self, data: Any) -> tuple[list[dict[str, Any]], Any]:
        """The rewardkit sample records of a verl ``DataProto`` and its response mask ``[batch, response_len]``."""
        samples, response_mask = self.samples(data)
        return [s.to_dict() for s in samples], response_mask

    def samples(self, data: Any) -> tuple[list[Any], Any]:
        """The samples of a verl ``DataProto`` (batch-decoded, prompts lazily) and its response mask."""
        from rewardkit.inputs import dataproto_samples

        if self.tokenizer is None:
            raise ValueError("RewardKitRewardManager needs a tokenizer to decode a DataProto")
        return dataproto_samples(data, self.tokenizer, reward_fn_key=self.reward_fn_key)

    # -- scoring ---------------------------------------------------------------------------------
    def score(self, data: Any) -> tuple[RewardResult, Any]:
        """Score a ``DataProto``: the rewardkit result and the reward tensor built from it."""
        result, reward_tensor, _ = self._score(data)
        return result, reward_tensor

    def _score(self, data: Any) -> tuple[RewardResult, Any, list[Any]]:
        samples, response_mask = self.samples(data)
        result = self.engine.compute(samples)
        reward_tensor = result.token_level_rewards(response_mask)
        if self.num_examine > 0:
            self._examine(samples, result.samples)
        return result, reward_tensor, samples

    def info_keys(self) -> list[str]:
        """The ``reward_extra_info`` keys of every sample, in both protocols (see :func:`sample_info`)."""
        return [*info_keys(self.engine.config), "empty_response"]

    def sample_infos(self, result: RewardResult, records: list[Any]) -> list[dict[str, Any]]:
        """One ``reward_extra_info`` dict per sample, all with :meth:`info_keys`.

        ``empty_response`` is True where the response had no valid token (no reward token was
        written for it).
        """
        cfg = self.engine.config
        components = component_keys(cfg)
        out = []
        for r, rec in zip(result.samples, records, strict=True):
            info = sample_info(r, cfg, components)
            length = rec.get("response_length") if isinstance(rec, dict) else rec.response_length
            info["empty_response"] = length == 0
            out.append(info)
        return out

    def extra_info(self, result: RewardResult, records: list[Any]) -> dict[str, list[Any]]:
        """verl's legacy ``reward_extra_info``: one list per key, one value per sample."""
        infos = self.sample_infos(result, records)
        return {k: [info[k] for info in infos] for k in self.info_keys()}

    def __call__(self, data: Any, return_dict: bool = False) -> Any:
        """verl's legacy manager call: the reward tensor, or ``{"reward_tensor", "reward_extra_info"}``.

        As verl's own managers do, a batch that already carries ``rm_scores`` (scored during rollout
        by verl's reward loop) is not scored again: those scores are returned, with the
        ``reward_extra_keys`` named in ``meta_info``.
        """
        if "rm_scores" in data.batch.keys():  # noqa: SIM118 - TensorDict refuses `key in td`
            if not return_dict:
                return data.batch["rm_scores"]
            keys = (getattr(data, "meta_info", None) or {}).get("reward_extra_keys", [])
            extra = {k: list(data.non_tensor_batch[k]) for k in keys}
            return {"reward_tensor": data.batch["rm_scores"], "reward_extra_info": extra}
        result, reward_tensor, records = self._score(data)
        if return_dict:
            return {"reward_tensor": reward_tensor, "reward_extra_info": self.extra_info(result, records)}
        return reward_tensor

    async def run_single(self, data: Any) -> dict[str, Any]:
        """verl reward loop: score one sample (the last row of ``data``).

        ``reward_extra_info`` holds :meth:`info_keys` for every sample, ``acc`` and ``pred``
        included (verl's reward loop takes the keys from the first sample only, and reads ``acc``
        for its ``val-core`` metrics, ``maj@N`` and ``filter_groups``).
        """
        if self.tokenizer is None:
            raise ValueError("RewardKitRewardManager needs a tokenizer to decode a DataProto")
        one = data if len(data) == 1 else data[-1:]
        # the prompt is decoded only if something reads it
        sample = dataproto_row(one, self.tokenizer, reward_fn_key=self.reward_fn_key)
        result = self.engine.score_one_here(sample)  # cheap scorers: here, no thread, no executor
        if result is None:
            result = (await self.engine.acompute([sample])).samples[0]
        if self.num_examine > 0:
            self._examine([sample], [result])
        config = self.engine.config
        info = sample_info(result, config, _component_keys(config))
        info["empty_response"] = sample.response_length == 0
        return {"reward_score": reported_score(result, config), "reward_extra_info": info}

    @classmethod
    def assemble_rm_scores(cls, data: Any, scores: list[float]) -> Any:
        """verl reward loop: per-sample scores into the ``rm_scores`` tensor (last valid response token)."""
        from rewardkit.result import RewardResult, SampleResult

        prompt_len = data.batch["prompts"].shape[-1]
        response_mask = data.batch["attention_mask"][:, prompt_len:]
        result = RewardResult(
            [SampleResult.ok(s) if not math.isnan(s) else SampleResult.abstained() for s in scores]
        )
        return result.token_level_rewards(response_mask)

    def _examine(self, samples: list[Any], results: list[SampleResult]) -> None:
        if self.num_examine <= 0:
            return
        for s, r in zip(samples, results, strict=True):
            ds = str(s.data_source)
            if self._printed.get(ds, 0) >= self.num_examine:
                continue
            self._printed[ds] = self._printed.get(ds, 0) + 1
            print("[prompt]", s.prompt)
            print("[response]", s.response)
            print("[ground_truth]", s.ground_truth)
            print("[score]", r.score, f"({r.status}{': ' + str(r.reason) if r.reason else ''})")
