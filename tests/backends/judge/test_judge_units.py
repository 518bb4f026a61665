"""Parsers, templates and truncation, Retry-After, circuit breaker, rate limiter, settings validation."""

from __future__ import annotations

import email.utils

import pytest

from rewardkit.backends.http import CircuitBreaker, RateLimiter, parse_retry_after, percentile
from rewardkit.backends.judge_parsers import ParseError, build_parser
from rewardkit.backends.judge_templates import (
    BUILTIN_TEMPLATES,
    PromptTooLong,
    TemplateFieldMissing,
    get_template,
    render,
    shorten,
    truncation_marker,
)
from rewardkit.batch import to_sample
from rewardkit.config import RewardModelConfig
from rewardkit.errors import ConfigError

# -- parsers ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, value",
    [
        ("Good answer.\nScore: 7", 7.0),
        ("Score: 8.5\nOn reflection...\nScore: 8.5", 8.5),
        ("**Score:** 9/10", 9.0),
        ("final score = 4", 4.0),
    ],
)
def test_score_line(text, value):
    assert build_parser("score_line")(text) == value


def test_score_line_without_a_score_line_is_an_error():
    with pytest.raises(ParseError):
        build_parser("score_line")("I'd give it 7 out of 10")


def test_last_int_skips_decimals_and_words():
    p = build_parser("last_int")
    assert p("between 3 and 8, I pick 6") == 6.0
    assert p("score 7 (confidence 0.9)") == 7.0
    with pytest.raises(ParseError):
        p("no digits here, only v2 and 0.5")


def test_json_prefers_fenced_block_and_supports_paths():
    p = build_parser("json")
    assert p('prelude {"score": 1}\n```json\n{"score": 6, "why": "ok"}\n```') == 6.0
    assert p('text {"a": 1} then {"score": "4"} end') == 4.0
    assert build_parser({"name": "json", "field": "verdict.value"})('{"verdict": {"value": 2}}') == 2.0
    with pytest.raises(ParseError):
        p('{"rating": 3}')
    with pytest.raises(ParseError):
        p('{"score": "high"}')


def test_yes_no_takes_the_last_verdict_word():
    p = build_parser("yes_no")
    assert p("Is it right? No wait, the answer is yes.\nAnswer: Yes") == 1.0
    assert p("Answer: no") == 0.0
    assert p("nobody knows; yesterday; Answer: no.") == 0.0
    with pytest.raises(ParseError):
        p("nobody knows")
    custom = build_parser({"name": "yes_no", "yes": ["A"], "no": ["B"], "yes_value": 1, "no_value": -1})
    assert custom("Verdict: B") == -1.0


def test_regex_parser_and_bad_configs():
    assert build_parser({"name": "regex", "pattern": r"Rating=(\d+)"})("Rating=3 ... Rating=5") == 5.0
    with pytest.raises(ConfigError, match="unknown judge parser"):
        build_parser("scoreline")
    with pytest.raises(ConfigError, match="bad options"):
        build_parser({"name": "json", "fields": "x"})
    with pytest.raises(ConfigError, match="no group"):
        build_parser({"name": "regex", "pattern": "abc"})


# -- templates and truncation ------------------------------------------------------------------------


def test_builtin_templates_render_the_sample_fields():
    s = to_sample(
        {
            "prompt": "What is 6*7?",
            "response": "It is 42",
            "ground_truth": "42",
            "extra_info": {"reference_response": "41"},
        },
        0,
    )
    r = render(BUILTIN_TEMPLATES["correctness"], s)
    assert "What is 6*7?" in r.user and "It is 42" in r.user and "[Reference answer]\n42" in r.user
    assert r.truncated == 0
    assert "[Response B]\n41" in render(BUILTIN_TEMPLATES["pairwise"], s).user
    assert "It is 42" in render(BUILTIN_TEMPLATES["rubric"], s).user


def test_missing_fields_raise_instead_of_rendering_none():
    s = to_sample({"prompt": "p", "response": "r"}, 0)
    with pytest.raises(TemplateFieldMissing, match="ground_truth"):
        render(BUILTIN_TEMPLATES["correctness"], s)
    with pytest.raises(TemplateFieldMissing, match="reference_response"):
        render(BUILTIN_TEMPLATES["pairwise"], s)
    with pytest.raises(TemplateFieldMissing, match="rubric"):
        render(get_template("Rubric: {extra_info[rubric]}\n{response}\nScore:"), s)


def test_literal_templates_are_checked():
    t = get_template("Q: {prompt} A: {response} {{not a field}}")
    assert render(t, to_sample({"prompt": "p", "response": "{x}"}, 0)).user == "Q: p A: {x} {not a field}"
    with pytest.raises(ConfigError, match="unknown placeholder"):
        get_template("{respons}")
    with pytest.raises(ConfigError, match="never shows"):
        get_template("{prompt}")
    with pytest.raises(ConfigError, match="unknown judge template"):
        get_template("rubrik")


@pytest.mark.parametrize("mode", ["middle", "tail"])
def test_truncation_fits_the_budget_and_is_visible(mode):
    response = "HEAD" + "x" * 5000 + "TAIL"
    s = to_sample({"prompt": "question", "response": response}, 0)
    t = BUILTIN_TEMPLATES["rubric"]
    r = render(t, s, max_chars=1000, truncate=mode)
    assert r.chars <= 1000
    assert r.truncated > 4000
    assert truncation_marker(r.truncated) in r.user
    assert "HEAD" in r.user
    assert ("TAIL" in r.user) == (mode == "middle")
    # nothing else was cut: the kept text plus the cut count is the response
    assert r.chars > 1000 - 60


def test_shorten_edge_cases():
    assert shorten("abc", 10, "middle") == "abc"
    out = shorten("abcdef", 0, "middle")
    assert out.strip() == truncation_marker(6)
    assert shorten("abcdef", 2, "tail").startswith("ab\n")


def test_prompt_too_long_even_without_response():
    s = to_sample({"prompt": "p" * 3000, "response": "r"}, 0)
    with pytest.raises(PromptTooLong, match="without the response"):
        render(BUILTIN_TEMPLATES["rubric"], s, max_chars=1000)


def test_unicode_and_empty_response_render():
    s = to_sample({"prompt": "数学?", "response": ""}, 0)
    assert "数学?" in render(BUILTIN_TEMPLATES["rubric"], s, max_chars=10_000).user
    s = to_sample({"prompt": "q", "response": "é" * 3000}, 0)
    r = render(BUILTIN_TEMPLATES["rubric"], s, max_chars=1200)
    assert r.chars <= 1200 and r.truncated > 0


# -- Retry-After, breaker, limiter -------------------------------------------------------------------


def test_parse_retry_after_seconds_and_http_date():
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after("0.25") == 0.25
    now = 1_700_000_000.0
    date = email.utils.formatdate(now + 12, usegmt=True)
    assert parse_retry_after(date, now=now) == pytest.approx(12, abs=1)
    assert parse_retry_after(email.utils.formatdate(now - 50, usegmt=True), now=now) == 0.0
    assert parse_retry_after("soon") is None
    assert parse_retry_after(None) is None


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_breaker_opens_only_without_success_in_the_window():
    clock = Clock()
    b = CircuitBreaker(threshold=3, cooldown_s=10, window_s=2, clock=clock)
    b.success()
    for _ in range(10):  # many failures, but a success 0 s ago: the server answers, it is not down
        b.failure("500")
    assert b.state == "closed"
    clock.t = 1.0
    b.success()
    for i in range(20):  # 30% faults interleaved with successes never open it
        b.failure("reset") if i % 3 == 0 else b.success()
    assert b.state == "closed"
    clock.t = 5.0  # no success for 4 s and three failures: down
    for _ in range(3):
        b.failure("refused")
    assert b.state == "open"
    assert "3 times in a row" in b.message() and "refused" in b.message()


def test_breaker_half_open_lets_one_probe_and_fails_only_after_a_fresh_probe():
    clock = Clock()
    b = CircuitBreaker(threshold=2, cooldown_s=1.0, window_s=0.5, clock=clock)
    b.failure("refused")
    b.failure("refused")
    assert b.state == "open"
    early = b.ticket()
    assert b.gate(early) == "wait"  # the first probe is not due yet; waiting, not failing
    clock.t = 0.11
    assert b.gate(early) == "allow"  # the probe
    assert b.gate(early) == "wait" and b.gate(b.ticket()) == "wait"  # exactly one probe at a time
    b.failure("still refused", probe=True)
    assert b.gate(early) == "wait"  # the outage is younger than cooldown_s: keep waiting
    clock.t = 1.5
    assert b.gate(early) == "allow"  # the next probe
    assert b.gate(early) == "open"  # old outage, and a probe sent after it arrived failed
    late = b.ticket()  # a fresh batch arrives: it is not failed before it has seen a probe of its own
    assert b.gate(late) == "wait"
    b.failure("refused", probe=True)
    assert b.gate(late) == "wait"  # that probe was sent before it arrived
    clock.t = 2.0
    assert b.gate(late) == "allow"  # its own probe
    b.success()  # the probe came back: closed, everyone goes
    assert b.state == "closed" and b.gate(late) == "allow" and b.gate(early) == "allow"


def test_rate_limiter_spaces_reservations():
    clock = Clock()
    lim = RateLimiter(per_minute=120, clock=clock)  # 2/s, burst 2
    waits = [lim.reserve(1) for _ in range(6)]
    assert waits[:2] == [0.0, 0.0]
    assert waits[2:] == pytest.approx([0.5, 1.0, 1.5, 2.0])
    clock.t = 10
    assert lim.reserve(1) == 0.0
    tokens = RateLimiter(per_minute=6000, clock=clock)  # 100/s
    assert tokens.reserve(300) == pytest.approx(2.0)  # a big request waits, is never starved
    tokens.refund(200)  # it really cost 100
    assert tokens.reserve(100) == pytest.approx(1.0)


def test_percentile():
    assert percentile([3, 1, 2], 50) == 2
    assert percentile(list(range(1, 101)), 99) == 99
    assert percentile([5.0], 99) == 5.0


# -- settings ----------------------------------------------------------------------------------------


def _judge(**rollout):
    from rewardkit.backends.generative import GenerativeRM

    return GenerativeRM(RewardModelConfig(enable=True, rollout=rollout))


def test_settings_errors_are_clear(monkeypatch):
    with pytest.raises(ConfigError, match="Did you mean 'max_retries'"):
        _judge(base_url="http://127.0.0.1:1", model="m", max_retry=3)
    with pytest.raises(ConfigError, match="base_url"):
        _judge(base_url="127.0.0.1:1", model="m")
    with pytest.raises(ConfigError, match="rollout.model"):
        _judge(base_url="http://127.0.0.1:1")
    with pytest.raises(ConfigError, match="context_length"):
        _judge(base_url="http://127.0.0.1:1", model="m", context_length=100, max_tokens=200)
    with pytest.raises(ConfigError, match="max_concurrency"):
        _judge(base_url="http://127.0.0.1:1", model="m", max_concurrency=0)
    monkeypatch.delenv("RK_TEST_KEY", raising=False)
    with pytest.raises(ConfigError, match="RK_TEST_KEY"):
        _judge(base_url="http://127.0.0.1:1", model="m", api_key_env="RK_TEST_KEY")
    with pytest.raises(ConfigError, match="unknown judge parser"):
        _judge(base_url="http://127.0.0.1:1", model="m", parser="nope")


def test_defaults_come_from_the_template():
    rm = _judge(base_url="http://127.0.0.1:1", model="m", template="correctness")
    assert rm.score_range == (0.0, 1.0)
    assert rm.parse("Answer: yes") == 1.0
    rm2 = RewardModelConfig(
        enable=True, model_path="judge-from-path", rollout={"base_url": "http://127.0.0.1:1"}
    )
    from rewardkit.backends.generative import GenerativeRM

    assert GenerativeRM(rm2).model == "judge-from-path"


async def test_adaptive_limit_halves_on_a_congested_wave_and_grows_back():
    import time

    from rewardkit.backends.http import AdaptiveLimit

    lim = AdaptiveLimit(16)
    async with lim as sent_a:
        pass
    for i in range(16):  # a wave of 16 answers, half of them 429: congestion
        lim.overloaded(sent_a) if i % 2 else lim.succeeded(sent_a)
    assert lim.limit == 8
    for _ in range(16):  # answers to requests sent before the cut say nothing about the new limit
        lim.overloaded(sent_a)
    assert lim.limit == 8
    now = time.monotonic() + 1
    for i in range(8):
        lim.overloaded(now) if i % 2 == 0 else lim.succeeded(now)
    assert lim.limit == 4 and lim.lowest == 4  # the floor: a quarter of 16
    for _ in range(4):
        lim.succeeded()
    assert 5 < lim.limit < 8  # one round of successes regains part of the way to the pre-cut 8
    burst = AdaptiveLimit(16)
    for i in range(16):  # two 429s among fourteen successes: a burst, not congestion
        burst.overloaded(now) if i < 2 else burst.succeeded(now)
    assert burst.limit == 16
    fixed = AdaptiveLimit(16, adaptive=False)
    for _ in range(16):
        fixed.overloaded(now)
    assert fixed.limit == 16


async def test_adaptive_limit_bounds_concurrency():
    import asyncio

    from rewardkit.backends.http import AdaptiveLimit

    lim = AdaptiveLimit(8)
    lim.limit = 3
    peak = 0

    async def work():
        nonlocal peak
        async with lim:
            peak = max(peak, lim.in_use)
            await asyncio.sleep(0.005)

    await asyncio.gather(*(work() for _ in range(30)))
    assert peak == 3 and lim.in_use == 0


def test_cache_is_safe_across_threads_and_instances(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    from rewardkit.backends.judge_cache import CachedJudgement, JudgeCache, cache_key

    path = tmp_path / "c.sqlite"
    shared = JudgeCache(path)
    other = JudgeCache(path)

    def work(t):
        cache = shared if t % 2 else other
        for i in range(25):
            key = cache_key({"t": t, "i": i})
            cache.put_many([(key, "m", CachedJudgement(f"Score: {i}", 3, 4))])
            assert cache.get_many([key])[key].text == f"Score: {i}"
        return t

    with ThreadPoolExecutor(4) as pool:
        assert sorted(pool.map(work, range(8))) == list(range(8))
    assert len(shared) == 200 and len(other) == 200
    assert cache_key({"a": 1, "b": 2}) == cache_key({"b": 2, "a": 1})
    shared.close()
    shared.close()
    other.close()


def test_api_key_from_the_environment(monkeypatch):
    monkeypatch.setenv("RK_JUDGE_KEY", "sk-env")
    rm = _judge(base_url="http://127.0.0.1:1", model="m", api_key_env="RK_JUDGE_KEY")
    assert rm.settings.resolved_api_key() == "sk-env"
    assert _judge(base_url="http://127.0.0.1:1", model="m").settings.resolved_api_key() is None


async def test_adaptive_limit_survives_cancelled_waiters():
    import asyncio

    from rewardkit.backends.http import AdaptiveLimit

    lim = AdaptiveLimit(1)
    order = []

    async def work(i):
        async with lim:
            order.append(i)
            await asyncio.sleep(0.01)

    tasks = [asyncio.ensure_future(work(i)) for i in range(6)]
    await asyncio.sleep(0.001)
    for t in tasks[1:4]:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    assert order == [0, 4, 5]  # first come, first served; cancelled waiters skipped
    assert lim.in_use == 0
    assert all(f.done() for f in lim._waiters)
    async with lim:  # the slot was not leaked
        assert lim.in_use == 1
