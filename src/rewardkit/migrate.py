"""Turn verl's legacy flat reward config into rewardkit's nested ``reward:`` section.

verl kept its reward settings at the top of the trainer config (``reward_model.*``,
``custom_reward_function``, ``sandbox_fusion``) before moving them under ``reward:``.
:func:`migrate_legacy` does the same move for rewardkit, key by key:

>>> cfg, messages = migrate_legacy({"reward_model": {"reward_manager": "dapo", "num_workers": 4}}, warn=False)
>>> cfg
{'reward': {'reward_manager': {'name': 'dapo'}, 'num_workers': 4}}
>>> messages[0]
'moved reward_model.reward_manager → reward.reward_manager.name'

Every key it moves, and every key it cannot carry (with the reason), gives a
:class:`LegacyConfigWarning` and a line in the returned messages. It avoids three bugs of verl's
own ``migrate_legacy_reward_impl`` (see docs/config.md): a path-only ``custom_reward_function``
keeps the name ``compute_score``; a url-only ``sandbox_fusion`` keeps its default limits; a custom
manager class (``reward_loop_class_name``) lands where the loader reads it.
"""

from __future__ import annotations

import copy
import math
import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from rewardkit import migrate_rules as R
from rewardkit.config import LEGACY_SECTIONS, looks_legacy, read_yaml
from rewardkit.errors import ConfigError
from rewardkit.hydra_overrides import overrides_to_config
from rewardkit.migrate_rules import DICT, DROP, MOVE, RM_KWARG, RULES, SECTION, KeyPath

__all__ = [
    "LEGACY_SECTIONS",
    "LegacyConfigWarning",
    "Migration",
    "is_legacy",
    "migrate_file",
    "migrate_legacy",
    "overrides_to_config",
]

# Read under these names by tests/test_migrate.py and tests/core/test_legacy_detection.py.
_MOVES, _DICT_MOVES, _DISCRIMINATIVE_MOVES = R.MOVES, R.DICT_MOVES, R.DISCRIMINATIVE_MOVES
_MANAGER_KEYS, _LEGACY_RM_KEYS, _VERL_ONLY_ROLLOUT = R.MANAGER_KEYS, R.LEGACY_RM_KEYS, R.VERL_ONLY_ROLLOUT


class LegacyConfigWarning(UserWarning):
    """A legacy verl config key was moved to the ``reward:`` layout, or could not be carried."""


class Migration(NamedTuple):
    """What :func:`migrate_legacy` returns: the new config and one message per change."""

    config: dict[str, Any]
    messages: list[str]


_UNRESOLVED = object()


def _not_a_rewardkit_manager(path: str, cls: str) -> str:
    """Why class ``cls`` in the file ``path`` is not a rewardkit manager, read without importing it;
    ``""`` when it may be one or the file cannot be read (a module path, a missing file)."""
    import ast

    file = Path(path)
    if path.startswith("pkg://") or file.suffix != ".py" or not file.is_file():
        return ""
    try:
        tree = ast.parse(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, SyntaxError):
        return ""
    imports = {
        (node.module or "").split(".")[0] if isinstance(node, ast.ImportFrom) else a.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for a in node.names
    }
    if not any(isinstance(n, ast.ClassDef) and n.name == cls for n in tree.body):
        return "is not defined at the top of that file"
    if "rewardkit" in imports:
        return ""
    if "verl" in imports:
        return "looks like a verl reward manager (its file imports verl, not rewardkit)"
    return "does not come from rewardkit (its file imports nothing from rewardkit)"


def _dotted(path: KeyPath) -> str:
    return ".".join(path)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _plain(value: Any, where: str) -> Any:
    """A deep copy of ``value`` as plain dicts/lists (OmegaConf and other mappings included)."""
    if type(value).__module__.startswith("omegaconf"):
        from omegaconf import OmegaConf  # only reachable when the caller already uses omegaconf

        try:
            return OmegaConf.to_container(value, resolve=True)
        except Exception:  # an interpolation OmegaConf cannot resolve: keep it, we try ourselves
            return OmegaConf.to_container(value, resolve=False)
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise ConfigError(f"{where or 'config'}: keys must be strings, got {k!r}")
            out[k] = _plain(v, f"{where}.{k}" if where else k)
        return out
    if isinstance(value, list | tuple):
        return [_plain(v, where) for v in value]
    return value


def _get(root: Any, path: KeyPath, default: Any = None) -> Any:
    node = root
    for part in path:
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node


def _has_interp(value: Any) -> bool:
    if isinstance(value, dict):
        return any(_has_interp(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_interp(v) for v in value)
    return isinstance(value, str) and "${" in value


def _omegaconf() -> Any:
    try:
        from omegaconf import OmegaConf
    except ImportError:
        return None
    return OmegaConf


_PROBE = "__rewardkit_probe__"


def _resolve(value: Any, root: dict[str, Any]) -> Any:
    """``value`` with its ``${a.b.c}`` references expanded against the whole document, by OmegaConf.

    ``_UNRESOLVED`` when one cannot be: a missing key, a loop, a relative reference, a resolver that
    fails, or omegaconf not installed (then every interpolation is left for the user to set).
    """
    if not _has_interp(value):
        return value
    OmegaConf = _omegaconf()
    if OmegaConf is None or "${." in str(value):
        return _UNRESOLVED
    try:
        doc = OmegaConf.create({**root, _PROBE: value})
        node = doc[_PROBE]
        out = OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node
    except Exception:  # omegaconf's errors, and RecursionError for a reference to itself
        return _UNRESOLVED
    return _UNRESOLVED if _has_interp(out) else out


def _load(config: Any) -> tuple[dict[str, Any], str]:
    is_path = isinstance(config, str | os.PathLike)
    origin = str(config) if is_path else ""
    data = read_yaml(config) if is_path else config
    if not (isinstance(data, Mapping) or type(data).__module__.startswith("omegaconf")):
        where = f" in {origin}" if origin else ""
        raise ConfigError(f"a verl config{where} must be a mapping, got {type(data).__name__}")
    data = _plain(data, "")
    if not isinstance(data, dict):
        raise ConfigError(f"a verl config must be a mapping, got {type(data).__name__}")
    return data, origin


def is_legacy(config: Any) -> bool:
    """Whether ``config`` (a mapping, or an OmegaConf config) holds verl legacy reward keys that
    :func:`migrate_legacy` would move (see :func:`rewardkit.config.looks_legacy`)."""
    try:
        data = config if isinstance(config, dict) else _plain(config, "")
    except ConfigError:
        return False
    return looks_legacy(data)


def _is_unwrapped_new(data: dict[str, Any]) -> bool:
    """Whether ``data`` is a valid ``reward:`` section written without the ``reward`` key.

    verl's server-launch keys under ``reward_model.rollout`` mark it as legacy even so.
    """
    from pydantic import ValidationError

    from rewardkit.config import RewardConfig

    rollout = _get(data, ("reward_model", "rollout"))
    if "reward" in data or not set(data) <= set(RewardConfig.model_fields):
        return False
    if isinstance(rollout, dict) and not R.VERL_ONLY_ROLLOUT.isdisjoint(rollout):
        return False
    try:
        with warnings.catch_warnings():  # a probe: a deprecated key is reported when it is loaded
            warnings.simplefilter("ignore", DeprecationWarning)
            RewardConfig.model_validate(data)
    except ValidationError:
        return False
    return True


def _all_off(value: Any) -> bool:
    """Whether a nested setting is all off/empty (``{enabled: false, ...}`` or ``{vllm: {}}``)."""
    if isinstance(value, dict):
        return (
            not value.get("enabled", value.get("enable", False))
            if ("enabled" in value or "enable" in value)
            else all(_all_off(v) for v in value.values())
        )
    return value is None or value == {} or value is False


def _is_section(path: KeyPath) -> bool:
    """Whether legacy keys live *below* ``path`` (so its value must be a mapping)."""
    n = len(path)
    return RULES.get(path, ("",))[0] in (DICT, SECTION) or any(
        len(p) > n and p[:n] == path and kind != DROP for p, (kind, _) in RULES.items()
    )


def _inert(path: KeyPath, value: Any) -> bool:
    """Whether a dropped legacy value sets nothing (empty, off, or verl's own default)."""
    if value is False or value == {} or value == []:
        return True
    if any(value == v and type(value) is type(v) for v in R.INERT_DROPS.get(path, ())):
        return True
    if path == ("reward_model", "profiler") and isinstance(value, dict):
        return not value.get("enable")
    if path == ("reward_model", "model", "fsdp_config") and isinstance(value, dict):
        return all(v is None or R.FSDP_DEFAULTS.get(k) == v for k, v in value.items())
    return False


def _bad(key: str, want: str, value: Any) -> ConfigError:
    return ConfigError(f"legacy key {key!r} must be {want}, got {type(value).__name__}: {_short(value)}")


class _Migrator:
    def __init__(self, root: dict[str, Any], new: dict[str, Any]):
        self.root = root
        self.out = new
        self.messages: list[str] = []
        self.provenance: dict[KeyPath, str] = {}  # target path → legacy key that set it
        self.inert: list[str] = []
        self.deferred: list[tuple[KeyPath, Any]] = []  # RM_KWARG rules, decided once the backend is
        self.rollout: list[tuple[str, str, Any]] = []  # (source key, rollout key, value) of verl's rollout
        self.picked_backend = False

    # -- writing -----------------------------------------------------------------------------------
    def note(self, message: str) -> None:
        self.messages.append(message)

    def say(self, what: str, /, **fields: Any) -> None:
        self.messages.append(R.SAYS[what].format(**fields))

    def put(self, target: KeyPath, value: Any, old: str) -> None:
        """Set ``reward.<target>`` from legacy key ``old``, unless something already set it."""
        node = self.out
        for i, part in enumerate(target[:-1]):
            nxt = node.get(part)
            if nxt is None:
                nxt = node[part] = {}
            elif not isinstance(nxt, dict):
                where = _dotted(target[: i + 1])
                return self.say(
                    "parent_taken", old=old, value=_short(value), where=where, existing=_short(nxt)
                )
            node = nxt
        key, dotted = target[-1], _dotted(target)
        existing, first = node.get(key), self.provenance.get(target)
        said = {"old": old, "value": _short(value), "target": dotted, "existing": _short(existing)}
        if existing is None or existing == {}:
            node[key] = value
            self.provenance[target] = old
            self.note(f"moved {old} → reward.{dotted}")
        elif isinstance(existing, dict) and isinstance(value, dict):
            for k, v in value.items():
                self.put((*target, k), v, f"{old}.{k}")
        elif existing == value:
            self.note(f"dropped {old}: same value as {first or f'reward.{dotted}'}")
        elif first is not None:
            self.say("set_first", first=first, **said)
        elif target in R.VERL_NEW_DEFAULTS and existing == R.VERL_NEW_DEFAULTS[target]:
            node[key] = value
            self.provenance[target] = old
            self.say("beats_default", **said)
        else:
            self.say("new_wins", **said)

    def carry(self, source: KeyPath | str, target: KeyPath, value: Any) -> None:
        old = source if isinstance(source, str) else _dotted(source)
        resolved = _resolve(value, self.root)
        if resolved is _UNRESOLVED:
            hint = "" if _omegaconf() else R.OMEGACONF_HINT
            self.say("unresolved", old=old, value=_short(value), target=_dotted(target), hint=hint)
        elif resolved is not None and resolved != {}:
            self.put(target, resolved, old)

    def drop(self, source: KeyPath, value: Any, reason: str) -> None:
        if isinstance(value, dict):
            value = {k: v for k, v in value.items() if k != "_target_"}
        resolved = _resolve(value, self.root)
        if resolved is None:
            return
        if _inert(source, value if resolved is _UNRESOLVED else resolved):
            self.inert.append(_dotted(source))
        else:
            self.note(f"not carried: {_dotted(source)}={_short(value)}: {reason}")

    # -- the legacy sections ----------------------------------------------------------------------
    def section(self, name: str) -> dict[str, Any]:
        value = self.root.get(name)
        if value is not None and not isinstance(value, dict):
            raise _bad(name, "a mapping", value)
        return value or {}

    def walk(self, path: KeyPath, value: Any) -> None:
        """Apply the rule table to one legacy key (and its subtree)."""
        if path[-1] == "_target_" or (
            len(path) == 2 and path[0] == "reward_model" and path[1] in R.MANAGER_KEYS
        ):
            return  # Hydra's class pointer, meaningless outside verl; or manager()'s
        kind, arg = RULES.get(path, ("", None))
        if kind in (MOVE, RM_KWARG):
            if isinstance(value, dict | list):
                raise _bad(_dotted(path), "a single value", value)
            if kind == MOVE:
                self.carry(path, arg, value)
            elif value is not None:
                self.deferred.append((path, value))
        elif value is not None and not isinstance(value, dict) and _is_section(path):
            raise _bad(_dotted(path), "a mapping", value)
        elif kind == DICT:
            self.carry(path, arg, value)
        elif kind == SECTION:
            for k, v in (value or {}).items():
                if k != "_target_" and v is not None:
                    self.rollout.append((_dotted((*path, k)), k, v))
        elif kind == DROP:
            if isinstance(value, dict):  # keys below a dropped section that do carry (fsdp param_offload)
                keep = {k for k in value if RULES.get((*path, k), ("",))[0] == MOVE}
                for k in keep:
                    self.walk((*path, k), value[k])
                value = {k: v for k, v in value.items() if k not in keep}
            self.drop(path, value, arg)
        elif isinstance(value, dict) and _is_section(path):
            for k, v in value.items():
                self.walk((*path, k), v)
        elif value is not None:
            self.note(f"not carried: {_dotted(path)}={_short(value)}: {R.UNKNOWN_REASON}")

    def manager(self, rm: dict[str, Any]) -> None:
        """``reward_model.reward_manager`` and the ``reward_loop_*`` trio, which only make sense together."""
        vals = {k: _resolve(rm.get(k), self.root) for k in R.MANAGER_KEYS}
        for k, v in vals.items():
            if v is _UNRESOLVED:
                old, value = f"reward_model.{k}", _short(rm.get(k))
                self.say("unresolved", old=old, value=value, target="reward_manager", hint="")
                vals[k] = None
            elif v is not None and not isinstance(v, str):
                raise ConfigError(R.SAYS["not_str"].format(key=k, type=type(v).__name__, value=_short(v)))
        name, source, path, cls = (vals[k] for k in R.MANAGER_KEYS)
        if source is not None and source not in ("register", "importlib"):
            raise ConfigError(R.SAYS["bad_source"].format(source=source))
        if source == "importlib":
            cls = cls or (name if name and name != "naive" else None)
            if not path or not cls:
                raise ConfigError(R.SAYS["no_module_path" if not path else "no_class"])
            self.put(("reward_manager", "source"), "importlib", "reward_model.reward_loop_source")
            self.put(("reward_manager", "module", "path"), path, "reward_model.reward_loop_module_path")
            by = "reward_model." + (
                "reward_loop_class_name" if vals["reward_loop_class_name"] else "reward_manager"
            )
            self.put(("reward_manager", "module", "name"), cls, by)
            # verl's new loader reads the class from reward_manager.name; rewardkit reads module.name
            # first. Setting both keeps the config right for either reader.
            self.put(("reward_manager", "name"), cls, by)
            if name is not None and name != cls and name != "naive":
                self.say("name_beside_class", name=name, cls=cls, path=path)
            if why := _not_a_rewardkit_manager(path, cls):
                self.say("not_our_manager", cls=cls, path=path, why=why)
            return
        if source == "register":
            self.put(("reward_manager", "source"), "register", "reward_model.reward_loop_source")
        for k in ("reward_loop_module_path", "reward_loop_class_name"):
            if vals[k] is not None:
                self.say("importlib_only", key=k, value=vals[k])
        if name in R.MANAGER_RENAMES:
            new, executor, why = R.MANAGER_RENAMES[name]
            self.put(("reward_manager", "name"), new, "reward_model.reward_manager")
            if self.out.get("executor") in (None, "auto"):
                self.out["executor"] = executor
            self.say("renamed_manager", name=name, new=new, executor=self.out.get("executor"), why=why)
        elif name is not None:
            self.put(("reward_manager", "name"), name, "reward_model.reward_manager")
            if name not in R.BUILTIN_MANAGERS:
                self.say("unknown_manager", name=name, builtins=", ".join(sorted(R.BUILTIN_MANAGERS)))

    # -- new-layout clean-up -----------------------------------------------------------------------
    def tidy_new(self) -> None:
        """Adapt verl's *new* layout where rewardkit differs (Hydra ``_target_``, ``reward_kwargs``...)."""
        targets: list[str] = []

        def strip(node: Any, path: KeyPath) -> None:
            if isinstance(node, dict):
                if "_target_" in node:
                    del node["_target_"]
                    targets.append(_dotted((*path, "_target_")))
                for k, v in node.items():
                    strip(v, (*path, k))

        strip(self.out, ("reward",))
        for path, new_key in R.RENAMED.items():
            parent = _get(self.out, path[:-1])
            if isinstance(parent, dict) and path[-1] in parent and new_key not in parent:
                parent[new_key] = parent.pop(path[-1])
                new_path = (*path[:-1], new_key)  # named: mypy misreads (*a, b) in a subscript as 3.11 syntax
                self.provenance[new_path] = f"reward.{_dotted(path)}"
                self.note(f"renamed reward.{_dotted(path)} → reward.{_dotted(new_path)}")
        if targets:
            self.note(f"dropped Hydra class pointers (verl-only): {', '.join(targets)}")
        kwargs = self.out.pop("reward_kwargs", None)
        if kwargs:
            if not isinstance(kwargs, dict):
                raise ConfigError(f"reward.reward_kwargs must be a mapping, got {type(kwargs).__name__}")
            self.put(("reward_manager", "kwargs"), kwargs, "reward.reward_kwargs")
        csk = self.out.pop("compute_score_kwargs", None)
        if csk:
            self.say("score_kwargs", value=_short(csk))
        rollout = _get(self.out, ("reward_model", "rollout"))
        for k in [k for k in rollout if k in R.VERL_ONLY_ROLLOUT] if isinstance(rollout, dict) else ():
            value = rollout.pop(k)
            if value is not None:
                self.rollout.append((f"reward.reward_model.rollout.{k}", k, value))
        rm = self.out.get("reward_manager")
        if not isinstance(rm, dict):
            return
        module = rm.get("module") if rm.get("source") == "importlib" else None
        if (
            isinstance(module, dict)
            and module.get("name") in (None, "custom_reward_manager")
            and rm.get("name")
        ):
            if module.get("name") is not None:
                self.say("module_alias", name=rm["name"])
            module["name"] = rm["name"]

    # -- after the move ----------------------------------------------------------------------------
    def pick_backend(self, rm: dict[str, Any]) -> None:
        """Choose the RM backend verl's legacy config implied (it had no ``backend`` key)."""
        if "backend" in rm:
            return
        self.picked_backend = True
        has_fn = bool(_get(self.out, ("custom_reward_function", "path")))
        if has_fn and self.rollout:
            rm["backend"] = "generative"
            return self.say("judge")
        rm["backend"] = "discriminative"
        self.note(R.SAYS["classifier"] + (R.SAYS["classifier_and_fn"] if has_fn else ""))

    def map_rollout(self, old: str, key: str, value: Any, *, generative: bool) -> None:
        """One key of verl's ``reward_model.rollout``: mapped for the generative judge, else dropped."""
        resolved = _resolve(value, self.root)
        if key not in R.VERL_ROLLOUT_DEFAULTS:  # not verl's: the user added it for a reason
            self.carry(old, ("reward_model", "rollout", key), value)
        elif resolved is not _UNRESOLVED and resolved == R.VERL_ROLLOUT_DEFAULTS[key]:
            self.inert.append(old)
        elif generative and key in R.GENERATIVE_ROLLOUT:
            self.carry(old, ("reward_model", "rollout", R.GENERATIVE_ROLLOUT[key]), value)
        elif key in ("disaggregation", "engine_kwargs") and isinstance(resolved, dict) and _all_off(resolved):
            self.inert.append(old)
        else:
            reason = R.SERVER_REASON if key in R.SERVER_KEYS else R.GENERATION_REASON
            self.note(f"not carried: {old}={_short(value)}: {reason}")

    def map_server(self, rm: dict[str, Any], backend: str) -> list[tuple[str, str, Any]]:
        """verl's server-launch rollout keys and RM resource-pool keys → ``reward.reward_model.server``.

        Returns the rollout entries left for :meth:`map_rollout` (sampling settings, the judge's).
        """
        values = {k: _resolve(v, self.root) for _, k, v in self.rollout}
        olds = {k: old for old, k, _ in self.rollout}
        engine = values.get("name") or "vllm"
        name_key = olds.get("name", "reward_model.rollout.name")
        if engine not in ("vllm", "sglang"):
            self.say("no_preset", old=name_key, engine=engine)
            return self.rollout
        server = ("reward_model", "server")
        self.put((*server, "engine"), engine, name_key)
        sizes = {k: values.get(k, R.VERL_ROLLOUT_DEFAULTS[k]) for k in R.SERVER_TOPOLOGY}
        sizes = {k: n if isinstance(n, int) and n > 0 else 1 for k, n in sizes.items()}
        gpus = math.prod(sizes.values())
        prefix = next(iter(olds.values())).rsplit(".", 1)[0]
        topology = " × ".join(f"{prefix}.{k}" for k in R.SERVER_TOPOLOGY) + " (verl's defaults where unset)"
        self.put((*server, "gpus_per_replica"), gpus, topology)
        pool = bool(rm.get("enable_resource_pool"))
        total = int(rm.get("n_gpus_per_node") or 0) * max(int(rm.get("nnodes") or 0), 1)
        if pool and total:
            self.put((*server, "replicas"), max(1, total // gpus), "n_gpus_per_node × nnodes / gpus")
        elif not pool:
            self.say("one_replica")
        placement = "standalone" if pool else "colocated"
        self.put((*server, "placement"), placement, "reward_model.enable_resource_pool")
        args = (*server, "engine_args")
        for key, flags in R.SERVER_ENGINE_ARGS.items():
            if key in values and values[key] is not None and values[key] is not _UNRESOLVED:
                flag = flags[engine]
                if flag is None:
                    self.note(f"not carried: {olds[key]}={_short(values[key])}: {engine} has no such flag")
                else:
                    self.put((*args, flag), values[key], olds[key])
        if gpus != sizes["tensor_model_parallel_size"]:  # the preset's TP = gpus_per_replica no longer holds
            for flag, key in zip(R.SERVER_TOPOLOGY_FLAGS[engine], R.SERVER_TOPOLOGY, strict=True):
                self.put((*args, flag), sizes[key], f"{prefix}.{key}")
        kwargs = values.get("engine_kwargs")
        if isinstance(kwargs, dict) and isinstance(kwargs.get(engine), dict):
            for k, v in kwargs[engine].items():
                self.put((*args, k), v, f"{olds['engine_kwargs']}.{engine}.{k}")
        if values.get("free_cache_engine") is False:
            self.say("keep_awake", old=olds["free_cache_engine"])
        if backend == "discriminative" and self.picked_backend:
            rm["backend"] = "served-classifier"
            self.say("served_classifier")
        judge = R.GENERATIVE_ROLLOUT if backend == "generative" else {}
        return [(o, k, v) for o, k, v in self.rollout if k not in R.SERVER_KEYS or k in judge]

    def finish(self) -> None:
        """What needs the whole config: the RM backend, its kwargs and server, DAPO's length, inert keys."""
        rm = self.out.get("reward_model")
        if not isinstance(rm, dict):
            rm = {}
        enabled = bool(rm.get("enable"))
        if enabled and self.provenance.get(("reward_model", "enable")):
            self.pick_backend(rm)
        backend = rm.get("backend", "generative") if isinstance(rm, dict) else "generative"
        unused = R.SAYS["rm_kwarg"].format(state=f"is {backend!r}" if enabled else "is off")
        for path, value in self.deferred:
            if enabled and backend == "discriminative":
                self.carry(path, RULES[path][1], value)
            else:
                self.drop(path, value, unused)
        if enabled and self.rollout:
            self.rollout = self.map_server(rm, backend)
            backend = rm.get("backend", backend)
        for old, key, value in self.rollout:
            self.map_rollout(old, key, value, generative=enabled and backend == "generative")
        kwargs = _get(self.out, ("reward_manager", "kwargs"))
        max_len = _get(self.root, ("data", "max_response_length"))
        fill = isinstance(kwargs, dict) and "overlong_buffer_cfg" in kwargs and "max_resp_len" not in kwargs
        if fill and isinstance(max_len, int):  # the DAPO manager's overlong penalty needs the length
            self.put(("reward_manager", "kwargs", "max_resp_len"), max_len, "data.max_response_length")
        if self.inert:
            self.say("inert", keys=", ".join(self.inert))


def migrate_legacy(config: Any, *, warn: bool = True, validate: bool = True) -> Migration:
    """Move verl's legacy reward keys into a ``{"reward": {...}}`` config that ``load_config`` accepts.

    ``config`` is a whole verl trainer config (a dict, an OmegaConf ``DictConfig`` or another
    mapping, or a YAML file path); its ``reward_model``, ``custom_reward_function`` and
    ``sandbox_fusion`` sections are migrated, an existing ``reward:`` section is kept (it wins
    over a conflicting legacy key unless it only holds verl's default), and other trainer
    sections are ignored. Unset (``null``) legacy keys are skipped, as verl does.

    Returns ``Migration(config, messages)``; with ``warn`` each message is also issued as a
    :class:`LegacyConfigWarning`. With ``validate`` the result is checked against
    :class:`~rewardkit.config.RewardConfig`. Raises :class:`~rewardkit.errors.ConfigError` naming
    the offending key for malformed input.
    """
    root, origin = _load(config)
    new = root.get("reward")
    if new is not None and not isinstance(new, dict):
        raise ConfigError(f"the 'reward' section must be a mapping, got {type(new).__name__}: {_short(new)}")
    if new is None and _is_unwrapped_new(root):
        return Migration({"reward": copy.deepcopy(root)}, [])

    m = _Migrator(root, copy.deepcopy(new) if new else {})
    m.tidy_new()
    rm = m.section("reward_model")
    m.manager(rm)
    for name in ("custom_reward_function", "sandbox_fusion"):
        for k, v in m.section(name).items():
            m.walk((name, k), v)
    for k, v in rm.items():
        m.walk(("reward_model", k), v)
    m.finish()

    result = {"reward": m.out}
    if warn:
        for message in m.messages:
            warnings.warn(message, LegacyConfigWarning, stacklevel=2)
    if validate:
        _validate(result, m.provenance, origin)
    return Migration(result, m.messages)


def _validate(result: dict[str, Any], provenance: dict[KeyPath, str], origin: str) -> None:
    from rewardkit.config import load_config

    try:
        load_config(result)
    except ConfigError as e:
        lines = str(e).splitlines()
        for i, line in enumerate(lines):
            for target, old in sorted(provenance.items(), key=lambda kv: -len(kv[0])):
                if line.lstrip().startswith(f"reward.{_dotted(target)}:"):
                    lines[i] = f"{line} [from legacy key {old}]"
                    break
        head = f"the migrated config{f' from {origin}' if origin else ''} is invalid: "
        raise ConfigError(head + "\n".join(lines)) from None


def migrate_file(src: str | os.PathLike, dst: str | os.PathLike | None = None, *, warn: bool = True) -> str:
    """Migrate the verl YAML config at ``src``; return the new YAML text (also written to ``dst`` if given).

    The text starts with comment lines listing what moved and what was not carried. This is what
    ``rewardkit migrate-config OLD.yaml -o NEW.yaml`` runs.
    """
    migration = migrate_legacy(src, warn=warn)
    header = [f"# rewardkit config migrated from {os.fspath(src)}"]
    header += [f"# - {line}" for msg in migration.messages for line in msg.splitlines()]
    body = yaml.safe_dump(migration.config, sort_keys=False, allow_unicode=True)
    text = "\n".join(header) + "\n" + body
    if dst is not None:
        Path(dst).write_text(text, encoding="utf-8")
    return text
