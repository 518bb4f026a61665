"""Configuration: pydantic models in verl's nested ``reward:`` layout, YAML in and out.

Load with :func:`load_config` (a dict, a YAML path, or a :class:`RewardConfig`); dump with
:meth:`RewardConfig.to_yaml`. A YAML file may hold the section at top level or under ``reward:``.
Legacy verl keys (``reward_model.reward_manager`` and friends) are turned into this layout by
:func:`rewardkit.migrate.migrate_legacy`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal

import yaml
from pydantic import ConfigDict, Field, ValidationError, field_validator, model_validator

from rewardkit.errors import ConfigError
from rewardkit.options import Options, format_validation_error


class _Model(Options):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class RewardManagerConfig(_Model):
    """Which reward manager scores a batch.

    ``name`` is a registered manager (``naive``, ``batch``, ``dapo``, ``composite`` or a plugin's);
    ``source: importlib`` with ``module.path`` + ``module.name`` loads a custom class from a file
    or module instead, as verl's ``reward_loop_source`` / ``reward_loop_module_path`` /
    ``reward_loop_class_name`` did.
    """

    source: Literal["register", "importlib"] = Field(
        "register", description="register: a registered manager by name | importlib: a class from module"
    )
    name: str = Field("naive", description="naive | batch | dapo | composite | a plugin's manager")
    module: ModuleRef | None = Field(None, description="the class to load with source: importlib")
    kwargs: dict[str, Any] = Field(
        default_factory=dict, description="the manager's options (see Reward managers below)"
    )

    @model_validator(mode="after")
    def _check_importlib(self):
        if self.source == "importlib" and (self.module is None or not self.module.path):
            raise ValueError("reward_manager.source is 'importlib' but reward_manager.module.path is not set")
        return self


class ModuleRef(_Model):
    """A class or function to load from a file path or module (``path``) by ``name``."""

    path: str | None = Field(None, description="a .py file, pkg://package.module or a module name")
    name: str | None = Field(None, description="the attribute to load; default reward_manager.name")


class CustomRewardFunctionConfig(_Model):
    """verl's ``custom_reward_function``: a user function that replaces data-source routing.

    ``path`` is a ``.py`` file, ``pkg://package.module`` or ``module:function``; ``name`` defaults
    to ``compute_score``; ``reward_kwargs`` are passed to every call.
    """

    path: str | None = Field(None, description="a .py file, pkg://package.module or module:function")
    name: str = Field("compute_score", description="the function's name in path")
    reward_kwargs: dict[str, Any] = Field(default_factory=dict, description="keyword arguments of every call")


#: The largest weight a reward component may have: rewards are O(1), a bigger weight is a typo,
#: and it lets a sum of finite scores overflow to inf.
MAX_WEIGHT = 1e6


def _check_weight(value: float) -> float:
    if not math.isfinite(value) or abs(value) > MAX_WEIGHT:
        raise ValueError(f"weight must be a finite number within ±{MAX_WEIGHT:g}")
    return value


class ScorerEntry(_Model):
    """One component of a composite reward: a registered scorer, its weight and options."""

    name: str = Field(description="a registered scorer, or custom_reward_function")
    weight: float = Field(1.0, description="weight in the sum (0: a metric only)")
    kwargs: dict[str, Any] = Field(default_factory=dict, description="keyword arguments of the scorer")
    alias: str | None = Field(None, description="component name in results and metrics; default name")

    @field_validator("weight")
    @classmethod
    def _finite_weight(cls, v: float) -> float:
        return _check_weight(v)

    @property
    def key(self) -> str:
        """The component name used in results and metrics."""
        return self.alias or self.name


class ServerConfig(_Model):
    """``reward.reward_model.server``: rewardkit launches the reward model's inference servers.

    ``engine`` is a registered server launcher (``vllm``, ``sglang``, ``command`` or a plugin's):
    it knows the command line, the health path and the sleep / wake calls. ``command`` (a string
    with ``{host}``, ``{port}``, ``{model_path}`` placeholders, or a list of arguments) is the whole
    command line for ``engine: command``, and overrides a preset's command line while keeping its
    protocol. ``placement``: ``colocated`` shares the trainer's GPUs (replicas sleep between
    batches), ``standalone`` takes GPUs of its own; unset, it follows ``reward_model.enable_resource_pool``
    (true: standalone), as in verl. See docs/served-models.md.
    """

    engine: str = Field("vllm", description="vllm | sglang | command | a plugin's launcher")
    model_path: str | None = Field(None, description="model served; default reward_model.model_path")
    replicas: int = Field(1, ge=1, description="server processes, each on its own GPUs")
    gpus_per_replica: float = Field(1.0, ge=0, description="GPUs each replica holds (tensor parallel size)")
    engine_args: dict[str, Any] = Field(
        default_factory=dict, description="engine flags: {max_model_len: 4096} becomes --max-model-len 4096"
    )
    command: str | list[str] | None = Field(
        None, description="command line with {host}, {port}, {model_path}; overrides the preset's"
    )
    env: dict[str, str] = Field(default_factory=dict, description="extra environment of the server processes")
    host: str = Field("127.0.0.1", description="address the servers bind")
    startup_timeout_s: float = Field(
        600.0, gt=0, description="deadline for a replica to answer its health check"
    )
    placement: Literal["colocated", "standalone"] | None = Field(
        None,
        description="colocated (trainer's GPUs) | standalone (own GPUs); default from enable_resource_pool",
    )
    sleep_level: int = Field(
        1, ge=1, le=2, description="vLLM sleep level: 1 offloads weights, 2 discards them"
    )
    when_asleep: Literal["wake", "fail"] = Field(
        "wake", description="scoring while asleep: wake the servers first, or raise ServersAsleepError"
    )
    max_restarts: int = Field(3, ge=0, description="restarts of a replica that died, per replica")
    health_interval_s: float = Field(1.0, gt=0, description="how often the monitor checks the processes")
    request_timeout_s: float = Field(300.0, gt=0, description="deadline of one sleep / wake call")


class RewardModelConfig(_Model):
    """A reward model (``reward.reward_model``): discriminative, generative judge, remote server or a plugin.

    Backend-specific settings go in ``rollout`` (serving / client settings such as ``base_url``,
    ``model``, sampling parameters, concurrency) and ``kwargs``. The model's score is one component
    of the reward named ``"rm"`` with weight ``weight``; with no rule scorer configured it *is* the reward.
    With ``server`` set, rewardkit launches the model's inference servers (:class:`ServerConfig`).
    """

    enable: bool = Field(False, description="score with a reward model")
    backend: str = Field(
        "generative", description="generative | remote | discriminative | served-classifier | a plugin's"
    )
    model_path: str | None = Field(None, description="the model (a local directory or a served model's name)")
    enable_resource_pool: bool = Field(
        False,
        description="with server: its default placement (true: standalone, false: colocated); "
        "read nowhere else (Ray actors take rollout.ray.layout)",
    )
    n_gpus_per_node: int = Field(0, description="Ray: GPUs per node for the model's actors (x nnodes)")
    nnodes: int = Field(0, description="Ray: nodes for the model's actors")
    weight: float = Field(1.0, description="weight of the model's score (component rm)")
    offload: bool = Field(False, description="keep the weights off the accelerator between batches")

    @field_validator("weight")
    @classmethod
    def _finite_weight(cls, v: float) -> float:
        return _check_weight(v)

    rollout: dict[str, Any] = Field(
        default_factory=dict, description="HTTP backends' client settings; rollout.ray: Ray placement"
    )
    kwargs: dict[str, Any] = Field(default_factory=dict, description="the discriminative backend's settings")
    server: ServerConfig | None = Field(None, description="rewardkit launches the model's servers")

    @property
    def server_placement(self) -> str | None:
        """The served model's layout: ``server.placement``, else standalone iff ``enable_resource_pool``."""
        if self.server is None:
            return None
        if self.server.placement is not None:
            return self.server.placement
        return "standalone" if self.enable_resource_pool else "colocated"


class SandboxFusionConfig(_Model):
    """A remote code sandbox (SandboxFusion). ``url`` unset means the local subprocess sandbox."""

    RENAMED: ClassVar[dict[str, str]] = {"max_concurrent": "max_concurrency"}

    url: str | None = Field(None, description="SandboxFusion endpoint; unset: the local sandbox")
    max_concurrency: int = Field(64, gt=0, description="requests in flight to the sandbox")
    memory_limit_mb: int = Field(1024, gt=0, description="memory limit of one program")


class SandboxConfig(_Model):
    """The local code sandbox: how untrusted programs are isolated (see docs/scorers.md, "Local sandbox")."""

    mode: Literal["auto", "bwrap", "namespaces", "unconfined"] = Field(
        "auto", description="auto: bwrap if it works here, else namespaces; never unconfined by itself"
    )
    allow_unconfined: bool = Field(
        False, description="run code without isolation when none can be had (instead of sandbox_unavailable)"
    )
    disk_mb: int = Field(64, gt=0, description="total size of everything one program may write")


class PluginSettings(_Model):
    """Which third-party plugins load. ``load=None`` means all; ``load=[]`` means none.

    The environment variables ``REWARDKIT_LOAD_PLUGINS`` / ``REWARDKIT_DISABLE_PLUGINS``
    (comma-separated entry-point names) override these when set.
    """

    load: list[str] | None = Field(None, description="entry-point names to load; null: all, []: none")
    disable: list[str] = Field(default_factory=list, description="entry-point names never loaded")


class RewardConfig(_Model):
    """The ``reward:`` section: everything that decides how a batch is scored."""

    num_workers: int | None = Field(None, ge=1, description="worker processes / actors; default: CPU count")
    executor: str = Field(
        "auto", description="inline | process | ray | auto (inline for cheap built-ins, else process)"
    )
    timeout_s: float | None = Field(30.0, gt=0, description="per-sample deadline; the work is killed past it")
    batch_timeout_s: float | None = Field(None, gt=0, description="deadline for a whole batch")
    max_retries: int = Field(1, ge=0, description="retries of a sample whose worker process crashed")
    max_input_chars: int | None = Field(
        50_000, gt=0, description="longer responses fail with input_too_large"
    )
    max_concurrency: int = Field(64, ge=1, description="async scorers / requests in flight")
    worker_memory_mb: int | None = Field(
        None, gt=0, description="address-space cap per process worker, MiB above its size at start"
    )
    dedup: bool = Field(True, description="score identical (data_source, response, ground_truth) once")
    failure_score: float | None = Field(None, description="score reported for failed samples; default nan")
    abstain_score: float | None = Field(None, description="score reported for abstained samples; default nan")
    default_scorer: str | None = Field(None, description="scorer for data sources no scorer claims")
    extra_keys: list[str] = Field(
        default_factory=list,
        description="scorer extras every sample reports to trainers (None where absent); acc, pred always",
    )
    strict_routing: bool = Field(
        False,
        description="raise for a sample no scorer applies to, instead of failing it with reason unroutable",
    )
    ray_address: str | None = Field(None, description="Ray cluster to join (executor: ray); default local")
    reward_manager: RewardManagerConfig = Field(default_factory=RewardManagerConfig, description="see below")
    custom_reward_function: CustomRewardFunctionConfig = Field(
        default_factory=CustomRewardFunctionConfig, description="see below"
    )
    scorers: list[ScorerEntry] = Field(
        default_factory=list, description="components of a composite reward (see below)"
    )
    reward_model: RewardModelConfig = Field(default_factory=RewardModelConfig, description="see below")
    sandbox_fusion: SandboxFusionConfig = Field(default_factory=SandboxFusionConfig, description="see below")
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig, description="see below")
    plugins: PluginSettings = Field(default_factory=PluginSettings, description="see below")

    @field_validator("scorers", mode="before")
    @classmethod
    def _scorer_shorthand(cls, v: Any) -> Any:
        # Accept ["gsm8k", "format"] and {"gsm8k": 1.0, "format": 0.1} as shorthands.
        if isinstance(v, dict):
            return [
                {"name": k, "weight": w} if not isinstance(w, dict) else {"name": k, **w}
                for k, w in v.items()
            ]
        if isinstance(v, list):
            return [{"name": x} if isinstance(x, str) else x for x in v]
        return v

    def to_dict(self) -> dict[str, Any]:
        """The config as plain data, defaults included."""
        return self.model_dump(mode="json")

    def to_yaml(self, path: str | Path | None = None) -> str:
        """The config as YAML under a ``reward:`` key; also written to ``path`` when given."""
        text = yaml.safe_dump({"reward": self.to_dict()}, sort_keys=False)
        if path is not None:
            Path(path).write_text(text, encoding="utf-8")
        return text


RewardManagerConfig.model_rebuild()


#: Top-level sections of a verl trainer config that hold legacy reward settings.
LEGACY_SECTIONS = ("reward_model", "custom_reward_function", "sandbox_fusion")

#: Keys of verl's legacy ``reward_model`` section that rewardkit's ``reward_model`` does not have
#: (:mod:`rewardkit.migrate` moves or drops them; a test keeps the two lists in step).
_LEGACY_ONLY_RM_KEYS = frozenset(
    {
        "forward_max_token_len_per_gpu",
        "inference",
        "launch_reward_fn_async",
        "max_length",
        "micro_batch_size",
        "micro_batch_size_per_gpu",
        "model",
        "num_workers",
        "overlong_buffer",
        "profiler",
        "reward_kwargs",
        "reward_loop_class_name",
        "reward_loop_module_path",
        "reward_loop_source",
        "reward_manager",
        "sandbox_fusion",
        "strategy",
        "ulysses_sequence_parallel_size",
        "use_dynamic_bsz",
        "use_reward_loop",
    }
)

#: verl rollout (server-launch) keys that rewardkit never reads under ``reward_model.rollout``.
_VERL_ONLY_ROLLOUT_KEYS = frozenset(
    {
        "cudagraph_capture_sizes",
        "data_parallel_size",
        "disable_log_stats",
        "disaggregation",
        "do_sample",
        "dtype",
        "enable_chunked_prefill",
        "enable_prefix_caching",
        "enforce_eager",
        "engine_kwargs",
        "expert_parallel_size",
        "free_cache_engine",
        "full_determinism",
        "gpu_memory_utilization",
        "ignore_eos",
        "layered_summon",
        "limit_images",
        "load_format",
        "max_model_len",
        "max_num_batched_tokens",
        "max_num_seqs",
        "mtp",
        "multi_stage_wake_up",
        "n",
        "name",
        "pipeline_model_parallel_size",
        "prompt_length",
        "quantization",
        "quantization_config_file",
        "response_length",
        "scheduling_policy",
        "skip_tokenizer_init",
        "tensor_model_parallel_size",
        "top_k",
    }
)


def looks_legacy(data: Any) -> bool:
    """Whether the mapping ``data`` holds verl legacy reward keys (see :func:`rewardkit.migrate.is_legacy`).

    True for a whole verl trainer config with a ``reward_model`` / ``custom_reward_function`` /
    ``sandbox_fusion`` section, and for any mapping using a legacy-only key such as
    ``reward_model.reward_manager`` or ``reward_model.model``. False for a ``reward:`` section written
    at top level (``{"custom_reward_function": {"path": "r.py"}}``), even a misspelt one, so that
    ``load_config`` can say "did you mean".
    """
    if not isinstance(data, dict):
        return False
    if "reward" in data:
        return any(_has_value(data.get(s)) for s in LEGACY_SECTIONS)
    rm = data.get("reward_model")
    if isinstance(rm, Mapping):
        if any(k in _LEGACY_ONLY_RM_KEYS for k in rm):
            return True
        if _verl_rollout_keys(rm.get("rollout")):
            return True
    present = any(isinstance(data.get(s), Mapping) for s in LEGACY_SECTIONS)
    return present and not set(data) <= set(RewardConfig.model_fields)


def _verl_rollout_keys(rollout: Any) -> bool:
    return isinstance(rollout, Mapping) and any(k in _VERL_ONLY_ROLLOUT_KEYS for k in rollout)


def _has_value(node: Any) -> bool:
    if isinstance(node, Mapping):
        return any(_has_value(v) for v in node.values())
    return node is not None


def read_yaml(path: str | os.PathLike) -> Any:
    """Read a YAML file (an empty file is ``{}``); every failure is a :class:`ConfigError` naming the file."""
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read config file {path}: {e}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"config file {path} is not valid YAML: {e}") from None
    return {} if data is None else data


def load_config(config: RewardConfig | dict[str, Any] | str | os.PathLike | None = None) -> RewardConfig:
    """Build a :class:`RewardConfig` from ``None`` (defaults), a dict, a YAML file path or a config.

    A dict/YAML may hold the section at top level or under a ``reward`` key. Legacy verl keys are
    not accepted here; run them through :func:`rewardkit.migrate.migrate_legacy` first (the error
    says so).
    """
    if config is None:
        return RewardConfig()
    if isinstance(config, RewardConfig):
        return config
    origin = ""
    if isinstance(config, str | os.PathLike):
        origin = str(config)
        data = read_yaml(config)
    else:
        data = config
    if not isinstance(data, dict):
        raise ConfigError(
            f"reward config{f' in {origin}' if origin else ''} must be a mapping, got {type(data).__name__}"
        )
    if "reward" in data:
        others = sorted(set(data) - {"reward"})
        if "reward_model" in others or "custom_reward_function" in others:
            raise ConfigError(
                f"config{f' in {origin}' if origin else ''} mixes the new 'reward:' section with legacy keys "
                f"{others}; run `rewardkit migrate-config` on it"
            )
        data = data["reward"] or {}
        if not isinstance(data, dict):
            raise ConfigError("the 'reward' section must be a mapping")
        legacy = False
    else:
        legacy = True  # a legacy config never validates, but for verl-only keys under reward_model.rollout
    try:
        config = RewardConfig.model_validate(data)
    except ValidationError as e:
        if legacy and looks_legacy(data):
            raise _legacy_error() from None
        raise ConfigError(
            format_validation_error(
                e, RewardConfig, "reward.", f"invalid reward config{f' in {origin}' if origin else ''}:"
            )
        ) from None
    if legacy and _verl_rollout_keys(config.reward_model.rollout):
        raise _legacy_error()
    return config


def _legacy_error() -> ConfigError:
    return ConfigError(
        "this looks like verl's legacy flat config (reward_model.reward_manager / reward_model.model); "
        "convert it with `rewardkit migrate-config OLD.yaml -o NEW.yaml` or rewardkit.migrate.migrate_legacy()"
    )
