"""The README's quick start stays true: two set-up commands, and the demo prints what it shows."""

import re
from pathlib import Path

from click.testing import CliRunner

from rewardkit.cli import cli

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text(encoding="utf-8")


def test_quick_start_has_exactly_two_setup_commands():
    quick_start = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    assert re.findall(r"^\$ (.+)$", quick_start, flags=re.M) == ["make demo", "make test"]
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    assert "examples/gsm8k_rollouts.jsonl" in makefile  # the demo scores the bundled file


def test_demo_output_matches_the_readme(tmp_path):
    out = tmp_path / "scored.jsonl"
    res = CliRunner().invoke(
        cli, ["score", str(REPO / "examples" / "gsm8k_rollouts.jsonl"), "-o", str(out), "--no-progress"]
    )
    assert res.exit_code == 0, res.output
    rows = [line for line in res.output.splitlines() if line.startswith(("│ openai/gsm8k", "│ all "))]
    assert len(rows) == 2
    for row in rows:
        assert row in README, f"README's demo output is stale; the demo now prints:\n{row}"
