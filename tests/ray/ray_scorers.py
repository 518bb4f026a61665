"""Scorers for tests/ray, loaded by file path (custom_reward_function) in the driver and in Ray workers.

``extra_info["mode"]`` picks a behaviour: ok (exact match), raise, none (abstain), sleep,
crash_once (os._exit the first time, per marker file), crash (os._exit every time), pid.
"""

from __future__ import annotations

import os
import time


def compute_score(solution_str, ground_truth, extra_info):
    mode = extra_info.get("mode", "ok")
    if mode == "raise":
        raise ValueError(f"bad sample {solution_str!r}")
    if mode == "none":
        return None
    if mode == "sleep":
        time.sleep(float(extra_info["seconds"]))
    if mode == "crash_once":
        marker = extra_info["marker"]
        if not os.path.exists(marker):
            open(marker, "w").close()
            os._exit(17)
    if mode == "crash":
        os._exit(17)
    score = float(solution_str.strip() == str(ground_truth).strip())
    if mode == "pid":
        return {"score": score, "pid": os.getpid()}
    return {"score": score, "length": len(solution_str)}


async def judge(response, extra_info, url):
    """A judge call: one HTTP request to a local server, inside the shared judge budget unless raw."""
    import aiohttp

    from rewardkit.ray.limiter import judge_slot

    async def ask():
        async with aiohttp.ClientSession() as session, session.get(url) as resp:
            return float(await resp.text())

    if extra_info.get("raw"):
        return await ask()
    async with judge_slot():
        return await ask()


def batch_lengths(responses):
    """A batch scorer: the length of each response, plus the batch size as an offset check."""
    return [len(r) + len(responses) / 1000 for r in responses]
