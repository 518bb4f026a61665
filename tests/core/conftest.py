"""Fixtures for core tests: throwaway plugin distributions discovered through real entry points."""

import sys
import textwrap
from pathlib import Path

import pytest

from rewardkit import plugins


def make_dist(site: Path, dist: str, version: str, ep_name: str, module: str, source: str) -> None:
    """Write a minimal installed distribution: a module plus a dist-info with an entry point."""
    (site / f"{module}.py").write_text(textwrap.dedent(source), encoding="utf-8")
    info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n", encoding="utf-8"
    )
    (info / "entry_points.txt").write_text(f"[rewardkit]\n{ep_name} = {module}\n", encoding="utf-8")


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A fresh directory on sys.path for throwaway distributions; plugin caches reset around the test."""
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    plugins.reset()
    yield site
    for mod in [m for m in sys.modules if m.startswith("rkt_")]:
        del sys.modules[mod]
    plugins.reset()
