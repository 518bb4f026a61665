"""CLI start-up and ``rewardkit serve`` under a hang: the numbers behind issue #14.

1. ``rewardkit --help`` and ``rewardkit list-plugins --json``: wall time of a fresh process (min
   and median of 5).
2. ``rewardkit serve --shutdown-timeout 5`` with a hung request in flight: when the client gets its
   503, and when the server has exited, after SIGTERM.
3. Head-of-line blocking on the ``process`` executor: the slowest of five one-sample requests sent
   while another request's scorer sleeps 8 s, with ``--lanes 1`` and ``--lanes 2``.

Run: ``PYTHONPATH=src .venv/bin/python benchmarks/bench_serve_cli.py``
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from integrations.conftest import SCORER_SOURCE  # noqa: E402
from integrations.serve_proc import ServeProc  # noqa: E402

GOOD = {"samples": [{"response": "1", "ground_truth": "1"}]}


def startup() -> None:
    for args in (["--help"], ["list-plugins", "--json"]):
        times = []
        for _ in range(5):
            t = time.perf_counter()
            subprocess.run(
                [sys.executable, "-m", "rewardkit.cli", *args], env=os.environ, capture_output=True
            )
            times.append(time.perf_counter() - t)
        print(f"rewardkit {' '.join(args)}: min {min(times):.2f}s, median {sorted(times)[2]:.2f}s")


def shutdown(cfg: Path) -> None:
    srv = ServeProc(cfg, "--shutdown-timeout", "5")
    out: dict = {}
    hung = {"samples": [{"response": "SLEEP 3600"}]}
    t = threading.Thread(target=lambda: out.update(a=srv.post("/v1/score", hung)))
    t.start()
    time.sleep(1)
    t0 = time.monotonic()
    srv.proc.send_signal(signal.SIGTERM)
    t.join()
    t1 = time.monotonic()
    srv.proc.wait()
    print(
        f"--shutdown-timeout 5: in-flight request answered {out['a'][0]} after {t1 - t0:.2f}s, "
        f"server exited after {time.monotonic() - t0:.2f}s"
    )


def head_of_line(cfg: Path) -> None:
    for lanes in ("1", "2"):
        srv = ServeProc(
            cfg, "--executor", "process", "--num-workers", "1", "--timeout", "60", "--lanes", lanes
        )
        try:
            srv.post("/v1/score", GOOD)
            srv.post("/v1/score", GOOD)
            hang = {"samples": [{"response": "SLEEP 8"}]}
            t = threading.Thread(target=srv.post, args=("/v1/score", hang))
            t.start()
            time.sleep(0.5)

            async def five(srv=srv):
                async def one():
                    s = time.monotonic()
                    await asyncio.to_thread(srv.post, "/v1/score", GOOD)
                    return time.monotonic() - s

                return await asyncio.gather(*(one() for _ in range(5)))

            latencies = asyncio.run(five())
            print(f"process executor, --lanes {lanes}: slowest one-sample request {max(latencies):.2f}s")
            t.join()
        finally:
            srv.close()


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        scorer = Path(tmp) / "scorers.py"
        scorer.write_text(SCORER_SOURCE, encoding="utf-8")
        cfg = Path(tmp) / "serve.yaml"
        cfg.write_text(f"reward:\n  executor: inline\n  custom_reward_function:\n    path: {scorer}\n")
        startup()
        shutdown(cfg)
        head_of_line(cfg)


if __name__ == "__main__":
    main()
