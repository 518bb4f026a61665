"""Helpers for testing rewardkit plugins: install a throwaway plugin, score through it, check its hooks.

>>> from rewardkit import hookimpl
>>> from rewardkit.testing import check_plugin, install_plugin, score_samples
>>> class MyPlugin:
...     @hookimpl
...     def register_scorers(self, register):
...         register(lambda response: float(response == "yes"), name="is_yes", data_sources=["yn"])
>>> check_plugin(MyPlugin()).registered["scorers"]
['is_yes']
>>> score_samples([{"data_source": "yn", "response": "yes"}], plugins=[MyPlugin()]).scores
[1.0]

:func:`install_plugin` makes a plugin discoverable the way an installed package is: it writes a
``*.dist-info`` folder with an ``entry_points.txt`` into a temporary folder, puts that folder on
``sys.path`` and forgets the loaded plugins (:func:`rewardkit.plugins.reset`), so
:func:`rewardkit.plugins.get_registries` finds the plugin through real entry-point discovery. On exit
everything is undone. :func:`plugin_fixture` wraps it as a pytest fixture.
"""

from __future__ import annotations

import contextlib
import difflib
import inspect
import itertools
import re
import shutil
import sys
import tempfile
import textwrap
import types
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pluggy

from rewardkit import hookspecs

if TYPE_CHECKING:
    from rewardkit.result import RewardResult

__all__ = [
    "InstalledPlugin",
    "PluginCheck",
    "PluginCheckError",
    "check_plugin",
    "hook_names",
    "install_plugin",
    "plugin_fixture",
    "score_samples",
    "write_dist_info",
]

_counter = itertools.count()


def hook_names() -> list[str]:
    """The names of every hook in :mod:`rewardkit.hookspecs`, sorted."""
    return sorted(
        name
        for name, obj in vars(hookspecs).items()
        if callable(obj) and hasattr(obj, f"{hookspecs.PROJECT_NAME}_spec")
    )


# ---------------------------------------------------------------------------------------------
# Installing a throwaway plugin through real entry-point discovery
# ---------------------------------------------------------------------------------------------


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", name)


def write_dist_info(
    folder: str | Path,
    distribution: str,
    version: str,
    entry_points: Mapping[str, str],
) -> Path:
    """Write ``<distribution>-<version>.dist-info`` (METADATA + entry_points.txt) into ``folder``.

    ``entry_points`` maps entry-point names to values (``"module"`` or ``"module:attr"``) in the
    ``rewardkit`` group. With ``folder`` on ``sys.path`` (or ``PYTHONPATH`` for a subprocess),
    :mod:`importlib.metadata` sees an installed distribution. Returns the dist-info path.
    """
    from rewardkit.plugins import ENTRY_POINT_GROUP

    dist_info = Path(folder) / f"{_safe(distribution)}-{version}.dist-info"
    dist_info.mkdir(parents=True, exist_ok=True)
    (dist_info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {distribution}\nVersion: {version}\n", encoding="utf-8"
    )
    lines = [f"[{ENTRY_POINT_GROUP}]", *(f"{k} = {v}" for k, v in entry_points.items()), ""]
    (dist_info / "entry_points.txt").write_text("\n".join(lines), encoding="utf-8")
    return dist_info


@dataclass
class InstalledPlugin:
    """What :func:`install_plugin` installed.

    ``path`` is the folder put on ``sys.path``: pass it in ``PYTHONPATH`` to let a subprocess
    discover the plugin too (only plugins given as source code or as importable modules can be
    imported there). ``module`` is the plugin's module name and ``entry_point`` the entry-point value.
    """

    name: str
    distribution: str
    version: str
    path: Path
    module: str
    entry_point: str


@contextlib.contextmanager
def install_plugin(
    plugin: Any,
    name: str | None = None,
    *,
    version: str = "0.0.0",
    distribution: str | None = None,
) -> Iterator[InstalledPlugin]:
    """Make ``plugin`` discoverable through the ``rewardkit`` entry-point group, for the ``with`` block.

    ``plugin`` is one of:

    * a module (its ``@hookimpl`` functions are the hooks), importable or built in memory;
    * any object whose methods are decorated with ``@hookimpl`` (a class instance);
    * a string of Python source code, written to a module file in the temporary folder (so a
      subprocess with :attr:`InstalledPlugin.path` on ``PYTHONPATH`` can import it too; source that
      raises on import gives a *broken* plugin, as a real one would).

    ``name`` is the entry-point name (default: the module's or class's name); ``distribution``
    defaults to ``"rewardkit-" + name``. Loaded plugins are reset on entry and on exit.
    """
    from rewardkit.plugins import reset

    n = next(_counter)
    if name is None:
        if isinstance(plugin, str):
            raise TypeError("install_plugin(source): give the plugin a name")
        name = getattr(plugin, "__name__", None) or type(plugin).__name__
        name = _safe(name.rpartition(".")[2]).lower()
    distribution = distribution or f"rewardkit-{name}"
    folder = Path(tempfile.mkdtemp(prefix=f"rewardkit-plugin-{_safe(name)}-"))
    added_modules: list[str] = []
    if isinstance(plugin, str):
        module = f"_rewardkit_test_plugin_{_safe(name)}_{n}"
        (folder / f"{module}.py").write_text(textwrap.dedent(plugin), encoding="utf-8")
        value = module
        added_modules.append(module)
    elif isinstance(plugin, types.ModuleType):
        module = plugin.__name__
        if sys.modules.get(module) is not plugin:
            module = f"_rewardkit_test_plugin_{_safe(name)}_{n}"
            sys.modules[module] = plugin
            added_modules.append(module)
        value = module
    else:
        module = f"_rewardkit_test_plugin_{_safe(name)}_{n}"
        holder = types.ModuleType(module, f"holder of test plugin {name!r}")
        holder.plugin = plugin  # type: ignore[attr-defined]
        sys.modules[module] = holder
        added_modules.append(module)
        value = f"{module}:plugin"
    write_dist_info(folder, distribution, version, {name: value})
    sys.path.insert(0, str(folder))
    reset()
    try:
        yield InstalledPlugin(name, distribution, version, folder, module, value)
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(str(folder))
        for m in added_modules:
            sys.modules.pop(m, None)
        reset()
        shutil.rmtree(folder, ignore_errors=True)


def plugin_fixture(plugin: Any, name: str | None = None, *, scope: str = "function", **kwargs: Any):
    """A pytest fixture that installs ``plugin`` (see :func:`install_plugin`) and yields the
    :class:`InstalledPlugin`. Assign it to a name in a test module or ``conftest.py``::

        my_plugin = plugin_fixture(my_plugin_module, name="myplugin")

        def test_it(my_plugin):
            assert "myscorer" in rewardkit.get_registries().scorers
    """
    import pytest

    def fixture():
        with install_plugin(plugin, name, **kwargs) as installed:
            yield installed

    return pytest.fixture(scope=scope)(fixture)


# ---------------------------------------------------------------------------------------------
# Scoring through the real engine
# ---------------------------------------------------------------------------------------------


def score_samples(
    samples: Iterable[Any],
    config: Any = None,
    plugins: Sequence[Any] | Mapping[str, Any] = (),
) -> RewardResult:
    """Score ``samples`` with :func:`rewardkit.compute` while ``plugins`` are installed.

    ``plugins`` is a list of plugins (as accepted by :func:`install_plugin`) or a mapping of
    entry-point name to plugin. ``config`` is anything :func:`rewardkit.load_config` accepts; a
    dict without ``executor`` gets ``executor: inline``, because a plugin built in memory cannot
    be imported by a worker process.
    """
    from rewardkit.config import load_config
    from rewardkit.engine_cache import compute

    if config is None or isinstance(config, dict):
        data = dict(config or {})
        section = data.get("reward", data)
        if isinstance(section, dict) and "executor" not in section:
            section = {**section, "executor": "inline"}
            data = {"reward": section} if "reward" in data else section
        config = data
    cfg = load_config(config)
    items = list(plugins.items()) if isinstance(plugins, Mapping) else [(None, p) for p in plugins]
    with contextlib.ExitStack() as stack:
        for name, p in items:
            stack.enter_context(install_plugin(p, name))
        return compute(samples, cfg)


# ---------------------------------------------------------------------------------------------
# Checking a plugin's hooks
# ---------------------------------------------------------------------------------------------


class PluginCheckError(AssertionError):
    """A plugin failed :func:`check_plugin`: a misspelt hook, bad hook arguments, or a bad registration."""


@dataclass
class PluginCheck:
    """What :func:`check_plugin` found.

    ``hooks``: the hooks the plugin implements; ``registered``: per kind (``scorers``,
    ``managers``, ``backends``, ``executors``, ``launchers``, ``commands``) the sorted names it registers;
    ``objects``: the same, name → registered object (lazy references resolved);
    ``warnings``: things that work but may surprise (a scorer that cannot travel to worker processes...).
    """

    hooks: list[str]
    registered: dict[str, list[str]] = field(default_factory=dict)
    objects: dict[str, dict[str, Any]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def _base_classes() -> dict[str, type]:
    from rewardkit.backends.base import RMBackend
    from rewardkit.executors.base import Executor
    from rewardkit.managers.base import RewardManager
    from rewardkit.serving.launcher import ServerLauncher

    return {
        "managers": RewardManager,
        "backends": RMBackend,
        "executors": Executor,
        "launchers": ServerLauncher,
    }


def _check_scorer_signature(name: str, fn: Any, batch: bool, warnings: list[str]) -> None:
    from rewardkit.scoring import BATCH_FIELDS, SINGLE_FIELDS, ref_of

    known = set(BATCH_FIELDS) if batch else set(SINGLE_FIELDS)
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        params = []
    for p in params:
        if p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
            continue
        if p.name not in known and p.default is p.empty:
            warnings.append(
                f"scorer {name!r}: parameter {p.name!r} is not a field rewardkit passes "
                f"({', '.join(sorted(known))}) and has no default; it must come from config kwargs"
            )
    if ref_of(fn) is None:
        warnings.append(
            f"scorer {name!r} is not a module-level function, so it cannot run in worker "
            "processes or Ray actors (use executor: inline, or define it at module level)"
        )


def check_plugin(plugin: Any, name: str = "plugin-under-test") -> PluginCheck:
    """Validate a plugin's hooks and registrations without installing it; raise :class:`PluginCheckError`.

    Checks that every ``@hookimpl`` names a hook in :mod:`rewardkit.hookspecs` (a misspelt hook
    fails, naming the closest real one), that hook functions take only the spec's arguments, and
    that each ``register_*`` hook runs and registers valid objects: callable scorers with names,
    classes (or lazy ``"module:Class"`` references that import) subclassing the right base, no
    name registered twice and no clash with a built-in. ``register_commands`` is called with a
    fresh :mod:`click` group. Returns a :class:`PluginCheck`.
    """
    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    try:
        pm.register(plugin, name=name)
    except pluggy.PluginValidationError as e:
        raise PluginCheckError(f"plugin {name!r}: {e}") from None
    known = hook_names()
    unknown = sorted(
        hc.name
        for hc in (pm.get_hookcallers(plugin) or [])
        if not hc.has_spec() and not all(impl.optionalhook for impl in hc.get_hookimpls())
    )
    if unknown:
        hints = []
        for h in unknown:
            close = difflib.get_close_matches(h, known, n=1)
            hints.append(f"{h!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        raise PluginCheckError(
            f"plugin {name!r} implements unknown hook(s) {', '.join(hints)}; known hooks: {', '.join(known)}"
        )
    hooks = sorted(hc.name for hc in (pm.get_hookcallers(plugin) or []))
    result = PluginCheck(hooks=hooks)
    builtin = _builtin_names()
    for hook in hooks:
        kind = _KIND_OF_HOOK.get(hook)
        if kind is None:
            continue
        register = _recording_register(kind, result, builtin)
        try:
            getattr(pm.hook, hook)(register=register)
        except PluginCheckError:
            raise
        except Exception as e:
            raise PluginCheckError(f"plugin {name!r}: {hook} raised {type(e).__name__}: {e}") from e
    if "register_commands" in hooks:
        import click

        group = click.Group("rewardkit")
        try:
            pm.hook.register_commands(cli=group)
        except Exception as e:
            raise PluginCheckError(
                f"plugin {name!r}: register_commands raised {type(e).__name__}: {e}"
            ) from e
        result.objects["commands"] = dict(group.commands)
        clash = sorted(set(group.commands) & builtin.get("commands", set()))
        if clash:
            raise PluginCheckError(f"plugin {name!r} adds command(s) {clash} that rewardkit already has")
    result.registered = {k: sorted(v) for k, v in sorted(result.objects.items()) if v}
    return result


_KIND_OF_HOOK = {
    "register_scorers": "scorers",
    "register_reward_managers": "managers",
    "register_rm_backends": "backends",
    "register_executors": "executors",
    "register_server_launchers": "launchers",
}


def _builtin_names() -> dict[str, set[str]]:
    """Names rewardkit's built-in plugins register (and its own commands), per kind."""
    from rewardkit.plugins import BUILTIN_PLUGINS, get_registries

    regs = get_registries()
    out: dict[str, set[str]] = {}
    for kind in ("scorers", "managers", "backends", "executors", "launchers"):
        out[kind] = {e.name for e in getattr(regs, kind) if e.provider in BUILTIN_PLUGINS}
    try:
        from rewardkit.cli import cli

        out["commands"] = set(cli.commands)
    except Exception:  # the CLI is optional for this check
        out["commands"] = set()
    return out


def _recording_register(kind: str, result: PluginCheck, builtin: dict[str, set[str]]):
    from rewardkit.scoring import resolve_ref

    seen = result.objects.setdefault(kind, {})

    def add(obj_name: Any, obj: Any) -> None:
        if not isinstance(obj_name, str) or not obj_name:
            raise PluginCheckError(f"{kind}: {obj!r} registered without a name")
        if obj_name in seen:
            raise PluginCheckError(f"{kind}: {obj_name!r} is registered twice")
        if obj_name in builtin.get(kind, set()):
            raise PluginCheckError(f"{kind}: {obj_name!r} clashes with a rewardkit built-in of that name")
        seen[obj_name] = obj

    if kind == "scorers":

        def register_scorer(fn, name=None, data_sources=(), batch=False):
            if not callable(fn):
                raise PluginCheckError(f"register_scorers: {fn!r} is not callable")
            name = name or getattr(fn, "__name__", None)
            if isinstance(data_sources, str):
                data_sources = (data_sources,)
            if not all(isinstance(d, str) and d for d in data_sources):
                raise PluginCheckError(f"scorer {name!r}: data_sources must be non-empty strings")
            _check_scorer_signature(str(name), fn, bool(batch), result.warnings)
            add(name, fn)

        return register_scorer

    base = _base_classes()[kind]

    def register_class(cls, name=None):
        if isinstance(cls, str):
            if name is None:
                raise PluginCheckError(f"{kind}: lazy reference {cls!r} needs a name")
            try:
                cls = resolve_ref(cls)
            except Exception as e:
                raise PluginCheckError(f"{kind} {name!r}: cannot import {cls!r}: {e}") from e
        if not (isinstance(cls, type) and issubclass(cls, base)):
            raise PluginCheckError(
                f"{kind} {name!r}: {cls!r} is not a subclass of {base.__module__}.{base.__name__}"
            )
        if inspect.isabstract(cls):
            missing = ", ".join(sorted(cls.__abstractmethods__))
            raise PluginCheckError(
                f"{kind} {name!r}: {cls.__name__} leaves abstract method(s) {missing} undefined"
            )
        add(name or getattr(cls, "name", None) or cls.__name__, cls)

    return register_class
