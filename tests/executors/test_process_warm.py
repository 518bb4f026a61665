"""The fork server's warm-up step (rewardkit.executors.process_warm)."""

from __future__ import annotations

import sys

from rewardkit.executors.process_worker import WARM_ENV


def test_a_failing_warm_up_leaves_the_fork_server_working(tmp_path, monkeypatch):
    monkeypatch.delenv(WARM_ENV, raising=False)  # importing the module must warm nothing here
    from rewardkit.executors import process_warm

    (tmp_path / "warm_fails.py").write_text("def warm_up():\n    raise RuntimeError('no')\n")
    (tmp_path / "warm_ok.py").write_text("done = []\ndef warm_up():\n    done.append(1)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    warmed = process_warm.warm_modules("warm_fails,no_such_module_here,warm_ok,")
    assert warmed == ["warm_ok"]
    assert sys.modules["warm_ok"].done == [1]
