"""Real notification receivers on loopback: an HTTP server and an SMTP server (aiosmtpd).

The HTTP receiver records every request (path, headers, raw body) and can answer the first
N with an error, so retries are seen as they happen; the SMTP receiver keeps every message
it accepted, parsed.
"""

from __future__ import annotations

import email
import email.policy
import socket
import threading
import time
from dataclasses import dataclass
from email.message import EmailMessage
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from aiosmtpd.controller import Controller

# The periodic jobs of monitors every second, webhooks to loopback allowed: for a beat or a
# worker started by a test.
EVERY_SECOND = {"ARES_MONITORS_EVERY_S": "1", "ARES_NOTIFY_EVERY_S": "1",
                "ARES_NOTIFY_ALLOW_PRIVATE": "1"}  # fmt: skip


@dataclass(frozen=True)
class Received:
    """One request the HTTP receiver got."""

    path: str
    headers: dict[str, str]
    body: bytes


class HttpReceiver:
    """An HTTP server on 127.0.0.1 recording POSTs; the first `fail_first` get `fail_status`."""

    def __init__(self, fail_first: int = 0, fail_status: int = 503) -> None:
        self.fail_first, self.fail_status = fail_first, fail_status
        self.requests: list[Received] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/hook"

    def start(self) -> HttpReceiver:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def wait_for(self, count: int, timeout_s: float = 20.0) -> list[Received]:
        """Return the requests once there are `count` (or the ones there are at the timeout)."""
        deadline = time.monotonic() + timeout_s
        while len(self.requests) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        return list(self.requests)

    def _answer(self, received: Received) -> int:
        with self._lock:
            self.requests.append(received)
            return self.fail_status if len(self.requests) <= self.fail_first else 200

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                headers = {name.lower(): value for name, value in self.headers.items()}
                status = receiver._answer(Received(self.path, headers, body))
                answer = b"ok" if status == 200 else b"receiver down for the test"
                self.send_response(status)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                pass

        return Handler


class _Keeper:
    def __init__(self, messages: list[EmailMessage], envelopes: list[tuple[str, list[str]]]):
        self.messages, self.envelopes = messages, envelopes

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        message = email.message_from_bytes(envelope.content, policy=email.policy.default)
        self.envelopes.append((envelope.mail_from, list(envelope.rcpt_tos)))
        self.messages.append(message)
        return "250 Message accepted for delivery"


class SmtpReceiver:
    """An aiosmtpd SMTP server on 127.0.0.1 keeping every message it accepts."""

    def __init__(self) -> None:
        self.messages: list[EmailMessage] = []
        self.envelopes: list[tuple[str, list[str]]] = []
        self.port = _free_port()
        self._controller = Controller(
            _Keeper(self.messages, self.envelopes), hostname="127.0.0.1", port=self.port
        )

    def start(self) -> SmtpReceiver:
        self._controller.start()
        return self

    def stop(self) -> None:
        self._controller.stop()

    def wait_for(self, count: int, timeout_s: float = 20.0) -> list[EmailMessage]:
        """Return the messages once there are `count` (or the ones there are at the timeout)."""
        deadline = time.monotonic() + timeout_s
        while len(self.messages) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        return list(self.messages)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
