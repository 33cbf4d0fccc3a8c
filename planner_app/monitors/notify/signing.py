"""The webhook signing secret of a channel and the signature of a body.

The secret is derived from SECRET_KEY and the channel's salt with Django's salted_hmac, so
it is never stored: a new salt (or a new SECRET_KEY) is a new secret. A channel gets its
salt when it is first saved (NotificationChannel.save).
"""

from __future__ import annotations

import hashlib
import hmac

from django.utils.crypto import salted_hmac

from planner_app.monitors.records import NotificationChannel

SIGNATURE_HEADER = "X-Ares-Signature"
_KEY_SALT = "ares.notify.webhook-secret"


def signing_secret(channel: NotificationChannel) -> str:
    """Return the channel's signing secret (hex), derived from SECRET_KEY and its salt."""
    if not channel.secret_salt:
        raise ValueError(f"channel {channel.name!r} has no secret salt yet")
    return salted_hmac(_KEY_SALT, channel.secret_salt, algorithm="sha256").hexdigest()


def signature(secret: str, body: bytes) -> str:
    """Return the X-Ares-Signature value of a body: sha256=<hex HMAC-SHA256 of the bytes>."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def signature_matches(secret: str, body: bytes, header: str) -> bool:
    """Return whether a received signature header is the body's (constant-time)."""
    return hmac.compare_digest(signature(secret, body), header.strip())
