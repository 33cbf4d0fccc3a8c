"""Send one notification: a signed webhook POST, a Slack-compatible POST, or an email.

Webhooks go through the http_request tool's requester: every address is checked (loopback
and private networks are refused unless ARES_NOTIFY_ALLOW_PRIVATE) and the connection goes
to the address that was checked. Redirects are not followed: a receiver answers itself.
"""

from __future__ import annotations

import ipaddress
import smtplib
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.core.mail import send_mail

from planner_app.monitors.notify import payloads
from planner_app.monitors.notify.signing import SIGNATURE_HEADER, signature, signing_secret
from planner_app.monitors.records import Delivery, NotificationChannel
from tools_app.builtins.http_request import (
    AddressPolicy,
    HttpRequester,
    parse_url,
    resolve,
)
from tools_app.specs import ErrorKind, ToolFailure

USER_AGENT = "ARES-Console notifications"
_ANYWHERE = ("0.0.0.0/0", "::/0")
_ERROR_EXCERPT = 300


@dataclass(frozen=True)
class SendResult:
    """What one try did: ok, the receiver's status, the error; permanent: do not retry."""

    ok: bool
    status_code: int | None = None
    error: str = ""
    permanent: bool = False


def address_policy() -> AddressPolicy:
    """Return where webhooks may go: public addresses, or anywhere when private is allowed."""
    return AddressPolicy.build(allowed_networks=_ANYWHERE if allow_private() else ())


def allow_private() -> bool:
    return bool(settings.ARES_NOTIFY_ALLOW_PRIVATE)


def url_problem(url: str) -> str | None:
    """Return why a webhook URL cannot be used (bad, unresolvable, private), or None."""
    try:
        parsed = parse_url(url)
        host = parsed.host
        addresses = resolve(host, parsed.port or (443 if parsed.scheme == "https" else 80))
    except ToolFailure as failure:
        return str(failure)
    policy = address_policy()
    for address in addresses:
        reason = policy.refusal(_ip(address))
        if reason:
            return (
                f"{address} is not a public address ({reason}); webhooks to loopback and "
                "private networks are refused unless ARES_NOTIFY_ALLOW_PRIVATE=1"
            )
    return None


def send(delivery: Delivery, now: datetime) -> SendResult:
    """Send the delivery's event to its channel once."""
    channel = delivery.channel
    if channel.kind == NotificationChannel.Kind.EMAIL:
        return send_email(delivery)
    if channel.kind == NotificationChannel.Kind.SLACK:
        return post_json(channel.url, payloads.slack_body(delivery.event), {})
    body = payloads.encode(payloads.webhook_body(delivery, now))
    headers = {
        SIGNATURE_HEADER: signature(signing_secret(channel), body),
        "X-Ares-Delivery": str(delivery.pk),
        "X-Ares-Timestamp": str(int(now.timestamp())),
        "X-Ares-Event": delivery.event.kind,
    }
    return post_bytes(channel.url, body, headers)


def send_test(channel: NotificationChannel, now: datetime) -> SendResult:
    """Send a test notification to the channel once (nothing is recorded)."""
    if channel.kind == NotificationChannel.Kind.EMAIL:
        return _mail(channel, "[ARES] TEST: " + channel.name, payloads.TEST_MESSAGE + "\n")
    if channel.kind == NotificationChannel.Kind.SLACK:
        return post_json(channel.url, payloads.channel_test_slack_body(), {})
    body = payloads.encode(payloads.channel_test_body(channel.name, now))
    headers = {
        SIGNATURE_HEADER: signature(signing_secret(channel), body),
        "X-Ares-Delivery": "test",
        "X-Ares-Timestamp": str(int(now.timestamp())),
        "X-Ares-Event": "test",
    }
    return post_bytes(channel.url, body, headers)


def post_json(url: str, body: dict, headers: dict[str, str]) -> SendResult:
    """POST a JSON body within the address policy."""
    return post_bytes(url, payloads.encode(body), headers)


def post_bytes(url: str, body: bytes, headers: dict[str, str]) -> SendResult:
    """POST these exact bytes as application/json; a 2xx answer is a success."""
    requester = HttpRequester(
        address_policy(), timeout_s=settings.ARES_NOTIFY_TIMEOUT_S, max_response_bytes=4096
    )
    all_headers = {"Content-Type": "application/json", "User-Agent": USER_AGENT, **headers}
    try:
        answer = requester(url, "POST", all_headers, body=body.decode(), follow_redirects=False)
    except ToolFailure as failure:
        refused = failure.kind in (ErrorKind.PERMISSION_DENIED, ErrorKind.INVALID_ARGUMENTS)
        return SendResult(False, error=str(failure), permanent=refused)
    status = int(answer["status"])
    if 200 <= status < 300:
        return SendResult(True, status)
    excerpt = (answer.get("body") or "")[:_ERROR_EXCERPT]
    return SendResult(False, status, f"the receiver answered {status}: {excerpt}".strip())


def send_email(delivery: Delivery) -> SendResult:
    """Send the event by email through Django's email settings (EMAIL_HOST, ...)."""
    event = delivery.event
    return _mail(delivery.channel, payloads.email_subject(event), payloads.email_text(event))


def _mail(channel: NotificationChannel, subject: str, text: str) -> SendResult:
    recipients = [address for address in channel.emails or [] if address]
    if not recipients:
        return SendResult(False, error="the channel has no email addresses", permanent=True)
    try:
        send_mail(subject, text, None, recipients, fail_silently=False)
    except smtplib.SMTPRecipientsRefused as error:
        return SendResult(False, error=f"the mail server refused every recipient: {error}")
    except (smtplib.SMTPException, OSError) as error:
        return SendResult(False, error=f"email not sent: {type(error).__name__}: {error}")
    return SendResult(True)


def _ip(address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    return ipaddress.ip_address(address.split("%")[0])
