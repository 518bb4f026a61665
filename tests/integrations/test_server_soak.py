"""Soak: `rewardkit serve` under mixed good, bad, hanging, slow and keep-alive clients, bounded in count
and time (about 25 s)."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest

from .serve_proc import ServeProc, trickle

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

SOAK_S = 20.0  # how long the mixed load runs
READ_TIMEOUT_S = 2.0
GOOD_DEADLINE_S = 10.0  # every good request must be answered within this
MAX_GOOD = 400  # bound on good requests (per client: MAX_GOOD / GOOD_CLIENTS)
GOOD_CLIENTS = 3
SLOW_CUT_S = 5 * READ_TIMEOUT_S  # a slow client must be cut off within this (generous, under load)


def test_soak_mixed_clients(tmp_path, scorer_path):
    config = tmp_path / "serve.yaml"
    config.write_text(
        "reward:\n  executor: inline\n  batch_timeout_s: 3\n"
        f"  custom_reward_function:\n    path: {scorer_path}\n",
        encoding="utf-8",
    )
    srv = ServeProc(config, "--read-timeout", str(READ_TIMEOUT_S), "--max-connections", "64")
    stop = time.monotonic() + SOAK_S
    latencies: list[float] = []
    wrong: list[str] = []
    counts = {"bad": 0, "hang": 0, "slow_headers": 0, "slow_body": 0, "slow_next": 0, "kept": 0}
    cut_after: list[float] = []  # how long each slow client stayed connected
    lock = threading.Lock()

    def note(kind: str, n: int = 1) -> None:
        with lock:
            counts[kind] += n

    def check(samples_of: int, status: int, body: dict, who: str) -> None:
        want = [1.0 if j % 2 == 0 else 0.0 for j in range(samples_of)]
        if status != 200 or body.get("scores") != want:
            wrong.append(f"{who}: {status} {body}")

    def samples(r: int, n: int = 4) -> list[dict]:
        return [{"response": str(r), "ground_truth": str(r if j % 2 == 0 else -1)} for j in range(n)]

    def good_client(k: int) -> None:
        for r in range(MAX_GOOD // GOOD_CLIENTS):
            if time.monotonic() > stop:
                return
            start = time.monotonic()
            try:
                status, body = srv.post("/v1/score", {"samples": samples(r)}, timeout=GOOD_DEADLINE_S)
            except (OSError, urllib.error.URLError) as e:
                wrong.append(f"good client {k} request {r}: {e!r}")
                continue
            with lock:
                latencies.append(time.monotonic() - start)
            check(4, status, body, f"good client {k} request {r}")

    def keep_alive_client() -> None:  # many requests on one connection, pausing inside the read timeout
        conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=GOOD_DEADLINE_S)
        first = None
        try:
            for r in range(200):
                if time.monotonic() > stop:
                    return
                start = time.monotonic()
                conn.request(
                    "POST",
                    "/v1/score",
                    body=json.dumps({"samples": samples(r, 2)}),
                    headers={"Content-Type": "application/json"},
                )
                reply = conn.getresponse()
                status, body = reply.status, json.loads(reply.read())
                with lock:
                    latencies.append(time.monotonic() - start)
                check(2, status, body, f"keep-alive request {r}")
                first = first or conn.sock
                if conn.sock is not first:
                    wrong.append(f"keep-alive request {r}: the connection was dropped")
                note("kept")
                time.sleep(READ_TIMEOUT_S / 4 if r % 5 == 4 else 0.02)
        except (OSError, http.client.HTTPException) as e:
            wrong.append(f"keep-alive client: {e!r}")
        finally:
            conn.close()

    def bad_client() -> None:
        payloads = [
            (b"{not json", "application/json", 400),
            (b'{"samples": [' + b"[" * 50_000 + b"]" * 50_000 + b"]}", "application/json", 400),
            (b'{"samples": []}', "text/plain", 415),
            (json.dumps({"query": "notalist"}).encode(), "application/json", 422),
            (json.dumps({"samples": [{"response": 5}]}).encode(), "application/json", 422),
        ]
        i = 0
        while time.monotonic() < stop and i < 300:
            data, ctype, want = payloads[i % len(payloads)]
            path = "/get_reward" if b"query" in data else "/v1/score"
            req = urllib.request.Request(srv.base + path, data=data, headers={"Content-Type": ctype})
            try:
                urllib.request.urlopen(req, timeout=10)
                wrong.append(f"bad payload {i} answered 2xx")
            except urllib.error.HTTPError as e:
                if e.code != want:
                    wrong.append(f"bad payload {i}: {e.code}, wanted {want}")
            i += 1
            note("bad")
            time.sleep(0.02)

    def hanging_client() -> None:  # a batch whose scorer hangs; the client gives up early
        while time.monotonic() < stop - 3 and counts["hang"] < 8:
            try:
                srv.post("/v1/score", {"samples": [{"response": "SLEEP 600"}]}, timeout=1)
            except (OSError, urllib.error.URLError):
                pass
            note("hang")

    def slow_client() -> None:  # byte-a-second headers, bodies, and next requests after a good one
        rounds = 0
        while time.monotonic() < stop - SLOW_CUT_S and rounds < 3:
            rounds += 1
            heads = [socket.create_connection(("127.0.0.1", srv.port), timeout=10) for _ in range(4)]
            for s in heads:
                s.sendall(b"POST /v1/score HTTP/1.1\r\n")
            bodies = [socket.create_connection(("127.0.0.1", srv.port), timeout=10) for _ in range(3)]
            for s in bodies:
                s.sendall(
                    b"POST /v1/score HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    b"Content-Length: 500\r\n\r\n{"
                )
            nexts = []
            for _ in range(3):
                s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
                s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
                if not s.recv(4096).startswith(b"HTTP/1.1 200"):
                    wrong.append("slow client: its good first request failed")
                s.sendall(b"POST /v1/score HTTP/1.1\r\n")
                nexts.append(s)
            socks = heads + bodies + nexts
            got = [b""] * len(socks)
            closed = trickle(socks, 1.0, 3 * SLOW_CUT_S, got)
            for s in socks:
                s.close()
            with lock:
                cut_after.extend(c if c is not None else float("inf") for c in closed)
            for answer in got[len(heads) : len(heads) + len(bodies)]:
                if answer and b" 408 " not in answer.split(b"\r\n")[0]:
                    wrong.append(f"slow body answered {answer[:40]!r}, not 408")
            note("slow_headers", len(heads))
            note("slow_body", len(bodies))
            note("slow_next", len(nexts))

    try:
        srv.post("/v1/score", {"samples": [{"response": "1", "ground_truth": "1"}]})  # warm up
        rss_start = srv.rss_kib()
        threads = [threading.Thread(target=good_client, args=(k,)) for k in range(GOOD_CLIENTS)]
        threads += [
            threading.Thread(target=f) for f in (keep_alive_client, bad_client, hanging_client, slow_client)
        ]
        for t in threads:
            t.start()
        mid = []
        while any(t.is_alive() for t in threads):
            time.sleep(1)
            mid.append(srv.rss_kib())
        for t in threads:
            t.join()
        rss_end = srv.rss_kib()
        status, health = srv.get("/health")
    finally:
        srv.close()
    assert not wrong, wrong[:10]
    assert len(latencies) >= 20 and max(latencies) < GOOD_DEADLINE_S
    assert counts["bad"] > 20 and counts["hang"] > 0 and counts["kept"] >= 20, counts
    assert min(counts["slow_headers"], counts["slow_body"], counts["slow_next"]) > 0, counts
    assert cut_after and max(cut_after) < SLOW_CUT_S, cut_after  # every slow client was cut off
    assert status == 200 and health["status"] == "ok" and health["in_flight"] == 0
    # flat memory: generous, as the allocator keeps freed arenas around
    assert rss_end < rss_start * 1.5 + 60_000, (rss_start, mid, rss_end)
