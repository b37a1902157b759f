"""What every ``ChatTool`` must do, checked the same way for each implementation."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from loopwise.core.propose.llm import ChatTool, ToolCall, run_tool_call
from loopwise.core.propose.llm._tools import anthropic_spec, openai_spec

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # what both APIs accept as a tool name


def check_chat_tool(tool: ChatTool, good_arguments: Mapping[str, Any]) -> str:
    """Checks the tool's declaration and its answers to a good and to bad calls; returns the good answer."""
    assert _NAME.match(tool.name) and tool.description.strip()
    schema = tool.parameters
    assert schema["type"] == "object" and set(schema.get("required", ())) <= set(schema["properties"])
    for spec in (openai_spec(tool), anthropic_spec(tool)):
        assert json.loads(json.dumps(spec)) == spec  # plain JSON on the wire
    tools = {tool.name: tool}
    good = run_tool_call(tools, ToolCall("good", tool.name, json.dumps(dict(good_arguments))))
    assert not good.is_error and good.content.strip(), good.content
    for bad in ("{", "[1, 2]", json.dumps({**good_arguments, "surplus_argument": 1})):
        answer = run_tool_call(tools, ToolCall("bad", tool.name, bad))
        assert answer.is_error and answer.content.startswith("error: ") and answer.call_id == "bad"
    for name in schema.get("required", ()):
        partial = {k: v for k, v in good_arguments.items() if k != name}
        answer = run_tool_call(tools, ToolCall("partial", tool.name, json.dumps(partial)))
        assert answer.is_error and name in answer.content
    return good.content
