"""Tools a model may call during a proposal: the role, the records of a call, and running one.

A tool never stops a proposal: an unknown name, arguments that are not a JSON object or do not fit
the tool's schema, and any error the tool raises all become an error result the model reads.
"""

from __future__ import annotations

import abc
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loopwise.core.engines import engines
from loopwise.errors import UserError

MAX_RESULT_CHARS = 16_000
_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,),
    "object": (dict,), "array": (list,),
}


class ToolError(Exception):
    """A tool call that cannot be answered; its message goes back to the model."""


class ChatTool(abc.ABC):
    """A function offered to the model.

    Attributes:
        name: what the model calls it (letters, digits, ``_``).
        description: what it does and when to use it, for the model.
        parameters: the JSON schema of its arguments (an object schema).
    """

    name: str
    description: str
    parameters: Mapping[str, Any]

    @abc.abstractmethod
    def run(self, arguments: Mapping[str, Any]) -> str:
        """Answers one call whose arguments already fit ``parameters``.

        Raises:
            ToolError: (or any exception) the call cannot be answered; the message is sent back.
        """


@dataclass(frozen=True, kw_only=True)
class ToolContext:
    """What a run knows that its engine's tools may answer with, built by the proposer for each request.

    Attributes:
        kind: the registered engine asking (the request's ``kind``).
        task: the problem as the request states it (for kernels: the reference problem file's source).
        rules: the rules the judge enforces, one sentence each; the run's precision policy and
            tolerance among them, in the engine's own words.
        device: the device the run judges on (``cuda:0``, ``cpu``, ...); empty when unknown.
        folder: a folder of the run where tools may write files; None when the run has none.
    """

    kind: str
    task: str = ""
    rules: tuple[str, ...] = ()
    device: str = ""
    folder: Path | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "rules", tuple(self.rules))


Toolbox = Callable[[ToolContext], Sequence[ChatTool]]
"""The tools to offer for one request: those of the engine ``context.kind`` names, for its run."""


@dataclass(frozen=True)
class ToolCall:
    """A call the model asked for: its id, the tool's name, and the arguments as the model wrote them."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class ToolResult:
    """What a tool answered to one call (``is_error`` when the call could not be answered)."""

    call_id: str
    name: str
    content: str
    is_error: bool = False


def engine_tools(context: ToolContext) -> list[ChatTool]:
    """The chat tools the engine ``context.kind`` registered, made for the run ``context``
    describes; loaded on first use so that proposing for one engine never imports another; none
    when it has none or no engine is registered under that name."""
    registered = engines().get(context.kind)
    return registered.tools(context) if registered is not None else []


def _argument_errors(schema: Mapping[str, Any], arguments: Mapping[str, Any]) -> list[str]:
    """What is wrong with the arguments against an object schema: missing, unknown, mistyped."""
    properties: Mapping[str, Any] = schema.get("properties", {})
    errors = [f"missing argument {name!r}" for name in schema.get("required", ()) if name not in arguments]
    for name, value in arguments.items():
        spec = properties.get(name)
        if spec is None:
            errors.append(f"unknown argument {name!r} (expected {', '.join(properties) or 'none'})")
            continue
        wanted = _JSON_TYPES.get(spec.get("type", ""), (object,))
        if not isinstance(value, wanted) or (isinstance(value, bool) and bool not in wanted):
            errors.append(f"argument {name!r} must be a {spec['type']}, got {json.dumps(value)[:80]}")
    return errors


def run_tool_call(tools: Mapping[str, ChatTool], call: ToolCall) -> ToolResult:
    """Runs one call; every fault becomes an error result, never an exception."""
    def error(text: str) -> ToolResult:
        return ToolResult(call.id, call.name, f"error: {text}", is_error=True)

    tool = tools.get(call.name)
    if tool is None:
        return error(f"unknown tool {call.name!r}; the tools are {', '.join(tools) or 'none'}")
    try:
        arguments = json.loads(call.arguments) if call.arguments.strip() else {}
    except json.JSONDecodeError as exc:
        return error(f"the arguments are not valid JSON ({exc.msg} at character {exc.pos}): "
                     f"{call.arguments[:200]}")
    if not isinstance(arguments, dict):
        return error(f"the arguments must be a JSON object, got {call.arguments[:200]}")
    problems = _argument_errors(tool.parameters, arguments)
    if problems:
        return error("; ".join(problems))
    try:
        content = tool.run(arguments)
    except (ToolError, UserError) as exc:
        return error(str(exc))
    except Exception as exc:  # noqa: BLE001 - a tool's own bug must not end the proposal: the model is told
        return error(f"{type(exc).__name__}: {exc}")
    if len(content) > MAX_RESULT_CHARS:
        content = content[:MAX_RESULT_CHARS] + f"\n[cut at {MAX_RESULT_CHARS} characters]"
    return ToolResult(call.id, call.name, content)


def openai_spec(tool: ChatTool) -> dict[str, Any]:
    """The tool as an OpenAI chat-completions ``tools`` entry."""
    return {"type": "function",
            "function": {"name": tool.name, "description": tool.description, "parameters": dict(tool.parameters)}}


def anthropic_spec(tool: ChatTool) -> dict[str, Any]:
    """The tool as an Anthropic Messages ``tools`` entry."""
    return {"name": tool.name, "description": tool.description, "input_schema": dict(tool.parameters)}
