"""Database unreachable: every page answers 503 with Retry-After and a plain page saying so.

The API answers the same way in JSON (ares_site.api's handler); OTLP in its own encoding.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.db import InterfaceError, OperationalError, connection
from django.http import HttpRequest, HttpResponse
from django.template.loader import render_to_string

logger = logging.getLogger(__name__)

DATABASE_UNREACHABLE = (OperationalError, InterfaceError)
RETRY_AFTER_SECONDS = "5"
# Answered by their own views, which turn a database error into their own 503 (the API:
# JSON, OTLP: a google.rpc.Status) or, for /healthz, report it; and the API still asks
# for credentials without the database.
NOT_PAGES = ("/api/", "/v1/", "/healthz")


def database_unavailable_page(request: HttpRequest, exc: Exception) -> HttpResponse:
    """Return 503 with Retry-After and a page saying the database is unreachable.

    The page is rendered without the request, so no context processor runs: nothing in it
    needs the user, the session or any other row.
    """
    logger.error("database unavailable for %s %s: %s", request.method, request.path, exc)
    response = HttpResponse(render_to_string("503.html"), status=503)
    response["Retry-After"] = RETRY_AFTER_SECONDS
    return response


class DatabaseUnavailableMiddleware:
    """Answer a page with 503 when the database cannot be reached, never with a 500.

    Placed before the session and auth middleware. It opens the connection before the page
    runs (what the page's first query would do anyway, health check included), so even a
    page that needs no row, such as the login form or the redirect to it, says the database
    is down rather than leading to a form that cannot work. An error raised later (the
    session or user looked up lazily, a query in the view or its template) reaches
    process_exception.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if not request.path.startswith(NOT_PAGES):
            try:
                connection.cursor().close()
            except DATABASE_UNREACHABLE as exc:
                return database_unavailable_page(request, exc)
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exc: Exception) -> HttpResponse | None:
        if isinstance(exc, DATABASE_UNREACHABLE) and not request.path.startswith(NOT_PAGES):
            return database_unavailable_page(request, exc)
        return None
