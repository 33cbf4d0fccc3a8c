"""Reading request bodies from outside: size-limited, gzip- and deflate-aware, strict JSON."""

from __future__ import annotations

import json
import zlib
from collections import Counter
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse
from django.utils.datastructures import MultiValueDict
from ninja.errors import HttpError
from ninja.parser import Parser
from ninja.renderers import JSONRenderer

from traces_app.http.json_nesting import MAX_JSON_DEPTH, nesting_exceeds

_RENDERER = JSONRenderer()
_CONTENT_TYPE = f"{_RENDERER.media_type}; charset={_RENDERER.charset}"


def read_json_body(request: HttpRequest) -> Any:
    """Return the request's JSON body, or raise HttpError 400/413/415/422 saying what is wrong."""
    raw = read_body(request)
    if not raw:  # whatever the Content-Type says (servers may fill in text/plain)
        raise HttpError(422, "a JSON object body is required (Content-Type: application/json)")
    if request.content_type != "application/json":
        got = request.content_type or "none"
        raise HttpError(415, f"Content-Type must be application/json, got {got}")
    return parse_json(raw)


# zlib's window bits for each Content-Encoding we read. HTTP's "deflate" is the zlib
# format (RFC 9110 8.4.1.2), as the OpenTelemetry exporters and the Collector send it.
_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


def read_body(request: HttpRequest) -> bytes:
    """Return the request's body, decompressed, or raise HttpError 400/413/415 saying why.

    A Content-Length over the limit is refused before the body is read.
    """
    limit = settings.ARES_INGEST_MAX_BODY_BYTES
    too_big = f"request body is larger than {limit} bytes (ARES_INGEST_MAX_BODY_BYTES)"
    declared = request.META.get("CONTENT_LENGTH") or "0"
    if declared.isdigit() and int(declared) > limit:
        raise HttpError(413, too_big)
    try:
        raw = request.body
    except RequestDataTooBig:
        raise HttpError(413, too_big) from None
    encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding in _WBITS:
        raw = decompress_bounded(raw, encoding, limit)
    elif encoding not in ("identity", ""):
        raise HttpError(
            415, f"Content-Encoding {encoding!r} is not supported: use gzip, deflate or none"
        )
    if len(raw) > limit:
        raise HttpError(413, too_big)
    return raw


def decompress_bounded(raw: bytes, encoding: str, limit: int) -> bytes:
    """Return gzip or deflate (zlib) data decompressed, refusing more than `limit` bytes (bombs).

    A gzip file may hold several members one after another (RFC 1952, `cat a.gz b.gz`);
    they are decompressed in turn, as gunzip does. A zlib stream is one stream: bytes
    after its end are refused.
    """
    parts: list[bytes] = []
    size = 0
    while True:
        decompressor = zlib.decompressobj(wbits=_WBITS[encoding])
        try:
            data = decompressor.decompress(raw, limit - size + 1)
        except zlib.error as exc:
            raise HttpError(400, f"body is not valid {encoding}: {exc}") from None
        size += len(data)
        if size > limit:
            raise HttpError(
                413, f"decompressed body is larger than {limit} bytes (ARES_INGEST_MAX_BODY_BYTES)"
            )
        if not decompressor.eof:
            raise HttpError(400, f"{encoding} body is truncated")
        parts.append(data)
        raw = decompressor.unused_data
        if not raw:
            return b"".join(parts)
        if encoding != "gzip":
            raise HttpError(400, f"{encoding} body has {len(raw)} bytes after its end")


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not valid JSON")


def parse_json(raw: bytes) -> Any:
    """Return the JSON document in raw, refusing NaN/Infinity and non-UTF-8 bytes."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HttpError(
            400, f"body is not UTF-8: byte 0x{raw[exc.start]:02x} at offset {exc.start}"
        ) from None
    if not text.strip():
        raise HttpError(400, "request body is empty: send a JSON document")
    too_deep = f"invalid JSON: nested deeper than {MAX_JSON_DEPTH} levels"
    try:
        document = json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        raise HttpError(
            400, f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from None
    except RecursionError:
        raise HttpError(400, too_deep) from None
    except ValueError as exc:
        raise HttpError(400, f"invalid JSON: {exc}") from None
    if nesting_exceeds(document, MAX_JSON_DEPTH):
        raise HttpError(400, too_deep)
    return document


def read_json_object(request: HttpRequest) -> dict[str, Any]:
    """Return the request's JSON body, which must be an object, or raise HttpError saying why.

    Ninja would read an array or a scalar as an object whose fields are all missing, so
    a body of only optional fields (`[null, null]`) would run with the defaults.
    """
    document = read_json_body(request)
    if not isinstance(document, dict):
        raise HttpError(422, f"body must be a JSON object {{...}}, got {json_type(document)}")
    return document


def json_type(value: Any) -> str:
    """Return the JSON name of a parsed value's type: 'an array', 'a string', 'null', ..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return {list: "an array", str: "a string", dict: "an object"}[type(value)]


class JsonBodyParser(Parser):
    """Ninja's parser: our limits, gzip and deflate, clear errors, objects only.

    Every body the API's operations take is an object; anything else is a 422. A query
    parameter that is not a list may be given once: ninja would silently keep the last.
    """

    def parse_body(self, request: HttpRequest) -> Any:
        return read_json_object(request)

    def parse_querydict(
        self, data: MultiValueDict, list_fields: list[str], request: HttpRequest
    ) -> dict[str, Any]:
        for key, values in data.lists():
            if key not in list_fields and len(values) > 1:
                raise HttpError(422, f"{key}: given {len(values)} times; give it once")
        return super().parse_querydict(data, list_fields, request)


def batch_request_body(key: str, item_schema: dict[str, Any]) -> dict[str, Any]:
    """Return the OpenAPI request body of a batch endpoint: {key: [1 to the limit items]}."""
    schema = {
        "type": "object",
        "required": [key],
        "properties": {
            key: {
                "type": "array",
                "minItems": 1,
                "maxItems": settings.ARES_INGEST_MAX_ITEMS,
                "items": item_schema,
            }
        },
    }
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


def batch_response(request: HttpRequest, outcomes: list[dict[str, Any]]) -> HttpResponse:
    """Return a batch's answer: counts and per-item outcomes; 422 only if all were rejected.

    Rendered here, as the API's renderer would, rather than by ninja, which builds and
    dumps a pydantic model per outcome: for 1000 items that cost as much as storing them.
    """
    counts = Counter(outcome["status"] for outcome in outcomes)
    body = {
        "accepted": counts["accepted"],
        "duplicates": counts["duplicate"],
        "rejected": counts["rejected"],
        "items": outcomes,
    }
    status = 422 if counts["rejected"] == len(outcomes) else 200
    content = _RENDERER.render(request, body, response_status=status)
    return HttpResponse(content, status=status, content_type=_CONTENT_TYPE)


def batch_items(body: Any, key: str) -> list[Any]:
    """Return the raw items of a batch body {key: [...]}, or raise 413/422 for a bad envelope."""
    if not isinstance(body, dict) or key not in body:
        raise HttpError(422, f'body must be an object {{"{key}": [...]}}')
    unknown = sorted(set(body) - {key})
    if unknown:
        raise HttpError(422, f"unknown top-level field(s): {', '.join(unknown)}")
    items = body[key]
    if not isinstance(items, list):
        raise HttpError(422, f"{key} must be a list, got {type(items).__name__}")
    if not items:
        raise HttpError(422, f"{key} is empty: send 1 or more items")
    limit = settings.ARES_INGEST_MAX_ITEMS
    if len(items) > limit:
        raise HttpError(413, f"{len(items)} items in one batch; the limit is {limit}")
    return items
