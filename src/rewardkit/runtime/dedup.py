"""In-batch dedup: score each distinct call once, then hand every sample its result.

>>> unique, slots = unique_slots(["a", "b", "a"])
>>> unique, slots
(['a', 'b'], [0, 1, 0])
>>> fan_out(["A", "B"], slots, copy=str.lower)
['A', 'B', 'a']
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")


def unique_slots(
    items: Sequence[T], key: Callable[[T], Hashable] | None = None, *, enabled: bool = True
) -> tuple[list[T], list[int]]:
    """The distinct ``items`` (first occurrence of each ``key``, in order) and, per item, the index of
    its distinct item. With ``enabled=False`` every item is its own slot."""
    if not enabled:
        return list(items), list(range(len(items)))
    first: dict[Any, int] = {}
    unique: list[T] = []
    slots: list[int] = []
    for it in items:
        k = it if key is None else key(it)
        if k not in first:
            first[k] = len(unique)
            unique.append(it)
        slots.append(first[k])
    return unique, slots


def fan_out(results: Sequence[R], slots: Sequence[int], copy: Callable[[R], R]) -> list[R]:
    """One result per item of :func:`unique_slots`: the first item of a group gets the result itself,
    its duplicates get ``copy(result)``, so that no two samples share a mutable result."""
    out: list[R] = []
    handed_out: set[int] = set()
    for s in slots:
        out.append(copy(results[s]) if s in handed_out else results[s])
        handed_out.add(s)
    return out
