"""The engines registry: what each engine tells core about itself, and how core finds it by name.

An engine registers one :class:`Engine` record in a cheap module of its own (it imports nothing
heavy), declared under the entry-point group ``loopwise.engines`` (name = engine name, value =
``module:ENGINE``). A source checkout that was never installed exposes no entry points; then the
``engine`` module of every subpackage of ``loopwise`` is read instead: the same engines either way.

What an engine hands over is named by ``"module:attribute"`` strings and loaded on first use, so
looking an engine up never imports torch, and core never imports an engine's code by name.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Literal

from loopwise.errors import UserError

__all__ = ["GROUP", "Engine", "engine", "engine_for_run", "engines", "load"]

GROUP = "loopwise.engines"
ReplyFormat = Literal["python", "json"]


def load(target: str) -> Any:
    """The object a ``"module:attribute"`` string names (imported now)."""
    module, _, attribute = target.partition(":")
    value: Any = importlib.import_module(module)
    for part in attribute.split(".") if attribute else ():
        value = getattr(value, part)
    return value


@dataclass(frozen=True)
class Engine:
    """What one engine registers with core.

    Attributes:
        name: the engine's name, the first word of its commands and the ``kind`` of its proposal
            requests, e.g. ``kernels``.
        config_section: ``"module:Model"``, the pydantic model of its section of the config file;
            empty when it has none.
        prompts: ``"package:folder"``, where its prompt templates live (``system.md.j2``,
            ``user.md.j2``, ``<role>.md.j2``); empty when it has none.
        reply: what a model's reply to it carries: a ``python`` file or a ``json`` object.
        chat_tools: ``"module:function"``, ``tools(context) -> list[ChatTool]``, the tools a model
            may call while proposing for it, made for the run ``context`` (a ``ToolContext``:
            the problem, the rules, the device, the run's folder) describes; empty when there are none.
        run_kinds: ``{run kind: "module:function"}``, the runs it records and each one's HTML
            report builder, ``build(store, out: Path | None) -> Path``.
        proposer: ``"module:function"``, its own LLM-free proposer,
            ``make(settings, store=None, **context) -> Proposer``; empty when it has none.
        agent_commands: ``"module:function"``, the commands an exchange agent may run while it
            answers, ``commands(request, folder, draft) -> list[AgentCommand]`` (``draft``: where
            the agent saves its file to try it); empty when there are none.
    """

    name: str
    config_section: str = ""
    prompts: str = ""
    reply: ReplyFormat = "python"
    chat_tools: str = ""
    run_kinds: dict[str, str] | None = None
    proposer: str = ""
    agent_commands: str = ""

    def section_model(self) -> type | None:
        """The pydantic model of its config section, or None."""
        return load(self.config_section) if self.config_section else None

    def prompt_folder(self) -> Path | None:
        """The folder holding its prompt templates, or None."""
        if not self.prompts:
            return None
        package, _, folder = self.prompts.partition(":")
        return Path(str(resources.files(package) / folder))

    def tools(self, context: Any) -> list:
        """The chat tools offered while proposing for it in the run ``context`` describes (loaded now)."""
        return list(load(self.chat_tools)(context)) if self.chat_tools else []

    def commands(self, request: Any, folder: Path, draft: Path) -> list:
        """The commands an exchange agent may run for ``request`` (loaded now; none when it has none)."""
        return list(load(self.agent_commands)(request, folder, draft)) if self.agent_commands else []

    def report_builder(self, run_kind: str) -> Callable[..., Path]:
        """The HTML report builder of one of its run kinds.

        Raises:
            UserError: it records no runs of that kind.
        """
        target = (self.run_kinds or {}).get(run_kind)
        if target is None:
            raise UserError(f"the {self.name} engine records no {run_kind!r} runs")
        return load(target)

    def own_proposer(self) -> Callable[..., Any]:
        """Its LLM-free proposer factory.

        Raises:
            UserError: it has none.
        """
        if not self.proposer:
            raise UserError(f"the {self.name} engine has no LLM-free proposer")
        return load(self.proposer)


def _entry_point_engines() -> list[Engine]:
    return [ep.load() for ep in entry_points(group=GROUP)]


def _package_engines() -> list[Engine]:
    """Engines of this package's own subpackages, for a checkout that exposes no entry points."""
    package = importlib.import_module("loopwise")
    found = []
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        if not info.ispkg:
            continue
        name = f"{package.__name__}.{info.name}.engine"
        if importlib.util.find_spec(name) is not None:
            found.append(importlib.import_module(name).ENGINE)
    return found


@functools.lru_cache(maxsize=1)
def engines() -> dict[str, Engine]:
    """Every registered engine by name.

    Raises:
        ValueError: two engines share a name, or a registered object is not an ``Engine``.
    """
    found = _entry_point_engines() or _package_engines()
    registry: dict[str, Engine] = {}
    for item in found:
        if not isinstance(item, Engine):
            raise ValueError(f"group {GROUP} holds {item!r}, not an Engine")
        if item.name in registry:
            raise ValueError(f"engine {item.name!r} registered twice under group {GROUP}")
        registry[item.name] = item
    return registry


def engine(name: str) -> Engine:
    """The engine registered under ``name``.

    Raises:
        UserError: none is.
    """
    found = engines().get(name)
    if found is None:
        raise UserError(f"no engine {name!r} is registered (known: {', '.join(sorted(engines())) or 'none'})")
    return found


def engine_for_run(run_kind: str) -> Engine:
    """The engine that records runs of ``run_kind`` (e.g. ``kernels.optimize``).

    Raises:
        UserError: no engine records that kind.
    """
    for item in engines().values():
        if run_kind in (item.run_kinds or {}):
            return item
    raise UserError(f"no engine records runs of kind {run_kind!r}")
