"""How the REST API writes JSON: ninja's renderer, with datetimes to the microsecond."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.http import HttpRequest, HttpResponse
from ninja.renderers import JSONRenderer
from ninja.responses import NinjaJSONEncoder


class PreciseJsonEncoder(NinjaJSONEncoder):
    """ninja's encoder, with datetimes to the microsecond the databases keep.

    Django's encoder, which ninja's extends, cuts them to milliseconds, so a span read
    back would not start when it was reported to start.
    """

    def default(self, o: Any) -> Any:
        if isinstance(o, datetime):
            text = o.isoformat()
            return text.removesuffix("+00:00") + "Z" if text.endswith("+00:00") else text
        return super().default(o)


class PreciseJsonRenderer(JSONRenderer):
    encoder_class = PreciseJsonEncoder


def json_response(request: HttpRequest, data: Any, status: int = 200) -> HttpResponse:
    """Return data as the API's answer, written as ninja's create_response writes it."""
    renderer = PreciseJsonRenderer()
    content = renderer.render(request, data, response_status=status)
    content_type = f"{renderer.media_type}; charset={renderer.charset}"
    return HttpResponse(content, status=status, content_type=content_type)
