"""The ``rewardkit`` command line: ``list-plugins``, ``score``, ``migrate-config`` and plugin commands."""

from __future__ import annotations

import json
import math
import sys
import time
from collections import Counter
from pathlib import Path

import click

from rewardkit import __version__
from rewardkit.cli_overrides import apply_overrides, engine_override_options

#: Built-in commands that live in modules too heavy to import for ``--help``: name -> (where, short help).
_LAZY_COMMANDS = {
    "serve": (
        "rewardkit.server:serve_command",
        "Serve rewards over HTTP: /v1/score, OpenRLHF's /get_reward, /health, /metrics.",
    ),
}


class _Cli(click.Group):
    """rewardkit's group: heavy built-ins are imported when run, plugins loaded only for their commands.

    ``rewardkit --help`` and the built-in commands never import plugins, aiohttp or the engine.
    """

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *_LAZY_COMMANDS})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in _LAZY_COMMANDS and name not in self.commands:
            import importlib

            where, attr = _LAZY_COMMANDS[name][0].split(":")
            self.add_command(getattr(importlib.import_module(where), attr), name)
        if name not in self.commands and name not in _LAZY_COMMANDS:
            _attach_plugin_commands()
        return self.commands.get(name)

    def format_commands(self, ctx: click.Context, formatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.commands.get(name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, cmd.get_short_help_str(formatter.width - 6 - len(name))))
            elif cmd is None:
                rows.append((name, _LAZY_COMMANDS[name][1]))
        with formatter.section("Commands"):
            formatter.write_dl(rows)
        names = _third_party_plugins()
        if names:
            with formatter.section("Plugins"):
                formatter.write_text(
                    f"Installed: {', '.join(names)}. Commands they add run as `rewardkit NAME`; "
                    "`rewardkit list-plugins` shows what each registers."
                )


def _third_party_plugins() -> list[str]:
    """Names of installed plugin entry points (read from metadata; nothing is imported)."""
    from importlib import metadata

    return sorted({ep.name for ep in metadata.entry_points(group="rewardkit")})


@click.group(cls=_Cli, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="rewardkit")
def cli() -> None:
    """rewardkit: rewards for RL of language models.

    Score stored rollouts, inspect installed plugins, migrate verl configs.
    """


def _console(stderr: bool = False):
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=True)


# ---------------------------------------------------------------------------------------------
# list-plugins
# ---------------------------------------------------------------------------------------------


@cli.command("list-plugins")
@click.option("--json", "as_json", is_flag=True, help="Print a sorted JSON array instead of a table.")
@click.option("--all", "show_all", is_flag=True, help="Include rewardkit's built-in plugins.")
def list_plugins(as_json: bool, show_all: bool) -> None:
    """Show installed plugins, what they register, and any that failed to load.

    Exits with status 1 when a plugin is broken (after printing everything).
    """
    from rewardkit.plugins import get_registries

    regs = get_registries()
    plugins = [p for p in regs.plugins if show_all or not p.builtin]
    plugins.sort(key=lambda p: (p.builtin, p.name))
    if as_json:
        click.echo(json.dumps([p.to_dict() for p in plugins], indent=2))
    else:
        from rich.table import Table

        table = Table(title="rewardkit plugins" + ("" if show_all else " (use --all to include built-ins)"))
        for col in ("name", "version", "kinds", "registers", "status"):
            table.add_column(col)
        for p in plugins:
            d = p.to_dict()
            regs_text = "; ".join(f"{k}: {', '.join(v)}" for k, v in d["registered"].items())
            status = "[red]broken (see below)[/red]" if p.error else "[green]ok[/green]"
            table.add_row(p.name, p.version or "", ", ".join(d["kinds"]), regs_text, status)
        console = _console()
        if plugins:
            console.print(table)
        else:
            console.print(
                "No third-party plugins installed. `rewardkit list-plugins --all` shows the built-ins."
            )
        for p in plugins:
            if p.error:
                where = " ".join(x for x in (p.distribution, p.version) if x)
                console.print(
                    f"[red]{p.name}[/red] ({where or 'unknown distribution'}) failed to load: {p.error}"
                )
    if any(p.error for p in regs.plugins):
        broken = ", ".join(p.name for p in regs.plugins if p.error)
        click.echo(f"error: broken plugin(s): {broken}", err=True)
        sys.exit(1)


# ---------------------------------------------------------------------------------------------
# score
# ---------------------------------------------------------------------------------------------


def _summary_table(tally, elapsed: float):
    from rich.console import JustifyMethod
    from rich.table import Table

    table = Table(title="rewardkit score: summary")
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("data source", "left"),
        ("samples", "right"),
        ("mean score", "right"),
        ("ok", "right"),
        ("abstained", "right"),
        ("failed", "right"),
    )
    for col, justify in columns:
        table.add_column(col, justify=justify)
    total: Counter = Counter()
    for ds in sorted(tally.counts):
        c = tally.counts[ds]
        total.update(c)
        mean = f"{tally.sums[ds] / c['ok']:.4f}" if c["ok"] else "-"
        table.add_row(ds, str(sum(c.values())), mean, str(c["ok"]), str(c["abstained"]), str(c["failed"]))
    table.add_section()
    all_sum = sum(tally.sums.values())
    table.add_row(
        "all",
        str(sum(total.values())),
        f"{all_sum / total['ok']:.4f}" if total["ok"] else "-",
        str(total["ok"]),
        str(total["abstained"]),
        str(total["failed"]),
    )
    n = tally.rows
    rate = n / elapsed if elapsed > 0 else math.inf
    caption = f"{n} samples in {elapsed:.2f}s ({rate:,.1f} samples/s)"
    if tally.reasons:
        caption += "; failures: " + ", ".join(f"{r}={k}" for r, k in sorted(tally.reasons.items()))
    table.caption = caption
    return table


@cli.command("score")
@click.argument("rollouts", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write one JSON line per input line: the record plus score, status, extra and input_line. "
    "Default: ROLLOUTS.scored.jsonl",
)
@click.option(
    "-c",
    "--config",
    "config_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A reward config YAML (the `reward:` section, or verl's layout after migrate-config). "
    "Default: rewardkit's defaults.",
)
@engine_override_options
@click.option(
    "--chunk-size",
    type=click.IntRange(min=1),
    default=512,
    show_default=True,
    help="Samples per engine call; results are written and flushed after each chunk.",
)
@click.option(
    "--resume",
    is_flag=True,
    help="Keep the rows already in the output file (checked against the input's lines and uids) "
    "and score only the lines after them.",
)
@click.option(
    "--on-bad-line",
    type=click.Choice(["fail", "skip"]),
    default="fail",
    show_default=True,
    help="A malformed input line: stop before scoring (fail), or write a failed row with reason "
    "bad_input for it (skip).",
)
@click.option("--no-progress", is_flag=True, help="Do not show the progress bar.")
@click.option("--fail-on-error", is_flag=True, help="Exit with status 1 if any sample failed.")
def score(
    rollouts: Path,
    output: Path | None,
    config_path: Path | None,
    executor: str | None,
    num_workers: int | None,
    timeout_s: float | None,
    chunk_size: int,
    resume: bool,
    on_bad_line: str,
    no_progress: bool,
    fail_on_error: bool,
) -> None:
    """Score stored rollouts (JSONL) and print a summary.

    Each line is a sample: `prompt`, `response`, `data_source`, `ground_truth` (or verl's
    `reward_model: {ground_truth}`), optional `extra_info` and `uid`. Ctrl-C keeps what was
    written (exit status 130); `--resume` carries on from there.
    """
    from rewardkit.config import load_config
    from rewardkit.engine import RewardEngine
    from rewardkit.errors import RewardKitError
    from rewardkit.scorejob import score_file

    try:
        config = load_config(config_path)
        config = apply_overrides(config, executor=executor, num_workers=num_workers, timeout_s=timeout_s)
    except RewardKitError as e:
        raise click.ClickException(str(e)) from None
    output = output or rollouts.with_suffix(".scored.jsonl")
    console = _console(stderr=True)
    start = time.perf_counter()
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    progress = Progress(
        TextColumn("scoring"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
        TextColumn("{task.fields[rate]}"),
        console=console,
        disable=no_progress,
        transient=False,
    )
    task = progress.add_task("score", total=None, rate="")
    first: list[int] = []

    def advance(done: int, total: int) -> None:
        if not first:
            first.append(done)
            progress.reset(task, total=total, completed=done)
        new = done - first[0]
        rate = new / max(time.perf_counter() - start, 1e-9)
        progress.update(task, completed=done, rate=f"{rate:,.0f} samples/s")

    engine = None
    try:
        with progress:
            engine = RewardEngine(config)
            tally = score_file(
                engine,
                rollouts,
                output,
                chunk_size=chunk_size,
                on_bad_line=on_bad_line,
                resume=resume,
                progress=advance,
            )
    except KeyboardInterrupt:
        written = progress.tasks[0].completed if progress.tasks else 0
        click.echo(
            f"interrupted: {int(written)} line(s) scored and written to {output}; "
            "run again with --resume to score the rest",
            err=True,
        )
        _close_quietly(engine)
        sys.exit(130)
    except RewardKitError as e:
        _close_quietly(engine)
        raise click.ClickException(str(e)) from None
    except BaseException:
        _close_quietly(engine)
        raise
    _close_quietly(engine)
    elapsed = time.perf_counter() - start
    out_console = _console()
    out_console.print(_summary_table(tally, elapsed))
    out_console.print(f"wrote {tally.rows} scored samples to {output}")
    if fail_on_error and any(c["failed"] for c in tally.counts.values()):
        sys.exit(1)


def _close_quietly(engine) -> None:
    """Close the engine; a second Ctrl-C while closing only skips the rest of the clean-up."""
    if engine is None:
        return
    try:
        engine.close()
    except KeyboardInterrupt:
        pass


# ---------------------------------------------------------------------------------------------
# migrate-config
# ---------------------------------------------------------------------------------------------


@cli.command("migrate-config")
@click.argument("old", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the new config here (default: print it).",
)
def migrate_config(old: Path, output: Path | None) -> None:
    """Convert verl's legacy flat `reward_model.*` config to rewardkit's nested `reward:` layout.

    The output is a rewardkit config (for `rewardkit score`, `RewardEngine`, the trainer
    integrations), not a verl one: verl rejects some of its keys (`reward_manager.kwargs`), and a
    legacy `reward_model.rollout` setting verl would still read (`temperature` for a discriminative
    model) is reported and dropped. Keep verl's own config for verl's side. Each moved key, each
    key that is not carried, and each manager rewardkit will not load is reported on stderr.
    """
    import warnings

    from rewardkit.errors import RewardKitError
    from rewardkit.migrate import migrate_file

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            text = migrate_file(old, output)
        except RewardKitError as e:
            raise click.ClickException(str(e)) from None
    for w in caught:
        click.echo(f"note: {w.message}", err=True)
    if output is None:
        click.echo(text, nl=False)
    else:
        click.echo(f"wrote {output}", err=True)


# ---------------------------------------------------------------------------------------------
# commands from elsewhere
# ---------------------------------------------------------------------------------------------


_plugins_attached = False


def _attach_plugin_commands() -> None:
    """Let plugins add their commands (once); they can never replace a built-in one."""
    global _plugins_attached
    if _plugins_attached:
        return
    _plugins_attached = True
    from rewardkit.plugins import get_registries

    regs = get_registries()
    builtin = dict(cli.commands)
    for impl in regs.pm.hook.register_commands.get_hookimpls():
        try:
            impl.function(cli=cli)
        except Exception as e:  # a broken plugin must not take the CLI down
            click.echo(f"warning: plugin {impl.plugin_name!r} failed to add its commands: {e}", err=True)
        clobbered = sorted(
            n
            for n in cli.commands
            if (n in _LAZY_COMMANDS and n not in builtin)
            or (n in builtin and cli.commands[n] is not builtin[n])
        )
        if clobbered:
            for n in clobbered:
                if n in builtin:
                    cli.commands[n] = builtin[n]
                else:
                    del cli.commands[n]
            click.echo(
                f"warning: plugin {impl.plugin_name!r} tried to replace rewardkit command(s) "
                f"{', '.join(clobbered)}; kept rewardkit's",
                err=True,
            )


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``rewardkit`` console script."""
    cli.main(args=argv, prog_name="rewardkit")


if __name__ == "__main__":
    main()
