"""The offline rescoring job behind ``rewardkit score``: stream a JSONL file through an engine.

Results are written chunk by chunk, in input order, and flushed after each chunk, so an interrupted
run keeps everything scored so far and ``--resume`` carries on after the last written line. Each
output row carries ``input_line``, the line of the input it belongs to; errors name the file and
that line. A bad input line either stops the run (``fail``) or gets a ``failed`` row with reason
``bad_input`` (``skip``), so the output stays line-aligned with the input.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rewardkit.batch import to_sample
from rewardkit.errors import RewardKitError, SampleError
from rewardkit.result import SampleResult

#: The output field naming the input line a row belongs to.
LINE_FIELD = "input_line"


class JobError(RewardKitError):
    """The job cannot go on: a bad input line (with ``fail``), or an output that does not match the input."""


@dataclass
class Line:
    """One non-blank input line: its number, and the record or why it is unusable."""

    lineno: int
    record: dict[str, Any] | None = None
    error: str | None = None


def _parse(path: Path, lineno: int, raw: bytes) -> Line:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return Line(lineno, error=f"not valid UTF-8 ({e})")
    try:
        rec = json.loads(text)
    except json.JSONDecodeError as e:
        return Line(lineno, error=f"not valid JSON ({e})")
    if not isinstance(rec, dict):
        return Line(lineno, error=f"expected a JSON object, got {type(rec).__name__}")
    try:
        to_sample(rec, 0)
    except SampleError as e:
        return Line(lineno, error=_without_index(e))
    return Line(lineno, record=rec)


def _without_index(e: SampleError) -> str:
    """A sample error's text without the ``sample N`` prefix (a position in a chunk means nothing)."""
    text = str(e)
    prefix = f"sample {e.index}"
    if e.index is not None and text.startswith(prefix):
        text = text[len(prefix) :].lstrip(", ")
    return text


def iter_lines(path: Path) -> Iterator[Line]:
    """Every non-blank line of ``path``, parsed and validated (never raises for a bad line)."""
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            if raw.strip():
                yield _parse(path, lineno, raw)


def bad_input_row(line: Line) -> dict[str, Any]:
    """The ``failed`` row written for an unusable input line under ``--on-bad-line=skip``."""
    res = SampleResult.failed("bad_input", f"line {line.lineno}: {line.error}")
    return {LINE_FIELD: line.lineno, **res.to_dict()}


def dump_row(row: dict[str, Any]) -> bytes:
    """One output line. Text that UTF-8 cannot hold (a lone surrogate) is written ``\\u``-escaped."""
    text = json.dumps(row, ensure_ascii=False, default=str)
    try:
        return (text + "\n").encode("utf-8")
    except UnicodeEncodeError:
        return (json.dumps(row, ensure_ascii=True, default=str) + "\n").encode("ascii")


@dataclass
class Tally:
    """Counts per data source for the summary, without keeping the rows."""

    counts: dict[str, Counter] = field(default_factory=lambda: defaultdict(Counter))
    sums: Counter = field(default_factory=Counter)
    reasons: Counter = field(default_factory=Counter)
    rows: int = 0

    def add(self, row: dict[str, Any]) -> None:
        """Count one output row."""
        ds = row.get("data_source") or "(none)"
        ds = str(ds).encode("utf-8", "backslashreplace").decode("utf-8")
        status = row.get("status", "failed")
        self.rows += 1
        self.counts[ds][status] += 1
        if status == "ok" and isinstance(row.get("score"), int | float):
            self.sums[ds] += row["score"]
        elif status == "failed":
            self.reasons[row.get("reason") or "?"] += 1


def check_resume(output: Path, lines: list[int], uids: list[Any]) -> tuple[int, Tally]:
    """How many input lines ``output`` already holds results for (and their tally).

    Each row must name the input line it belongs to, in order, and carry the same ``uid`` as that
    line; a torn last line (the run died mid-write) is cut off. Raises :class:`JobError` when the
    output belongs to another input.
    """
    tally = Tally()
    if not output.exists():
        return 0, tally
    done = 0
    good_end = 0
    with open(output, "rb") as f:
        for raw in f:
            if not raw.endswith(b"\n"):
                break  # torn: no newline after the last row
            try:
                row = json.loads(raw)
            except (UnicodeDecodeError, json.JSONDecodeError):
                if f.read().strip():
                    raise JobError(f"{output}: row {done + 1} is not valid JSON; cannot resume") from None
                break
            _check_row(output, row, done, lines, uids)
            tally.add(row)
            done += 1
            good_end += len(raw)
        size = f.seek(0, 2)
    if good_end < size:
        with open(output, "r+b") as f:
            f.truncate(good_end)
    return done, tally


def _check_row(output: Path, row: Any, done: int, lines: list[int], uids: list[Any]) -> None:
    if done >= len(lines):
        raise JobError(f"{output} has more rows than the input has lines; cannot resume")
    if not isinstance(row, dict) or row.get(LINE_FIELD) != lines[done]:
        got = row.get(LINE_FIELD) if isinstance(row, dict) else "?"
        raise JobError(
            f"{output}: row {done + 1} is for input line {got}, expected line {lines[done]}: "
            "it was not written from this input; cannot resume"
        )
    if uids[done] is not None and row.get("uid") != uids[done]:
        raise JobError(
            f"{output}: row {done + 1} has uid {row.get('uid')!r}, input line {lines[done]} has "
            f"{uids[done]!r}; cannot resume"
        )


def score_file(
    engine: Any,
    path: Path,
    output: Path,
    *,
    chunk_size: int = 512,
    on_bad_line: str = "fail",
    resume: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> Tally:
    """Score every line of ``path`` into ``output``; returns the tally of all rows in ``output``.

    ``progress(done, total)`` is called at start and after each chunk. Rows are flushed after each
    chunk; on an exception (``KeyboardInterrupt`` included) everything finished so far is on disk.
    """
    index: list[int] = []
    uids: list[Any] = []
    for line in iter_lines(path):
        if line.error is not None and on_bad_line == "fail":
            raise JobError(f"{path}: line {line.lineno}: {line.error}")
        index.append(line.lineno)
        uids.append(line.record.get("uid") if line.record else None)
    total = len(index)
    done, tally = check_resume(output, index, uids) if resume else (0, Tally())
    output.parent.mkdir(parents=True, exist_ok=True)
    if progress is not None:
        progress(done, total)
    chunk: list[Line] = []
    with open(output, "ab" if resume else "wb") as out:
        for k, line in enumerate(iter_lines(path)):
            if k < done:
                continue
            chunk.append(line)
            if len(chunk) == chunk_size:
                done += _score_chunk(engine, path, chunk, on_bad_line, out, tally)
                chunk = []
                if progress is not None:
                    progress(done, total)
        if chunk:
            done += _score_chunk(engine, path, chunk, on_bad_line, out, tally)
            if progress is not None:
                progress(done, total)
    return tally


def _score_chunk(engine, path: Path, chunk: list[Line], on_bad_line: str, out, tally: Tally) -> int:
    while True:
        good = [line for line in chunk if line.error is None]
        try:
            result = engine.compute([line.record for line in good])
            break
        except SampleError as e:
            if e.index is None or not 0 <= e.index < len(good):
                raise
            bad = good[e.index]
            if on_bad_line == "fail":
                raise JobError(f"{path}: line {bad.lineno}: {_without_index(e)}") from None
            bad.error = _without_index(e)
    rows = iter(result.samples)
    buf = bytearray()
    for line in chunk:
        if line.error is not None:
            row = bad_input_row(line)
        else:
            row = {**line.record, **next(rows).to_dict(), LINE_FIELD: line.lineno}
        tally.add(row)
        buf += dump_row(row)
    out.write(buf)
    out.flush()
    return len(chunk)
