"""The ``rewardkit serve`` application: its state, request handlers, middleware and :func:`create_app`.

See :mod:`rewardkit.server` for the endpoints and how the server runs.
"""

from __future__ import annotations

import asyncio
import bisect
import hmac
import json
import logging
import math
import time
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from rewardkit.config import RewardConfig, load_config
from rewardkit.engine import RewardEngine
from rewardkit.errors import RewardKitError, SampleError
from rewardkit.integrations.openrlhf import openrlhf_reply
from rewardkit.result import SampleResult
from rewardkit.server_limits import loads_bounded, media_type_ok

logger = logging.getLogger("rewardkit.serve")

TOKEN_ENV = "REWARDKIT_SERVE_TOKEN"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
DEFAULT_MAX_BATCH = 4096
DEFAULT_MAX_BODY_MB = 32.0
DEFAULT_READ_TIMEOUT_S = 30.0
DEFAULT_MAX_CONNECTIONS = 1024
#: Upper bounds (seconds) of the request latency histogram.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
_ENDPOINTS = ("/v1/score", "/get_reward", "/health", "/metrics")


@dataclass
class ServerState:
    """Counters and settings shared by the handlers of one app."""

    engine: RewardEngine
    token: str | None
    max_batch: int
    strip_tokens: tuple[str, ...]
    owns_engine: bool
    max_body_bytes: int
    read_timeout_s: float = DEFAULT_READ_TIMEOUT_S
    draining: bool = False
    #: Set when the shutdown timeout has passed: in-flight requests answer 503 at once.
    abort: asyncio.Event = field(default_factory=asyncio.Event)
    in_flight: int = 0
    idle: asyncio.Event = field(default_factory=asyncio.Event)
    requests: Counter = field(default_factory=Counter)  # (endpoint, code) -> n
    samples: Counter = field(default_factory=Counter)  # status -> n
    failures: Counter = field(default_factory=Counter)  # reason -> n
    latency_buckets: dict[str, list[int]] = field(
        default_factory=lambda: defaultdict(lambda: [0] * (len(LATENCY_BUCKETS) + 1))
    )
    latency_sum: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    latency_count: Counter[str] = field(default_factory=Counter)
    #: Engines requests are spread over (``engine`` first), and when each lane's in-flight requests began.
    lanes: list[RewardEngine] = field(default_factory=list)
    lane_since: list[list[float]] = field(default_factory=list)

    def pick_lane(self) -> tuple[int, float]:
        """A lane for one request: an idle one, else the one whose oldest request is youngest (a lane
        stuck on an old request is likely hung). Give it back with :meth:`drop_lane`."""
        if not self.lanes:
            self.lanes, self.lane_since = [self.engine], [[]]

        def key(i: int) -> tuple[int, float]:
            since = self.lane_since[i]
            return (1, -min(since)) if since else (0, 0.0)

        i = min(range(len(self.lanes)), key=key)
        now = time.monotonic()
        self.lane_since[i].append(now)
        return i, now

    def drop_lane(self, taken: tuple[int, float]) -> None:
        """Give back a lane taken with :meth:`pick_lane`."""
        self.lane_since[taken[0]].remove(taken[1])

    def observe(self, endpoint: str, code: int, seconds: float) -> None:
        """Count one finished request."""
        self.requests[(endpoint, code)] += 1
        self.latency_buckets[endpoint][bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1
        self.latency_sum[endpoint] += seconds
        self.latency_count[endpoint] += 1


STATE = web.AppKey("rewardkit_state", ServerState)


# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------


class ApiError(Exception):
    """An error answered as JSON ``{"error": message, **fields}`` with an HTTP status."""

    def __init__(self, status: int, message: str, **fields: Any):
        super().__init__(message)
        self.status = status
        self.payload = {"error": message, **fields}


def _clean(value: Any) -> Any:
    """JSON-safe: ``nan``/``inf`` → ``None``, unknown objects → ``str``."""
    if isinstance(value, float):
        return None if math.isnan(value) or math.isinf(value) else value
    if isinstance(value, Mapping):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    if value is None or isinstance(value, str | int | bool):
        return value
    if hasattr(value, "tolist"):
        return _clean(value.tolist())
    return str(value)


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(
        text=json.dumps(_clean(data), allow_nan=False), status=status, content_type="application/json"
    )


async def _read_json(request: web.Request) -> Any:
    """The request's JSON body; raises :class:`ApiError` (400 / 413) when it is not usable."""
    limit = request.app[STATE].max_body_bytes
    if request.content_length is not None and request.content_length > limit:
        raise ApiError(
            413,
            f"request body of {request.content_length} bytes is over the {limit} byte limit (--max-body-mb)",
        )
    if not media_type_ok(request.headers.get("Content-Type")):
        raise ApiError(415, f"Content-Type {request.headers['Content-Type']!r}: send application/json")
    timeout = request.app[STATE].read_timeout_s
    try:
        body = await asyncio.wait_for(request.read(), timeout)
    except web.HTTPRequestEntityTooLarge:
        raise ApiError(413, f"request body is over the {limit} byte limit (--max-body-mb)") from None
    except asyncio.TimeoutError:
        raise ApiError(408, f"request body not received within {timeout}s (--read-timeout)") from None
    if not body:
        raise ApiError(400, "empty request body: send a JSON object")
    try:
        return loads_bounded(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ApiError(400, f"request body is not valid JSON: {e}") from None
    except ValueError as e:  # nested too deeply
        raise ApiError(400, f"request body is not usable: {e}") from None


def _check_batch(state: ServerState, n: int, what: str) -> None:
    if n > state.max_batch:
        raise ApiError(
            413, f"batch of {n} {what} is over the server's limit of {state.max_batch} (--max-batch)"
        )


async def _score(state: ServerState, records: list[Any]):
    lane = state.pick_lane()
    try:
        result = await state.lanes[lane[0]].acompute(records)
    except SampleError as e:
        raise ApiError(422, str(e), index=e.index, field=e.field) from None
    except RewardKitError as e:
        raise ApiError(422, str(e)) from None
    finally:
        state.drop_lane(lane)
    for s in result.samples:
        state.samples[s.status] += 1
        if s.status == "failed":
            state.failures[s.reason or "error"] += 1
    return result


def _log_failed_samples(endpoint: str, samples: list[SampleResult]) -> None:
    failed = [(i, r) for i, r in enumerate(samples) if r.status == "failed"]
    if failed:
        reasons = Counter(r.reason for _, r in failed)
        i, first = failed[0]
        logger.warning(
            "rewardkit serve: %s: %d of %d sample(s) failed (%s); first, sample %d: %s",
            endpoint,
            len(failed),
            len(samples),
            ", ".join(f"{k}: {n}" for k, n in sorted(reasons.items())),
            i,
            (first.error or "")[:300],
        )


# ---------------------------------------------------------------------------------------------
# Handlers
# ---------------------------------------------------------------------------------------------


async def handle_score(request: web.Request) -> web.Response:
    """``POST /v1/score``: rewardkit samples in, rewardkit results out."""
    state = request.app[STATE]
    body = await _read_json(request)
    if not isinstance(body, dict) or "samples" not in body:
        raise ApiError(400, 'expected a JSON object {"samples": [...]}')
    samples = body["samples"]
    if not isinstance(samples, list):
        raise ApiError(400, f"'samples' must be a list, got {type(samples).__name__}", field="samples")
    _check_batch(state, len(samples), "samples")
    result = await _score(state, samples)
    _log_failed_samples("/v1/score", result.samples)
    return _json(
        {
            "scores": result.scores,
            "status": result.status,
            "reasons": result.reasons,
            "errors": result.errors,
            "extra": result.extra,
            "components": result.components,
            "metrics": result.metrics,
        }
    )


def split_query(query: str, prompt: str | None, strip_tokens: tuple[str, ...] = ()) -> str | None:
    """The response inside OpenRLHF's ``query`` (prompt + response), or ``None`` if ``prompt`` is not in it.

    The response is what follows the first occurrence of the prompt; without a prompt it is the
    whole query. Trailing ``strip_tokens`` (pad / EOS token text) are removed.
    """
    if prompt:
        at = query.find(prompt)
        if at < 0:
            return None
        response = query[at + len(prompt) :]
    else:
        response = query
    changed = True
    while changed and strip_tokens:
        changed = False
        for tok in strip_tokens:
            if tok and response.endswith(tok):
                response = response[: -len(tok)]
                changed = True
    return response


def _list_field(body: dict, names: tuple[str, ...], n: int) -> list[Any] | None:
    for name in names:
        if name in body and body[name] is not None:
            value = body[name]
            if not isinstance(value, list):
                raise ApiError(400, f"'{name}' must be a list, got {type(value).__name__}", field=name)
            if len(value) != n:
                raise ApiError(400, f"'{name}' has {len(value)} entries but 'query' has {n}", field=name)
            return value
    return None


async def handle_get_reward(request: web.Request) -> web.Response:
    """``POST /get_reward``: OpenRLHF's remote reward model protocol."""
    state = request.app[STATE]
    body = await _read_json(request)
    if not isinstance(body, dict) or "query" not in body:
        raise ApiError(400, 'expected a JSON object {"query": [...], "prompts": [...], "labels": [...]}')
    queries = body["query"]
    if not isinstance(queries, list):
        raise ApiError(422, f"'query' must be a list of strings, got {type(queries).__name__}", field="query")
    n = len(queries)
    _check_batch(state, n, "queries")
    prompts = _list_field(body, ("prompts",), n)
    labels = _list_field(body, ("labels",), n)
    sources = _list_field(body, ("data_source", "data_sources", "datasources"), n)
    records = []
    unroutable: dict[int, SampleResult] = {}
    for i, q in enumerate(queries):
        if not isinstance(q, str):
            raise ApiError(422, f"sample {i}, field 'query': must be a string", index=i, field="query")
        prompt = prompts[i] if prompts is not None else None
        if prompt is not None and not isinstance(prompt, str):
            raise ApiError(422, f"sample {i}, field 'prompts': must be a string", index=i, field="prompts")
        response = split_query(q, prompt, state.strip_tokens)
        if response is None:  # this sample cannot be scored; the others still are
            unroutable[i] = SampleResult.failed(
                "unroutable",
                f"sample {i}, field 'query': does not contain its prompt (prompts[{i}]), so the response "
                "cannot be told apart from it",
            )
            continue
        rec: dict[str, Any] = {"prompt": prompt or "", "response": response}
        if labels is not None:
            rec["ground_truth"] = labels[i]
        if sources is not None:
            rec["data_source"] = sources[i]
        records.append(rec)
    result = await _score(state, records) if records else None
    scored = iter(result.samples if result is not None else [])
    samples = [unroutable[i] if i in unroutable else next(scored) for i in range(n)]
    state.samples["failed"] += len(unroutable)
    state.failures["unroutable"] += len(unroutable)
    _log_failed_samples("/get_reward", samples)
    return _json(openrlhf_reply(samples, state.engine.config))


async def handle_health(request: web.Request) -> web.Response:
    """``GET /health``: liveness, in-flight requests, whether the server is shutting down."""
    state = request.app[STATE]
    from rewardkit import __version__

    return _json(
        {
            "status": "draining" if state.draining else "ok",
            "in_flight": state.in_flight,
            "version": __version__,
        }
    )


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render_metrics(state: ServerState) -> str:
    """The server's counters in the Prometheus text exposition format (version 0.0.4)."""
    lines = [
        "# HELP rewardkit_requests_total HTTP requests handled, by endpoint and status code.",
        "# TYPE rewardkit_requests_total counter",
    ]
    for (endpoint, code), n in sorted(state.requests.items()):
        lines.append(f'rewardkit_requests_total{{endpoint="{_escape(endpoint)}",code="{code}"}} {n}')
    lines += [
        "# HELP rewardkit_samples_total Samples scored, by status.",
        "# TYPE rewardkit_samples_total counter",
    ]
    for status in ("ok", "abstained", "failed"):
        lines.append(f'rewardkit_samples_total{{status="{status}"}} {state.samples.get(status, 0)}')
    lines += [
        "# HELP rewardkit_sample_failures_total Failed samples, by failure reason.",
        "# TYPE rewardkit_sample_failures_total counter",
    ]
    for reason, n in sorted(state.failures.items()):
        lines.append(f'rewardkit_sample_failures_total{{reason="{_escape(reason)}"}} {n}')
    lines += [
        "# HELP rewardkit_in_flight_requests Requests being handled now.",
        "# TYPE rewardkit_in_flight_requests gauge",
        f"rewardkit_in_flight_requests {state.in_flight}",
        "# HELP rewardkit_request_duration_seconds Request latency, by endpoint.",
        "# TYPE rewardkit_request_duration_seconds histogram",
    ]
    for endpoint in sorted(state.latency_buckets):
        counts = state.latency_buckets[endpoint]
        label = f'endpoint="{_escape(endpoint)}"'
        total = 0
        for bound, n in zip((*LATENCY_BUCKETS, math.inf), counts, strict=True):
            total += n
            le = "+Inf" if math.isinf(bound) else repr(bound)
            lines.append(f'rewardkit_request_duration_seconds_bucket{{{label},le="{le}"}} {total}')
        lines.append(f"rewardkit_request_duration_seconds_sum{{{label}}} {state.latency_sum[endpoint]!r}")
        lines.append(f"rewardkit_request_duration_seconds_count{{{label}}} {state.latency_count[endpoint]}")
    return "\n".join(lines) + "\n"


async def handle_metrics(request: web.Request) -> web.Response:
    """``GET /metrics``: Prometheus text format."""
    return web.Response(
        body=render_metrics(request.app[STATE]).encode(),
        headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"},
    )


# ---------------------------------------------------------------------------------------------
# Middleware: auth, draining, error bodies, metrics
# ---------------------------------------------------------------------------------------------


def _log_http_error(request: web.Request, code: int, reason: str) -> None:
    logger.warning("rewardkit serve: %s %s -> %d: %s", request.method, request.path, code, reason[:500])


@web.middleware
async def _middleware(request: web.Request, handler) -> web.StreamResponse:
    state = request.app[STATE]
    endpoint = request.path if request.path in _ENDPOINTS else "other"
    start = time.perf_counter()
    counted = request.path not in ("/health", "/metrics")  # /health must not count itself
    if counted:
        state.in_flight += 1
        state.idle.clear()
    code = 500
    try:
        if state.draining and request.path != "/health":
            raise ApiError(503, "the server is shutting down", retry=True)
        if state.token is not None and request.path != "/health":
            given = request.headers.get("Authorization", "")
            scheme, _, credentials = given.partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(
                credentials.strip().encode(), state.token.encode()
            ):
                raise ApiError(401, "missing or wrong bearer token (send 'Authorization: Bearer <token>')")
        response = await _until_aborted(state, handler(request))
        code = response.status
        return response
    except ApiError as e:
        code = e.status
        _log_http_error(request, code, str(e))
        return _json(e.payload, status=e.status)
    except web.HTTPException as e:  # aiohttp's own 404 / 405 / 413: answered as JSON too
        code = e.status
        _log_http_error(request, code, e.reason or "error")
        return _json({"error": e.reason or "error", "path": request.path}, status=e.status)
    except Exception as e:  # noqa: BLE001 - a bug must answer 500 JSON, and the server stays up
        code = 500
        logger.exception("rewardkit serve: %s %s -> 500", request.method, request.path)
        return _json({"error": f"internal error: {type(e).__name__}: {e}"}, status=500)
    finally:
        if counted:
            state.in_flight -= 1
            if state.in_flight == 0:
                state.idle.set()
        state.observe(endpoint, code, time.perf_counter() - start)


async def _until_aborted(state: ServerState, work) -> web.StreamResponse:
    """Await the handler; once the shutdown timeout passes, cancel it and answer a JSON 503."""
    task = asyncio.ensure_future(work)
    stop = asyncio.ensure_future(state.abort.wait())
    try:
        await asyncio.wait((task, stop), return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        raise
    finally:
        stop.cancel()
    if not task.done():
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        raise ApiError(503, "the server shut down before this request finished (--shutdown-timeout)")
    return task.result()


# ---------------------------------------------------------------------------------------------
# The app
# ---------------------------------------------------------------------------------------------


def create_app(
    engine_or_config: RewardEngine | RewardConfig | dict[str, Any] | str | None = None,
    token: str | None = None,
    *,
    max_batch: int = DEFAULT_MAX_BATCH,
    max_body_mb: float = DEFAULT_MAX_BODY_MB,
    strip_tokens: tuple[str, ...] | list[str] = (),
    default_scorer: str | None = None,
    read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
    lanes: int = 1,
) -> web.Application:
    """The aiohttp application serving a reward engine.

    :param engine_or_config: a :class:`RewardEngine` (left open when the app stops) or a config
        to build one from (closed when the app stops). The manager is built here, so a broken
        config or custom reward function fails now, not on the first request.
    :param token: bearer token required on every endpoint but ``/health``; ``None``: no auth.
    :param max_batch: most samples (or queries) in one request; more answers 413.
    :param max_body_mb: largest request body in MiB; more answers 413.
    :param strip_tokens: token texts (pad, EOS) stripped from the end of OpenRLHF responses.
    :param default_scorer: overrides the config's ``default_scorer``, the scorer of samples with
        no (or an unclaimed) data source, e.g. every OpenRLHF request (``--default-scorer gsm8k``).
    :param read_timeout_s: longest wait for a request body; slower answers 408 (:func:`serve`
        applies it to headers and kept-alive connections too).
    :param lanes: engines (each with its own workers) that concurrent requests are spread over, to
        isolate them (requests share one engine's workers fairly anyway). Only for an app that
        builds its engine from a config.
    """
    check_token(token)
    if max_batch < 1:
        raise ValueError("max_batch must be at least 1")
    if lanes < 1:
        raise ValueError("lanes must be at least 1")
    if max_body_mb <= 0:
        raise ValueError("max_body_mb must be positive")
    owns = not isinstance(engine_or_config, RewardEngine)
    if isinstance(engine_or_config, RewardEngine):
        if default_scorer is not None:
            raise ValueError("default_scorer needs a config, not a built RewardEngine")
        engine = engine_or_config
    else:
        config = load_config(engine_or_config)
        if default_scorer is not None:
            config = config.model_copy(update={"default_scorer": default_scorer})
        engine = RewardEngine(config)
    try:
        engine.manager  # noqa: B018 - build it now so errors surface at start-up
    except BaseException:
        if owns:
            engine.close()
        raise
    max_bytes = int(max_body_mb * 1024 * 1024)
    app = web.Application(middlewares=[_middleware], client_max_size=max_bytes)
    state = ServerState(
        engine, token or None, max_batch, tuple(strip_tokens), owns, max_bytes, read_timeout_s
    )
    state.idle.set()
    state.lanes, state.lane_since = [engine], [[]]
    try:
        for _ in range(lanes - 1 if owns else 0):
            state.lanes.append(RewardEngine(engine.config, registries=engine.registries))
            state.lane_since.append([])
            state.lanes[-1].manager  # noqa: B018
    except BaseException:
        for lane in state.lanes:
            lane.close()
        raise
    app[STATE] = state
    app.router.add_post("/v1/score", handle_score)
    app.router.add_post("/get_reward", handle_get_reward)
    app.router.add_get("/health", handle_health)
    app.router.add_get("/metrics", handle_metrics)

    async def close_engine(app: web.Application) -> None:
        if app[STATE].owns_engine:
            for lane in app[STATE].lanes:
                await lane.aclose()

    app.on_cleanup.append(close_engine)
    return app


def check_token(token: str | None) -> None:
    """Refuse a token that can never match: blank, or with spaces around it (:class:`ValueError`)."""
    if token is not None and token != "" and (not token.strip() or token != token.strip()):
        raise ValueError("the bearer token is blank or has whitespace around it, so no client could send it")
