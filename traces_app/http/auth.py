"""API-key authentication: `Authorization: Bearer ares_...` or `x-api-key: ares_...`, scoped."""

from __future__ import annotations

from django.http import HttpRequest
from ninja.errors import AuthenticationError, AuthorizationError
from ninja.security import HttpBearer
from ninja.security.session import SessionAuthIsStaff

from traces_app.models import ApiKey


class ApiKeyAuth(HttpBearer):
    """Accept an active API key that holds `scope`; 401 for a bad key, 403 for a missing scope."""

    def __init__(self, scope: str) -> None:
        self.scope = scope
        super().__init__()

    def __call__(self, request: HttpRequest) -> ApiKey | None:
        # Some OpenTelemetry exporters and SDKs can only be given an `x-api-key` header.
        api_key = request.headers.get("X-Api-Key", "").strip()
        if api_key and "Authorization" not in request.headers:
            return self.authenticate(request, api_key)
        return super().__call__(request)

    def authenticate(self, request: HttpRequest, token: str) -> ApiKey:
        if not token.strip():
            raise AuthenticationError(message="no key after 'Bearer': send 'Bearer ares_...'")
        key = ApiKey.objects.find_active(token.strip())
        if key is None:
            raise AuthenticationError(message="API key is invalid, expired or revoked")
        if not key.has_scope(self.scope):
            raise AuthorizationError(message=f"API key lacks the '{self.scope}' scope")
        key.touch()
        return key


def key_or_staff(scope: str) -> list:
    """Return the auth for endpoints open to API keys with `scope` and to staff sessions.

    Staff sessions come from the site's own pages, so unsafe methods need a CSRF token.
    """
    return [ApiKeyAuth(scope), SessionAuthIsStaff()]


def sender_of(request: HttpRequest, anonymous: str = "") -> str:
    """Return who sent the request: "key <name> (<prefix>)", "user <name>", or `anonymous`."""
    auth = getattr(request, "auth", None)
    if isinstance(auth, ApiKey):
        return f"key {auth.name} ({auth.prefix})"
    user = getattr(request, "user", None)
    return (
        f"user {user.get_username()}" if user is not None and user.is_authenticated else anonymous
    )
