"""Commands an exchange agent may run while it answers: the engine's tools as documented command
lines (the same tools a model gets as tool calls), listed in every exchange prompt."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from loopwise.core.engines import engines
from loopwise.core.propose._base import ProposalRequest
from loopwise.core.propose._prompt import render_template


@dataclass(frozen=True)
class AgentCommand:
    """One command an agent may run.

    Attributes:
        purpose: what it tells the agent, in one line.
        argv: the command line, word by word (``QUERY`` and the like are for the agent to fill in).
        needs: what it needs beyond this machine's CPU, e.g. ``an NVIDIA GPU``; empty: runs anywhere.
    """

    purpose: str
    argv: tuple[str, ...]
    needs: str = ""

    @property
    def line(self) -> str:
        """The command as a shell line."""
        return shlex.join(self.argv)


def agent_commands(request: ProposalRequest, folder: Path, draft: Path) -> list[AgentCommand]:
    """The commands the engine of ``request.kind`` offers an agent answering it (none for a kind
    no engine registered or one without commands)."""
    registered = engines().get(request.kind)
    return registered.commands(request, folder, draft) if registered is not None else []


def commands_section(commands: list[AgentCommand], draft: Path) -> str:
    """The prompt section that lists ``commands`` (empty text when there are none)."""
    if not commands:
        return ""
    return render_template("commands.md.j2", commands=commands, draft=str(draft))
