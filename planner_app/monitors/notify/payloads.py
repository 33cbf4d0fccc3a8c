"""The bodies of notifications: the webhook JSON, the Slack message, the email text.

Every body is built from the event and its monitor alone, so each try of a delivery sends
the same content (only `sent_at` and `attempt` change). Links are absolute, on
ARES_SITE_URL.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any
from urllib.parse import quote, urlencode

from django.conf import settings

from planner_app.monitors.records import Delivery, Monitor, MonitorEvent, Scope

PAYLOAD_VERSION = 1
TEST_MESSAGE = "A test notification from ARES Console: this channel works."
_MAX_TRACE_LINKS = 5
_HEADLINE = {
    MonitorEvent.Kind.FIRED: "FIRING",
    MonitorEvent.Kind.REMINDER: "STILL FIRING",
    MonitorEvent.Kind.RESOLVED: "RESOLVED",
}


def site_link(path: str) -> str:
    """Return the absolute URL of a path of the console."""
    return settings.ARES_SITE_URL.rstrip("/") + path


def monitor_link(monitor: Monitor) -> str:
    """Return the absolute URL of the monitor's page."""
    return site_link(f"/monitors/{monitor.pk}/")


def traces_link(event: MonitorEvent) -> str:
    """Return the traces page filtered to the event's window and target."""
    monitor = event.monitor
    query = {"since": _iso(event.window_start), "until": _iso(event.window_end)}
    if monitor.scope == Scope.TOOL:
        query["tool"] = monitor.target
    elif monitor.scope == Scope.AGENT:
        query["agent"] = monitor.target
    return site_link("/traces/?" + urlencode(query))


def trace_link(trace_id: str) -> str:
    """Return the absolute URL of one trace."""
    return site_link(f"/traces/{quote(trace_id, safe='')}/")


def headline(event: MonitorEvent) -> str:
    """Return the one-line title: '[ARES] FIRING: <monitor name>'."""
    return f"[ARES] {_HEADLINE.get(event.kind, event.kind.upper())}: {event.monitor.name}"


def webhook_body(delivery: Delivery, sent_at: datetime) -> dict[str, Any]:
    """Return the webhook JSON body of a delivery (documented in docs/notifications.md)."""
    event, monitor = delivery.event, delivery.event.monitor
    return {
        "type": "ares.monitor_event",
        "version": PAYLOAD_VERSION,
        "delivery_id": delivery.pk,
        "attempt": delivery.attempts + 1,
        "sent_at": _iso(sent_at),
        "event": {
            "id": event.pk,
            "number": event.number,
            "kind": event.kind,
            "at": _iso(event.at),
            "value": event.value,
            "threshold": event.threshold,
            "window_start": _iso(event.window_start),
            "window_end": _iso(event.window_end),
            "message": event.message,
            "trace_ids": list(event.trace_ids or []),
        },
        "monitor": {
            "id": monitor.pk,
            "name": monitor.name,
            "metric": monitor.metric,
            "scope": monitor.scope,
            "target": monitor.target,
            "comparison": monitor.comparison,
            "threshold": monitor.threshold,
            "window_minutes": monitor.window_minutes,
        },
        "links": {
            "monitor": monitor_link(monitor),
            "traces": traces_link(event),
            "trace_pages": [trace_link(t) for t in (event.trace_ids or [])[:_MAX_TRACE_LINKS]],
        },
    }


def encode(body: dict[str, Any]) -> bytes:
    """Return the exact bytes sent (and signed): compact UTF-8 JSON."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def slack_body(event: MonitorEvent) -> dict[str, Any]:
    """Return a Slack incoming-webhook body: `text` (read by every compatible receiver)."""
    lines = [
        f"*{_slack_escape(headline(event))}*",
        _slack_escape(event.message),
        f"<{monitor_link(event.monitor)}|Monitor> · <{traces_link(event)}|Traces in the window>",
    ]
    return {"text": "\n".join(lines), "unfurl_links": False}


def email_subject(event: MonitorEvent) -> str:
    """Return the email subject (one line)."""
    return " ".join(headline(event).split())[:200]


def email_text(event: MonitorEvent) -> str:
    """Return the plain-text email body."""
    links = [f"  {trace_link(t)}" for t in (event.trace_ids or [])[:_MAX_TRACE_LINKS]]
    parts = [
        event.message,
        "",
        f"Monitor: {event.monitor.name} ({monitor_link(event.monitor)})",
        f"Event: #{event.number} {event.kind} at {_iso(event.at)}",
        f"Window: {_iso(event.window_start)} to {_iso(event.window_end)}",
        f"Traces in the window: {traces_link(event)}",
    ]
    if links:
        parts += ["Some traces behind the value:", *links]
    return "\n".join(parts) + "\n"


def _slack_escape(text: str) -> str:
    """Escape the three characters Slack's mrkdwn treats as control characters."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def channel_test_body(channel_name: str, sent_at: datetime) -> dict[str, Any]:
    """Return the body of a test notification: the shape of an event, with no event."""
    return {
        "type": "ares.test",
        "version": PAYLOAD_VERSION,
        "delivery_id": None,
        "attempt": 1,
        "sent_at": _iso(sent_at),
        "channel": channel_name,
        "message": TEST_MESSAGE,
        "links": {"console": site_link("/monitors/")},
    }


def channel_test_slack_body() -> dict[str, Any]:
    """Return the Slack body of a test notification."""
    text = f"*[ARES] TEST*\n{TEST_MESSAGE}\n<{site_link('/monitors/')}|Monitors>"
    return {"text": text, "unfurl_links": False}
