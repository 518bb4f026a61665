"""Typed name → object registries with helpful errors."""

from __future__ import annotations

import fnmatch
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, cast

from rewardkit.errors import DuplicateNameError, UnknownNameError

T = TypeVar("T")


@dataclass
class Entry(Generic[T]):
    """One registered object and the plugin that provided it."""

    name: str
    obj: T
    provider: str
    meta: dict[str, Any] = field(default_factory=dict)


class Registry(Generic[T]):
    """Objects of one kind (``"scorer"``, ``"reward manager"``...) by name.

    Registering a name twice raises :class:`DuplicateNameError` naming both plugins; asking for an
    unknown name raises :class:`UnknownNameError` listing the known names and the closest match.
    ``hint`` is appended to unknown-name errors (the plugin manager uses it to mention broken plugins).
    """

    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, Entry[T]] = {}
        self.hint = ""

    def add(self, name: str, obj: T, provider: str, **meta: Any) -> Entry[T]:
        """Register ``obj`` as ``name`` for ``provider``; a taken name raises :class:`DuplicateNameError`."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"plugin {provider!r} registered a {self.kind} without a name")
        if name in self._entries:
            raise DuplicateNameError(self.kind, name, self._entries[name].provider, provider)
        entry = Entry(name, obj, provider, dict(meta))
        self._entries[name] = entry
        return entry

    def entry(self, name: str) -> Entry[T]:
        """The entry for ``name``; an unknown name raises :class:`UnknownNameError`."""
        try:
            return self._entries[name]
        except KeyError:
            raise UnknownNameError(self.kind, name, self._entries, self.hint) from None

    def get(self, name: str) -> T:
        """The object registered as ``name``; a lazy ``"module:attr"`` string is imported on first use."""
        entry = self.entry(name)
        if isinstance(entry.obj, str):
            from rewardkit.errors import BrokenPluginError
            from rewardkit.scoring import resolve_ref

            try:
                # A lazy "module:attr" registered in place of a T: resolving it yields the T.
                entry.obj = cast(T, resolve_ref(entry.obj))
            except Exception as e:
                raise BrokenPluginError(
                    f"{self.kind} {name!r} from plugin {entry.provider!r} cannot be loaded: {e}"
                ) from e
        return entry.obj

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[Entry[T]]:
        return iter(self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)

    def names(self) -> list[str]:
        """Every registered name, sorted."""
        return sorted(self._entries)

    def remove_provider(self, provider: str) -> None:
        """Forget everything ``provider`` registered (used when a plugin fails half-way)."""
        self._entries = {k: e for k, e in self._entries.items() if e.provider != provider}


class ScorerRegistry(Registry[T]):
    """Scorers by name, plus the routing table from ``data_source`` to scorer name."""

    def __init__(self) -> None:
        super().__init__("scorer")
        self._exact: dict[str, str] = {}
        self._patterns: list[tuple[str, str]] = []

    def add(self, name: str, obj: T, provider: str, **meta: Any) -> Entry[T]:
        """Register a scorer and route its ``data_sources`` to it; a routed data source taken twice is an error."""
        sources = list(meta.get("data_sources") or ())
        for ds in sources:
            owner = self._exact.get(ds) or next((n for p, n in self._patterns if p == ds), None)
            if owner is not None:
                raise DuplicateNameError(
                    "data source",
                    ds,
                    f"{self._entries[owner].provider} (scorer {owner!r})",
                    f"{provider} (scorer {name!r})",
                )
        entry = super().add(name, obj, provider, **meta)
        for ds in sources:
            if any(c in ds for c in "*?["):
                self._patterns.append((ds, name))
            else:
                self._exact[ds] = name
        return entry

    def name_for(self, data_source: str) -> str | None:
        """The scorer name for a data source (exact match first, then patterns), or ``None``."""
        name = self._exact.get(data_source)
        if name is not None:
            return name
        for pattern, name in self._patterns:
            if fnmatch.fnmatchcase(data_source, pattern):
                return name
        return None

    def remove_provider(self, provider: str) -> None:
        """Forget ``provider``'s scorers and their routes."""
        super().remove_provider(provider)
        self._exact = {ds: n for ds, n in self._exact.items() if n in self._entries}
        self._patterns = [(p, n) for p, n in self._patterns if n in self._entries]

    def data_sources(self) -> list[str]:
        """Every routed data source name and pattern."""
        return sorted([*self._exact, *(p for p, _ in self._patterns)])
