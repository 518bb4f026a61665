"""``rewardkit serve``: a reward engine behind HTTP.

Endpoints:

* ``POST /v1/score``: ``{"samples": [...]}`` (rewardkit samples) → ``{"scores", "status",
  "reasons", "errors", "extra", "components", "metrics"}`` (``null`` where a score is ``nan``).
* ``POST /get_reward``: OpenRLHF's remote reward model protocol. ``{"query": [...], "prompts":
  [...], "labels": [...]}`` → ``{"rewards": [...], "scores": [...], "extra_logs": {...}, "status",
  "reasons"}``. Each ``query`` is prompt + response; the response is what follows the prompt.
  ``labels`` are the ground truths. Where a sample failed or abstained, its reward is the config's
  ``failure_score`` / ``abstain_score`` (default ``0.0``, as OpenRLHF needs a number) and
  ``status`` / ``extra_logs.failed`` say so.
* ``GET /health`` (never needs the token) and ``GET /metrics`` (Prometheus text format).

Errors are JSON ``{"error": ..., ...}``: 400 (not JSON, wrong shape), 401 (token), 413 (body or
batch too large), 422 (a bad sample: ``index`` and ``field`` name it), 503 (shutting down).
SIGTERM / SIGINT stop accepting connections, let in-flight batches finish, then exit.

Run it with ``rewardkit serve --config reward.yaml`` or ``python -m rewardkit.server``; embed or
test it with :func:`create_app`.
"""

from __future__ import annotations

import asyncio
import bisect
import hmac
import ipaddress
import json
import math
import os
import signal
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import click
from aiohttp import web

from rewardkit.config import RewardConfig
from rewardkit.engine import RewardEngine
from rewardkit.errors import RewardKitError, SampleError
from rewardkit.server_limits import ConnectionGuard, GuardedProtocol, loads_bounded, media_type_ok

#: Environment variable read for the bearer token when ``--token`` is not given.
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
    latency_sum: Counter = field(default_factory=Counter)
    latency_count: Counter = field(default_factory=Counter)
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


def _fallback_scores(result, config: RewardConfig) -> list[float]:
    out = []
    for score, r in zip(result.scores, result.samples, strict=True):
        if r.status == "ok":
            out.append(score)
        elif r.status == "failed":
            out.append(config.failure_score if config.failure_score is not None else 0.0)
        else:
            out.append(config.abstain_score if config.abstain_score is not None else 0.0)
    return out


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
    for i, q in enumerate(queries):
        if not isinstance(q, str):
            raise ApiError(422, f"sample {i}, field 'query': must be a string", index=i, field="query")
        prompt = prompts[i] if prompts is not None else None
        if prompt is not None and not isinstance(prompt, str):
            raise ApiError(422, f"sample {i}, field 'prompts': must be a string", index=i, field="prompts")
        response = split_query(q, prompt, state.strip_tokens)
        if response is None:
            raise ApiError(
                422,
                f"sample {i}, field 'query': does not contain its prompt (prompts[{i}]), so the response "
                "cannot be told apart from it",
                index=i,
                field="query",
            )
        rec: dict[str, Any] = {"prompt": prompt or "", "response": response}
        if labels is not None:
            rec["ground_truth"] = labels[i]
        if sources is not None:
            rec["data_source"] = sources[i]
        records.append(rec)
    result = await _score(state, records)
    rewards = _fallback_scores(result, state.engine.config)
    return _json(
        {
            "rewards": rewards,
            "scores": rewards,
            "extra_logs": {
                "failed": [float(s == "failed") for s in result.status],
                "abstained": [float(s == "abstained") for s in result.status],
            },
            "status": result.status,
            "reasons": result.reasons,
        }
    )


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
        return _json(e.payload, status=e.status)
    except web.HTTPException as e:  # aiohttp's own 404 / 405 / 413: answered as JSON too
        code = e.status
        return _json({"error": e.reason or "error", "path": request.path}, status=e.status)
    except Exception as e:  # noqa: BLE001 - a bug must answer 500 JSON, and the server stays up
        code = 500
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
    :param read_timeout_s: longest wait for a request body; slower answers 408.
    :param lanes: engines (each with its own workers) that concurrent requests are spread over, so
        that one request whose scorers hang holds up only its lane (an executor that runs one job at
        a time, like ``process``, otherwise makes every other request wait). Only for an app that
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
    engine = RewardEngine(engine_or_config) if owns else engine_or_config
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


def is_loopback(host: str) -> bool:
    """Whether ``host`` only accepts connections from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


async def serve(
    app: web.Application,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    *,
    shutdown_timeout: float = 60.0,
    ready: Any = None,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    header_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
) -> None:
    """Run ``app`` until SIGTERM / SIGINT, then drain and exit.

    Draining: scoring requests arriving now answer 503 and ``/health`` answers ``draining``; the
    in-flight ones get ``shutdown_timeout`` seconds to finish, then answer a JSON 503; then the
    server closes. ``ready`` (optional) is called with the bound port once the server listens.
    Binding an address other machines can reach needs the app to have a token (:class:`ValueError`
    otherwise). Connections over ``max_connections`` get a 503; one whose request headers take
    longer than ``header_timeout_s`` is closed.
    """
    if not is_loopback(host) and app[STATE].token is None:
        raise ValueError(
            f"refusing to serve on {host!r}, which other machines can reach, without a token "
            "(create_app(..., token=...)), or bind 127.0.0.1"
        )
    runner = web.AppRunner(
        app, handle_signals=False, access_log=None, shutdown_timeout=1.0, keepalive_timeout=header_timeout_s
    )
    await runner.setup()
    loop = asyncio.get_running_loop()
    guard = ConnectionGuard(max_connections, header_timeout_s)
    server = await loop.create_server(lambda: GuardedProtocol(runner.server(), guard), host, port)
    bound = server.sockets[0].getsockname()[1] if server.sockets else port
    if ready is not None:
        ready(bound)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
        state = app[STATE]
        state.draining = True
        print(
            f"rewardkit serve: draining {state.in_flight} in-flight request(s)", file=sys.stderr, flush=True
        )
        try:
            await asyncio.wait_for(state.idle.wait(), shutdown_timeout)
        except asyncio.TimeoutError:
            print(
                f"rewardkit serve: {state.in_flight} request(s) still running after {shutdown_timeout}s; "
                "answering them 503 and stopping",
                file=sys.stderr,
                flush=True,
            )
            state.abort.set()
            try:
                await asyncio.wait_for(state.idle.wait(), 5.0)
            except asyncio.TimeoutError:
                pass
        await asyncio.sleep(0.05)  # let the last responses leave
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        server.close()
        await runner.cleanup()
        await server.wait_closed()
    print("rewardkit serve: stopped", file=sys.stderr, flush=True)


@click.command("serve")
@click.option(
    "--config", "-c", "config_path", type=click.Path(exists=True, dir_okay=False), help="reward config YAML"
)
@click.option("--host", default=DEFAULT_HOST, show_default=True, help="address to bind")
@click.option(
    "--port", default=DEFAULT_PORT, show_default=True, type=click.IntRange(0, 65535), help="0: any free port"
)
@click.option("--token", default=None, help=f"bearer token clients must send (default: ${TOKEN_ENV})")
@click.option(
    "--executor",
    type=click.Choice(["auto", "inline", "process", "ray"]),
    default=None,
    help="Override reward.executor.",
)
@click.option("--num-workers", type=click.IntRange(min=1), default=None, help="Override reward.num_workers.")
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Override reward.timeout_s (per-sample deadline, seconds).",
)
@click.option(
    "--max-batch",
    default=DEFAULT_MAX_BATCH,
    show_default=True,
    type=click.IntRange(min=1),
    help="most samples (or queries) in one request; more answers 413",
)
@click.option(
    "--max-body-mb",
    default=DEFAULT_MAX_BODY_MB,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="largest request body in MiB; more answers 413",
)
@click.option(
    "--read-timeout",
    "read_timeout_s",
    default=DEFAULT_READ_TIMEOUT_S,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="seconds a client may take to send its request headers, and again its body (408); "
    "also how long an idle keep-alive connection stays open",
)
@click.option(
    "--max-connections",
    default=DEFAULT_MAX_CONNECTIONS,
    show_default=True,
    type=click.IntRange(min=1),
    help="open connections at most; more are answered 503 and closed",
)
@click.option(
    "--lanes",
    default=1,
    show_default=True,
    type=click.IntRange(min=1),
    help="engines (each with its own workers) concurrent requests are spread over: a request whose "
    "scorers hang then holds up only its lane",
)
@click.option(
    "--strip-token", "strip_tokens", multiple=True, help="token text stripped from OpenRLHF responses"
)
@click.option(
    "--shutdown-timeout",
    default=60.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="seconds in-flight requests get to finish after SIGTERM/SIGINT; then they answer 503",
)
def serve_command(
    config_path,
    host,
    port,
    token,
    executor,
    num_workers,
    timeout_s,
    max_batch,
    max_body_mb,
    read_timeout_s,
    max_connections,
    lanes,
    strip_tokens,
    shutdown_timeout,
):
    """Serve rewards over HTTP: /v1/score, OpenRLHF's /get_reward, /health, /metrics."""
    from rewardkit.config import load_config

    token = token if token is not None else (os.environ.get(TOKEN_ENV) or None)
    try:
        check_token(token)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--token") from None
    token = token or None
    if not is_loopback(host) and token is None:
        raise click.UsageError(
            f"refusing to serve on {host}, which other machines can reach, without a token: pass --token or set "
            f"{TOKEN_ENV} (or bind 127.0.0.1)"
        )
    try:
        config = load_config(config_path)
        overrides = {
            k: v
            for k, v in (("executor", executor), ("num_workers", num_workers), ("timeout_s", timeout_s))
            if v is not None
        }
        if overrides:
            config = config.model_copy(update=overrides)
        app = create_app(
            config,
            token,
            max_batch=max_batch,
            max_body_mb=max_body_mb,
            strip_tokens=strip_tokens,
            read_timeout_s=read_timeout_s,
            lanes=lanes,
        )
    except RewardKitError as e:
        raise click.ClickException(str(e)) from None

    def ready(bound: int) -> None:
        auth = "bearer token required" if token else "no auth"
        click.echo(f"rewardkit serve: listening on http://{host}:{bound} ({auth})", err=True)

    asyncio.run(
        serve(
            app,
            host,
            port,
            shutdown_timeout=shutdown_timeout,
            ready=ready,
            max_connections=max_connections,
            header_timeout_s=read_timeout_s,
        )
    )


if __name__ == "__main__":
    serve_command()
