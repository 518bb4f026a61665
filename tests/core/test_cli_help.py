"""`rewardkit serve --help` and `rewardkit score --help`: every option explains itself and its default."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from rewardkit.cli import cli

_UNSET = getattr(click.core, "UNSET", None)  # click >= 8.2: an option without a default


def _options(name: str) -> tuple[click.Context, list[click.Option]]:
    command = cli.get_command(click.Context(cli), name)
    assert command is not None, name
    return click.Context(command), [
        p for p in command.params if isinstance(p, click.Option) and p.name != "help"
    ]


@pytest.mark.parametrize("name", ["serve", "score"])
def test_every_option_has_help_and_shows_its_default(name):
    ctx, options = _options(name)
    assert len(options) >= 8
    out = " ".join(CliRunner().invoke(cli, [name, "--help"]).output.split())
    for opt in options:
        flag = max(opt.opts, key=len)
        assert opt.help and len(opt.help.split()) >= 3, f"{name} {flag}: no help text"
        assert flag in out, f"{name} {flag} missing from --help"
        default = opt.get_default(ctx, call=False)
        has_default = not opt.is_flag and default not in (None, (), False, _UNSET)
        if has_default:  # a concrete default is printed as [default: ...]
            assert opt.show_default, f"{name} {flag}: default {opt.default!r} not shown"
        elif not opt.is_flag and not opt.multiple:  # no default: the help says what happens then
            assert "Default:" in opt.help, f"{name} {flag}: help does not say what the default is"


def test_defaults_shown_are_the_ones_used():
    out = " ".join(CliRunner().invoke(cli, ["serve", "--help"]).output.split())
    for shown in (
        "[default: 127.0.0.1]",
        "[default: 30.0; x>0]",
        "[default: 1; x>=1]",
        "[default: 1024; x>=1]",
    ):
        assert shown in out, shown
    out = " ".join(CliRunner().invoke(cli, ["score", "--help"]).output.split())
    assert "[default: 512; x>=1]" in out and "[default: fail]" in out
