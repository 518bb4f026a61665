"""The scorer calling convention, shared by every executor.

A scorer is any function. rewardkit passes it the sample fields its signature names, by keyword
(``prompt``, ``response`` or its alias ``solution_str``, ``ground_truth``, ``data_source``,
``extra_info``, ``sample``) plus the configured keyword arguments, and turns what it returns into
a :class:`~rewardkit.result.SampleResult`:

* a number or bool → ``ok`` with that score (``nan``/``inf`` → ``failed``, ``invalid_return``; so is
  text such as ``"1.0"``: a score returned as a string is a bug, not a number)
* a dict with ``"score"`` → ``ok``; the other keys go to ``extra``
* ``None`` → ``abstained``
* an exception (any, including ``BaseException`` subclasses such as math-verify's timeout) →
  ``failed`` with reason ``error`` and the exception text.

Scorers travel to worker processes *by reference* (:attr:`ScorerSpec.ref`: ``"module:qualname"``
or ``"/path/to/file.py:name"``), never by pickling their code, so functions loaded from a file work
in workers too.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import importlib
import importlib.util
import inspect
import math
import numbers
import os
import sys
import threading
import traceback
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rewardkit.batch import Sample
from rewardkit.errors import ConfigError
from rewardkit.result import SampleResult

#: Sample fields a scorer may ask for by parameter name, and where they come from.
SINGLE_FIELDS = ("prompt", "response", "solution_str", "ground_truth", "data_source", "extra_info", "sample")
#: The same for batch scorers, which receive lists.
BATCH_FIELDS = {
    "prompts": "prompt",
    "responses": "response",
    "solution_strs": "response",
    "ground_truths": "ground_truth",
    "data_sources": "data_source",
    "extra_infos": "extra_info",
    "samples": "sample",
}


def _field(sample: Sample, name: str) -> Any:
    if name in ("response", "solution_str"):
        return sample.response
    if name == "sample":
        return sample
    return getattr(sample, name)


@dataclass(frozen=True)
class Signature:
    """What a scorer function accepts: the injectable fields it names and whether it takes ``**kwargs``."""

    params: frozenset[str]
    var_kwargs: bool
    is_async: bool


@functools.lru_cache(maxsize=1024)
def _signature(fn: Callable) -> Signature:
    target = fn
    is_async = inspect.iscoroutinefunction(fn)
    if not inspect.isfunction(fn) and not inspect.ismethod(fn) and callable(fn):
        is_async = is_async or inspect.iscoroutinefunction(type(fn).__call__)
    try:
        sig = inspect.signature(target)
    except (TypeError, ValueError):
        return Signature(frozenset(), True, is_async)
    params = frozenset(
        p.name for p in sig.parameters.values() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    )
    var_kwargs = any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())
    return Signature(params, var_kwargs, is_async)


def signature_of(fn: Callable) -> Signature:
    """The (cached) :class:`Signature` of a scorer function."""
    try:
        return _signature(fn)
    except TypeError:  # unhashable callable
        return _signature.__wrapped__(fn)


@dataclass(frozen=True)
class ScorerSpec:
    """A scorer ready to call: the function, how to find it again in another process, and its options.

    ``kwargs`` are extra keyword arguments from config (verl's ``reward_kwargs``).
    ``batch`` scorers take lists and return a list.
    """

    name: str
    fn: Callable = field(compare=False)
    ref: str | None = None
    data_sources: tuple[str, ...] = ()
    batch: bool = False
    provider: str = ""
    kwargs: Mapping[str, Any] = field(default_factory=dict, compare=False)

    def __reduce__(self):
        if self.ref is None:
            return (
                ScorerSpec,
                (self.name, self.fn, None, self.data_sources, self.batch, self.provider, dict(self.kwargs)),
            )
        return (
            _spec_from_ref,
            (self.name, self.ref, self.data_sources, self.batch, self.provider, dict(self.kwargs)),
        )

    def with_kwargs(self, kwargs: Mapping[str, Any]) -> ScorerSpec:
        """A copy with ``kwargs`` merged over the current ones, checked against the signature."""
        merged = {**self.kwargs, **kwargs}
        sig = signature_of(self.fn)
        if not sig.var_kwargs:
            bad = sorted(set(merged) - sig.params)
            if bad:
                raise ConfigError(
                    f"scorer {self.name!r} does not accept keyword argument(s) {', '.join(bad)}; "
                    f"it accepts: {', '.join(sorted(sig.params)) or '(none)'}"
                )
        return ScorerSpec(self.name, self.fn, self.ref, self.data_sources, self.batch, self.provider, merged)

    def build_kwargs(self, sample: Sample) -> dict[str, Any]:
        """The keyword arguments for calling ``fn`` on one sample."""
        kw = {
            name: sample if attr is None else getattr(sample, attr) for name, attr in single_params(self.fn)
        }
        if self.kwargs:
            kw.update(self.kwargs)
        return kw

    def build_batch_kwargs(self, samples: Sequence[Sample]) -> dict[str, Any]:
        """The keyword arguments for calling a batch ``fn`` on many samples."""
        sig = signature_of(self.fn)
        kw = {
            plural: [_field(s, single) for s in samples]
            for plural, single in BATCH_FIELDS.items()
            if plural in sig.params
        }
        kw.update(self.kwargs)
        return kw


def single_params(fn: Callable) -> tuple[tuple[str, str | None], ...]:
    """``(parameter, Sample attribute)`` for the :data:`SINGLE_FIELDS` ``fn`` names, in that order
    (``None``: the sample itself; cached per function)."""
    try:
        return _single_params_of(fn)
    except TypeError:  # unhashable callable
        return _single_params_of.__wrapped__(fn)


@functools.lru_cache(maxsize=1024)
def _single_params_of(fn: Callable) -> tuple[tuple[str, str | None], ...]:
    params = signature_of(fn).params
    attrs = {"solution_str": "response", "sample": None}
    return tuple((name, attrs.get(name, name)) for name in SINGLE_FIELDS if name in params)


def _spec_from_ref(name, ref, data_sources, batch, provider, kwargs) -> ScorerSpec:
    return ScorerSpec(name, resolve_ref(ref), ref, tuple(data_sources), batch, provider, kwargs)


# ---------------------------------------------------------------------------------------------
# Finding functions: "module:qualname", "/path/file.py:name", "pkg://module"
# ---------------------------------------------------------------------------------------------

_load_lock = threading.Lock()


def _module_from_file(path: str):
    path = os.path.abspath(os.path.expanduser(path))
    if not os.path.isfile(path):
        raise ConfigError(f"custom reward function file not found: {path}")
    digest = hashlib.sha1(path.encode()).hexdigest()[:12]
    mod_name = f"rewardkit_custom_{digest}"
    with _load_lock:
        mod = sys.modules.get(mod_name)
        if mod is not None:
            return mod
        spec = importlib.util.spec_from_file_location(mod_name, path)
        if spec is None or spec.loader is None:
            raise ConfigError(f"cannot load custom reward function file {path}")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[mod_name] = mod
        try:
            spec.loader.exec_module(mod)
        except BaseException as e:
            del sys.modules[mod_name]
            raise ConfigError(f"error while importing {path}: {type(e).__name__}: {e}") from e
        return mod


def _import_module(name: str):
    try:
        return importlib.import_module(name)
    except ImportError as e:
        raise ConfigError(f"cannot import module {name!r}: {e}") from e


@functools.lru_cache(maxsize=256)
def resolve_ref(ref: str) -> Callable:
    """Find the function a reference names: ``"module:qualname"`` or ``"/path/file.py:name"``."""
    where, sep, name = ref.rpartition(":")
    if not sep or not where or not name:
        raise ConfigError(f"bad function reference {ref!r}: expected 'module:name' or '/path/file.py:name'")
    if where.endswith(".py") or os.sep in where:
        mod = _module_from_file(where)
    else:
        mod = _import_module(where)
    obj: Any = mod
    for part in name.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ConfigError(f"{where!r} has no function {name!r}") from None
    if not callable(obj):
        raise ConfigError(f"{ref!r} is not callable")
    return obj


def load_function(path: str, name: str | None = None) -> tuple[Callable, str]:
    """Load a user's reward function as verl's ``custom_reward_function`` does.

    ``path`` is a file path (``name`` defaults to ``compute_score``), ``pkg://package.module``
    (with ``name``), or ``module:function``. Returns ``(function, ref)``.
    """
    if path.startswith("pkg://"):
        ref = f"{path[len('pkg://') :]}:{name or 'compute_score'}"
    elif path.endswith(".py") or os.sep in path or os.path.isfile(path):
        ref = f"{os.path.abspath(os.path.expanduser(path))}:{name or 'compute_score'}"
    elif ":" in path:
        if name:
            raise ConfigError(f"give either 'module:function' ({path!r}) or a name ({name!r}), not both")
        ref = path
    else:
        ref = f"{path}:{name or 'compute_score'}"
    return resolve_ref(ref), ref


def ref_of(fn: Callable) -> str | None:
    """An importable ``module:qualname`` reference for ``fn``, or ``None`` if it has none (closures, lambdas)."""
    mod = getattr(fn, "__module__", None)
    qual = getattr(fn, "__qualname__", None)
    if mod is None or qual is None:  # e.g. a callable instance: not referable by name
        return None
    if "<" in qual or mod == "__main__":
        return None
    if mod.startswith("rewardkit_custom_"):
        file = getattr(sys.modules.get(mod), "__file__", None)
        return f"{file}:{qual}" if file else None
    return f"{mod}:{qual}"


# ---------------------------------------------------------------------------------------------
# Turning returns and exceptions into results
# ---------------------------------------------------------------------------------------------


_NO_SCORE = object()
_new = object.__new__


def to_result(value: Any) -> SampleResult:
    """Turn what a scorer returned into a :class:`SampleResult`."""
    kind = type(value)
    if kind is dict:  # the common return first: {"score": finite number, ...extras}
        score = value.get("score", _NO_SCORE)
        skind = type(score)
        if skind is float and score - score == 0.0 or skind is int or skind is bool:
            rest = value.copy()
            del rest["score"]
            # SampleResult(float(score), "ok", None, None, rest) without the call of its
            # generated __init__ (this runs once per sample of every batch)
            result = _new(SampleResult)
            result.score = float(score)
            result.status = "ok"
            result.reason = None
            result.error = None
            result.extra = rest
            result.components = {}
            return result
    if value is None:
        return SampleResult.abstained()
    if isinstance(value, SampleResult):
        if value.status == "ok" and not (
            isinstance(value.score, numbers.Real)
            and not isinstance(value.score, bool)
            and math.isfinite(value.score)
        ):
            return SampleResult.failed(
                "invalid_return", f"scorer returned an ok SampleResult with score {value.score!r:.80}"
            )
        return value
    if kind is float:  # the common returns first, with the checks below
        if value - value == 0.0:  # finite: inf - inf and nan - nan are nan
            return SampleResult(score=value, status="ok", extra={})
        return SampleResult.failed("invalid_return", f"scorer returned {value}")
    if kind is bool or kind is int:
        return SampleResult(score=float(value), status="ok", extra={})
    extra: dict[str, Any] = {}
    if kind is dict or isinstance(value, Mapping):
        if "score" not in value:
            return SampleResult.failed(
                "invalid_return", f"scorer returned a dict without a 'score' key (keys: {sorted(value)[:10]})"
            )
        extra = {k: v for k, v in value.items() if k != "score"}
        value = value["score"]
        if value is None:
            return SampleResult.abstained(**extra)
    if isinstance(value, str | bytes | bytearray):  # "1.0" is text a bug produced, not a score
        return SampleResult.failed(
            "invalid_return", f"scorer returned {type(value).__name__} {value!r:.80}, not a number", **extra
        )
    try:
        score = float(value)
    except (TypeError, ValueError):
        return SampleResult.failed(
            "invalid_return", f"scorer returned {type(value).__name__} {value!r:.80}, not a number", **extra
        )
    if math.isnan(score) or math.isinf(score):
        return SampleResult.failed("invalid_return", f"scorer returned {score}", **extra)
    return SampleResult(score=score, status="ok", extra=extra)


def error_result(exc: BaseException) -> SampleResult:
    """A ``failed`` result for an exception a scorer raised, with the last frames of its traceback
    (the scorer's: the calling code of this module is left out, so every path reads the same)."""
    try:
        tb = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename != __file__][-3:]
        where = "; ".join(f"{os.path.basename(f.filename)}:{f.lineno} in {f.name}" for f in tb)
    except Exception:  # noqa: BLE001 - a traceback that cannot be read is left out
        where = ""
    try:
        msg = f"{type(exc).__name__}: {exc}"
    except BaseException as e:  # noqa: BLE001 - its __str__ raised: fail the sample, not the batch
        if isinstance(e, KeyboardInterrupt):
            raise
        msg = f"{type(exc).__name__} (its message could not be formatted: {type(e).__name__})"
    return SampleResult.failed("error", f"{msg} (at {where})" if where else msg)


def _too_large(sample: Sample, max_input_chars: int | None) -> SampleResult | None:
    if max_input_chars is not None and len(sample.response) > max_input_chars:
        return SampleResult.failed(
            "input_too_large",
            f"response has {len(sample.response)} characters, over max_input_chars={max_input_chars}",
        )
    return None


def invoke(spec: ScorerSpec, sample: Sample, max_input_chars: int | None = None) -> SampleResult:
    """Call a scorer on one sample, synchronously (async scorers run in a private event loop)."""
    too_large = _too_large(sample, max_input_chars)
    if too_large is not None:
        return too_large
    return call_with(spec, spec.build_kwargs(sample))


def call_with(spec: ScorerSpec, kwargs: Mapping[str, Any], args: tuple[Any, ...] = ()) -> SampleResult:
    """Call a scorer with its arguments built (``spec.fn(*args, **kwargs)``; the fast path passes
    the fields positionally, see :func:`fast_fields`): what it returned as a result, every failure
    typed, turning the return into a result included (async scorers run in a private event loop).

    A ``CancelledError`` is the scorer's own (nothing cancels a synchronous call): typed too."""
    try:
        value = spec.fn(*args, **kwargs) if kwargs else spec.fn(*args)
        if type(value) not in _PLAIN_RETURNS and inspect.isawaitable(value):
            value = asyncio.run(_await(value))
        return to_result(value)
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # noqa: BLE001 - math-verify's TimeoutException is a BaseException
        return error_result(e)


def fast_fields(spec: ScorerSpec) -> tuple[str, ...] | None:
    """The :class:`Sample` attributes that ``spec.fn`` takes as its first parameters, in their
    order, so :func:`call_with` can take them positionally (no keyword dict per sample); ``None``
    where it cannot be sure: not a plain function (a wrapper, a callable object), positional-only
    parameters, the sample itself wanted, or ``spec.kwargs`` naming one of those parameters."""
    fn = spec.fn
    if type(fn) is not types.FunctionType or hasattr(fn, "__wrapped__") or hasattr(fn, "__signature__"):
        return None
    code = fn.__code__
    params = single_params(fn)
    names = code.co_varnames[: len(params)]
    attr_of = {name: attr for name, attr in params if attr is not None}
    if (
        code.co_posonlyargcount
        or len(params) > code.co_argcount
        or len(attr_of) < len(params)  # (the sample itself)
        or set(names) != set(attr_of)
        or any(name in spec.kwargs for name in names)
    ):
        return None
    return tuple(attr_of[name] for name in names)


#: The sample fields :meth:`NaiveRewardManager.score_fields_now
#: <rewardkit.managers.naive.NaiveRewardManager.score_fields_now>` passes without a Sample.
CALL_FIELDS = ("response", "ground_truth", "data_source", "extra_info")


def field_params(fn: Callable) -> tuple[tuple[str, int], ...] | None:
    """``(parameter, index in CALL_FIELDS)`` for a one-sample scorer that reads only
    :data:`CALL_FIELDS`; ``None`` if it reads anything else (the sample itself, the prompt...)."""
    params = single_params(fn)
    if any(attr not in CALL_FIELDS for _name, attr in params):
        return None
    return tuple((name, CALL_FIELDS.index(attr)) for name, attr in params)


#: Return types that are never awaitable (checked before the slower ``inspect.isawaitable``).
_PLAIN_RETURNS = frozenset({dict, float, int, bool, type(None), str})


async def _await(aw):
    return await aw


async def ainvoke(spec: ScorerSpec, sample: Sample, max_input_chars: int | None = None) -> SampleResult:
    """Call a scorer on one sample from async code: async scorers are awaited, sync ones run inline."""
    too_large = _too_large(sample, max_input_chars)
    if too_large is not None:
        return too_large
    try:
        value = spec.fn(**spec.build_kwargs(sample))
        if inspect.isawaitable(value):
            value = await value
        return to_result(value)
    except (KeyboardInterrupt, asyncio.CancelledError):
        raise
    except BaseException as e:  # noqa: BLE001
        return error_result(e)


def invoke_batch(spec: ScorerSpec, samples: Sequence[Sample]) -> list[SampleResult]:
    """Call a batch scorer once on many samples. A wrong-length return fails every sample."""
    try:
        value = spec.fn(**spec.build_batch_kwargs(samples))
        if inspect.isawaitable(value):
            value = asyncio.run(_await(value))
    except (KeyboardInterrupt, asyncio.CancelledError):
        raise
    except BaseException as e:  # noqa: BLE001
        err = error_result(e)
        return [SampleResult.failed("error", err.error or "") for _ in samples]
    if not isinstance(value, Sequence) or isinstance(value, str | bytes) or len(value) != len(samples):
        n = len(value) if isinstance(value, Sequence) else type(value).__name__
        return [
            SampleResult.failed(
                "invalid_return",
                f"batch scorer {spec.name!r} returned {n} results for {len(samples)} samples",
            )
            for _ in samples
        ]
    return [to_result(v) for v in value]
