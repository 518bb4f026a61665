"""Configuration: pydantic models in verl's nested ``reward:`` layout, YAML in and out.

Load with :func:`load_config` (a dict, a YAML path, or a :class:`RewardConfig`); dump with
:meth:`RewardConfig.to_yaml`. A YAML file may hold the section at top level or under ``reward:``.
Legacy verl keys (``reward_model.reward_manager`` and friends) are turned into this layout by
:func:`rewardkit.migrate.migrate_legacy`.
"""

from __future__ import annotations

import os
import typing
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from rewardkit.errors import ConfigError


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class RewardManagerConfig(_Model):
    """Which reward manager scores a batch.

    ``name`` is a registered manager (``naive``, ``batch``, ``dapo``, ``composite`` or a plugin's);
    ``source: importlib`` with ``module.path`` + ``module.name`` loads a custom class from a file
    or module instead, as verl's ``reward_loop_source`` / ``reward_loop_module_path`` /
    ``reward_loop_class_name`` did.
    """

    source: Literal["register", "importlib"] = "register"
    name: str = "naive"
    module: ModuleRef | None = None
    kwargs: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check_importlib(self):
        if self.source == "importlib" and (self.module is None or not self.module.path):
            raise ValueError("reward_manager.source is 'importlib' but reward_manager.module.path is not set")
        return self


class ModuleRef(_Model):
    """A class or function to load from a file path or module (``path``) by ``name``."""

    path: str | None = None
    name: str | None = None


class CustomRewardFunctionConfig(_Model):
    """verl's ``custom_reward_function``: a user function that replaces data-source routing.

    ``path`` is a ``.py`` file, ``pkg://package.module`` or ``module:function``; ``name`` defaults
    to ``compute_score``; ``reward_kwargs`` are passed to every call.
    """

    path: str | None = None
    name: str = "compute_score"
    reward_kwargs: dict[str, Any] = Field(default_factory=dict)


class ScorerEntry(_Model):
    """One component of a composite reward: a registered scorer, its weight and options."""

    name: str
    weight: float = 1.0
    kwargs: dict[str, Any] = Field(default_factory=dict)
    alias: str | None = None

    @property
    def key(self) -> str:
        """The component name used in results and metrics."""
        return self.alias or self.name


class RewardModelConfig(_Model):
    """A reward model (``reward.reward_model``): discriminative, generative judge, remote server or a plugin.

    Backend-specific settings go in ``rollout`` (serving / client settings such as ``base_url``,
    ``model``, sampling parameters, concurrency) and ``kwargs``. The model's score is one component
    of the reward named ``"rm"`` with weight ``weight``; with no rule scorer configured it *is* the reward.
    """

    enable: bool = False
    backend: str = "generative"
    model_path: str | None = None
    enable_resource_pool: bool = False
    n_gpus_per_node: int = 0
    nnodes: int = 0
    weight: float = 1.0
    offload: bool = False
    rollout: dict[str, Any] = Field(default_factory=dict)
    kwargs: dict[str, Any] = Field(default_factory=dict)


class SandboxFusionConfig(_Model):
    """A remote code sandbox (SandboxFusion). ``url`` unset means the local subprocess sandbox."""

    url: str | None = None
    max_concurrent: int = Field(64, gt=0)
    memory_limit_mb: int = Field(1024, gt=0)


class PluginSettings(_Model):
    """Which third-party plugins load. ``load=None`` means all; ``load=[]`` means none.

    The environment variables ``REWARDKIT_LOAD_PLUGINS`` / ``REWARDKIT_DISABLE_PLUGINS``
    (comma-separated entry-point names) override these when set.
    """

    load: list[str] | None = None
    disable: list[str] = Field(default_factory=list)


class RewardConfig(_Model):
    """The ``reward:`` section: everything that decides how a batch is scored."""

    num_workers: int | None = Field(None, ge=1, description="worker processes / actors; default: CPU count")
    executor: str = Field(
        "auto", description="inline | process | ray | auto (process pool for large batches)"
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
    ray_address: str | None = None
    reward_manager: RewardManagerConfig = Field(default_factory=RewardManagerConfig)
    custom_reward_function: CustomRewardFunctionConfig = Field(default_factory=CustomRewardFunctionConfig)
    scorers: list[ScorerEntry] = Field(default_factory=list)
    reward_model: RewardModelConfig = Field(default_factory=RewardModelConfig)
    sandbox_fusion: SandboxFusionConfig = Field(default_factory=SandboxFusionConfig)
    plugins: PluginSettings = Field(default_factory=PluginSettings)

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


def _model_in(ann: Any) -> type[BaseModel] | None:
    """The pydantic model inside an annotation (``M``, ``M | None``, ``list[M]``), or None."""
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return ann
    for arg in typing.get_args(ann):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _format_validation_error(e: ValidationError, origin: str) -> str:
    lines = [f"invalid reward config{f' in {origin}' if origin else ''}:"]
    for err in e.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
        if err["type"] == "extra_forbidden":
            parent: type[BaseModel] | None = RewardConfig
            for part in err["loc"][:-1]:
                if isinstance(part, int):
                    continue  # a list index: parent already is the item model
                field = parent.model_fields.get(str(part))
                parent = _model_in(field.annotation) if field is not None else None
                if parent is None:
                    break
            known = sorted(parent.model_fields) if parent is not None else []
            import difflib

            close = difflib.get_close_matches(str(err["loc"][-1]), known, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            if known:
                hint += f" Known keys here: {', '.join(known)}."
            lines.append(f"  reward.{loc}: unknown key.{hint}")
        else:
            lines.append(f"  reward.{loc}: {err['msg']} (got {err.get('input')!r:.60})")
    return "\n".join(lines)


def _is_legacy(data: dict[str, Any]) -> bool:
    from rewardkit.migrate import is_legacy

    return is_legacy(data)


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
    elif _is_legacy(data):
        raise ConfigError(
            "this looks like verl's legacy flat config (reward_model.reward_manager / reward_model.model); "
            "convert it with `rewardkit migrate-config OLD.yaml -o NEW.yaml` or rewardkit.migrate.migrate_legacy()"
        )
    try:
        return RewardConfig.model_validate(data)
    except ValidationError as e:
        raise ConfigError(_format_validation_error(e, origin)) from None
