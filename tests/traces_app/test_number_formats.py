"""Numbers as an operator reads them: separators on every count, costs rounded, one label."""

from __future__ import annotations

import html
import re
import secrets
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db.models import F
from django.test import Client

from tests.conftest import make_span
from traces_app.ingest.recording import record_invocations
from traces_app.models import FailureSpiral, SpanRollup, ToolRollup, Trace
from traces_app.rollups.recount import recount_marked_rollups
from traces_app.schemas import InvocationIn
from traces_app.templatetags.console import thousands, usd

T0 = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=30)
BIG_TOKENS = 1_056_440
SLOW_MS = 1_234_567.8
COST = 0.008673050000000002  # what summing float costs gives


@pytest.mark.parametrize(
    ("value", "decimals", "shown"),
    [
        (1056440, 0, "1,056,440"),
        (999, 0, "999"),
        (1234567.85, 1, "1,234,567.9"),
        (-1234.5, 2, "-1,234.50"),
        (-0.001, 2, "0.00"),  # no "-0.00"
        (2.0, -2, "2"),
        (1.25, -2, "1.25"),
        (1250.5, -2, "1,250.5"),
        (None, 0, "–"),
        ("", 0, "–"),
        (float("nan"), 0, "–"),
        ("n/a", 0, "n/a"),
    ],
)
def test_thousands_separates_and_rounds(value: Any, decimals: int, shown: str) -> None:
    assert thousands(value, decimals) == shown


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (COST, "0.00867305"),
        (0.1 + 0.2, "0.30"),
        (3.5, "3.50"),
        (12.3456789, "12.3457"),
        (1234.5678, "1,234.57"),
        (1_056_440.123, "1,056,440.12"),
        (0.000012345678, "0.0000123457"),
        (0, "0.00"),
        (-2.5, "-2.50"),
        (None, "–"),
        ("x", "–"),
    ],
)
def test_usd_gives_six_significant_digits_and_at_least_cents(value: Any, shown: str) -> None:
    assert usd(value) == shown


def visible_numbers(page: str) -> list[str]:
    """Return the runs of four or more digits a reader sees without separators on a page.

    Left out: scripts, chart data tables (their CSV must stay plain), dates and times,
    hexadecimal ids, and form values (a request typed in).
    """
    page = re.sub(r"(?s)<script.*?</script>|<details class=\"numbers\">.*?</details>", " ", page)
    page = re.sub(r"(?s)<textarea.*?</textarea>|<code>.*?</code>", " ", page)
    text = html.unescape(re.sub(r"<[^>]+>", " ", page))
    text = re.sub(r"\d{4}-\d{2}-\d{2}|\d{2}-\d{2}|\d{2}:\d{2}(:\d{2}(\.\d+)?)?", " ", text)
    text = re.sub(r"\b(?=[0-9a-f]*[a-f])[0-9a-f]{8,}\b", " ", text)
    # A random span or trace id is all digits now and then (16 or 32 of them): an id too.
    text = re.sub(r"\b(\d{16}|\d{32})\b", " ", text)
    return re.findall(r"(?<![\d,.])\d{4,}", text)


def at(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat()


@pytest.fixture
def big_trace(db: None, settings: Any) -> str:
    """Store a trace of a failing spiral then a success, with big tokens, latency and cost."""
    trace_id = secrets.token_hex(16)
    failing = [
        make_span(trace_id=trace_id, tool_name="calculator", arguments={"expression": f"1/{i}"},
                  status="error", error_kind="timeout", result=None, started_at=at(i),
                  latency_ms=SLOW_MS, input_tokens=BIG_TOKENS, output_tokens=BIG_TOKENS,
                  cost_usd=COST / 3)
        for i in range(3)
    ]  # fmt: skip
    spans = [
        make_span(trace_id=trace_id, kind="llm", tool_name="", chosen_by=None, ran_on=None,
                  model="gpt-4o", request_text="What is 1,250.5 plus 17%?", started_at=at(-1),
                  input_tokens=BIG_TOKENS, output_tokens=2_500, cost_usd=COST),
        *failing,
        make_span(trace_id=trace_id, tool_name="calculator", started_at=at(5),
                  latency_ms=SLOW_MS, input_tokens=BIG_TOKENS),
    ]  # fmt: skip
    record_invocations([InvocationIn.model_validate(span) for span in spans])
    # A busy tool: a million calls in its rollups, as a month of traffic would leave.
    now = datetime.now(UTC)
    recount_marked_rollups(now - timedelta(days=1), now, marked_before=now, limit=100)
    ToolRollup.objects.update(calls=F("calls") * 300_000, successes=F("successes") * 300_000,
                              failures=F("failures") * 300_000)  # fmt: skip
    SpanRollup.objects.update(calls=F("calls") * 300_000, failures=F("failures") * 300_000)
    return trace_id


def test_every_count_the_console_shows_has_separators(admin_client: Client, big_trace: str) -> None:
    spiral = FailureSpiral.objects.get(trace_id=big_trace)
    pages = [
        "/", "/traces/", "/spirals/", f"/traces/{big_trace}/", f"/spirals/{spiral.pk}/",
        "/tools/", "/tools/calculator/", "/evidence/", "/evidence/Arithmetic/",
        "/planner/try?request=what+is+12+plus+370",
    ]  # fmt: skip
    found = {}
    for path in pages:
        response = admin_client.get(path)
        assert response.status_code == 200, path
        if numbers := visible_numbers(response.content.decode()):
            found[path] = numbers
    assert found == {}


def test_the_headers_cards_and_parts_read_as_the_readme_says(
    admin_client: Client, big_trace: str
) -> None:
    stored = Trace.objects.get(pk=big_trace)
    trace = admin_client.get(f"/traces/{big_trace}/").content.decode()
    assert f"{stored.input_tokens:,} in, {stored.output_tokens:,} out" in trace  # the header
    assert stored.input_tokens > 5_000_000 and f"${usd(stored.cost_usd)}" in trace
    assert "1,234,567.8 ms" in trace  # a span's latency

    spiral = FailureSpiral.objects.get(trace_id=big_trace)
    page = admin_client.get(f"/spirals/{spiral.pk}/").content.decode()
    assert ">Spiral: calculator × 3<" in page
    assert f"{spiral.wasted_tokens:,} tokens, {spiral.wasted_ms:,.1f} ms, $0.00867305" in page

    tool = admin_client.get("/tools/calculator/").content.decode()
    assert re.search(r'id="calls">1,200,000<', tool)
    tools = admin_client.get("/tools/").content.decode()
    assert "1,200,000" in tools


def test_a_custom_range_is_said_once(admin_client: Client, db: None) -> None:
    response = admin_client.get(
        "/traces/", {"since": "2026-01-02T03:04:00+00:00", "until": "2026-01-03T05:06:00+00:00"}
    )
    text = re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", "", response.content.decode())))
    assert text.count("2026-01-02 03:04 to 2026-01-03 05:06 UTC") == 1
    assert "Showing 2026-01-02 03:04 to 2026-01-03 05:06 UTC;" in text


def test_a_preset_range_says_its_name_and_its_ends(admin_client: Client, db: None) -> None:
    text = re.sub(r"<[^>]+>", "", admin_client.get("/traces/?range=6h").content.decode())
    assert re.search(r"Showing last 6 hours: \d{4}-\d{2}-\d{2} \d{2}:\d{2} to ", text)
