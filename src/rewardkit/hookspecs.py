"""The plugin contract: pluggy markers and hook specifications.

A plugin is a module holding functions decorated with :data:`hookimpl` whose names match the
specs below. Each ``register_*`` hook receives a ``register`` callable; call it once per object
the plugin provides. Built-in scorers, managers, backends and executors are registered through
these same hooks. Third-party plugins are found through the ``rewardkit`` entry-point group::

    [project.entry-points.rewardkit]
    myname = "my_module"
"""

from __future__ import annotations

from typing import Any, Protocol

import pluggy

PROJECT_NAME = "rewardkit"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
#: Decorate a plugin's hook functions with this: ``@rewardkit.hookimpl``.
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


class RegisterScorer(Protocol):
    """The ``register`` callable passed to :func:`register_scorers`."""

    def __call__(
        self,
        fn: Any,
        name: str | None = None,
        data_sources: list[str] | tuple[str, ...] = (),
        batch: bool = False,
        cheap: bool = False,
    ) -> None: ...


class RegisterClass(Protocol):
    """The ``register`` callable passed to the class-registering hooks."""

    def __call__(self, cls: type | str, name: str | None = None) -> None: ...


@hookspec
def register_scorers(register: RegisterScorer) -> None:
    """Register rule-based reward functions (scorers).

    :param register: call ``register(fn, name="gsm8k", data_sources=["openai/gsm8k"], batch=False)``
        once per scorer. ``fn`` is a module-level function (or a callable class instance that
        pickles) so that it can run in worker processes and Ray actors. ``name`` defaults to
        ``fn.__name__``. ``data_sources`` routes samples to it: exact names or shell-style patterns
        such as ``"aime*"``. With ``batch=True`` the function takes lists (``responses``,
        ``ground_truths``, ...) and returns a list. ``cheap=True`` declares it pure, fast and unable
        to hang or crash (no I/O, no subprocesses, no unbounded work): ``executor: auto`` then
        scores batches of such scorers in this process, without a worker round trip.

    Calling convention: rewardkit passes the fields the function names, by keyword: ``prompt``,
    ``response`` (alias ``solution_str``), ``ground_truth``, ``data_source``, ``extra_info``,
    ``sample``, plus any configured keyword arguments. It may be ``async def``. It returns a number
    or bool (the score), a dict with ``"score"`` plus extra fields, or ``None`` to abstain.
    """


@hookspec
def register_reward_managers(register: RegisterClass) -> None:
    """Register reward-manager classes.

    :param register: call ``register(cls, name="dapo")``; ``cls`` may also be a lazy
        ``"package.module:Class"`` string, imported only when a config asks for it. ``cls`` subclasses
        :class:`rewardkit.managers.base.RewardManager`: it is built with
        ``cls(context, **kwargs)`` (``kwargs`` from ``reward.reward_manager.kwargs``) and scores a
        batch with ``await manager.ascore(samples)``.
    """


@hookspec
def register_rm_backends(register: RegisterClass) -> None:
    """Register reward-model backends (discriminative models, LLM judges, remote reward servers).

    :param register: call ``register(cls, name="generative")``. ``cls`` subclasses
        :class:`rewardkit.backends.base.RMBackend`: built with ``cls(config)`` from
        ``reward.reward_model``, it goes through ``load() → wake_up() → ascore() → sleep() → close()``.
    """


@hookspec
def register_executors(register: RegisterClass) -> None:
    """Register executors: where and how scorer calls run (inline, process pool, Ray...).

    :param register: call ``register(cls, name="process")``. ``cls`` subclasses
        :class:`rewardkit.executors.base.Executor`, built with ``cls(config)``.
    """


@hookspec
def register_server_launchers(register: RegisterClass) -> None:
    """Register server launchers: how to start, health-check, sleep and wake an inference engine.

    :param register: call ``register(cls, name="vllm")``; ``cls`` may be a lazy
        ``"package.module:Class"`` string. ``cls`` subclasses
        :class:`rewardkit.serving.launcher.ServerLauncher`: built with ``cls(server_config)`` from
        ``reward.reward_model.server`` (whose ``engine`` names it), it builds each replica's command
        line and knows the health path and the sleep / wake requests.
    """


@hookspec
def register_commands(cli: Any) -> None:
    """Add sub-commands to the ``rewardkit`` command line.

    :param cli: the :mod:`click` group; decorate new commands with ``@cli.command()``.
    """
