"""A persistent judge cache: SQLite, content-addressed, safe for concurrent use within a process.

The key is a SHA-256 of the request that decides the judgement (model, API, template identity,
sampling parameters and the rendered prompt), so rescoring stored rollouts with the same judge
does not pay twice. The *raw judge text* is stored, not the score: changing the parser or the
score scale re-parses cached text instead of invalidating it.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def cache_key(request: dict[str, Any]) -> str:
    """The content address of a request (any JSON-serialisable dict)."""
    blob = json.dumps(request, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


@dataclass
class CachedJudgement:
    """What the cache stores per request."""

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0


class JudgeCache:
    """A SQLite file of ``key → judge text``; one connection guarded by a lock (WAL, so other processes may read)."""

    def __init__(self, path: str | Path):
        self.path = Path(path).expanduser()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(self.path), check_same_thread=False, timeout=30)
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS judgements ("
                " key TEXT PRIMARY KEY, text TEXT NOT NULL, model TEXT,"
                " prompt_tokens INTEGER, completion_tokens INTEGER, created REAL)"
            )
            self._db.commit()

    def get_many(self, keys: Sequence[str]) -> dict[str, CachedJudgement]:
        """The cached judgements among ``keys``."""
        out: dict[str, CachedJudgement] = {}
        keys = list(dict.fromkeys(keys))
        with self._lock:
            for i in range(0, len(keys), 500):
                chunk = keys[i : i + 500]
                rows = self._db.execute(
                    "SELECT key, text, prompt_tokens, completion_tokens FROM judgements WHERE key IN "
                    f"({','.join('?' * len(chunk))})",
                    chunk,
                ).fetchall()
                for key, text, pt, ct in rows:
                    out[key] = CachedJudgement(text, pt or 0, ct or 0)
        return out

    def put_many(self, items: Iterable[tuple[str, str, CachedJudgement]]) -> None:
        """Store ``(key, model, judgement)`` triples in one transaction."""
        now = time.time()
        rows = [(k, j.text, model, j.prompt_tokens, j.completion_tokens, now) for k, model, j in items]
        if not rows:
            return
        with self._lock:
            self._db.executemany("INSERT OR REPLACE INTO judgements VALUES (?, ?, ?, ?, ?, ?)", rows)
            self._db.commit()

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM judgements").fetchone()[0]

    def close(self) -> None:
        """Close the database (idempotent)."""
        with self._lock:
            self._db.close()
