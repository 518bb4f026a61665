"""Judge prompt templates: built-ins, literal templates, and rendering within a context budget.

A template is ``str.format`` text with these placeholders (``{{`` / ``}}`` for literal braces):
``{prompt}``, ``{response}``, ``{ground_truth}``, ``{data_source}``, ``{reference_response}``
(``extra_info["reference_response"]``) and ``{extra_info[KEY]}``. A placeholder whose value a
sample lacks (``ground_truth`` is ``None``, a missing ``extra_info`` key) makes that sample fail
rather than render ``None`` into the judge's prompt.

When the rendered prompt would exceed the character budget, the *response* is shortened (middle
or tail) and a visible marker ``[... truncated N characters ...]`` takes the cut text's place.
"""

from __future__ import annotations

import hashlib
import string
from dataclasses import dataclass, field
from typing import Any, Literal

from rewardkit.batch import Sample
from rewardkit.errors import ConfigError

FIELDS = ("prompt", "response", "ground_truth", "data_source", "reference_response", "extra_info")


class TemplateFieldMissing(ValueError):
    """A sample lacks a value the template needs."""


class PromptTooLong(ValueError):
    """The prompt is over budget even with the response cut to nothing."""


@dataclass(frozen=True)
class JudgeTemplate:
    """A judge prompt: ``user`` text (and optional ``system`` text) plus the parser and score range it implies."""

    name: str
    user: str
    system: str | None = None
    parser: str | dict[str, Any] = "score_line"
    score_range: tuple[float, float] | None = (0.0, 10.0)
    fields: frozenset[str] = field(default=frozenset(), compare=False)

    @property
    def identity(self) -> str:
        """A short stable id of the template text (part of the cache key)."""
        text = f"{self.system or ''}\x00{self.user}"
        return f"{self.name}:{hashlib.sha256(text.encode()).hexdigest()[:16]}"


def _fields_of(text: str, where: str) -> frozenset[str]:
    found = set()
    try:
        parsed = list(string.Formatter().parse(text))
    except ValueError as e:
        raise ConfigError(f"judge template {where}: {e} (write literal braces as {{{{ and }}}})") from None
    for _, name, _, _ in parsed:
        if name is None:
            continue
        root = name.split("[", 1)[0].split(".", 1)[0]
        if root not in FIELDS or (root != "extra_info" and root != name):
            raise ConfigError(
                f"judge template {where}: unknown placeholder {{{name}}}; known: "
                + ", ".join("{" + f + "}" for f in FIELDS[:-1])
                + ", {extra_info[KEY]}"
            )
        found.add(root)
    return frozenset(found)


def make_template(
    name: str,
    user: str,
    system: str | None = None,
    parser: str | dict[str, Any] = "score_line",
    score_range: tuple[float, float] | None = (0.0, 10.0),
) -> JudgeTemplate:
    """Build a template, checking its placeholders."""
    fields = _fields_of(user, name) | (_fields_of(system, name) if system else frozenset())
    if "response" not in fields:
        raise ConfigError(f"judge template {name}: it never shows the judge the {{response}}")
    return JudgeTemplate(name, user, system, parser, score_range, fields)


_SYSTEM = "You are a careful, impartial grader. Follow the output format exactly."

BUILTIN_TEMPLATES: dict[str, JudgeTemplate] = {
    "correctness": make_template(
        "correctness",
        "Decide whether the response reaches the same final answer as the reference answer. "
        "Ignore style and working; judge only the final answer.\n\n"
        "[Question]\n{prompt}\n\n[Reference answer]\n{ground_truth}\n\n[Response]\n{response}\n\n"
        "Is the response's final answer correct? Reply with a short reason, then a last line "
        '"Answer: yes" or "Answer: no".',
        system=_SYSTEM,
        parser="yes_no",
        score_range=(0.0, 1.0),
    ),
    "rubric": make_template(
        "rubric",
        "Rate the response to the user's request on a scale from 0 (useless or harmful) to 10 "
        "(excellent: correct, complete, clear and concise).\n\n"
        "[Request]\n{prompt}\n\n[Response]\n{response}\n\n"
        'Give a brief justification, then a last line "Score: N" with N an integer from 0 to 10.',
        system=_SYSTEM,
        parser="score_line",
        score_range=(0.0, 10.0),
    ),
    "pairwise": make_template(
        "pairwise",
        "Compare two responses to the same request.\n\n[Request]\n{prompt}\n\n"
        "[Response A]\n{response}\n\n[Response B]\n{reference_response}\n\n"
        "Is Response A better than Response B (more correct, helpful and clear)? Reply with a short "
        'reason, then a last line "Answer: yes" or "Answer: no".',
        system=_SYSTEM,
        parser="yes_no",
        score_range=(0.0, 1.0),
    ),
}


def get_template(spec: str) -> JudgeTemplate:
    """A built-in template by name, or a literal template (any text with a ``{response}`` placeholder)."""
    if spec in BUILTIN_TEMPLATES:
        return BUILTIN_TEMPLATES[spec]
    if "{" not in spec:
        raise ConfigError(
            f"unknown judge template {spec!r}: use one of {', '.join(sorted(BUILTIN_TEMPLATES))} "
            "or a literal template containing {response}"
        )
    return make_template("custom", spec, parser="score_line", score_range=None)


class _Missing(dict):
    """``extra_info`` view that raises a clear error on a missing key."""

    def __missing__(self, key):
        raise TemplateFieldMissing(f"the judge template needs extra_info[{key!r}], which this sample lacks")


def _values(template: JudgeTemplate, sample: Sample, response: str) -> dict[str, Any]:
    values: dict[str, Any] = {
        "prompt": sample.prompt_text,
        "response": response,
        "data_source": sample.data_source or "",
        "extra_info": _Missing(sample.extra_info),
    }
    if "ground_truth" in template.fields:
        if sample.ground_truth is None:
            raise TemplateFieldMissing(f"the judge template {template.name!r} needs a ground_truth")
        values["ground_truth"] = sample.ground_truth
    if "reference_response" in template.fields:
        ref = sample.extra_info.get("reference_response")
        if ref is None:
            raise TemplateFieldMissing(
                f"the judge template {template.name!r} needs extra_info['reference_response']"
            )
        values["reference_response"] = ref
    return values


@dataclass
class Rendered:
    """A rendered judge prompt: ``system`` and ``user`` text, and how many response characters were cut."""

    system: str | None
    user: str
    truncated: int = 0

    @property
    def chars(self) -> int:
        """Characters of system and user text together."""
        return len(self.user) + len(self.system or "")


def truncation_marker(n: int) -> str:
    """The visible marker that stands in for ``n`` cut characters."""
    return f"[... truncated {n} characters ...]"


def shorten(text: str, keep: int, mode: Literal["middle", "tail"]) -> str:
    """``text`` cut to about ``keep`` characters plus a marker (middle: keep head and tail; tail: keep head)."""
    keep = max(0, keep)
    cut = len(text) - keep
    if cut <= 0:
        return text
    marker = truncation_marker(cut)
    if mode == "tail":
        return f"{text[:keep]}\n{marker}"
    head = (keep + 1) // 2
    tail = keep - head
    return f"{text[:head]}\n{marker}\n{text[len(text) - tail :]}"


def render(
    template: JudgeTemplate,
    sample: Sample,
    *,
    max_chars: int | None = None,
    truncate: Literal["middle", "tail"] = "middle",
    system_override: str | None = None,
) -> Rendered:
    """Render ``template`` for ``sample`` within ``max_chars`` (system + user), cutting the response if needed.

    Raises :class:`TemplateFieldMissing` or :class:`PromptTooLong`.
    """
    system_t = system_override if system_override is not None else template.system

    def fill(response: str) -> Rendered:
        values = _values(template, sample, response)
        try:
            system = system_t.format_map(values) if system_t else None
            user = template.user.format_map(values)
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as e:
            raise TemplateFieldMissing(f"the judge template cannot be filled for this sample: {e}") from None
        return Rendered(system, user)

    full = fill(sample.response)
    if max_chars is None or full.chars <= max_chars:
        return full
    bare = fill("")
    uses = max(1, (full.chars - bare.chars) // max(1, len(sample.response)))
    room = (max_chars - bare.chars) // uses
    # Find the longest kept part whose shortened form (marker and newlines included) fits the room.
    keep = room - len(truncation_marker(len(sample.response))) - 2
    if keep < 0:
        raise PromptTooLong(
            f"the judge prompt is {bare.chars} characters without the response, over the budget of "
            f"{max_chars} (set max_prompt_chars / context_length higher or shorten the template)"
        )
    out = fill(shorten(sample.response, keep, truncate))
    out.truncated = len(sample.response) - keep
    return out
