"""Text helpers shared by the built-in scorers: boxed-answer extraction and number normalisation.

Every helper runs in time linear in the input (no nested quantifiers in regexes), so a
megabyte-long response costs milliseconds, never a catastrophic backtrack.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

_BOX_COMMANDS = ("\\boxed", "\\fbox")
# One escaped character (``\{`` is a literal brace, ``\\`` a line break) or one brace.
_BRACE_TOKEN = re.compile(r"\\.|[{}]", re.DOTALL)
_BARE_BOX_ARG = re.compile(r"[^\s$]+")


def matching_brace(text: str, open_at: int) -> int | None:
    """Index of the ``}`` that closes the ``{`` at ``open_at``, skipping escaped braces; ``None`` if unbalanced."""
    depth = 0
    for m in _BRACE_TOKEN.finditer(text, open_at):
        tok = m.group()
        if tok == "{":
            depth += 1
        elif tok == "}":
            depth -= 1
            if depth == 0:
                return m.start()
    return None


def last_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` / ``\\fbox{...}`` / ``\\boxed N`` in ``text``.

    Braces are balanced (``\\boxed{\\frac{1}{2}}`` gives ``\\frac{1}{2}``) and escaped braces
    (``\\{``, ``\\}``) are literal. If the last box is unbalanced (a truncated response) there is no
    answer: ``None``, as there is when ``text`` holds no box at all.
    """
    if not text:
        return None
    # Each command's last position; only the one just rejected is searched again (linear overall).
    found = {cmd: text.rfind(cmd) for cmd in _BOX_COMMANDS}
    while True:
        cmd = max(found, key=found.__getitem__)
        start = found[cmd]
        if start < 0:
            return None
        j = start + len(cmd)
        k = j
        while k < len(text) and text[k] in " \t":
            k += 1
        if k < len(text) and text[k] == "{":
            close = matching_brace(text, k)
            return None if close is None else text[k + 1 : close]
        if k > j:  # "\boxed 5"
            m = _BARE_BOX_ARG.match(text, k)
            if m:
                return m.group()
        # "\boxedsomething" is another command: keep looking further left.
        found[cmd] = text.rfind(cmd, 0, start)


def boxes(text: str) -> list[tuple[int, int, str]]:
    """Every balanced ``\\boxed{...}`` / ``\\fbox{...}`` / ``\\boxed N`` as ``(start, end, content)``, in order.

    Nested boxes are inside their outer box's content and not listed again; an unbalanced box
    ends the scan (what follows it is inside it).
    """
    out: list[tuple[int, int, str]] = []
    pos = 0
    nxt = {cmd: text.find(cmd) for cmd in _BOX_COMMANDS}  # each command's next position (linear)
    while True:
        for cmd, at in nxt.items():
            if 0 <= at < pos:
                nxt[cmd] = text.find(cmd, pos)
        live = [(at, cmd) for cmd, at in nxt.items() if at >= 0]
        if not live:
            return out
        start, cmd = min(live)
        k = j = start + len(cmd)
        while k < len(text) and text[k] in " \t":
            k += 1
        if k < len(text) and text[k] == "{":
            close = matching_brace(text, k)
            if close is None:
                return out
            out.append((start, close + 1, text[k + 1 : close]))
            pos = close + 1
            continue
        m = _BARE_BOX_ARG.match(text, k) if k > j else None
        if m:
            out.append((start, m.end(), m.group()))
            pos = m.end()
        else:
            pos = j


# Where a sentence may end: a line break, or ". " / "! " / "? " / a final stop ("x=1; y=2" is one).
_SENTENCE_END = re.compile(r"\n|[.!?](?=\s|$)")
_CURRENCY = re.compile(r"(?<!\\)\$\d")
_MATH_OPENERS = (("\\[", "\\]"), ("\\(", "\\)"))


def _math_balanced(text: str) -> bool:
    if any(text.count(a) != text.count(b) for a, b in _MATH_OPENERS):
        return False
    if _CURRENCY.search(text):  # "$5 + $19 = $24": dollars, not maths delimiters
        return True
    return (text.count("$") - text.count("\\$")) % 2 == 0


def first_sentence(text: str, limit: int = 400) -> str:
    """``text`` up to the end of its first sentence (at most ``limit`` characters).

    A stop or line break inside ``$...$``, ``\\(...\\)`` or ``\\[...\\]`` does not end the sentence,
    and neither does one before any content (``"The final answer is:\\n\\[5\\]"`` gives ``"\\[5\\]"``).
    """
    text = text[:limit]
    for m in _SENTENCE_END.finditer(text):
        head = text[: m.start()]
        if head.strip(" \t\n*:") and _math_balanced(head):
            return head
    return text


_NUMBER = re.compile(r"(?:-\$?)?\d[\d,]*(?:\.\d+)?|-?\.\d+")  # "-$15" is minus fifteen dollars


def find_numbers(text: str) -> list[str]:
    """Every number-looking token in ``text``: ``-1,234.5``, ``72``, ``.5``, ``-$15``."""
    return _NUMBER.findall(text)


def last_number(text: str) -> str | None:
    """The last number-looking token in ``text``, or ``None``."""
    last = None
    for m in _NUMBER.finditer(text):
        last = m.group()
    return last


def normalize_number(text: str) -> Decimal | None:
    """``"$1,234."`` → ``Decimal("1234")``; ``"72.0"`` and ``"72"`` compare equal. ``None`` if not a number."""
    s = text.strip().replace(",", "").replace("$", "").replace("\\", "").strip()
    s = s.rstrip(".").strip()
    if not s or len(s) > 10_000:
        return None
    try:
        value = Decimal(s)
    except (InvalidOperation, ValueError):
        return None
    if not value.is_finite():
        return None
    return value


def truncate(text: str | None, limit: int = 200) -> str | None:
    """``text`` cut to ``limit`` characters (with an ellipsis), for extra fields that travel in results."""
    if text is None or len(text) <= limit:
        return text
    return text[: limit - 1] + "…"
