"""The REST API: one NinjaAPI under /api/v1/ that mounts each app's router."""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, ValidationError

from ares_site.middleware import database_unavailable
from planner_app.api import router as planner_router
from planner_app.monitors.monitor_api import router as monitors_router
from planner_app.monitors.notify.channel_api import router as channels_router
from planner_app.proposals.proposal_api import router as proposals_router
from tools_app.api import router as tools_router
from traces_app.api import router as traces_router
from traces_app.chain_api import router as chains_router
from traces_app.http.bodies import JsonBodyParser, read_json_body
from traces_app.http.errors import document_errors, refuse_unknown_query
from traces_app.http.json_output import PreciseJsonEncoder, PreciseJsonRenderer  # noqa: F401 - named here too
from traces_app.schemas import MAX_LISTED_ERRORS, FieldError, listed
from traces_app.scores.score_api import router as scores_router
from traces_app.session_api import router as sessions_router

logger = logging.getLogger(__name__)


class AresApi(NinjaAPI):
    """The API, whose OpenAPI schema describes each error status and its headers."""

    def get_openapi_schema(self, **kwargs: Any) -> Any:
        return document_errors(super().get_openapi_schema(**kwargs))


api = AresApi(
    title="ARES Console API",
    version="1",
    description=(
        "Report tool invocations from any agent and read traces back. "
        "Authenticate with `Authorization: Bearer ares_...` (create keys in the admin or "
        "with `manage.py create_api_key`)."
    ),
    parser=JsonBodyParser(),
    renderer=PreciseJsonRenderer(),
    urls_namespace="api-v1",
)
# Every read refuses a query parameter it does not take (422), instead of ignoring it.
api.add_decorator(refuse_unknown_query, mode="view")
api.add_router("/", traces_router)
api.add_router("/", tools_router)
api.add_router("/", planner_router)
api.add_router("/", proposals_router)
api.add_router("/", scores_router)
api.add_router("/", monitors_router)
api.add_router("/", channels_router)
api.add_router("/", sessions_router)
api.add_router("/", chains_router)


@api.exception_handler(AuthenticationError)
def on_unauthenticated(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
    message = exc.message
    if message == AuthenticationError().message:  # ninja's bare default: say what to send
        message = "authentication required: send 'Authorization: Bearer ares_...'"
    response = api.create_response(request, {"detail": message}, status=401)
    response["WWW-Authenticate"] = 'Bearer realm="ares"'
    return response


@api.exception_handler(HttpError)
def on_http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    # Ninja answers whatever the body parser raises with 400 "Cannot parse request body";
    # the parser's own error (413, 415, 422 for a non-object...) says what is wrong.
    if isinstance(exc.__cause__, HttpError):
        exc = exc.__cause__
    return api.create_response(request, {"detail": str(exc)}, status=exc.status_code)


@api.exception_handler(RequestDataTooBig)
def on_body_too_big(request: HttpRequest, exc: RequestDataTooBig) -> HttpResponse:
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return on_http_error(request, HttpError(413, f"request body is larger than {limit} bytes"))


@api.exception_handler(ValidationError)
def on_invalid_request(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    if _body_is_missing(exc):
        try:  # ninja skips the parser when there is no body; say what the parser would
            read_json_body(request)
        except HttpError as problem:
            return on_http_error(request, problem)
    errors = []
    for error in exc.errors[:MAX_LISTED_ERRORS]:
        location = [str(part) for part in error.get("loc", ())]
        if location and location[0] in ("query", "path", "body", "header", "cookie"):
            location = location[1:]
        field = ".".join(location)[:200] or "(request)"
        errors.append(FieldError(field=field, reason=error.get("msg", "")))
    errors = [error.model_dump() for error in listed(errors, len(exc.errors), "(request)")]
    detail = "; ".join(f"{e['field']}: {e['reason']}" for e in errors)
    return api.create_response(request, {"detail": detail, "errors": errors}, status=422)


def _body_is_missing(exc: ValidationError) -> bool:
    """Return whether the request had no body where the operation requires one."""
    return any(
        error.get("type") == "missing"
        and tuple(error.get("loc", ()))[:1] == ("body",)
        and len(error.get("loc", ())) == 2
        for error in exc.errors
    )


@api.exception_handler(OperationalError)
@api.exception_handler(InterfaceError)
def on_database_unavailable(request: HttpRequest, exc: Exception) -> HttpResponse:
    return database_unavailable(request, exc)  # the same answer as the pages give, in JSON


@api.exception_handler(Exception)
def on_unexpected_error(request: HttpRequest, exc: Exception) -> HttpResponse:
    logger.exception("unhandled error in %s %s", request.method, request.path)
    return api.create_response(
        request, {"detail": "internal error; it has been logged"}, status=500
    )
