"""The REST API's error answers: one body shape, one table of statuses, used by every router.

Every error the API gives is `{"detail": "..."}` (a request that fails validation adds
`errors`, one field and reason each, at most MAX_LISTED_ERRORS). Operations declare which
statuses they can answer with `responses(...)`, so the OpenAPI schema lists them all, with
their bodies. A read naming a query parameter it does not take is refused here, once for
every router (refuse_unknown_query).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from functools import wraps
from http.client import responses as HTTP_REASONS
from typing import Any

from django.db import Error as DatabaseError
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from ninja import Field, Schema
from ninja.errors import HttpError, ValidationError
from ninja.operation import Operation
from ninja.params.models import QueryModel

from traces_app.schemas import MAX_LISTED_ERRORS, FieldError, listed

RETRY_AFTER_SECONDS = "5"
# PostgreSQL refusing for load, not for being down: too many connections, lock not
# available, statement timeout.
_BUSY_SQLSTATES = {"53300", "55P03", "57014"}


class ErrorOut(Schema):
    detail: str = Field(description="What went wrong, in words a developer can act on")


class InvalidRequestOut(ErrorOut):
    errors: list[FieldError] = Field(
        default=[], description="Each field that failed validation and why (when known)"
    )


# Why each status is answered; the schema shows it as the response's description.
ERRORS: dict[int, tuple[type[Schema], str]] = {
    400: (ErrorOut, "The body is not JSON (or not UTF-8, nested too deep, badly compressed)"),
    401: (ErrorOut, "No API key, or one that is invalid, expired or revoked"),
    403: (ErrorOut, "The API key lacks the scope this operation needs"),
    404: (ErrorOut, "Nothing with that id or name"),
    413: (ErrorOut, "The body (or its decompressed form) is larger than the limit"),
    415: (ErrorOut, "Content-Type is not application/json, or an unsupported Content-Encoding"),
    422: (
        InvalidRequestOut,
        "A parameter or the body is invalid, the body is not an object, or a query "
        "parameter is not one the operation takes",
    ),
    429: (ErrorOut, "The database is busy (locked); nothing was stored. Retry after Retry-After"),
    503: (
        ErrorOut,
        "The database (or, for chat, the LLM) is unavailable; nothing was stored. "
        "Retry after Retry-After",
    ),
}
# Every operation checks an API key in the database, whose write lock or absence may answer.
AUTHENTICATED = (401, 403, 422, 429, 503)
# Statuses the JSON body reader adds (traces_app.http.bodies).
WITH_BODY = (400, 413, 415, 422)


def responses(ok: Any, *statuses: int, others: dict[int, Any] | None = None) -> dict[int, Any]:
    """Return ninja's `response=` table: `ok` for 200, then the shared error bodies.

    The statuses are those every authenticated operation can answer, plus `statuses`;
    `others` gives the body of a status the shared table lacks or this operation shapes
    differently (a 502 of the chat, a 422 that may also be a BatchOut).
    """
    table: dict[int, Any] = {200: ok}
    for status in sorted({*AUTHENTICATED, *statuses}):
        table[status] = ERRORS[status][0]
    table.update(others or {})
    return table


def document_errors(schema: dict[str, Any]) -> dict[str, Any]:
    """Add each error's description and headers (Retry-After, WWW-Authenticate) to a schema."""
    headers = {
        401: {"WWW-Authenticate": 'Bearer realm="ares": how to authenticate'},
        429: {"Retry-After": f"Seconds to wait before retrying ({RETRY_AFTER_SECONDS})"},
        503: {"Retry-After": f"Seconds to wait before retrying ({RETRY_AFTER_SECONDS})"},
    }
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            for status, answer in operation.get("responses", {}).items():
                status = int(status)
                if status in ERRORS and answer.get("description") in (None, "", _default(status)):
                    answer["description"] = ERRORS[status][1]
                for name, meaning in headers.get(status, {}).items():
                    answer.setdefault("headers", {})[name] = {
                        "description": meaning,
                        "schema": {"type": "string"},
                    }
    return schema


def _default(status: int) -> str:
    """Return the description ninja gives a status: its HTTP reason phrase."""
    return HTTP_REASONS.get(status, "Unknown Status Code")


def database_is_busy(exc: DatabaseError) -> bool:
    """Return whether the database refused for load (locked, full) rather than being down."""
    if getattr(exc.__cause__, "sqlstate", None) in _BUSY_SQLSTATES:
        return True
    return "database is locked" in str(exc) or "database table is locked" in str(exc)


def refuse_unknown_query(run: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Wrap an operation so that a read naming a query parameter it does not take is a 422.

    Installed once for the whole API (`api.add_decorator(..., mode="view")`, which hands
    over each operation's bound `run`). Ninja drops parameters an operation does not
    declare, so a misspelt or unsupported filter (`?session_id=x`) would answer as if it
    were not there: every trace. The key is checked first, as for any other bad parameter.
    """
    operation = run.__self__
    assert isinstance(operation, Operation), "install with mode='view'"
    known = query_parameters(operation)

    @wraps(run)
    def checked(request: HttpRequest, **kwargs: Any) -> HttpResponse:
        unknown = [name for name in request.GET if name not in known]
        if request.method != "GET" or not unknown:
            return run(request, **kwargs)
        return operation._run_checks(request) or unknown_query_answer(
            operation, request, unknown, known
        )

    return checked


def query_parameters(operation: Operation) -> set[str]:
    """Return the names of the query parameters an operation takes (its filters, paging...)."""
    names: set[str] = set()
    for model in operation.models:
        if issubclass(model, QueryModel):
            names.update(getattr(model, "__ninja_flatten_map__", None) or model.model_fields)
    return names


def unknown_query_answer(
    operation: Operation, request: HttpRequest, unknown: list[str], known: set[str]
) -> HttpResponse:
    """Return the 422 of a read with unknown query parameters: each named, the known ones listed."""
    plural = "s" if len(unknown) > 1 else ""
    takes = "this endpoint takes no query parameters"
    if known:
        takes = f"known: {', '.join(sorted(known))}"
    errors = [
        FieldError(field=name[:200], reason="unknown query parameter")
        for name in unknown[:MAX_LISTED_ERRORS]
    ]
    names = ", ".join(error.field for error in errors)
    more = f" and {len(unknown) - len(errors):,} more" if len(unknown) > len(errors) else ""
    body = {
        "detail": f"unknown query parameter{plural}: {names}{more}; {takes}",
        "errors": [error.model_dump() for error in listed(errors, len(unknown), "(request)")],
    }
    return operation.api.create_response(request, body, status=422)


def refuse_fields(problems: dict[str, str]) -> None:
    """Answer 422 naming each body field at fault, as a body that fails validation does."""
    raise ValidationError(
        [{"loc": ("body", "payload", name), "msg": reason} for name, reason in problems.items()]
    )


def patched_fields(payload: Schema, exclude: frozenset[str] = frozenset()) -> dict[str, Any]:
    """Return the fields a PATCH body sets; one set to null is a 422 (leave it out to keep it)."""
    changes = payload.model_dump(exclude=set(exclude), exclude_unset=True)
    nulls = [name for name, value in changes.items() if value is None]
    if nulls:
        refuse_fields({name: "may not be null: leave it out to keep it" for name in nulls})
    return changes


def query_window(
    since: datetime | None, until: datetime | None, default: timedelta
) -> tuple[datetime, datetime]:
    """Return a read's [since, until): until defaults to now, since to `default` before it.

    A window that does not run forward is a 422.
    """
    until = until or timezone.now()
    since = since or until - default
    if since >= until:
        raise HttpError(422, "since must be before until")
    return since, until
