"""A real HTTP(S) server on loopback for tool tests; routes are functions of the request."""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit


@dataclass(frozen=True)
class Seen:
    """A request as the server received it."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes


Route = Callable[["RouteHandler"], None]


class RouteHandler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
        pass  # Quiet tests; failures say enough.

    def _dispatch(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        headers = {name.lower(): value for name, value in self.headers.items()}
        self.server.seen.append(Seen(self.command, self.path, headers, body))
        route = self.server.routes.get(urlsplit(self.path).path)
        if route is None:
            reply(self, 404, b"no such route")
        else:
            route(self)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _dispatch

    @property
    def release(self) -> threading.Event:
        """The event a stalling route waits on; set when the server stops."""
        return self.server.release


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    routes: dict[str, Route]
    seen: list[Seen]
    release: threading.Event

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # The client hanging up mid-body is what several tests do on purpose.


class LocalServer:
    """Serve routes on 127.0.0.1 (or ::1) in a thread, over TLS when given a context."""

    def __init__(
        self,
        routes: dict[str, Route],
        host: str = "127.0.0.1",
        tls: ssl.SSLContext | None = None,
    ) -> None:
        server_class = type("Server", (_Server,), {"address_family": _family(host)})
        self.server = server_class((host, 0), RouteHandler)
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        self.server.routes = routes
        self.server.seen = []
        self.server.release = threading.Event()
        self.scheme = "https" if tls else "http"
        # A short poll interval: shutting down waits for it, once per test.
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    @property
    def seen(self) -> list[Seen]:
        return self.server.seen

    def url(self, path: str = "/", host: str | None = None) -> str:
        """Return the URL of a path here, optionally naming this server by another host."""
        host = host or self.server.server_address[0]
        shown = f"[{host}]" if ":" in host else host
        return f"{self.scheme}://{shown}:{self.port}{path}"

    def __enter__(self) -> LocalServer:
        self.thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.server.release.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


def reply(
    handler: BaseHTTPRequestHandler,
    status: int = 200,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
) -> None:
    """Send a complete response with a Content-Length."""
    handler.send_response(status)
    for name, value in (headers or {}).items():
        handler.send_header(name, value)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    if handler.command != "HEAD":
        handler.wfile.write(body)


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET
