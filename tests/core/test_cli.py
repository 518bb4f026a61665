"""The ``rewardkit score`` command, through click's runner (list-plugins is tested in test_plugin_discovery)."""

import json

import pytest
from click.testing import CliRunner

from rewardkit.cli import cli

REWARD = """
def compute_score(solution_str, ground_truth):
    if solution_str == "boom":
        raise RuntimeError("scorer bug")
    return {"score": float(solution_str == ground_truth), "len": len(solution_str)}
"""


@pytest.fixture
def setup(tmp_path, write_module):
    reward = write_module("reward.py", REWARD)
    config = tmp_path / "config.yaml"
    config.write_text(f"reward:\n  executor: inline\n  custom_reward_function:\n    path: {reward}\n")
    rollouts = tmp_path / "rollouts.jsonl"
    records = [
        {"data_source": "a", "response": "1", "ground_truth": "1", "uid": "u0"},
        {"data_source": "a", "response": "2", "ground_truth": "1"},
        {"data_source": "b", "response": "boom", "ground_truth": "1"},
        {"data_source": "b", "response": "ünï", "reward_model": {"ground_truth": "ünï"}},
    ]
    rollouts.write_text(
        "\n".join(json.dumps(r, ensure_ascii=False) for r in records) + "\n", encoding="utf-8"
    )
    return tmp_path, config, rollouts, records


def test_score_writes_one_line_per_input_and_a_summary(setup):
    tmp_path, config, rollouts, records = setup
    out = tmp_path / "scored.jsonl"
    res = CliRunner().invoke(
        cli, ["score", str(rollouts), "-o", str(out), "-c", str(config), "--chunk-size", "3"]
    )
    assert res.exit_code == 0, res.output
    lines = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    assert len(lines) == len(records)
    assert [x["score"] for x in lines] == [1.0, 0.0, None, 1.0]
    assert [x["status"] for x in lines] == ["ok", "ok", "failed", "ok"]
    assert lines[2]["reason"] == "error" and "scorer bug" in lines[2]["error"]
    assert lines[3]["extra"] == {"len": 3} and lines[0]["uid"] == "u0"  # input fields are kept
    assert "summary" in res.output
    assert "4 samples in" in res.output and "failures: error=1" in res.output
    assert f"wrote 4 scored samples to {out}" in res.output.replace("\n", "")


def test_score_fail_on_error_and_default_output_path(setup):
    tmp_path, config, rollouts, _ = setup
    res = CliRunner().invoke(
        cli, ["score", str(rollouts), "-c", str(config), "--no-progress", "--fail-on-error"]
    )
    assert res.exit_code == 1
    assert (tmp_path / "rollouts.scored.jsonl").exists()


def test_score_bad_input_names_the_record_and_field(setup):
    tmp_path, config, rollouts, _ = setup
    rollouts.write_text('{"response": "1"}\n{"response": 5}\n')
    res = CliRunner().invoke(cli, ["score", str(rollouts), "-c", str(config)])
    assert res.exit_code == 1
    assert "rollouts.jsonl: line 2: field 'response': must be a string, got int" in res.output
    rollouts.write_text('{"response": "1"}\nnot json\n')
    res = CliRunner().invoke(cli, ["score", str(rollouts), "-c", str(config)])
    assert res.exit_code == 1 and "rollouts.jsonl: line 2: not valid JSON" in res.output


def test_score_bad_config_and_unknown_data_source(setup, tmp_path):
    _, _, rollouts, _ = setup
    bad = tmp_path / "bad.yaml"
    bad.write_text("reward:\n  timeout_s: -1\n")
    res = CliRunner().invoke(cli, ["score", str(rollouts), "-c", str(bad)])
    assert res.exit_code == 1 and "reward.timeout_s" in res.output
    # samples whose data source no scorer claims fail alone (reason unroutable); the run goes on
    out = tmp_path / "scored.jsonl"
    res = CliRunner().invoke(cli, ["score", str(rollouts), "-o", str(out), "--executor", "inline"])
    assert res.exit_code == 0 and "unroutable" in res.output
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert {r["status"] for r in lines} == {"failed"} and {r["reason"] for r in lines} == {"unroutable"}
    assert "unknown data source 'a'" in lines[0]["error"]


def test_score_help_mentions_fields():
    res = CliRunner().invoke(cli, ["score", "--help"])
    assert res.exit_code == 0
    assert "ground_truth" in res.output and "--executor" in res.output


def test_migrate_config_command(tmp_path):
    import yaml

    old = tmp_path / "old.yaml"
    old.write_text(
        "reward_model:\n  reward_manager: dapo\n  num_workers: 4\n"
        "custom_reward_function:\n  path: my_reward.py\n"
    )
    new = tmp_path / "new.yaml"
    res = CliRunner().invoke(cli, ["migrate-config", str(old), "-o", str(new)])
    assert res.exit_code == 0, res.output
    assert "reward_model.reward_manager" in res.output and "reward.reward_manager.name" in res.output
    reward = yaml.safe_load(new.read_text())["reward"]
    assert reward["reward_manager"]["name"] == "dapo" and reward["num_workers"] == 4
    assert reward["custom_reward_function"]["path"] == "my_reward.py"
    printed = CliRunner().invoke(cli, ["migrate-config", str(old)])
    assert printed.exit_code == 0 and "reward:" in printed.output
    bad = tmp_path / "bad.yaml"
    bad.write_text("- just\n- a list\n")
    res = CliRunner().invoke(cli, ["migrate-config", str(bad)])
    assert res.exit_code == 1 and "must be a mapping" in res.output
