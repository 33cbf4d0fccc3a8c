"""A span whose values the database itself refuses costs only itself, on REST and OTLP."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import httpx
import pytest
from django.db import connection
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from tests.conftest import make_span
from tests.traces_app.test_otlp_bad_input import export_request, is_stored, post, tool_span
from traces_app.models import Invocation

__all__ = ["post"]  # the fixture, used by name

REFUSED_TOOL = "refused_by_db"


@pytest.fixture
def database_refuses_a_tool(transactional_db: None) -> Iterator[None]:
    """Make the database itself refuse spans of one tool, as a constraint would."""
    table = Invocation._meta.db_table
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "CREATE FUNCTION refuse_span() RETURNS trigger AS $$ BEGIN "
                f"IF NEW.tool_name = '{REFUSED_TOOL}' THEN RAISE EXCEPTION 'tool refused' "
                "USING ERRCODE = 'check_violation', COLUMN = 'tool_name'; END IF; "
                "RETURN NEW; END $$ LANGUAGE plpgsql"
            )
            cursor.execute(
                f"CREATE TRIGGER refuse_span BEFORE INSERT ON {table} "
                "FOR EACH ROW EXECUTE FUNCTION refuse_span()"
            )
        else:
            cursor.execute(
                f"CREATE TRIGGER refuse_span BEFORE INSERT ON {table} "
                f"WHEN NEW.tool_name = '{REFUSED_TOOL}' "
                "BEGIN SELECT RAISE(ABORT, 'tool refused'); END"
            )
    yield
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(f"DROP TRIGGER refuse_span ON {table}")
            cursor.execute("DROP FUNCTION refuse_span()")
        else:
            cursor.execute("DROP TRIGGER refuse_span")


def test_one_span_the_database_refuses_costs_only_itself(
    api: httpx.Client, database_refuses_a_tool: None
) -> None:
    spans = [make_span() for _ in range(3)]
    spans.insert(1, make_span(tool_name=REFUSED_TOOL))
    body = api.post("/invocations", json={"invocations": spans}).json()
    assert (body["accepted"], body["duplicates"], body["rejected"]) == (3, 0, 1)
    refused = body["items"][1]
    assert refused["status"] == "rejected" and refused["span_id"] == spans[1]["span_id"]
    error = refused["errors"][0]
    assert "the database refused it" in error["reason"] and "tool refused" in error["reason"]
    if connection.vendor == "postgresql":
        assert error["field"] == "tool_name"
    stored = set(Invocation.objects.values_list("span_id", flat=True))
    assert stored == {span["span_id"] for i, span in enumerate(spans) if i != 1}
    again = api.post("/invocations", json={"invocations": spans}).json()
    assert (again["accepted"], again["duplicates"], again["rejected"]) == (0, 3, 1)


def test_a_batch_the_database_refuses_whole_is_a_422(
    api: httpx.Client, database_refuses_a_tool: None
) -> None:
    response = api.post("/invocations", json={"invocations": [make_span(tool_name=REFUSED_TOOL)]})
    assert response.status_code == 422
    assert response.json()["rejected"] == 1 and not Invocation.objects.exists()


def test_an_otlp_span_the_database_refuses_is_a_partial_success(
    post: Callable[..., httpx.Response], database_refuses_a_tool: None
) -> None:
    good, refused = tool_span(), tool_span(attributes={"gen_ai.tool.name": REFUSED_TOOL})
    response = post(export_request(good, refused).SerializeToString())
    assert response.status_code == 200
    outcome = ExportTraceServiceResponse.FromString(response.content).partial_success
    assert outcome.rejected_spans == 1
    assert "the database refused it" in outcome.error_message
    assert is_stored(good) and not is_stored(refused)
