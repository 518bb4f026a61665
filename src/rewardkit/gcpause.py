"""Garbage collection paused while a large batch is scored.

A batch of tens of thousands of samples allocates several container objects per sample (samples,
dicts, results) that all survive until the batch is done. CPython counts them as long-lived and
runs *full* collections, each walking every object of the process (torch, transformers, the
trainer), several times per call: about 30% of the call at B = 16,384. Inside :func:`paused_gc`
the collector is off (process-wide, re-entrant); when the last pause ends it is switched back on,
so a cycle made during the call is collected afterwards, at most one full collection later.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

#: Batches at least this large pause the collector (smaller ones gain nothing measurable).
MIN_BATCH = 1024

_lock = threading.Lock()
_depth = 0
_reenable = False


@contextmanager
def paused_gc(batch_size: int) -> Iterator[None]:
    """Switch the garbage collector off for the block when ``batch_size >= MIN_BATCH``."""
    global _depth, _reenable
    if batch_size < MIN_BATCH:
        yield
        return
    with _lock:
        if _depth == 0:
            _reenable = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _reenable:
                gc.enable()


def batch_size(batch: object) -> int:
    """The number of samples in ``batch`` when it can tell without being consumed, else 0."""
    if isinstance(batch, dict) and "completions" in batch:
        batch = batch["completions"]
    try:
        return len(batch)  # type: ignore[arg-type]
    except TypeError:
        return 0
