"""Fixtures for the traces API tests: posting batches, reading problems, sessions, OTLP export."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExportResult

PASSWORD = "pw-for-tests-1"


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("postgres") and connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL: set DATABASE_URL=postgres://...")


@pytest.fixture
def report(api: httpx.Client) -> Callable[..., httpx.Response]:
    """Return a function that posts spans as one batch and returns the response."""

    def post(*spans: dict[str, Any]) -> httpx.Response:
        return api.post("/invocations", json={"invocations": list(spans)})

    return post


@pytest.fixture
def problem() -> Callable[[httpx.Response], str]:
    """Return a function that reads everything an error response says, as one string."""

    def read(response: httpx.Response) -> str:
        body = response.json()
        parts = [str(body.get("detail", ""))]
        for error in body.get("errors", []):
            parts.append(f"{error['field']}: {error['reason']}")
        for item in body.get("items", []):
            parts.extend(f"{error['field']}: {error['reason']}" for error in item["errors"])
        return "\n".join(parts)

    return read


@pytest.fixture
def session_client(live_server: Any) -> Iterator[Callable[..., httpx.Client]]:
    """Return a function that gives a new user a logged-in session on the live server.

    Staff log in through the admin login page, as a person would. The admin turns other
    users away, so they get their session from Django's own login and its cookie.
    """
    clients: list[httpx.Client] = []

    def login(*, is_staff: bool) -> httpx.Client:
        username = f"user{len(clients)}"
        user = get_user_model().objects.create_user(username, password=PASSWORD, is_staff=is_staff)
        client = httpx.Client(base_url=live_server.url, timeout=30)
        clients.append(client)
        if is_staff:
            form = client.get("/admin/login/").text
            token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form).group(1)
            client.post(
                "/admin/login/",
                data={"username": username, "password": PASSWORD, "csrfmiddlewaretoken": token},
            )
        else:
            django_client = Client()
            django_client.force_login(user)
            client.cookies.set("sessionid", django_client.cookies["sessionid"].value)
        assert "sessionid" in client.cookies, "the login gave no session cookie"
        return client

    yield login
    for client in clients:
        client.close()


class RecordingExporter(OTLPSpanExporter):
    """The SDK's OTLP/HTTP protobuf exporter, remembering the result of each export."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.results: list[SpanExportResult] = []

    def export(self, spans: Any) -> SpanExportResult:
        result = super().export(spans)
        self.results.append(result)
        return result


@pytest.fixture
def otlp_url(live_server: Any) -> str:
    """The live server's OTLP/HTTP traces endpoint."""
    return f"{live_server.url}/v1/traces"


@pytest.fixture
def sdk_export(otlp_url: str, make_key: Callable[..., str]) -> Callable[..., list[Any]]:
    """Return a function that makes spans with the OpenTelemetry SDK and exports them to us.

    `make_spans(tracer)` creates the spans; they go through the SDK's BatchSpanProcessor
    (or `processor`: SimpleSpanProcessor sends each span in a request of its own) and
    OTLP/HTTP exporter, as in an instrumented agent. Returns the export results.
    """

    def export(
        make_spans: Callable[[Any], None],
        resource: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        compression: Compression | None = None,
        processor: type[SpanProcessor] = BatchSpanProcessor,
    ) -> list[SpanExportResult]:
        if headers is None:
            headers = {"Authorization": f"Bearer {make_key('report')}"}
        exporter = RecordingExporter(
            endpoint=otlp_url, headers=headers, compression=compression, timeout=30
        )
        provider = TracerProvider(resource=Resource.create(resource or {}))
        provider.add_span_processor(processor(exporter))
        make_spans(provider.get_tracer("ares-tests"))
        provider.shutdown()  # flushes, then stops the processor's thread
        return exporter.results

    return export
