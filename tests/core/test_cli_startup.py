"""The CLI starts fast: ``--help`` and the light commands import neither the server nor heavy libraries."""

from __future__ import annotations

import json
import os
import subprocess
import sys

HEAVY = ("aiohttp", "torch", "ray", "transformers", "rewardkit.server", "rewardkit.engine")

PROBE = """
import json, sys
from click.testing import CliRunner
import rewardkit.cli as c
loaded = {"import": [m for m in %(heavy)r if m in sys.modules]}
res = CliRunner().invoke(c.cli, %(args)r)
loaded["exit"] = res.exit_code
loaded["output"] = res.output
loaded["after"] = [m for m in %(heavy)r if m in sys.modules]
print(json.dumps(loaded))
"""


def probe(*args: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", PROBE % {"heavy": HEAVY, "args": list(args)}],
        capture_output=True,
        text=True,
        env=os.environ,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1])


def test_import_and_help_load_nothing_heavy():
    got = probe("--help")
    assert got["import"] == [] and got["after"] == [], got
    assert got["exit"] == 0 and "serve" in got["output"] and "Serve rewards over HTTP" in got["output"]


def test_list_plugins_does_not_import_the_server():
    got = probe("list-plugins", "--json")
    assert "aiohttp" not in got["after"] and "rewardkit.server" not in got["after"], got
    assert isinstance(json.loads(got["output"].split("error:")[0] or "[]"), list)


def test_serve_is_still_there_when_asked_for():
    got = probe("serve", "--help")
    assert got["exit"] == 0 and "--shutdown-timeout" in got["output"]
    assert "rewardkit.server" in got["after"]
