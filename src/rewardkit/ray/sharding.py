"""Contiguous sharding of a batch: no padding, no duplicated samples, gathered back in input order."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Shard:
    """A contiguous slice ``[start, stop)`` of a batch and how many times its worker crashed on it."""

    start: int
    stop: int
    crashes: int = 0

    def __len__(self) -> int:
        return self.stop - self.start

    def halves(self) -> tuple[Shard, Shard]:
        """Split in two contiguous halves (to isolate a sample that crashes its worker)."""
        mid = self.start + len(self) // 2
        return Shard(self.start, mid, self.crashes), Shard(mid, self.stop, self.crashes)


def split_contiguous(n: int, parts: int) -> list[Shard]:
    """Split ``range(n)`` into at most ``parts`` contiguous shards whose sizes differ by at most one.

    Never pads: with fewer samples than parts there are fewer shards, and an empty batch has none.
    """
    if n < 0 or parts < 1:
        raise ValueError(f"split_contiguous({n}, {parts}): need n >= 0 and parts >= 1")
    parts = min(parts, n)
    shards = []
    start = 0
    for k in range(parts):
        size = n // parts + (1 if k < n % parts else 0)
        shards.append(Shard(start, start + size))
        start += size
    return shards
