"""Server launchers: what an inference engine's command line is and how to talk to it.

A :class:`ServerLauncher` is a *protocol*, not a process: it builds a replica's command line and
names the health check and the sleep / wake requests. :mod:`rewardkit.serving.process` runs the
processes. Presets (checked against the engines' docs, see docs/served-models.md):

* ``vllm`` (vLLM >= 0.8 with the V1 engine; endpoints as of 0.10/0.11): ``vllm serve MODEL
  --enable-sleep-mode`` with ``VLLM_SERVER_DEV_MODE=1``; ``GET /health``; ``POST /sleep?level=N``,
  ``POST /wake_up``, ``GET /is_sleeping``.
* ``sglang`` (SGLang >= 0.4.6, ``--enable-memory-saver``): ``python -m sglang.launch_server``;
  ``GET /health``; ``POST /release_memory_occupation`` and ``POST /resume_memory_occupation``.
* ``command``: any program; the user's command line, ``GET /health``, no sleep or wake.
"""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from rewardkit.errors import ConfigError

if TYPE_CHECKING:
    from rewardkit.config import RewardModelConfig, ServerConfig
    from rewardkit.plugins import Registries


@dataclass(frozen=True)
class Call:
    """One HTTP request of the protocol: ``method`` ``path`` with query ``params`` and a JSON body."""

    method: str
    path: str
    params: dict[str, str] = field(default_factory=dict)
    json: Any = None


def engine_flags(args: dict[str, Any], *, negate_false: bool = False) -> list[str]:
    """``{max_model_len: 4096, enforce_eager: true}`` → ``--max-model-len 4096 --enforce-eager``.

    ``None`` leaves a flag out; ``false`` too, or writes ``--no-flag`` with ``negate_false`` (vLLM's
    boolean flags, e.g. ``--no-enable-prefix-caching``); a list repeats its values; a dict is JSON.
    """
    import json

    out: list[str] = []
    for key, value in args.items():
        flag = "--" + str(key).replace("_", "-")
        if value is None:
            continue
        if value is False:
            if negate_false:
                out.append(f"--no-{flag[2:]}")
            continue
        if value is True:
            out.append(flag)
        elif isinstance(value, list | tuple):
            out.extend([flag, *(str(v) for v in value)])
        elif isinstance(value, dict):
            out.extend([flag, json.dumps(value)])
        else:
            out.extend([flag, str(value)])
    return out


class ServerLauncher:
    """Base launcher: the command line of one replica and the requests of the engine's protocol.

    Built with ``cls(server_config)``. Subclasses set :attr:`health` and override
    :meth:`preset_command`, :meth:`sleep_call`, :meth:`wake_call` (``None``: the engine cannot
    sleep; wake/sleep are then no-ops for it) and :meth:`environment`.
    """

    name: ClassVar[str] = ""
    #: Health check: a GET that answers 200 once the model is loaded.
    health: ClassVar[str] = "/health"

    def __init__(self, config: ServerConfig):
        self.config = config

    def preset_command(self, host: str, port: int, model_path: str) -> list[str]:
        """The engine's own command line (without the user's ``command`` override)."""
        raise ConfigError(
            f"server engine {self.name or type(self).__name__!r} needs reward_model.server.command"
        )

    def command(self, host: str, port: int, model_path: str) -> list[str]:
        """The argv of one replica: ``server.command`` with its placeholders filled, else the preset's."""
        cmd = self.config.command
        if cmd is None:
            return self.preset_command(host, port, model_path)
        values = {"host": host, "port": str(port), "model_path": model_path, "python": sys.executable}
        parts = shlex.split(cmd) if isinstance(cmd, str) else list(cmd)
        try:
            return [p.format(**values) for p in parts]
        except (KeyError, IndexError, ValueError) as e:
            raise ConfigError(
                f"reward_model.server.command {cmd!r}: bad placeholder {e} "
                "(known: {host}, {port}, {model_path}, {python})"
            ) from None

    def environment(self) -> dict[str, str]:
        """Environment variables the engine needs (``server.env`` is added on top)."""
        return {}

    def sleep_call(self, level: int) -> Call | None:
        """The request that frees accelerator memory, or ``None`` when the engine has none."""
        return None

    def wake_call(self) -> Call | None:
        """The request that takes the memory back, or ``None``."""
        return None

    @property
    def can_sleep(self) -> bool:
        """Whether this engine has sleep / wake requests."""
        return self.sleep_call(1) is not None


class VLLMLauncher(ServerLauncher):
    """vLLM's OpenAI-compatible server with sleep mode (``/sleep``, ``/wake_up``, ``/is_sleeping``).

    The sleep endpoints exist only with ``VLLM_SERVER_DEV_MODE=1``, which this preset sets; bind
    the servers to 127.0.0.1 (the default) since they are not meant for end users.
    """

    name = "vllm"

    def preset_command(self, host: str, port: int, model_path: str) -> list[str]:
        """``vllm serve MODEL --host H --port P --enable-sleep-mode --tensor-parallel-size N ...``."""
        args = dict(self.config.engine_args)
        tp = max(1, int(self.config.gpus_per_replica))
        args.setdefault("tensor_parallel_size", tp)
        args.setdefault("enable_sleep_mode", True)
        flags = engine_flags(args, negate_false=True)
        return ["vllm", "serve", model_path, "--host", host, "--port", str(port), *flags]

    def environment(self) -> dict[str, str]:
        """``VLLM_SERVER_DEV_MODE=1`` turns on the sleep / wake endpoints."""
        return {"VLLM_SERVER_DEV_MODE": "1"}

    def sleep_call(self, level: int) -> Call | None:
        """``POST /sleep?level=N`` (1: offload weights to CPU, drop the KV cache; 2: drop both)."""
        return Call("POST", "/sleep", {"level": str(level)})

    def wake_call(self) -> Call | None:
        """``POST /wake_up``."""
        return Call("POST", "/wake_up")


class SGLangLauncher(ServerLauncher):
    """SGLang's server with the memory saver (``/release_memory_occupation``, ``/resume_memory_occupation``)."""

    name = "sglang"

    def preset_command(self, host: str, port: int, model_path: str) -> list[str]:
        """``python -m sglang.launch_server --model-path M --host H --port P --enable-memory-saver --tp N ...``."""
        args = dict(self.config.engine_args)
        args.setdefault("tp_size", max(1, int(self.config.gpus_per_replica)))
        args.setdefault("enable_memory_saver", True)
        return [
            sys.executable,
            "-m",
            "sglang.launch_server",
            "--model-path",
            model_path,
            "--host",
            host,
            "--port",
            str(port),
            *engine_flags(args),
        ]

    def sleep_call(self, level: int) -> Call | None:
        """``POST /release_memory_occupation`` (weights and KV cache)."""
        return Call("POST", "/release_memory_occupation", json={})

    def wake_call(self) -> Call | None:
        """``POST /resume_memory_occupation``."""
        return Call("POST", "/resume_memory_occupation", json={})


class CommandLauncher(ServerLauncher):
    """Any program started from ``server.command``; health ``GET /health``, no sleep or wake."""

    name = "command"


def make_launcher(rm: RewardModelConfig, registries: Registries | None = None) -> Any:
    """The launcher ``reward_model.server.engine`` names, built with the server config."""
    from rewardkit.plugins import get_registries

    assert rm.server is not None
    regs = registries or get_registries()
    return regs.launchers.get(rm.server.engine)(rm.server)
