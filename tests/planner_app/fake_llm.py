"""A scripted OpenAI-compatible chat-completions server on 127.0.0.1, for the agent tests.

It speaks the real wire format: POST /v1/chat/completions with a JSON body, answered
with a JSON completion, or with server-sent events (`data: {chunk}` ... `data: [DONE]`)
when the request says `"stream": true`, tool calls streamed as `index`-keyed deltas
and usage in a last chunk when `stream_options.include_usage` is set. Each request
takes the next reply of the script, so a test reads as the conversation it drives:

    llm.script(call("calculator", {"expression": "6*7"}), say("42"))

Every request body is kept (`llm.requests`) for the test to check what the loop sent.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Reply = dict[str, Any]


def say(text: str, **extra: Any) -> Reply:
    """A reply with text only (a final answer)."""
    return {"content": text, **extra}


def call(name: str, arguments: Any, call_id: str | None = None, **extra: Any) -> Reply:
    """A reply with one tool call; arguments given as a dict are sent as JSON text."""
    return calls((name, arguments, call_id), **extra)


def calls(*items: tuple[str, Any, str | None], **extra: Any) -> Reply:
    """A reply with several tool calls in one turn: (name, arguments, id or None)."""
    tool_calls = []
    for index, (name, arguments, call_id) in enumerate(items):
        text = arguments if isinstance(arguments, str) else json.dumps(arguments)
        tool_calls.append({"id": call_id or f"call_{index + 1}", "name": name, "arguments": text})
    return {"content": extra.pop("content", ""), "tool_calls": tool_calls, **extra}


def held(release: threading.Event, reply: Reply) -> Callable[[dict[str, Any]], Reply]:
    """A reply from a model that thinks until `release` is set (at most 30 s)."""

    def answer(body: dict[str, Any]) -> Reply:
        release.wait(30)
        return reply

    return answer


def fail(status: int, message: str) -> Reply:
    """An error response, shaped like OpenAI's (and vLLM's, Ollama's) error bodies."""
    return {"error": {"status": status, "message": message}}


@dataclass
class FakeLlm:
    """The server's state: the script of replies still to give, and the requests seen."""

    model: str = "fake-model"
    replies: list[Reply | Callable[[dict[str, Any]], Reply]] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    # A stubborn model: the reply given, forever, once the script has run out.
    forever: Reply | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    server: ThreadingHTTPServer | None = None

    @property
    def base_url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def script(self, *replies: Reply | Callable[[dict[str, Any]], Reply]) -> None:
        with self.lock:
            self.replies.extend(replies)

    def next_reply(self, body: dict[str, Any]) -> Reply:
        with self.lock:
            self.requests.append(body)
            if not self.replies and self.forever is not None:
                return self.forever
            if not self.replies:
                return fail(500, "the fake LLM's script has no reply left")
            reply = self.replies.pop(0)
        return reply(body) if callable(reply) else reply

    def always(self, reply: Reply) -> None:
        """Give this reply to every request from now on (after any scripted ones)."""
        self.forever = reply

    def start(self) -> FakeLlm:
        handler = type("Handler", (_Handler,), {"llm": self})
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        # shutdown() waits for the loop's next poll: 0.5 s by default, in every test using it.
        serve = {"poll_interval": 0.05}
        threading.Thread(target=self.server.serve_forever, kwargs=serve, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


class _Handler(BaseHTTPRequestHandler):
    llm: FakeLlm
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        if self.path != "/v1/chat/completions":
            self._json(404, {"error": {"message": f"no route {self.path}"}})
            return
        reply = self.llm.next_reply(body)
        if "error" in reply:
            status = reply["error"]["status"]
            self._json(status, {"error": {"message": reply["error"]["message"], "code": status}})
        elif body.get("stream"):
            self._stream(body, reply)
        else:
            self._json(200, self._completion(body, reply))

    def _json(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _completion(self, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
        tool_calls = [
            {"id": c["id"], "type": "function",
             "function": {"name": c["name"], "arguments": c["arguments"]}}
            for c in reply.get("tool_calls", [])
        ]  # fmt: skip
        message: dict[str, Any] = {"role": "assistant", "content": reply.get("content") or None}
        if tool_calls:
            message["tool_calls"] = tool_calls
        completion = {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.llm.model,
            "choices": [{"index": 0, "message": message, "finish_reason": _finish(reply)}],
        }
        usage = _usage(body, reply)
        if usage is not None:
            completion["usage"] = usage
        return completion

    def _stream(self, body: dict[str, Any], reply: Reply) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self._event(_chunk(self.llm.model, {"role": "assistant", "content": ""}))
        text = reply.get("content") or ""
        for start in range(0, len(text), 7):
            self._event(_chunk(self.llm.model, {"content": text[start : start + 7]}))
        for index, item in enumerate(reply.get("tool_calls", [])):
            first = {"index": index, "id": item["id"], "type": "function",
                     "function": {"name": item["name"], "arguments": ""}}  # fmt: skip
            self._event(_chunk(self.llm.model, {"tool_calls": [first]}))
            arguments = item["arguments"]
            middle = len(arguments) // 2
            for piece in (arguments[:middle], arguments[middle:]):
                delta = {"tool_calls": [{"index": index, "function": {"arguments": piece}}]}
                self._event(_chunk(self.llm.model, delta))
        self._event(_chunk(self.llm.model, {}, _finish(reply)))
        usage = _usage(body, reply)
        if usage is not None and (body.get("stream_options") or {}).get("include_usage"):
            self._event({**_chunk(self.llm.model, {}), "choices": [], "usage": usage})
        self._write(b"data: [DONE]\n\n")
        self._write(b"")

    def _event(self, payload: dict[str, Any]) -> None:
        self._write(f"data: {json.dumps(payload)}\n\n".encode())

    def _write(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()


def _chunk(model: str, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def _finish(reply: Reply) -> str:
    return reply.get("finish_reason") or ("tool_calls" if reply.get("tool_calls") else "stop")


def _usage(body: dict[str, Any], reply: Reply) -> dict[str, int] | None:
    """The reply's own usage, none when it says usage=None, else a count of the request."""
    if "usage" in reply:
        return reply["usage"]
    prompt = len(json.dumps(body.get("messages", []))) // 4
    tools = len(json.dumps(body.get("tools", []))) // 4 if body.get("tools") else 0
    completion = (
        len(json.dumps(reply.get("tool_calls", []))) // 4 + len(reply.get("content") or "") // 4
    )
    return {"prompt_tokens": prompt + tools, "completion_tokens": completion + 1,
            "total_tokens": prompt + tools + completion + 1}  # fmt: skip
