"""What a notification channel's fields must be, per kind; shared by the admin and the API."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.core.validators import URLValidator, validate_email

from planner_app.monitors.notify.senders import url_problem
from planner_app.monitors.records import NotificationChannel

MAX_EMAILS = 50
_HTTP_URL = URLValidator(schemes=["http", "https"])


def channel_problems(kind: str, url: str, emails: list[Any]) -> dict[str, str]:
    """Return {field: why} for everything wrong with these fields; empty when they are fine."""
    if kind not in NotificationChannel.Kind.values:
        return {"kind": f"must be one of {', '.join(NotificationChannel.Kind.values)}"}
    if kind == NotificationChannel.Kind.EMAIL:
        problems = _email_problems(emails)
        if url:
            problems["url"] = "email channels have no URL: leave it blank"
        return problems
    problems = {"url": reason} if (reason := _url_problem(url)) else {}
    if emails:
        problems["emails"] = f"{kind} channels have no email addresses: leave it empty"
    return problems


def _url_problem(url: str) -> str | None:
    if not url:
        return "required for webhook and Slack channels"
    try:
        _HTTP_URL(url)
    except ValidationError:
        return f"{url!r} is not an http:// or https:// URL"
    return url_problem(url)


def _email_problems(emails: list[Any]) -> dict[str, str]:
    if not isinstance(emails, list) or not emails:
        return {"emails": "email channels need at least one address"}
    if len(emails) > MAX_EMAILS:
        return {"emails": f"at most {MAX_EMAILS} addresses"}
    for address in emails:
        try:
            validate_email(address if isinstance(address, str) else "")
        except ValidationError:
            return {"emails": f"{address!r} is not an email address"}
    return {}
