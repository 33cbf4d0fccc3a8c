"""Database unreachable: 503 with Retry-After, never a 500, on every page and the API.

One answer for both: `database_unavailable` gives the API its JSON (429 when the database
is only busy) and a page a plain HTML page. The API's exception handler calls it for
errors in its operations; this middleware for errors anywhere in a page.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.db import InterfaceError, OperationalError, connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string

from traces_app.http.errors import RETRY_AFTER_SECONDS, database_is_busy

logger = logging.getLogger(__name__)

DATABASE_UNREACHABLE = (OperationalError, InterfaceError)
API_PREFIX = "/api/"
# Not pages: the API answers in JSON from its exception handler (and still asks for
# credentials without the database); OTLP answers with its own google.rpc.Status; /healthz
# reports the database itself.
NOT_PAGES = (API_PREFIX, "/v1/", "/healthz")


def database_unavailable(request: HttpRequest, exc: Exception) -> HttpResponse:
    """Return 503 with Retry-After: JSON for the API (429 if only busy), else a plain page.

    The page is rendered without the request, so no context processor runs: nothing in it
    needs the user, the session or any other row.
    """
    logger.error("database unavailable for %s %s: %s", request.method, request.path, exc)
    busy = database_is_busy(exc)
    if request.path_info.startswith(API_PREFIX):
        detail = "busy" if busy else "unavailable"
        response: HttpResponse = JsonResponse(
            {"detail": f"database {detail}; nothing was stored, retry later"},
            status=429 if busy else 503,
            content_type="application/json; charset=utf-8",
        )
    else:
        response = HttpResponse(render_to_string("503.html", {"busy": busy}), status=503)
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
        if not request.path_info.startswith(NOT_PAGES):
            try:
                connection.cursor().close()
            except DATABASE_UNREACHABLE as exc:
                return database_unavailable(request, exc)
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exc: Exception) -> HttpResponse | None:
        if isinstance(exc, DATABASE_UNREACHABLE) and not request.path_info.startswith(NOT_PAGES):
            return database_unavailable(request, exc)
        return None
