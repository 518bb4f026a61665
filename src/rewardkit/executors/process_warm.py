"""Warm-up of the process executor's fork server: preloaded last, it runs the scorers' ``warm_up()``.

The fork server imports the built-in scorer modules a pool uses (see
:meth:`ProcessExecutor._preload <rewardkit.executors.process.ProcessExecutor>`); importing this
module afterwards calls ``warm_up()`` of each module named in the environment variable
``REWARDKIT_FORKSERVER_WARM``, so that what those
scorers build lazily on first use (parser tables, sympy's late imports) is built once there and every
worker, a replacement after a kill too, forks with it. A failing warm-up leaves the workers cold,
never broken. Nothing else imports this module.
"""

from __future__ import annotations

import importlib
import logging
import os

from rewardkit.executors.process_worker import WARM_ENV

_log = logging.getLogger(__name__)


def warm_modules(names: str) -> list[str]:
    """Call ``warm_up()`` of each named module that has one; returns the ones that were warmed."""
    warmed = []
    for name in filter(None, names.split(",")):
        try:
            warm = getattr(importlib.import_module(name), "warm_up", None)
            if warm is not None:
                warm()
                warmed.append(name)
        except Exception as e:  # noqa: BLE001 - a cold worker still works
            _log.debug("rewardkit: warm-up of %s failed: %s", name, e)
    return warmed


warm_modules(os.environ.pop(WARM_ENV, ""))
