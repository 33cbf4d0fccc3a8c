"""NUL bytes in an address: refused at the door, before any page or API operation sees them.

PostgreSQL refuses NUL in text (psycopg raises ValueError), so a NUL that reached a
query would be a 500 there and a silent no-match on SQLite. No name, id or filter this
site knows holds one, so one check answers for every page, API operation and the
admin: a path with a NUL names nothing (404); a query parameter with one is a bad
value (422, naming the parameter).
"""

from __future__ import annotations

import json
from collections.abc import Callable

from django.http import Http404, HttpRequest, HttpResponse

NUL = "\x00"
API_PREFIX = "/api/"
REASON = "must not contain a NUL byte (%00)"


class RefuseNulBytesMiddleware:
    """Answer 404 to a path holding a NUL byte, 422 to a query string holding one."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if NUL in request.path_info:
            return _not_found(request)
        names = [
            name.replace(NUL, "%00")
            for name, values in request.GET.lists()
            if NUL in name or any(NUL in value for value in values)
        ]
        if names:
            return _invalid(request, names)
        return self.get_response(request)


def _not_found(request: HttpRequest) -> HttpResponse:
    if request.path_info.startswith(API_PREFIX):
        return _json({"detail": "Not Found"}, status=404)
    raise Http404("no address holds a NUL byte")  # Django's own 404 page


def _invalid(request: HttpRequest, names: list[str]) -> HttpResponse:
    errors = [{"field": name, "reason": REASON} for name in names]
    detail = "; ".join(f"{error['field']}: {error['reason']}" for error in errors)
    if request.path_info.startswith(API_PREFIX):
        return _json({"detail": detail, "errors": errors}, status=422)
    return HttpResponse(
        f"Bad query parameter: {detail}.\n", status=422, content_type="text/plain; charset=utf-8"
    )


def _json(body: dict[str, object], status: int) -> HttpResponse:
    """Return a JSON answer in the API's error shape (traces_app.http.errors)."""
    return HttpResponse(json.dumps(body), status=status, content_type="application/json")
