"""Runs the rewardkit-jsonschema plugin's own tests (plugins/rewardkit-jsonschema/tests/test_jsonschema_plugin.py) in the repository suite.

The plugin's tests live with the plugin so that they ship with it; this module loads them by path
and re-exports their tests and fixtures, so `python -m pytest` from the repository root runs them.
"""

import importlib.util
import sys
from pathlib import Path

_PATH = (
    Path(__file__).resolve().parents[2]
    / "plugins"
    / "rewardkit-jsonschema"
    / "tests"
    / "test_jsonschema_plugin.py"
)
_spec = importlib.util.spec_from_file_location("_rewardkit_jsonschema_plugin_tests", _PATH)
_module = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = _module
_spec.loader.exec_module(_module)
globals().update({k: v for k, v in vars(_module).items() if not k.startswith("__")})
