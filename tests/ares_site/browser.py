"""Checks the browser tests share."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse


def assert_stayed_local(page: Any, live_server: Any) -> None:
    """Assert the page requested nothing but the live server, itself on loopback (no CDN)."""
    hosts = {
        urlparse(url).hostname
        for url in page.requested_urls
        if urlparse(url).scheme in ("http", "https", "ws", "wss")
    }
    assert hosts == {urlparse(live_server.url).hostname}, hosts
    assert hosts <= {"localhost", "127.0.0.1"}
