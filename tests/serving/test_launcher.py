"""The server launcher: presets, plugin registration, local replicas through the real launcher.

The stand-in (standin_server.py) is launched as ``engine: vllm`` with a ``command`` override, so
the vLLM preset's protocol (health, ``/sleep?level``, ``/wake_up``) is what the tests exercise.
"""

from __future__ import annotations

import os
import signal

import pytest
from standin_helpers import gone, standin_server, stats, wait_for

from rewardkit.config import ServerConfig, load_config
from rewardkit.errors import ConfigError, UnknownNameError
from rewardkit.hookspecs import hookimpl
from rewardkit.plugins import get_registries
from rewardkit.serving import make_launcher, start_servers
from rewardkit.serving.group import ServerGroup
from rewardkit.serving.launcher import ServerLauncher, SGLangLauncher, VLLMLauncher, engine_flags
from rewardkit.serving.process import ServerStartError
from rewardkit.testing import check_plugin


def rm_config(server: dict, **rm):
    return load_config(
        {"reward_model": {"enable": True, "backend": "served-classifier", "server": server, **rm}}
    ).reward_model


# -- presets and plugins -------------------------------------------------------------------------
def test_builtin_launchers_are_registered_as_a_plugin():
    regs = get_registries()
    assert {"vllm", "sglang", "command"} <= set(regs.launchers.names())
    assert regs.launchers.entry("vllm").provider == "rewardkit.serving"
    assert regs.launchers.get("vllm") is VLLMLauncher


def test_unknown_engine_names_the_known_ones():
    rm = rm_config({"engine": "vllmm", "model_path": "m"})
    with pytest.raises(UnknownNameError) as e:
        make_launcher(rm)
    assert "vllm" in str(e.value)


def test_vllm_preset_command_line_and_protocol():
    cfg = ServerConfig(
        gpus_per_replica=2,
        engine_args={
            "max_model_len": 4096,
            "enforce_eager": True,
            "seed": None,
            "enable_prefix_caching": False,
        },
    )
    launcher = VLLMLauncher(cfg)
    argv = launcher.command("127.0.0.1", 8123, "/models/rm")
    assert argv[:3] == ["vllm", "serve", "/models/rm"]
    assert argv[argv.index("--port") + 1] == "8123"
    assert "--enable-sleep-mode" in argv and "--enforce-eager" in argv and "--seed" not in argv
    assert "--no-enable-prefix-caching" in argv  # vLLM's boolean flags take --no-
    assert argv[argv.index("--tensor-parallel-size") + 1] == "2"
    assert argv[argv.index("--max-model-len") + 1] == "4096"
    assert launcher.environment() == {"VLLM_SERVER_DEV_MODE": "1"}
    sleep = launcher.sleep_call(2)
    assert (sleep.method, sleep.path, sleep.params) == ("POST", "/sleep", {"level": "2"})
    assert launcher.wake_call().path == "/wake_up"


def test_sglang_preset_command_line_and_protocol():
    launcher = SGLangLauncher(ServerConfig(engine="sglang", gpus_per_replica=1))
    argv = launcher.command("127.0.0.1", 30000, "/models/rm")
    assert "sglang.launch_server" in argv and "--enable-memory-saver" in argv
    assert argv[argv.index("--model-path") + 1] == "/models/rm"
    assert launcher.sleep_call(1).path == "/release_memory_occupation"
    assert launcher.wake_call().path == "/resume_memory_occupation"


def test_command_override_keeps_the_preset_protocol_and_fills_placeholders():
    cfg = ServerConfig(engine="vllm", command="myserver --bind {host}:{port} --weights {model_path}")
    launcher = VLLMLauncher(cfg)
    assert launcher.command("127.0.0.1", 9, "/m") == ["myserver", "--bind", "127.0.0.1:9", "--weights", "/m"]
    assert launcher.sleep_call(1).path == "/sleep"  # still vLLM's protocol
    with pytest.raises(ConfigError, match="placeholder"):
        VLLMLauncher(ServerConfig(command="x {gpu}")).command("h", 1, "m")


def test_engine_flags():
    assert engine_flags({"a_b": 1, "on": True, "off": False, "xs": [1, 2], "d": {"k": 1}}) == [
        "--a-b", "1", "--on", "--xs", "1", "2", "--d", '{"k": 1}',
    ]  # fmt: skip


def test_a_third_party_launcher_is_an_ordinary_plugin():
    class MyLauncher(ServerLauncher):
        name = "my-engine"

        def preset_command(self, host, port, model_path):
            return ["my-engine", model_path, str(port)]

    class Plugin:
        @staticmethod
        @hookimpl
        def register_server_launchers(register):
            register(MyLauncher, name="my-engine")

    check = check_plugin(Plugin, name="my-launchers")
    assert check.registered == {"launchers": ["my-engine"]}
    assert check.objects["launchers"]["my-engine"] is MyLauncher


def test_server_config_names_and_placement_default():
    rm = rm_config(
        {"engine": "sglang", "model_path": "m", "replicas": 3, "gpus_per_replica": 2, "command": "x"}
    )
    assert (rm.server.engine, rm.server.replicas, rm.server.gpus_per_replica) == ("sglang", 3, 2.0)
    assert rm.server_placement == "colocated"  # verl: no resource pool of its own
    assert rm_config({"model_path": "m"}, enable_resource_pool=True).server_placement == "standalone"
    assert rm_config({"model_path": "m", "placement": "standalone"}).server_placement == "standalone"
    with pytest.raises(ConfigError, match="placement"):
        rm_config({"placement": "both"})


# -- local replicas ------------------------------------------------------------------------------
def test_replicas_start_on_free_ports_and_close_leaves_no_process():
    rm = rm_config(standin_server(replicas=2, flags="--startup-delay 0.5", placement="standalone"))
    group = start_servers(rm)
    try:
        assert len(set(group.urls)) == 2 and all(u.startswith("http://127.0.0.1:") for u in group.urls)
        pids = group.pids
        assert [os.getpgid(stats(u)["pid"]) for u in group.urls] == pids  # each in its own group
        assert not group.asleep  # standalone: awake
    finally:
        group.close()
    assert all(gone(pid) for pid in pids)


def test_a_server_that_exits_at_start_fails_with_its_log_tail():
    rm = rm_config(standin_server(replicas=2, flags="--exit-at-start 7"))
    with pytest.raises(ServerStartError) as e:
        start_servers(rm)
    msg = str(e.value)
    assert "exited with code 7" in msg and "CUDA out of memory (pretend)" in msg and "log tail" in msg


def test_startup_deadline_kills_the_slow_server_and_quotes_its_log():
    rm = rm_config(standin_server(flags="--startup-delay 60", startup_timeout_s=1.5))
    group = ServerGroup(rm, make_launcher(rm))
    with pytest.raises(ServerStartError) as e:
        group.start()
    assert "not healthy within startup_timeout_s=1.5s" in str(e.value)
    assert "standin: starting" in str(e.value)
    assert all(gone(pid) for pid in group.pids)


def test_colocated_replicas_sleep_after_start_and_fan_out_reaches_every_replica():
    rm = rm_config(standin_server(replicas=3, sleep_level=2))
    group = start_servers(rm)
    try:
        assert group.asleep
        woke = group.wake_up()
        assert set(woke) == {"r0", "r1", "r2"} and all(t >= 0 for t in woke.values())
        slept = group.sleep()
        assert set(slept) == {"r0", "r1", "r2"}
        for url in group.urls:
            assert stats(url)["events"] == ["sleep:2", "wake_up", "sleep:2"]
        assert {"wake_up_s/r2", "sleep_s/r0"} <= set(group.metrics())
    finally:
        group.close()


def test_a_killed_replica_is_restarted_on_its_port_and_put_back_to_sleep():
    rm = rm_config(standin_server(replicas=2))
    group = start_servers(rm)
    try:
        assert group.asleep
        old_pid, url = group.pids[0], group.urls[0]
        os.killpg(old_pid, signal.SIGKILL)
        assert wait_for(lambda: group.restarts() == 1, timeout=60)
        assert group.urls[0] == url and group.pids[0] != old_pid
        assert wait_for(lambda: stats(url)["asleep"], timeout=10)
        assert stats(url)["events"] == ["sleep:1"]  # the new process was put back to sleep
        assert os.getpgid(stats(group.urls[1])["pid"]) == group.pids[1]  # the other replica untouched
        assert group.metrics()["restarts"] == 1.0
    finally:
        group.close()
    # the killed server's own child is re-parented to init, which reaps it in its own time
    assert wait_for(lambda: gone(old_pid) and all(gone(p) for p in group.pids), timeout=10)


def test_restarts_are_bounded():
    rm = rm_config(standin_server(max_restarts=0, placement="standalone"))
    group = start_servers(rm)
    try:
        os.killpg(group.pids[0], signal.SIGKILL)
        assert wait_for(lambda: 0 in group.failed, timeout=30)
        assert group.restarts() == 0
    finally:
        group.close()


def test_servers_left_open_are_stopped_when_the_owner_exits(tmp_path):
    """A script that starts servers and forgets to close them leaves no process behind."""
    import json
    import subprocess
    import sys

    script = tmp_path / "owner.py"
    script.write_text(
        "import json, sys\n"
        "from rewardkit.config import load_config\n"
        "from rewardkit.serving import start_servers\n"
        f"server = json.loads({json.dumps(json.dumps(standin_server(replicas=2)))})\n"
        "rm = load_config({'reward_model': {'enable': True, 'server': server}}).reward_model\n"
        "group = start_servers(rm)\n"
        "print(json.dumps(group.pids), flush=True)\n"
    )
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=dict(os.environ)
    )
    assert out.returncode == 0, out.stderr
    pids = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(pids) == 2 and all(gone(p) for p in pids)


def test_servers_go_down_when_their_owner_is_killed(tmp_path):
    """SIGKILL of the owning process (no atexit, no close): the supervisor takes each group down."""
    import json
    import subprocess
    import sys

    script = tmp_path / "owner.py"
    script.write_text(
        "import json, sys, time\n"
        "from rewardkit.config import load_config\n"
        "from rewardkit.serving import start_servers\n"
        f"server = json.loads({json.dumps(json.dumps(standin_server(replicas=2)))})\n"
        "rm = load_config({'reward_model': {'enable': True, 'server': server}}).reward_model\n"
        "group = start_servers(rm)\n"
        "print(json.dumps(group.pids), flush=True)\n"
        "time.sleep(120)\n"
    )
    owner = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=dict(os.environ)
    )
    try:
        pids = json.loads(owner.stdout.readline())
        assert len(pids) == 2 and not any(gone(p) for p in pids)
        owner.kill()
        owner.wait(timeout=10)
        assert wait_for(lambda: all(gone(p) for p in pids), timeout=30)
    finally:
        owner.kill()


def test_launched_urls_go_to_the_backend_as_a_list_or_the_first_with_a_warning():
    from rewardkit.backends.generative import GenerativeRM
    from rewardkit.serving.routing import backend_config

    rm = rm_config(standin_server(replicas=2), backend="generative")
    urls = ["http://127.0.0.1:1", "http://127.0.0.1:2"]
    assert backend_config(rm, urls, GenerativeRM).rollout["base_url"] == urls

    class OneURLBackend:  # a third-party backend that does not route over replicas
        name = "one-url"

    with pytest.warns(RuntimeWarning, match="only the first replica"):
        assert backend_config(rm, urls, OneURLBackend).rollout["base_url"] == urls[0]
    assert backend_config(rm, urls[:1], OneURLBackend).rollout["base_url"] == urls[0]
