"""Every `loopwise ...` command the README shows names a command that exists and only options that
command takes, so a reader who copies one gets the command, not a usage error."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import typer

from loopwise.cli import app

README = Path(__file__).parents[1] / "README.md"


def _commands() -> list[str]:
    lines, inside, continued = [], False, False
    for line in README.read_text().splitlines():
        if line.startswith("```"):
            inside = not inside
            continue
        if inside and (continued or line.startswith("loopwise ")):
            text = line.split("#")[0].strip()
            if continued:
                lines[-1] += " " + text.rstrip("\\").strip()
            else:
                lines.append(text.rstrip("\\").strip())
            continued = text.endswith("\\")
    return lines


def _is_group(command) -> bool:
    return hasattr(command, "list_commands")


def _resolve(words: list[str]):
    """The command the words name (typer's click objects), and the words after its name."""
    command = typer.main.get_command(app)
    rest = words[1:]
    while _is_group(command) and rest:
        sub = command.get_command(command.context_class(command), rest[0])
        if sub is None:
            break
        command, rest = sub, rest[1:]
    return command, rest


def test_the_readme_shows_commands():
    assert len(_commands()) >= 10


@pytest.mark.parametrize("line", _commands())
def test_a_readme_command_names_a_command_and_its_options(line):
    words = shlex.split(re.sub(r"[\[\]]", " ", line.replace("|", " ")))
    command, rest = _resolve(words)
    assert not _is_group(command), f"{line!r} names no command of {command.name!r}"
    known = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}
    unknown = [w.split("=")[0] for w in rest if w.startswith("--") and w.split("=")[0] not in known]
    assert not unknown, f"{line!r}: {command.name} takes no {unknown}"
