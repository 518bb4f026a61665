"""``rewardkit score`` as a long job: streamed output, Ctrl-C, --resume, bad lines, line numbers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from rewardkit.cli import cli

REWARD = """
import os
import time


def compute_score(solution_str, ground_truth):
    delay = float(os.environ.get("RK_TEST_DELAY", "0"))
    if delay:
        time.sleep(delay)
    return float(solution_str == ground_truth)
"""


@pytest.fixture
def job(tmp_path, write_module):
    reward = write_module("reward.py", REWARD)
    config = tmp_path / "config.yaml"
    config.write_text(f"reward:\n  executor: inline\n  custom_reward_function:\n    path: {reward}\n")
    return tmp_path, config


def write_lines(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


def read_rows(path):
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]


def run_cli(args):
    return CliRunner().invoke(cli, ["score", *map(str, args)])


@pytest.mark.parametrize("executor", ["inline", "process"])
def test_sigint_keeps_finished_lines_and_resume_completes_them(job, executor):
    """A real Ctrl-C on a real process: exit 130, the finished chunks are on disk, --resume finishes."""
    tmp_path, config = job
    n = 3000
    rollouts = tmp_path / "big.jsonl"
    records = [
        {"response": str(i), "ground_truth": str(i) if i % 7 == 3 else "x", "uid": f"u{i}"} for i in range(n)
    ]
    write_lines(rollouts, records)
    out = tmp_path / "big.scored.jsonl"
    cmd = [sys.executable, "-m", "rewardkit.cli", "score", str(rollouts), "-o", str(out), "-c", str(config)]
    cmd += ["--executor", executor, "--num-workers", "2"]
    env = {**os.environ, "RK_TEST_DELAY": "0.005"}
    proc = subprocess.Popen(
        [*cmd, "--chunk-size", "40", "--no-progress"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while (not out.exists() or out.stat().st_size < 10_000) and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "Task was destroyed" not in err and "Traceback" not in err, err
    assert "--resume" in err
    rows = read_rows(out)
    assert 0 < len(rows) < n
    assert [r["input_line"] for r in rows] == list(range(1, len(rows) + 1))
    assert [r["uid"] for r in rows] == [f"u{i}" for i in range(len(rows))]

    done = subprocess.run(
        [*cmd, "--resume", "--no-progress"], env=os.environ, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    rows = read_rows(out)
    assert [r["input_line"] for r in rows] == list(range(1, n + 1))  # every line exactly once, in order
    assert [r["score"] for r in rows] == [float(i % 7 == 3) for i in range(n)]
    assert f"{n} samples in" in done.stdout


def test_resume_cuts_a_torn_last_line_and_refuses_a_foreign_output(job):
    tmp_path, config = job
    rollouts = tmp_path / "r.jsonl"
    write_lines(rollouts, [{"response": "3", "ground_truth": "3", "uid": f"u{i}"} for i in range(10)])
    out = tmp_path / "out.jsonl"
    assert run_cli([rollouts, "-o", out, "-c", config, "--chunk-size", "4"]).exit_code == 0
    full = out.read_bytes()
    lines = full.splitlines(keepends=True)
    out.write_bytes(b"".join(lines[:6]) + lines[6][:15])  # died mid-write of row 7
    res = run_cli([rollouts, "-o", out, "-c", config, "--resume"])
    assert res.exit_code == 0, res.output
    assert out.read_bytes() == full

    other = tmp_path / "other.jsonl"
    write_lines(other, [{"response": "3", "ground_truth": "3", "uid": f"x{i}"} for i in range(10)])
    res = run_cli([other, "-o", out, "-c", config, "--resume"])
    assert res.exit_code == 1 and "uid 'u0'" in res.output and "cannot resume" in res.output
    assert out.read_bytes() == full  # untouched

    assert run_cli([rollouts, "-o", out, "-c", config, "--resume"]).exit_code == 0  # nothing left to do
    assert out.read_bytes() == full


def test_bad_lines_fail_with_the_whole_reason_or_get_a_bad_input_row(job):
    tmp_path, config = job
    rollouts = tmp_path / "r.jsonl"
    rollouts.write_bytes(
        b'{"response": "3", "ground_truth": "3"}\n'
        b"{'response': 'single quotes'}\n"
        b"\n"
        b'{"response": 5}\n'
        b"[1, 2]\n"
        b'{"response": "\xff"}\n'
        b'{"response": "4", "ground_truth": "4"}\n'
    )
    out = tmp_path / "out.jsonl"
    res = run_cli([rollouts, "-o", out, "-c", config])
    assert res.exit_code == 1
    reason = "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"
    assert f"r.jsonl: line 2: not valid JSON ({reason})" in res.output.replace("\n", "")
    assert not out.exists() or out.read_text() == ""  # fail: checked before anything is scored

    res = run_cli([rollouts, "-o", out, "-c", config, "--on-bad-line", "skip"])
    assert res.exit_code == 0, res.output
    rows = read_rows(out)
    assert [r["input_line"] for r in rows] == [1, 2, 4, 5, 6, 7]  # blank line 3 has no row
    assert [r["status"] for r in rows] == ["ok", "failed", "failed", "failed", "failed", "ok"]
    assert [r.get("reason") for r in rows[1:5]] == ["bad_input"] * 4
    assert reason in rows[1]["error"]
    assert "field 'response': must be a string, got int" in rows[2]["error"]
    assert "expected a JSON object, got list" in rows[3]["error"]
    assert "not valid UTF-8" in rows[4]["error"]
    assert "bad_input=4" in res.output


def test_errors_name_the_input_line_not_a_chunk_position(job):
    tmp_path, config = job
    rollouts = tmp_path / "r.jsonl"
    records = [{"response": "1", "ground_truth": "1"} for _ in range(5000)]
    records[4999] = {"response": "1", "prompt": 7}
    write_lines(rollouts, records)
    res = run_cli([rollouts, "-o", tmp_path / "o.jsonl", "-c", config, "--no-progress"])
    assert res.exit_code == 1 and "r.jsonl: line 5000: field 'prompt'" in res.output
    assert "sample" not in res.output

    # an error only the engine sees (no scorer for a data source under strict_routing), in the second chunk
    records = [{"response": "1", "ground_truth": "1", "data_source": "openai/gsm8k"} for _ in range(700)]
    records[699]["data_source"] = "no/such-source"
    write_lines(rollouts, records)
    strict = tmp_path / "strict.yaml"
    strict.write_text("reward:\n  strict_routing: true\n")
    res = run_cli(
        [rollouts, "-o", tmp_path / "o.jsonl", "-c", strict, "--executor", "inline", "--chunk-size", "512"]
    )
    assert res.exit_code == 1 and "r.jsonl: line 700:" in res.output and "no/such-source" in res.output
    assert "sample 187" not in res.output
    # without strict_routing that sample fails alone and the rest is scored
    lenient = run_cli([rollouts, "-o", tmp_path / "o.jsonl", "--executor", "inline", "--chunk-size", "512"])
    assert lenient.exit_code == 0, lenient.output
    rows = read_rows(tmp_path / "o.jsonl")
    assert len(rows) == 700 and rows[699]["reason"] == "unroutable" and rows[698]["status"] == "ok"
    skipped = run_cli(
        [rollouts, "-o", tmp_path / "o.jsonl", "-c", strict, "--executor", "inline", "--on-bad-line", "skip"]
    )
    assert skipped.exit_code == 0, skipped.output
    rows = read_rows(tmp_path / "o.jsonl")
    assert len(rows) == 700 and rows[699]["reason"] == "bad_input" and rows[698]["status"] == "ok"


def test_a_lone_surrogate_is_written_escaped(job):
    tmp_path, config = job
    rollouts = tmp_path / "r.jsonl"
    rollouts.write_text(
        '{"response": "3", "ground_truth": "3", "note": "\\ud800"}\n{"response": "ünï", "ground_truth": "x"}\n',
        encoding="utf-8",
    )
    out = tmp_path / "out.jsonl"
    res = run_cli([rollouts, "-o", out, "-c", config])
    assert res.exit_code == 0, res.output
    raw = out.read_bytes()
    raw.decode("utf-8")  # valid UTF-8 throughout
    rows = [json.loads(x) for x in raw.splitlines()]
    assert rows[0]["note"] == "\ud800" and rows[0]["score"] == 1.0
    assert "ünï".encode() in raw  # other rows keep their plain UTF-8


def test_progress_shows_an_eta(job):
    tmp_path, config = job
    rollouts = tmp_path / "r.jsonl"
    write_lines(rollouts, [{"response": "1", "ground_truth": "1"}] * 5)
    res = run_cli([rollouts, "-o", tmp_path / "o.jsonl", "-c", config, "--chunk-size", "2"])
    assert res.exit_code == 0
    assert "5/5" in res.output and "eta" in res.output
