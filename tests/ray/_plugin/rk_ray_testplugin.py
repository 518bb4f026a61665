"""A test plugin for tests/ray: a tiny RM backend, discovered through a real entry point in Ray workers."""

from __future__ import annotations

import asyncio
import os

from rewardkit import hookimpl
from rewardkit.backends.base import RMBackend
from rewardkit.result import SampleResult


class LengthRM(RMBackend):
    """Scores a response by its length; records which process scored it. Takes ``kwargs.delay``
    seconds per call, or a sample's ``extra_info["rm_delay"]`` when longer."""

    name = "rk-test-length"

    async def ascore(self, samples):
        delays = [float(s.extra_info.get("rm_delay", 0.0)) for s in samples]
        await asyncio.sleep(max([float(self.config.kwargs.get("delay", 0.0)), *delays]))
        return [SampleResult.ok(len(s.response), rm_pid=os.getpid()) for s in samples]


@hookimpl
def register_rm_backends(register):
    register(LengthRM, name="rk-test-length")
