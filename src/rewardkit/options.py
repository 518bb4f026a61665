"""Options models: how the config, managers and backends declare their settings, and the one way
their validation errors are reported.

Every reward manager and RM backend declares an ``Options`` model (a subclass of :class:`Options`:
unknown keys are errors, every field has a description). :func:`validate_options` validates a
mapping against it and raises a :class:`~rewardkit.errors.ConfigError` whose lines name the full key
path (``reward.reward_manager.kwargs.overlong_buffer_cfg.len: ...``), with "did you mean" for a
misspelt key. ``RENAMED`` maps an old spelling of a key to its new name: the old one is accepted
for one release, with a :class:`DeprecationWarning` naming both.
"""

from __future__ import annotations

import difflib
import typing
import warnings
from collections.abc import Mapping
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from rewardkit.errors import ConfigError

M = TypeVar("M", bound=BaseModel)


class Options(BaseModel):
    """Base of every options model: unknown keys are errors; ``RENAMED`` old keys still work, with a warning."""

    model_config = ConfigDict(extra="forbid")

    #: Deprecated spelling → current field name (accepted for one release, with a DeprecationWarning).
    RENAMED: ClassVar[dict[str, str]] = {}

    @model_validator(mode="before")
    @classmethod
    def _renamed_keys(cls, data: Any) -> Any:
        if not cls.RENAMED or not isinstance(data, Mapping):
            return data
        data = dict(data)
        for old, new in cls.RENAMED.items():
            if old not in data:
                continue
            if new in data:
                raise ValueError(f"{old!r} is the deprecated name of {new!r}; give only {new!r}")
            warnings.warn(
                f"{cls.__name__}: key {old!r} is deprecated, use {new!r} (the old name goes in the next release)",
                DeprecationWarning,
                stacklevel=2,
            )
            data[new] = data.pop(old)
        return data


def model_in(ann: Any) -> type[BaseModel] | None:
    """The pydantic model inside an annotation (``M``, ``M | None``, ``list[M]``), or None."""
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return ann
    for arg in typing.get_args(ann):
        found = model_in(arg)
        if found is not None:
            return found
    return None


def _known_at(model: type[BaseModel], loc: tuple) -> list[str]:
    """The field names of the model that holds the last element of ``loc`` ([] when not a model)."""
    parent: type[BaseModel] | None = model
    for part in loc[:-1]:
        if isinstance(part, int):
            continue  # a list index: parent already is the item model
        field = parent.model_fields.get(str(part)) if parent is not None else None
        parent = model_in(field.annotation) if field is not None else None
        if parent is None:
            return []
    return sorted(parent.model_fields) if parent is not None else []


def format_validation_error(e: ValidationError, model: type[BaseModel], prefix: str, header: str) -> str:
    """One line per problem under ``header``, each naming its key path below ``prefix`` (``reward.``)."""
    lines = [header]
    for err in e.errors():
        loc = ".".join(str(p) for p in err["loc"])
        where = f"{prefix}{loc}" if loc else prefix.rstrip(".") or "(top level)"
        if err["type"] == "extra_forbidden":
            known = _known_at(model, err["loc"])
            close = difflib.get_close_matches(str(err["loc"][-1]), known, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            hint += f" Known keys here: {', '.join(known)}." if known else " No keys are known here."
            lines.append(f"  {where}: unknown key.{hint}")
        else:
            msg = err["msg"].removeprefix("Value error, ")
            got = f" (got {err.get('input')!r:.60})" if err["type"] != "value_error" else ""
            lines.append(f"  {where}: {msg}{got}")
    return "\n".join(lines)


def validate_options(model: type[M], data: Any, prefix: str, what: str = "") -> M:
    """``model`` validated from ``data`` (``None`` is ``{}``); a :class:`ConfigError` lists every problem.

    ``prefix`` is the key path of ``data`` in the config (``reward.reward_manager.kwargs``); ``what``
    names the owner in the header (``reward manager 'dapo'``).
    """
    try:
        return model.model_validate({} if data is None else data)
    except ValidationError as e:
        none = "" if model.model_fields else " (it takes no options)"
        header = f"invalid {prefix}{f' for {what}' if what else ''}{none}:"
        raise ConfigError(format_validation_error(e, model, prefix + ".", header)) from None
