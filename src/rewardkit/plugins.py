"""The plugin manager: built-ins, entry points, allow/block lists and broken-plugin capture.

Plugins load once, lazily (on first use, never at ``import rewardkit``). A plugin whose import
or registration fails is recorded as a :class:`BrokenPlugin` and skipped; everything else keeps
working, and asking for a name only a broken plugin could provide says so.
"""

from __future__ import annotations

import importlib
import os
import sys
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pluggy

from rewardkit import hookspecs
from rewardkit.config import PluginSettings
from rewardkit.registry import Registry, ScorerRegistry

if sys.version_info >= (3, 12):
    from importlib import metadata
else:  # pragma: no cover - depends on the interpreter
    import importlib_metadata as metadata

ENTRY_POINT_GROUP = "rewardkit"
LOAD_ENV = "REWARDKIT_LOAD_PLUGINS"
DISABLE_ENV = "REWARDKIT_DISABLE_PLUGINS"

#: Built-in plugins, registered exactly like third-party ones. Each must import without torch/ray.
BUILTIN_PLUGINS = (
    "rewardkit.scorers",
    "rewardkit.managers",
    "rewardkit.executors",
    "rewardkit.backends",
    "rewardkit.serving",
)


@dataclass
class PluginInfo:
    """A loaded plugin: its name, where it came from, its hooks and what it registered."""

    name: str
    builtin: bool
    distribution: str | None = None
    version: str | None = None
    entry_point: str | None = None
    hooks: list[str] = field(default_factory=list)
    registered: dict[str, list[str]] = field(default_factory=dict)
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON form printed by ``rewardkit list-plugins --json``."""
        kinds = sorted(k for k, v in self.registered.items() if v)
        return {
            "name": self.name,
            "version": self.version,
            "distribution": self.distribution,
            "builtin": self.builtin,
            "kinds": kinds,
            "hooks": sorted(self.hooks),
            "registered": {k: sorted(v) for k, v in sorted(self.registered.items()) if v},
            "error": self.error,
        }


@dataclass
class BrokenPlugin(PluginInfo):
    """A plugin that failed to import or to register; ``error`` says why."""


@dataclass
class Registries:
    """Everything the loaded plugins registered."""

    scorers: ScorerRegistry
    managers: Registry
    backends: Registry
    executors: Registry
    plugins: list[PluginInfo]
    pm: pluggy.PluginManager
    launchers: Registry = field(default_factory=lambda: Registry("server launcher"))

    @property
    def broken(self) -> list[PluginInfo]:
        """Plugins that failed to import or register."""
        return [p for p in self.plugins if p.error is not None]


def _env_list(name: str) -> list[str] | None:
    value = os.environ.get(name)
    if value is None:
        return None
    return [x.strip() for x in value.split(",") if x.strip()]


def effective_settings(
    settings: PluginSettings | None = None,
) -> tuple[tuple[str, ...] | None, tuple[str, ...]]:
    """The (allow, block) lists after applying the environment over ``settings``."""
    settings = settings or PluginSettings()
    allow = _env_list(LOAD_ENV)
    if allow is None:
        allow = settings.load
    block = _env_list(DISABLE_ENV)
    if block is None:
        block = settings.disable
    return (None if allow is None else tuple(sorted(allow)), tuple(sorted(block)))


def _format_error(e: BaseException) -> str:
    last = traceback.extract_tb(e.__traceback__)[-1:] if e.__traceback__ else []
    where = f" ({os.path.basename(last[0].filename)}:{last[0].lineno})" if last else ""
    return f"{type(e).__name__}: {e}{where}"


def _hook_names(pm: pluggy.PluginManager, plugin: object) -> list[str]:
    return sorted(hc.name for hc in (pm.get_hookcallers(plugin) or []))


class _Loader:
    def __init__(self, allow: tuple[str, ...] | None, block: tuple[str, ...]):
        self.allow, self.block = allow, block
        self.pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
        self.pm.add_hookspecs(hookspecs)
        self.infos: dict[str, PluginInfo] = {}

    def _register(self, module: object, info: PluginInfo) -> None:
        try:
            self.pm.register(module, name=info.name)
        except Exception as e:  # pluggy.PluginValidationError, ValueError (already registered)
            info.error = _format_error(e)
            self.infos[info.name] = info
            return
        try:
            self.pm.check_pending()
        except pluggy.PluginValidationError as e:
            self.pm.unregister(module)
            info.error = f"unknown hook: {e}"
        info.hooks = _hook_names(self.pm, module) if info.error is None else []
        self.infos[info.name] = info

    def load_builtins(self) -> None:
        for modname in BUILTIN_PLUGINS:
            info = PluginInfo(name=modname, builtin=True, distribution="rewardkit", version=_own_version())
            try:
                module = importlib.import_module(modname)
            except Exception as e:  # a broken built-in must not hide the rest
                info.error = _format_error(e)
                self.infos[modname] = info
                continue
            self._register(module, info)

    def load_entry_points(self) -> None:
        if self.allow is not None and not self.allow:
            return
        seen: set[str] = set()
        for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
            if ep.name in seen:
                continue
            seen.add(ep.name)
            dist = getattr(ep, "dist", None)
            dist_name = dist.metadata["Name"] if dist is not None else None
            if self.allow is not None and ep.name not in self.allow and dist_name not in self.allow:
                continue
            if ep.name in self.block or (dist_name and dist_name in self.block):
                continue
            info = PluginInfo(
                name=ep.name,
                builtin=False,
                distribution=dist_name,
                version=dist.version if dist is not None else None,
                entry_point=f"{ep.name} = {ep.value}",
            )
            try:
                module = ep.load()
            except BaseException as e:  # noqa: BLE001 - a plugin may even call sys.exit on import
                if isinstance(e, KeyboardInterrupt):
                    raise
                info.error = _format_error(e)
                self.infos[info.name] = info
                continue
            self._register(module, info)

    def collect(self) -> Registries:
        regs = Registries(
            scorers=ScorerRegistry(),
            managers=Registry("reward manager"),
            backends=Registry("RM backend"),
            executors=Registry("executor"),
            plugins=[],
            pm=self.pm,
        )
        hooks: list[tuple[str, str, Callable[[str, PluginInfo], Callable]]] = [
            ("register_scorers", "scorers", lambda p, i: self._scorer_register(regs, p, i)),
            (
                "register_reward_managers",
                "managers",
                lambda p, i: self._class_register(regs.managers, "managers", p, i),
            ),
            (
                "register_rm_backends",
                "backends",
                lambda p, i: self._class_register(regs.backends, "backends", p, i),
            ),
            (
                "register_executors",
                "executors",
                lambda p, i: self._class_register(regs.executors, "executors", p, i),
            ),
            (
                "register_server_launchers",
                "launchers",
                lambda p, i: self._class_register(regs.launchers, "launchers", p, i),
            ),
        ]
        for hook_name, _kind, make_register in hooks:
            caller = getattr(self.pm.hook, hook_name)
            for impl in caller.get_hookimpls():
                info = self.infos[impl.plugin_name]
                if info.error is not None:
                    continue
                try:
                    impl.function(register=make_register(impl.plugin_name, info))
                except Exception as e:
                    info.error = f"{hook_name} failed: {_format_error(e)}"
                    # Undo what it registered before failing: half a plugin is worse than none.
                    for reg in (regs.scorers, regs.managers, regs.backends, regs.executors, regs.launchers):
                        reg.remove_provider(impl.plugin_name)
                    info.registered.clear()
        regs.plugins = sorted(self.infos.values(), key=lambda p: (not p.builtin, p.name))
        broken = [p for p in regs.plugins if p.error]
        if broken:
            hint = "Note: these plugins failed to load and may provide it: " + "; ".join(
                f"{p.name} ({p.distribution or '?'} {p.version or ''}): {p.error}".replace("  ", " ")
                for p in broken
            )
            for reg in (regs.scorers, regs.managers, regs.backends, regs.executors, regs.launchers):
                reg.hint = hint
        return regs

    def _scorer_register(self, regs: Registries, provider: str, info: PluginInfo):
        from rewardkit.scoring import ScorerSpec, ref_of

        def register(fn, name=None, data_sources=(), batch=False, cheap=False):
            if not callable(fn):
                raise TypeError(f"register_scorers: {fn!r} is not callable")
            if isinstance(data_sources, str):
                data_sources = (data_sources,)
            name = name or getattr(fn, "__name__", None)
            spec = ScorerSpec(name, fn, ref_of(fn), tuple(data_sources), bool(batch), provider)
            regs.scorers.add(
                name, spec, provider, data_sources=tuple(data_sources), batch=bool(batch), cheap=bool(cheap)
            )
            info.registered.setdefault("scorers", []).append(name)

        return register

    @staticmethod
    def _class_register(registry: Registry, kind: str, provider: str, info: PluginInfo):
        def register(cls, name=None):
            if isinstance(cls, str) and name is None:
                raise TypeError(f"register({cls!r}): a lazy 'module:Class' reference needs a name")
            name = name or getattr(cls, "name", None) or getattr(cls, "__name__", None)
            registry.add(name, cls, provider)
            info.registered.setdefault(kind, []).append(name)

        return register


def _own_version() -> str:
    from rewardkit import __version__

    return __version__


_cache: dict[tuple, Registries] = {}
_cache_lock = threading.Lock()


def get_registries(settings: PluginSettings | None = None) -> Registries:
    """Load plugins (once per effective allow/block setting) and return what they registered."""
    key = effective_settings(settings)
    with _cache_lock:
        regs = _cache.get(key)
        if regs is None:
            loader = _Loader(*key)
            loader.load_builtins()
            loader.load_entry_points()
            regs = loader.collect()
            _cache[key] = regs
        return regs


def reset() -> None:
    """Forget loaded plugins, so the next :func:`get_registries` discovers them again (tests, after pip install)."""
    with _cache_lock:
        _cache.clear()
    metadata_cache = getattr(metadata, "_cache_clear", None)
    if metadata_cache:  # pragma: no cover
        metadata_cache()
    importlib.invalidate_caches()
