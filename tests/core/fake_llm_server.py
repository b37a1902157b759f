"""A scripted LLM server on 127.0.0.1 speaking the real OpenAI and Anthropic wire formats.

Tests queue replies (``good``, ``malformed``, ``no_code``, ``truncated``, ``rate_limited``,
``server_error``, ``slow``, ``tool_use``), point a real SDK at ``base_url``, and read back ``requests``.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

GOOD_CODE = (
    "import torch\n\n\nclass ModelNew(torch.nn.Module):\n"
    "    def forward(self, x):\n        return torch.relu(x)\n"
)


@dataclass
class ScriptedCall:
    """One tool call in a scripted reply. A dict of arguments is sent as JSON (OpenAI) or as the
    ``input`` object (Anthropic); a string is sent verbatim (malformed JSON, a non-object input)."""

    name: str
    arguments: dict[str, Any] | str
    id: str = ""


@dataclass
class Scripted:
    """One scripted reply: a text (with its token counts) and maybe tool calls, or an HTTP error,
    maybe late."""

    text: str = ""
    status: int = 200
    truncated: bool = False
    delay_s: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    input_tokens: int = 1000
    output_tokens: int = 200
    tool_calls: list[ScriptedCall] = field(default_factory=list)


def good(code: str = GOOD_CODE, note: str = "Move: fuse relu into one kernel") -> Scripted:
    return Scripted(text=f"{note}\n\n```python\n{code}```\n")


def malformed() -> Scripted:
    return Scripted(text="Move: oops\n```python\ndef forward(self x):\n    return\n```\n")


def no_code() -> Scripted:
    return Scripted(text="I would fuse the two kernels, but I cannot write it now.")


def truncated() -> Scripted:
    return Scripted(text="Move: tile\n```python\nimport torch\nclass ModelNew(torch.nn.Mo",
                    truncated=True, output_tokens=4096)


def rate_limited(retry_after: str = "0.05") -> Scripted:
    return Scripted(status=429, headers={"Retry-After": retry_after})


def server_error(status: int = 500) -> Scripted:
    return Scripted(status=status)


def slow(delay_s: float) -> Scripted:
    return Scripted(text=good().text, delay_s=delay_s)


def call(name: str, arguments: dict[str, Any] | str, id: str = "") -> ScriptedCall:
    return ScriptedCall(name, arguments, id)


def tool_use(*calls: ScriptedCall, text: str = "") -> Scripted:
    """A reply that calls tools (ids ``call_<n>`` unless given); finish_reason ``tool_calls`` /
    stop_reason ``tool_use``."""
    numbered = [c if c.id else ScriptedCall(c.name, c.arguments, f"call_{i}") for i, c in enumerate(calls, 1)]
    return Scripted(text=text, tool_calls=numbered, output_tokens=50)


@dataclass
class Received:
    """One request as the server saw it."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any


class _Handler(BaseHTTPRequestHandler):
    server: FakeLLMServer

    def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
        pass

    def do_GET(self) -> None:
        self.server.record(self, None)
        if self.path.rstrip("/") == "/v1/models":
            self._send(200, {"object": "list", "data": [{"id": "fake-model", "object": "model",
                                                          "created": 0, "owned_by": "tests"}]})
        else:
            self._send(404, {"error": {"message": "not found", "type": "not_found"}})

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = json.loads(self.rfile.read(length) or b"null")
        self.server.record(self, body)
        path = self.path.split("?")[0].rstrip("/")
        if path == "/v1/chat/completions":
            self._reply(body, self._openai)
        elif path == "/v1/messages":
            # anthropic 2.x sends the key as "Authorization: Bearer"; 0.x sent "x-api-key"
            keyed = self.headers.get("x-api-key") or self.headers.get("authorization")
            if not keyed or not self.headers.get("anthropic-version"):
                self._send(401, _anthropic_error(401, "an API key and anthropic-version required"))
            else:
                self._reply(body, self._anthropic)
        else:
            self._send(404, {"error": {"message": f"no route {path}", "type": "not_found"}})

    def _reply(self, body: Any, render: Any) -> None:
        fault = _wire_fault(self.path, body)
        if fault:  # what the real APIs reject with a 400, before any scripted reply is used
            self._send(400, _error_body(self.path, 400, fault))
            return
        step = self.server.next_step()
        if step is None:  # 400: not retried, so a test with too short a script fails at once
            self._send(400, {"error": {"message": "fake server: script exhausted", "type": "x"}})
            return
        if step.delay_s and self.server.stopping.wait(step.delay_s):
            return
        if step.status != 200:
            self._send(step.status, _error_body(self.path, step.status), step.headers)
            return
        self._send(200, render(body, step), step.headers)

    def _openai(self, body: dict, step: Scripted) -> dict:
        message: dict[str, Any] = {"role": "assistant", "content": step.text or None}
        finish = "length" if step.truncated else "stop"
        if step.tool_calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {
                    "name": c.name,
                    "arguments": c.arguments if isinstance(c.arguments, str) else json.dumps(c.arguments)}}
                for c in step.tool_calls]
            finish = "tool_calls"
        return {
            "id": "chatcmpl-fake", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": step.input_tokens, "completion_tokens": step.output_tokens,
                      "total_tokens": step.input_tokens + step.output_tokens},
        }

    def _anthropic(self, body: dict, step: Scripted) -> dict:
        content: list[dict[str, Any]] = [{"type": "text", "text": step.text}] if step.text or not step.tool_calls else []
        content += [{"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments} for c in step.tool_calls]
        stop = "max_tokens" if step.truncated else "tool_use" if step.tool_calls else "end_turn"
        return {
            "id": "msg_fake", "type": "message", "role": "assistant", "model": body.get("model"),
            "content": content,
            "stop_reason": stop, "stop_sequence": None,
            "usage": {"input_tokens": step.input_tokens, "output_tokens": step.output_tokens},
        }

    def _send(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout test)
            pass


def _anthropic_error(status: int, message: str) -> dict:
    kinds = {401: "authentication_error", 429: "rate_limit_error", 529: "overloaded_error"}
    return {"type": "error", "error": {"type": kinds.get(status, "api_error"), "message": message}}


def _openai_fault(messages: list[dict]) -> str:
    pending: set[str] = set()
    for i, message in enumerate(messages):
        role = message.get("role")
        if role == "tool":
            if message.get("tool_call_id") not in pending:
                return f"messages[{i}]: a 'tool' message must answer a preceding assistant 'tool_calls' id"
            pending.discard(message["tool_call_id"])
            continue
        if pending:
            return f"messages[{i}]: tool_call ids {sorted(pending)} have no 'tool' message answering them"
        if role == "assistant":
            pending = {c["id"] for c in message.get("tool_calls") or ()}
    return ""


def _anthropic_fault(body: dict) -> str:
    messages = body.get("messages") or []
    kinds = {b.get("type") for m in messages if isinstance(m.get("content"), list) for b in m["content"]}
    if kinds & {"tool_use", "tool_result"} and not body.get("tools"):
        return "Requests which include `tool_use` or `tool_result` blocks must define tools."
    for i, message in enumerate(messages):
        if message.get("role") != ("user" if i % 2 == 0 else "assistant"):
            return f"messages.{i}: roles must alternate between user and assistant, starting with user"
        content = message["content"] if isinstance(message.get("content"), list) else []
        asked = {b["id"] for b in content if b.get("type") == "tool_use"}
        if asked:
            following = messages[i + 1]["content"] if i + 1 < len(messages) else []
            following = following if isinstance(following, list) else []
            leading = []
            for block in following:
                if block.get("type") != "tool_result":
                    break
                leading.append(block.get("tool_use_id"))
            if set(leading) != asked:
                return (f"messages.{i + 1}: `tool_use` ids were found without `tool_result` blocks "
                        f"immediately after: {sorted(asked - set(leading))}")
    return ""


def _wire_fault(path: str, body: Any) -> str:
    """Why the real API would reject this request's conversation; empty when it would not."""
    if not isinstance(body, dict):
        return ""
    if path.startswith("/v1/messages"):
        return _anthropic_fault(body)
    return _openai_fault(body.get("messages") or [])


def _error_body(path: str, status: int, message: str = "") -> dict:
    message = message or f"fake server: scripted HTTP {status}"
    if path.startswith("/v1/messages"):
        return _anthropic_error(status, message)
    return {"error": {"message": message, "type": "server_error", "code": status}}


class FakeLLMServer(ThreadingHTTPServer):
    """Serves scripted replies on an ephemeral port until ``stop``."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.script: deque[Scripted] = deque()
        self.requests: list[Received] = []
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)

    @property
    def base_url(self) -> str:
        """The root URL; OpenAI clients append ``/v1``, Anthropic clients use it as is."""
        return f"http://127.0.0.1:{self.server_address[1]}"

    def start(self) -> FakeLLMServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self.shutdown()
        self.server_close()
        self._thread.join(timeout=5)

    def queue(self, *steps: Scripted) -> None:
        with self._lock:
            self.script.extend(steps)

    def next_step(self) -> Scripted | None:
        with self._lock:
            return self.script.popleft() if self.script else None

    def record(self, handler: _Handler, body: Any) -> None:
        headers = {k.lower(): v for k, v in handler.headers.items()}
        with self._lock:
            self.requests.append(Received(handler.command, handler.path, headers, body))

    def posts(self) -> list[Received]:
        """The POST requests received, in order."""
        with self._lock:
            return [r for r in self.requests if r.method == "POST"]
