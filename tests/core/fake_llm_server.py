"""A scripted LLM server on 127.0.0.1 speaking the real OpenAI and Anthropic wire formats.

Tests queue replies (``good``, ``malformed``, ``no_code``, ``truncated``, ``rate_limited``,
``server_error``, ``slow``), point a real SDK at ``base_url``, and read back ``requests``.
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
class Scripted:
    """One scripted reply: a text (with its token counts) or an HTTP error, maybe late."""

    text: str = ""
    status: int = 200
    truncated: bool = False
    delay_s: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    input_tokens: int = 1000
    output_tokens: int = 200


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
        return {
            "id": "chatcmpl-fake", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model"),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": step.text},
                         "finish_reason": "length" if step.truncated else "stop"}],
            "usage": {"prompt_tokens": step.input_tokens, "completion_tokens": step.output_tokens,
                      "total_tokens": step.input_tokens + step.output_tokens},
        }

    def _anthropic(self, body: dict, step: Scripted) -> dict:
        return {
            "id": "msg_fake", "type": "message", "role": "assistant", "model": body.get("model"),
            "content": [{"type": "text", "text": step.text}],
            "stop_reason": "max_tokens" if step.truncated else "end_turn", "stop_sequence": None,
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


def _error_body(path: str, status: int) -> dict:
    message = f"fake server: scripted HTTP {status}"
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
