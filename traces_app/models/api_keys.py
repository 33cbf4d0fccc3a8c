"""API keys as stored: hashed, scoped and revocable, with the scopes a key may hold."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone

SCOPES = {
    "report": "Report invocations (POST /api/v1/invocations)",
    "read": "Read traces, invocations and statistics",
    "plan": "Ask the planner for a plan",
    "execute": "Execute tools",
    "chat": "Chat with agents",
    "score": "Send scores of calls and traces (POST /api/v1/scores)",
    "tune": "Read the planner's proposals and apply or dismiss them (/api/v1/proposals)",
    "monitor": "Read and edit monitors, channels and alerts (/api/v1/monitors, /api/v1/channels)",
}

KEY_PREFIX = "ares_"


def hash_api_key(raw_key: str) -> str:
    """Return the SHA-256 hex digest under which a key is stored.

    Keys are 256 random bits, so a fast unsalted hash is safe and lets a request
    find its key with one indexed lookup.
    """
    return hashlib.sha256(raw_key.encode()).hexdigest()


class ApiKeyManager(models.Manager):
    def issue(self, name: str, scopes: Sequence[str], created_by: Any = None) -> tuple[ApiKey, str]:
        """Create a key and return it with its raw value, which is never stored."""
        unknown = sorted(set(scopes) - set(SCOPES))
        if unknown:
            raise ValueError(f"unknown scope(s) {', '.join(unknown)}; known: {', '.join(SCOPES)}")
        key = self.model(name=name, scopes=sorted(set(scopes)), created_by=created_by)
        raw_key = key.set_new_key()
        key.save()
        return key, raw_key

    def find_active(self, raw_key: str) -> ApiKey | None:
        """Return the unrevoked, unexpired key with this raw value, or None."""
        key = self.filter(key_hash=hash_api_key(raw_key)).first()
        if key is None or not key.is_active:
            return None
        return key


class ApiKey(models.Model):
    """A hashed, scoped, revocable key for agents calling the REST API."""

    name = models.CharField(max_length=200)
    prefix = models.CharField(
        max_length=12, help_text="The key's first characters, to tell keys apart"
    )
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    scopes = models.JSONField(default=list)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = ApiKeyManager()

    class Meta:
        verbose_name = "API key"
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def is_active(self) -> bool:
        if self.revoked_at is not None:
            return False
        return self.expires_at is None or self.expires_at > timezone.now()

    def set_new_key(self) -> str:
        """Give this key a new random value; return it raw, since only its hash is kept."""
        raw_key = KEY_PREFIX + secrets.token_urlsafe(32)
        self.prefix = raw_key[:12]
        self.key_hash = hash_api_key(raw_key)
        return raw_key

    def has_scope(self, scope: str) -> bool:
        return scope in self.scopes

    def revoke(self) -> None:
        self.revoked_at = timezone.now()
        self.save(update_fields=["revoked_at"])

    def touch(self) -> None:
        """Record use, at most once a minute, so busy keys don't write on every request."""
        now = timezone.now()
        if self.last_used_at is None or now - self.last_used_at > timedelta(minutes=1):
            ApiKey.objects.filter(pk=self.pk).update(last_used_at=now)
            self.last_used_at = now
