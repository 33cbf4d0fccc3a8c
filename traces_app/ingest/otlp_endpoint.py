"""POST /v1/traces: OpenTelemetry spans over OTLP/HTTP, protobuf or JSON, stored as invocations.

POST /v1/metrics and /v1/logs are accepted and dropped: SDKs set up by instrumentation
libraries (traceloop's among them) export metrics and logs beside spans, and a 404 there
makes them log an error on every export.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial

from django.conf import settings
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST
from google.protobuf.message import Message
from google.rpc.status_pb2 import Status
from ninja.errors import AuthenticationError, HttpError
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from traces_app.http.auth import ApiKeyAuth
from traces_app.http.bodies import parse_json, read_body
from traces_app.http.errors import RETRY_AFTER_SECONDS, database_is_busy
from traces_app.ingest.otlp_decoding import (
    CONTENT_TYPES,
    JSON,
    PROTOBUF,
    OtlpDecodeError,
    TooManySpans,
    decode_json,
    decode_protobuf,
    encode_message,
)
from traces_app.ingest.otlp_spans import (
    read_request,
    rejection_summary,
    service_name_notes,
    store_readings,
)

logger = logging.getLogger(__name__)

_report_key = ApiKeyAuth("report")
# google.rpc.Code of each HTTP status we answer with, for the Status body.
_GRPC_CODES = {400: 3, 401: 16, 403: 7, 413: 3, 415: 3, 429: 8, 500: 13, 503: 14}


@csrf_exempt
@require_POST
def export_traces(request: HttpRequest) -> HttpResponse:
    """Store the spans of an ExportTraceServiceRequest; answer as the OTLP/HTTP spec says.

    Each span is mapped and validated on its own: the valid ones are stored and the
    others counted in partial_success with the reasons. A request over the limits
    (ARES_INGEST_MAX_BODY_BYTES, ARES_OTLP_MAX_SPANS) is refused with 413 before its
    spans are read. Errors are google.rpc.Status bodies in the request's encoding.
    """
    return _answer(request, _export_traces)


@csrf_exempt
@require_POST
def export_metrics(request: HttpRequest) -> HttpResponse:
    """Accept an ExportMetricsServiceRequest and drop it: ARES stores no metrics."""
    return _answer(request, partial(_drop, response=ExportMetricsServiceResponse()))


@csrf_exempt
@require_POST
def export_logs(request: HttpRequest) -> HttpResponse:
    """Accept an ExportLogsServiceRequest and drop it: ARES stores no logs."""
    return _answer(request, partial(_drop, response=ExportLogsServiceResponse()))


def _answer(
    request: HttpRequest, export: Callable[[HttpRequest, str], HttpResponse]
) -> HttpResponse:
    """Return what `export` answers, or its error as a google.rpc.Status the OTLP way."""
    encoding = request.content_type if request.content_type in CONTENT_TYPES else JSON
    try:
        return export(request, encoding)
    except OtlpDecodeError as exc:
        return status_response(400, str(exc), encoding)
    except TooManySpans as exc:
        return status_response(413, str(exc), encoding)
    except HttpError as exc:
        return status_response(exc.status_code, str(exc), encoding)
    except (OperationalError, InterfaceError) as exc:
        logger.error("database unavailable during OTLP export: %s", exc)
        if database_is_busy(exc):
            return status_response(429, "database busy; nothing was stored, retry later", encoding)
        return status_response(
            503, "database unavailable; nothing was stored, retry later", encoding
        )
    except Exception:
        logger.exception("unhandled error in OTLP export")
        return status_response(500, "internal error; it has been logged", encoding)


def _export_traces(request: HttpRequest, encoding: str) -> HttpResponse:
    export = decode_request(_checked_body(request), request.content_type)
    readings = read_request(export)
    rejected = store_readings(readings)
    response = ExportTraceServiceResponse()
    # Warnings go in partial_success too, which OTLP allows with no span rejected.
    said = [rejection_summary(rejected, len(readings))] if rejected else []
    said += service_name_notes(export)
    if rejected:
        response.partial_success.rejected_spans = len(rejected)
    if said:
        response.partial_success.error_message = "; ".join(said)
    return HttpResponse(encode_message(response, encoding), content_type=encoding)


def decode_request(raw: bytes, content_type: str) -> ExportTraceServiceRequest:
    """Return the ExportTraceServiceRequest in a protobuf or OTLP/JSON body.

    Raises TooManySpans, before any span is read, for a request over the span limit.
    """
    limit = settings.ARES_OTLP_MAX_SPANS
    if content_type == PROTOBUF:
        return decode_protobuf(raw, limit)
    document = parse_json(raw)  # raises HttpError 400 for bad JSON, saying where
    return decode_json(document, limit)


def _drop(request: HttpRequest, encoding: str, response: Message) -> HttpResponse:
    """Check the key, type and size of an export as for traces, then answer it empty.

    The body is not decoded: nothing in it is kept, so a full success is the truthful answer.
    """
    _checked_body(request)
    return HttpResponse(encode_message(response, encoding), content_type=encoding)


def _checked_body(request: HttpRequest) -> bytes:
    """Return the body of an export sent with a report key, in an OTLP content type."""
    if _report_key(request) is None:
        raise AuthenticationError(
            message="authentication required: send 'Authorization: Bearer ares_...' "
            "or 'x-api-key: ares_...'"
        )
    if request.content_type not in CONTENT_TYPES:
        got = request.content_type or "none"
        raise HttpError(415, f"Content-Type must be {' or '.join(CONTENT_TYPES)}, got {got}")
    return read_body(request)


def status_response(status: int, message: str, encoding: str) -> HttpResponse:
    """Return an OTLP error: a google.rpc.Status body, with Retry-After when worth retrying."""
    body = Status(code=_GRPC_CODES.get(status, 2), message=message)
    response = HttpResponse(encode_message(body, encoding), status=status, content_type=encoding)
    if status in (429, 503):
        response["Retry-After"] = RETRY_AFTER_SECONDS
    if status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="ares"'
    return response
