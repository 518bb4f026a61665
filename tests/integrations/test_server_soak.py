"""Soak: `rewardkit serve` under mixed good, bad, hanging and slow clients, bounded in count and time."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest

from .serve_proc import ServeProc

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

SOAK_S = 20.0  # how long the mixed load runs
GOOD_DEADLINE_S = 10.0  # every good request must be answered within this
MAX_GOOD = 400  # bound on good requests (per client: MAX_GOOD / GOOD_CLIENTS)
GOOD_CLIENTS = 4


def test_soak_mixed_clients(tmp_path, scorer_path):
    config = tmp_path / "serve.yaml"
    config.write_text(
        "reward:\n  executor: inline\n  batch_timeout_s: 3\n"
        f"  custom_reward_function:\n    path: {scorer_path}\n",
        encoding="utf-8",
    )
    srv = ServeProc(config, "--read-timeout", "2", "--max-connections", "64")
    stop = time.monotonic() + SOAK_S
    latencies: list[float] = []
    wrong: list[str] = []
    counts = {"bad": 0, "hang": 0, "slow": 0}
    lock = threading.Lock()

    def good_client(k: int) -> None:
        for r in range(MAX_GOOD // GOOD_CLIENTS):
            if time.monotonic() > stop:
                return
            samples = [{"response": str(r), "ground_truth": str(r if j % 2 == 0 else -1)} for j in range(4)]
            start = time.monotonic()
            try:
                status, body = srv.post("/v1/score", {"samples": samples}, timeout=GOOD_DEADLINE_S)
            except (OSError, urllib.error.URLError) as e:
                wrong.append(f"good client {k} request {r}: {e!r}")
                continue
            took = time.monotonic() - start
            with lock:
                latencies.append(took)
            if status != 200 or body["scores"] != [1.0, 0.0, 1.0, 0.0]:
                wrong.append(f"good client {k} request {r}: {status} {body}")

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
            counts["bad"] += 1
            time.sleep(0.02)

    def hanging_client() -> None:  # a batch whose scorer hangs; the client gives up early
        while time.monotonic() < stop - 3 and counts["hang"] < 8:
            try:
                srv.post("/v1/score", {"samples": [{"response": "SLEEP 600"}]}, timeout=1)
            except (OSError, urllib.error.URLError):
                pass
            counts["hang"] += 1

    def slow_client() -> None:  # slow-loris: headers a byte at a time
        while time.monotonic() < stop - 3 and counts["slow"] < 20:
            socks = []
            for _ in range(5):
                s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
                s.sendall(b"POST /v1/score HTTP/1.1\r\n")
                socks.append(s)
            for _ in range(3):
                for s in socks:
                    try:
                        s.sendall(b"X")
                    except OSError:
                        pass
                time.sleep(1)
            for s in socks:
                s.close()
            counts["slow"] += 5

    try:
        srv.post("/v1/score", {"samples": [{"response": "1", "ground_truth": "1"}]})  # warm up
        rss_start = srv.rss_kib()
        threads = [threading.Thread(target=good_client, args=(k,)) for k in range(GOOD_CLIENTS)]
        threads += [threading.Thread(target=f) for f in (bad_client, hanging_client, slow_client)]
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
    assert counts["bad"] > 20 and counts["hang"] > 0 and counts["slow"] > 0
    assert status == 200 and health["status"] == "ok"
    # flat memory: generous, as the allocator keeps freed arenas around
    assert rss_end < rss_start * 1.5 + 60_000, (rss_start, mid, rss_end)
