"""docs/plugins/tutorial.md is executable: its titled code blocks are the plugin's files and the
expected outputs. This test writes the files, pip-installs the package into a target folder, runs the
tutorial's commands and compares what they print with what the page shows."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rewardkit.plugins import reset

REPO = Path(__file__).resolve().parents[2]
TUTORIAL = REPO / "docs" / "plugins" / "tutorial.md"
PROJECT = "rewardkit-keywords"
BLOCK = re.compile(r'^```(\w*)(?: title="([^"]+)")?[ \t]*\n(.*?)^```[ \t]*$', re.MULTILINE | re.DOTALL)


def tutorial_blocks() -> dict[str, str]:
    """Titled code blocks of the tutorial: title → content."""
    blocks: dict[str, str] = {}
    for m in BLOCK.finditer(TUTORIAL.read_text(encoding="utf-8")):
        if m.group(2):
            assert m.group(2) not in blocks, f"two blocks titled {m.group(2)!r}"
            blocks[m.group(2)] = m.group(3)
    return blocks


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict:
    """The tutorial's project written to disk and pip-installed into a target folder."""
    root = tmp_path_factory.mktemp("tutorial")
    blocks = tutorial_blocks()
    for title, content in blocks.items():
        if title.startswith(f"{PROJECT}/"):
            path = root / title
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content, encoding="utf-8")
    site = root / "site"
    pip = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation"]
        + ["--no-compile", "--target", str(site), str(root / PROJECT)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert pip.returncode == 0, pip.stderr
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])),
    }
    return {"root": root, "project": root / PROJECT, "site": site, "env": env, "blocks": blocks}


def _run(built: dict, *cmd: str) -> subprocess.CompletedProcess:
    out = subprocess.run(
        [sys.executable, *cmd],
        cwd=built["project"],
        env=built["env"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    return out


def _same(documented, actual) -> bool:
    if isinstance(documented, float) and isinstance(actual, float):
        return math.isclose(documented, actual, rel_tol=1e-6)
    if isinstance(documented, dict) and isinstance(actual, dict):
        return documented.keys() == actual.keys() and all(_same(documented[k], actual[k]) for k in documented)
    if isinstance(documented, list) and isinstance(actual, list):
        return len(documented) == len(actual) and all(
            _same(a, b) for a, b in zip(documented, actual, strict=True)
        )
    return documented == actual


def test_the_layout_shown_is_the_files_given():
    blocks = tutorial_blocks()
    files = sorted(t[len(PROJECT) + 1 :] for t in blocks if t.startswith(f"{PROJECT}/"))
    assert files == [
        "examples/rollouts.jsonl",
        "examples/score.py",
        "pyproject.toml",
        "rewardkit_keywords.py",
        "tests/test_keywords.py",
    ]
    tree = next(
        m.group(3)
        for m in BLOCK.finditer(TUTORIAL.read_text())
        if m.group(1) == "text" and PROJECT in m.group(3)
    )
    for f in files:
        assert Path(f).name in tree, f"{f} missing from the layout tree"


def test_installs_as_a_distribution(built):
    dist_info = list(built["site"].glob("rewardkit_keywords-0.1.0.dist-info"))
    assert dist_info, sorted(p.name for p in built["site"].iterdir())
    assert "[rewardkit]\nkeywords = rewardkit_keywords" in (dist_info[0] / "entry_points.txt").read_text()


def test_list_plugins_prints_what_the_tutorial_shows(built):
    out = _run(built, "-m", "rewardkit.cli", "list-plugins", "--json")
    actual = {p["name"]: p for p in json.loads(out.stdout)}
    documented = json.loads(built["blocks"]["output: rewardkit list-plugins --json"])
    assert documented, "the tutorial shows no plugin"
    for entry in documented:
        assert entry["name"] in actual, f"{entry['name']} not listed: {sorted(actual)}"
        assert actual[entry["name"]] == entry


def test_score_writes_what_the_tutorial_shows(built):
    _run(
        built,
        "-m",
        "rewardkit.cli",
        "score",
        "examples/rollouts.jsonl",
        "-o",
        "scored.jsonl",
        "--no-progress",
    )
    actual = [json.loads(line) for line in (built["project"] / "scored.jsonl").read_text().splitlines()]
    documented = [json.loads(line) for line in built["blocks"]["output: scored.jsonl"].splitlines()]
    assert len(actual) == len(documented)
    for d, a in zip(documented, actual, strict=True):
        assert _same(d, a), (d, a)


def test_python_example_prints_what_the_tutorial_shows(built):
    out = _run(built, "examples/score.py")
    assert out.stdout == built["blocks"]["output: python examples/score.py"]


def test_the_tutorials_own_tests_pass(built, monkeypatch):
    """The tutorial's test module, run in this process against the installed package."""
    documented = re.search(r"(\d+) passed", built["blocks"]["output: pytest"])
    monkeypatch.syspath_prepend(str(built["site"]))
    reset()
    try:
        path = built["project"] / "tests" / "test_keywords.py"
        spec = importlib.util.spec_from_file_location("tutorial_test_keywords", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        tests = [fn for name, fn in vars(module).items() if name.startswith("test_")]
        assert len(tests) == int(documented.group(1))
        for fn in tests:
            fn()
        assert sys.modules["rewardkit_keywords"].__file__.startswith(str(built["site"]))
    finally:
        sys.modules.pop("rewardkit_keywords", None)
        reset()
