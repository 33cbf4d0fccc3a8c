"""POST /v1/metrics and /v1/logs: accepted and dropped, with the same key as /v1/traces."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from opentelemetry._logs import SeverityNumber
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import LogRecordExportResult, SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricExportResult, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource

from traces_app.models import Invocation, OtlpProducer

PROTOBUF = "application/x-protobuf"
JSON = "application/json"


class RecordingMetricExporter(OTLPMetricExporter):
    """The SDK's OTLP/HTTP metric exporter, remembering the result of each export."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.results: list[MetricExportResult] = []

    def export(self, metrics_data: Any, *args: Any, **kwargs: Any) -> MetricExportResult:
        result = super().export(metrics_data, *args, **kwargs)
        self.results.append(result)
        return result


class RecordingLogExporter(OTLPLogExporter):
    """The SDK's OTLP/HTTP log exporter, remembering the result of each export."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.results: list[LogRecordExportResult] = []

    def export(self, batch: Any) -> LogRecordExportResult:
        result = super().export(batch)
        self.results.append(result)
        return result


@pytest.fixture
def report_headers(make_key: Callable[..., str]) -> dict[str, str]:
    return {"Authorization": f"Bearer {make_key('report')}"}


def test_it_accepts_the_sdks_metric_export_and_stores_nothing(live_server, report_headers):
    exporter = RecordingMetricExporter(
        endpoint=f"{live_server.url}/v1/metrics", headers=report_headers, timeout=30
    )
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=3_600_000)
    resource = Resource.create({"service.name": "weather-agent"})
    provider = MeterProvider(resource=resource, metric_readers=[reader])
    provider.get_meter("ares-tests").create_counter("gen_ai.client.token.usage").add(42)

    provider.shutdown()  # collects and exports once

    assert exporter.results == [MetricExportResult.SUCCESS]
    assert not Invocation.objects.exists()
    assert not OtlpProducer.objects.exists()


def test_it_accepts_the_sdks_log_export(live_server, report_headers):
    exporter = RecordingLogExporter(
        endpoint=f"{live_server.url}/v1/logs", headers=report_headers, timeout=30
    )
    provider = LoggerProvider(resource=Resource.create({"service.name": "weather-agent"}))
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))

    provider.get_logger("ares-tests").emit(
        severity_number=SeverityNumber.WARN, body="tool get_weather retried"
    )
    provider.shutdown()

    assert exporter.results == [LogRecordExportResult.SUCCESS]
    assert not Invocation.objects.exists()


@pytest.mark.parametrize(
    ("path", "response_type"),
    [("/v1/metrics", ExportMetricsServiceResponse), ("/v1/logs", ExportLogsServiceResponse)],
)
def test_it_answers_an_empty_protobuf_response(live_server, report_headers, path, response_type):
    body = ExportMetricsServiceRequest().SerializeToString()
    headers = {**report_headers, "Content-Type": PROTOBUF}

    response = httpx.post(f"{live_server.url}{path}", content=body, headers=headers)

    assert response.status_code == 200
    assert response.headers["Content-Type"] == PROTOBUF
    assert response_type.FromString(response.content) == response_type()


@pytest.mark.parametrize("path", ["/v1/metrics", "/v1/logs"])
def test_it_answers_an_empty_json_object_to_json(live_server, report_headers, path):
    body = {"resourceMetrics": []} if path == "/v1/metrics" else {"resourceLogs": []}

    response = httpx.post(f"{live_server.url}{path}", json=body, headers=report_headers)

    assert response.status_code == 200
    assert response.headers["Content-Type"] == JSON
    assert response.json() == {}


@pytest.mark.parametrize("path", ["/v1/metrics", "/v1/logs"])
@pytest.mark.parametrize(
    ("scopes", "status"), [(None, 401), (("read",), 403)], ids=["no key", "read key"]
)
def test_it_asks_for_a_report_key(live_server, make_key, path, scopes, status):
    headers = {"Authorization": f"Bearer {make_key(*scopes)}"} if scopes else {}

    response = httpx.post(f"{live_server.url}{path}", json={}, headers=headers)

    assert response.status_code == status
    assert response.headers["Content-Type"] == JSON


@pytest.mark.parametrize("path", ["/v1/metrics", "/v1/logs"])
def test_it_refuses_another_content_type(live_server, report_headers, path):
    headers = {**report_headers, "Content-Type": "text/plain"}

    response = httpx.post(f"{live_server.url}{path}", content=b"x", headers=headers)

    assert response.status_code == 415
