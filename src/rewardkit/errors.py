"""Exceptions raised by rewardkit.

Per-sample problems (a scorer that raises, hangs or crashes) never raise: they become a
``failed`` :class:`~rewardkit.result.SampleResult`. These exceptions are for problems with the
*call itself*: bad input, bad config, unknown or broken plugins.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class RewardKitError(Exception):
    """Base class of every error rewardkit raises.

    Every subclass pickles with its fields (so it crosses Ray and process pools as itself, not as
    ``UnserializableException``): it is rebuilt from its message and attributes, without calling
    its ``__init__``, whatever that subclass's signature is.
    """

    def __reduce__(self):
        return (_rebuild, (type(self), self.args, dict(self.__dict__)))


def _rebuild(cls: type[RewardKitError], args: tuple, state: dict) -> RewardKitError:
    err = cls.__new__(cls)
    Exception.__init__(err, *args)
    err.__dict__.update(state)
    return err


class ConfigError(RewardKitError, ValueError):
    """The configuration is malformed or inconsistent."""


class SampleError(RewardKitError, ValueError):
    """A sample is malformed or cannot be routed. ``index``, ``field`` and ``reason`` name the culprit.

    ``reason`` is the failure reason the sample gets where it fails alone (``invalid_sample``,
    ``unroutable``); ``detail`` is the message without the ``sample i, field f:`` prefix.
    """

    def __init__(self, index: int | None, field: str | None, message: str, reason: str = "invalid_sample"):
        self.index = index
        self.field = field
        self.reason = reason
        self.detail = message
        where = []
        if index is not None:
            where.append(f"sample {index}")
        if field:
            where.append(f"field {field!r}")
        prefix = ", ".join(where)
        super().__init__(f"{prefix}: {message}" if prefix else message)


class DuplicateNameError(RewardKitError):
    """Two plugins registered the same name for the same kind of object."""

    def __init__(self, kind: str, name: str, first: str, second: str):
        self.kind, self.name, self.first, self.second = kind, name, first, second
        super().__init__(
            f"{kind} {name!r} is registered twice: by plugin {first!r} and by plugin {second!r}. "
            f"Disable one of them (REWARDKIT_DISABLE_PLUGINS={second}) or rename it."
        )


class UnknownNameError(RewardKitError, KeyError):
    """A name was asked for that no loaded plugin registered."""

    def __init__(self, kind: str, name: str, known: Iterable[str], hint: str = ""):
        self.kind, self.name, self.hint = kind, name, hint
        self.known = sorted(known)
        close = difflib.get_close_matches(name, self.known, n=1, cutoff=0.6)
        msg = f"unknown {kind} {name!r}."
        if close:
            msg += f" Did you mean {close[0]!r}?"
        msg += f" Known {kind}s: {', '.join(self.known) if self.known else '(none)'}."
        if hint:
            msg += " " + hint
        self.message = msg
        super().__init__(msg)

    def __str__(self) -> str:  # KeyError would repr() the message
        return self.message


class BrokenPluginError(RewardKitError):
    """Something was asked for that only a plugin which failed to load could provide."""


class ScorerTimeout(RewardKitError):
    """Raised inside executors when a scorer passes its deadline."""
