"""Rows sent to the database as one JSON parameter: the same values whichever encoder wrote them."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime

import pytest

from tests.conftest import make_span
from traces_app.ingest.bulk_rows import rows_as_json
from traces_app.ingest.recording import record_invocations
from traces_app.models import Invocation
from traces_app.schemas import InvocationIn

FIELDS = {name: Invocation._meta.get_field(name) for name in ("span_id", "arguments", "result")}


def encoded(*payloads: object) -> list[dict[str, object]]:
    rows = [
        {"span_id": f"{number:016x}", "arguments": payload, "result": None}
        for number, payload in enumerate(payloads)
    ]
    return json.loads(rows_as_json(rows, FIELDS))


def test_values_read_back_are_the_ones_given_unicode_and_64_bit_integers_included() -> None:
    payloads = [
        {"city": "Zürich", "emoji": "🙂", "quote": 'say "hi"\n', "nested": [1, [2, {"x": None}]]},
        {"big": 2**63 - 1, "small": -(2**63), "float": 0.1, "tiny": 5e-324, "huge": 1.7e308},
        {"empty": {}, "list": [], "true": True, "false": False},
    ]
    rows = encoded(*payloads)
    assert [row["arguments"] for row in rows] == payloads


def test_what_the_fast_encoder_refuses_is_written_by_the_standard_one() -> None:
    # An integer beyond 64 bits (a JSON body may hold one) and a lone surrogate.
    rows = encoded({"n": 2**70, "m": -(10**30)}, {"text": "\ud800 alone"})
    assert rows[0]["arguments"] == {"n": 2**70, "m": -(10**30)}
    assert rows[1]["arguments"] == {"text": "\ud800 alone"}


def test_a_nan_from_an_otlp_double_becomes_null_not_invalid_json() -> None:
    rows = encoded({"score": math.nan, "inf": math.inf})
    assert rows[0]["arguments"] == {"score": None, "inf": None}


@pytest.mark.django_db(transaction=True)
def test_a_span_with_an_integer_beyond_64_bits_is_stored_exactly() -> None:
    span = make_span(
        arguments={"n": 2**70, "city": "Zürich"},
        result={"digits": 10**25},
        started_at=datetime.now(UTC).isoformat(),
    )
    record_invocations([InvocationIn.model_validate(span)])
    stored = Invocation.objects.get(span_id=span["span_id"])
    assert stored.arguments == {"n": 2**70, "city": "Zürich"}
    assert stored.result == {"digits": 10**25}
