"""``rewardkit serve``: a reward engine behind HTTP.

Endpoints:

* ``POST /v1/score``: ``{"samples": [...]}`` (rewardkit samples) → ``{"scores", "status",
  "reasons", "errors", "extra", "components", "metrics"}`` (``null`` where a score is ``nan``).
* ``POST /get_reward``: OpenRLHF's remote reward model protocol. ``{"query": [...], "prompts":
  [...], "labels": [...]}`` → ``{"rewards": [...], "scores": [...], "extra_logs": {...}, "status",
  "reasons", "errors"}``. Each ``query`` is prompt + response; the response is what follows the
  prompt (a query without its prompt fails alone, reason ``unroutable``). ``labels`` are the
  ground truths. Where a sample failed or abstained, its reward is the config's ``failure_score``
  / ``abstain_score`` (default ``0.0``, as OpenRLHF needs a number) and ``status`` /
  ``extra_logs.failed`` say so. ``scores`` (OpenRLHF's dynamic-filtering value) is the scorer's
  ``acc`` where it gives one, else the reward; ``extra_logs`` holds one number per sample for
  ``failed``, ``abstained``, ``acc`` and the other numeric extras of ``reward.extra_keys``.
  OpenRLHF sends no data source: ``--default-scorer gsm8k`` scores its requests out of the box.
* ``GET /health`` (never needs the token) and ``GET /metrics`` (Prometheus text format).

Errors are JSON ``{"error": ..., ...}``: 400 (not JSON, wrong shape), 401 (token), 413 (body or
batch too large), 422 (a malformed sample: ``index`` and ``field`` name it), 503 (shutting down);
each is logged (logger ``rewardkit.serve``, WARNING) with its reason. A sample no scorer applies to
is not an error: it fails alone, reason ``unroutable``.
SIGTERM / SIGINT stop accepting connections, let in-flight batches finish, then exit.

Run it with ``rewardkit serve --config reward.yaml`` or ``python -m rewardkit.server``; embed or
test it with :func:`create_app`.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import signal
import sys
from typing import Any

import click
from aiohttp import web

from rewardkit.cli_overrides import apply_overrides, engine_override_options
from rewardkit.errors import RewardKitError
from rewardkit.server_app import (  # noqa: F401 - the public names of rewardkit.server
    DEFAULT_HOST,
    DEFAULT_MAX_BATCH,
    DEFAULT_MAX_BODY_MB,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_PORT,
    DEFAULT_READ_TIMEOUT_S,
    STATE,
    TOKEN_ENV,
    ServerState,
    check_token,
    create_app,
    render_metrics,
    split_query,
)
from rewardkit.server_limits import ConnectionGuard, GuardedProtocol


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
    otherwise). Connections over ``max_connections`` get a 503. A connection is closed when it keeps
    the server waiting more than ``header_timeout_s`` for any request's headers (the first or a later
    one on a kept-alive connection) or, after an answer, for the rest of an unread body or for the
    client to read the answer; a body the handler reads gets ``header_timeout_s`` too (408).
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
    handler = runner.server
    if handler is None:  # set by runner.setup()
        raise RuntimeError("aiohttp AppRunner has no server after setup()")
    handler.request_handler = guard.wrap(handler.request_handler)
    server = await loop.create_server(lambda: GuardedProtocol(handler(), guard), host, port)
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
    "--config",
    "-c",
    "config_path",
    type=click.Path(exists=True, dir_okay=False),
    help="A reward config YAML (the `reward:` section). Default: rewardkit's defaults.",
)
@click.option(
    "--host",
    default=DEFAULT_HOST,
    show_default=True,
    help="Address to bind; other than loopback needs --token.",
)
@click.option(
    "--port",
    default=DEFAULT_PORT,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="Port to listen on; 0: any free port.",
)
@click.option(
    "--token",
    default=None,
    help=f"Bearer token clients must send (not on /health). Default: ${TOKEN_ENV}, else none.",
)
@engine_override_options
@click.option(
    "--max-batch",
    default=DEFAULT_MAX_BATCH,
    show_default=True,
    type=click.IntRange(min=1),
    help="Most samples (or queries) in one request; more answers 413.",
)
@click.option(
    "--max-body-mb",
    default=DEFAULT_MAX_BODY_MB,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="Largest request body in MiB; more answers 413.",
)
@click.option(
    "--read-timeout",
    "read_timeout_s",
    default=DEFAULT_READ_TIMEOUT_S,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="Seconds a client may take to send each request's headers, then its body (408), and, after "
    "each answer, to read it and send the next request (keep-alive); scoring time does not count.",
)
@click.option(
    "--max-connections",
    default=DEFAULT_MAX_CONNECTIONS,
    show_default=True,
    type=click.IntRange(min=1),
    help="Open connections at most; more are answered 503 and closed.",
)
@click.option(
    "--lanes",
    default=1,
    show_default=True,
    type=click.IntRange(min=1),
    help="Engines (each with its own workers) concurrent requests are spread over, to isolate them; "
    "not needed against a hung request, as requests share an engine's workers fairly.",
)
@click.option(
    "--strip-token",
    "strip_tokens",
    multiple=True,
    help="Token text (pad, EOS) stripped from the end of OpenRLHF responses; repeatable. Default: none.",
)
@click.option(
    "--default-scorer",
    default=None,
    help="Scorer for samples without a data source, e.g. gsm8k for OpenRLHF's query/prompts/labels. "
    "Default: the config's default_scorer.",
)
@click.option(
    "--shutdown-timeout",
    default=60.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="Seconds in-flight requests get to finish after SIGTERM/SIGINT; then they answer 503.",
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
    default_scorer,
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
        config = apply_overrides(config, executor=executor, num_workers=num_workers, timeout_s=timeout_s)
        app = create_app(
            config,
            token,
            max_batch=max_batch,
            max_body_mb=max_body_mb,
            strip_tokens=strip_tokens,
            default_scorer=default_scorer,
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
