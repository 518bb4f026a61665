"""Hydra command-line overrides (``reward_model.reward_manager=dapo``, ``+a.b=1``) as a nested config.

For the overrides in a verl run script: ``migrate_legacy(overrides_to_config(args))``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import yaml

from rewardkit.errors import ConfigError

__all__ = ["overrides_to_config"]

_OVERRIDE = re.compile(r"^(?P<prefix>~|\+\+|\+)?(?P<key>[A-Za-z_][\w.]*)(?:=(?P<value>.*))?$", re.S)


def overrides_to_config(overrides: Iterable[str]) -> dict[str, Any]:
    """Turn Hydra command-line overrides (``reward_model.reward_manager=dapo``, ``+a.b=1``) into a config.

    For the overrides in a verl run script: ``migrate_legacy(overrides_to_config(args))``. Values
    are parsed as Hydra does for the common cases (numbers, booleans, ``null``, quoted strings,
    ``[lists]``, ``{mappings}``); deletions (``~key``) are ignored. Raises ConfigError naming a
    malformed override.
    """
    out: dict[str, Any] = {}
    for raw in overrides:
        text = raw.strip()
        if not text:
            continue
        m = _OVERRIDE.match(text)
        if m is None or (m["value"] is None and m["prefix"] != "~"):
            raise ConfigError(f"not a Hydra override (key=value): {raw!r}")
        if m["prefix"] == "~":
            continue
        value_text = m["value"]
        if value_text.startswith("{"):
            value_text = re.sub(r":(?=[^\s/])", ": ", value_text)  # Hydra's {a:1} is YAML's {a: 1}
        try:
            value = yaml.safe_load(value_text) if value_text != "" else ""
        except yaml.YAMLError:
            value = m["value"]
        node = out
        parts = m["key"].split(".")
        for part in parts[:-1]:
            nxt = node.setdefault(part, {})
            if not isinstance(nxt, dict):
                raise ConfigError(
                    f"override {raw!r} sets a key below {part!r}, which an earlier override set to a value"
                )
            node = nxt
        node[parts[-1]] = value
    return out
