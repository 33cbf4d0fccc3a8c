"""The REST API: one NinjaAPI under /api/v1/ that mounts each app's router."""

from __future__ import annotations

import logging

from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, ValidationError

from planner_app.api import router as planner_router
from tools_app.api import router as tools_router
from traces_app.api import router as traces_router
from traces_app.bodies import JsonBodyParser

logger = logging.getLogger(__name__)

api = NinjaAPI(
    title="ARES Console API",
    version="1",
    description=(
        "Report tool invocations from any agent and read traces back. "
        "Authenticate with `Authorization: Bearer ares_...` (create keys in the admin or "
        "with `manage.py create_api_key`)."
    ),
    parser=JsonBodyParser(),
    urls_namespace="api-v1",
)
api.add_router("/", traces_router)
api.add_router("/", tools_router)
api.add_router("/", planner_router)


@api.exception_handler(AuthenticationError)
def on_unauthenticated(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
    message = exc.message
    if message == AuthenticationError().message:  # ninja's bare default: say what to send
        message = "authentication required: send 'Authorization: Bearer ares_...'"
    response = api.create_response(request, {"detail": message}, status=401)
    response["WWW-Authenticate"] = 'Bearer realm="ares"'
    return response


@api.exception_handler(ValidationError)
def on_invalid_request(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    errors = []
    for error in exc.errors:
        location = [str(part) for part in error.get("loc", ())]
        if location and location[0] in ("query", "path", "body", "header", "cookie"):
            location = location[1:]
        errors.append({"field": ".".join(location) or "(request)", "reason": error.get("msg", "")})
    detail = "; ".join(f"{e['field']}: {e['reason']}" for e in errors)
    return api.create_response(request, {"detail": detail, "errors": errors}, status=422)


@api.exception_handler(OperationalError)
@api.exception_handler(InterfaceError)
def on_database_unavailable(request: HttpRequest, exc: Exception) -> HttpResponse:
    logger.error("database unavailable: %s", exc)
    response = api.create_response(
        request, {"detail": "database unavailable; nothing was stored, retry later"}, status=503
    )
    response["Retry-After"] = "5"
    return response


@api.exception_handler(Exception)
def on_unexpected_error(request: HttpRequest, exc: Exception) -> HttpResponse:
    logger.exception("unhandled error in %s %s", request.method, request.path)
    return api.create_response(
        request, {"detail": "internal error; it has been logged"}, status=500
    )
