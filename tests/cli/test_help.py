"""`--help` of `pgq` and of every command and sub-command: it exits 0, lists every command with a
summary, and documents every option the parser accepts, so help cannot silently fall behind the code."""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import io
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from pgq.cli import COMMANDS, build_parser, main


def _commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[
        tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every (command path, parser) below `parser`, depth first."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*path, name), sub
                yield from _commands(sub, (*path, name))


COMMAND_PARSERS = list(_commands(build_parser()))


def _help(argv: list[str]) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main([*argv, "--help"]) == 0
    return out.getvalue()


def test_top_level_help_lists_every_command_with_a_summary() -> None:
    text = _help([])
    top = [path[0] for path, _ in COMMAND_PARSERS if len(path) == 1]
    assert len(top) == len(COMMANDS)
    for name in top:
        line = next((line for line in text.splitlines() if line.strip().startswith(name + " ")), None)
        assert line is not None, f"{name} missing from `pgq --help`"
        assert len(line.split(None, 1)) == 2, f"{name} has no summary in `pgq --help`"


@pytest.mark.parametrize(("path", "parser"), COMMAND_PARSERS, ids=[" ".join(p) for p, _ in COMMAND_PARSERS])
def test_every_command_help_documents_each_of_its_options(path: tuple[str, ...],
                                                          parser: argparse.ArgumentParser) -> None:
    text = _help(list(path))
    assert text.startswith("usage: pgq " + " ".join(path))
    assert parser.description, f"`pgq {' '.join(path)}` has no description"
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
            continue
        assert action.help, f"{action.option_strings or action.dest} of `pgq {' '.join(path)}` has no help"
        for option in action.option_strings:
            assert option in text, f"{option} missing from `pgq {' '.join(path)} --help`"


CLI_DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
GENERATED_FROM = "## `pgq --help`"


def _cli_reference() -> str:
    """The generated part of docs/cli.md: `pgq --help`, then every command's and sub-command's help."""
    from .test_commands import _all_commands

    parts = [GENERATED_FROM, "", "```", _help([]).rstrip("\n"), "```", "", "## Commands", ""]
    for path in _all_commands():
        if path:
            parts += [f"### `pgq {' '.join(path)}`", "", "```", _help(path).rstrip("\n"), "```", ""]
    return "\n".join(parts)


def test_the_cli_reference_in_the_docs_is_current(monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/cli.md ends with every command's --help, generated: PGQ_UPDATE_DOCS=1 rewrites it."""
    monkeypatch.setattr(os, "get_terminal_size", lambda *a: os.terminal_size((100, 40)))
    text = CLI_DOC.read_text()
    head = text[:text.index(GENERATED_FROM)]
    wanted = head + _cli_reference()
    if os.environ.get("PGQ_UPDATE_DOCS") == "1":
        CLI_DOC.write_text(wanted)
    assert text == wanted, "docs/cli.md is out of date: run this test with PGQ_UPDATE_DOCS=1"


@pytest.mark.parametrize(("path", "parser"), [(p, s) for p, s in COMMAND_PARSERS
                                              if any("--dsn" in a.option_strings for a in s._actions)],
                         ids=lambda v: " ".join(v) if isinstance(v, tuple) else "")
def test_secrets_on_the_command_line_are_said_to_show_in_ps(path: tuple[str, ...],
                                                           parser: argparse.ArgumentParser) -> None:
    """Every --dsn and --auth help says that a secret given there shows in `ps`, and names the
    environment variable to use instead."""
    for action in parser._actions:
        if {"--dsn", "--auth"} & set(action.option_strings):
            text = " ".join((action.help or "").split())
            assert "shows in `ps`" in text, (path, action.option_strings)
            assert ("$PGQ_DSN" if "--dsn" in action.option_strings else "$PGQ_DASHBOARD_AUTH") in text.split(
                "shows in `ps`")[1], (path, text)


def test_version_prints_the_installed_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"pgq {importlib.metadata.version('pgq-jobs')}\n"
