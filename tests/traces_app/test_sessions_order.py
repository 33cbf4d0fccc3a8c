"""The default order of sessions (latest activity first), found by walking the newest traces,
pages the same as summing every trace: ties, interleaved turns, cursors, and the fallback."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from tests.traces_app.test_sessions_api import T0, tool, turn
from traces_app import sessions
from traces_app.ingest.recording import record_invocations
from traces_app.schemas import InvocationIn


@pytest.fixture
def interleaved(db: None) -> list[str]:
    """Store 12 sessions whose turns interleave, two of them ending at the same moment.

    Return the session ids by latest activity, then id, both descending: the order.
    """
    rng = random.Random(7)
    last: dict[str, float] = {}
    spans = []
    for number in range(12):
        session = f"s-{number:02d}"
        for offset in sorted(rng.sample(range(600), rng.randint(1, 5))):
            spans.append(tool(turn(session, "hi"), "calculator", offset))
            last[session] = max(last.get(session, -1), offset)
    tie = max(last.values()) + 10  # s-03 and s-08 both end here
    for session in ("s-03", "s-08"):
        spans.append(tool(turn(session, "tie"), "calculator", tie))
        last[session] = tie
    record_invocations([InvocationIn.model_validate(span) for span in spans])
    return sorted(last, key=lambda session: (last[session], session), reverse=True)


def walk(limit: int) -> list[str]:
    """Return every session of the range, page by page."""
    filters = sessions.SessionFilters(since=T0 - timedelta(hours=1), until=T0 + timedelta(hours=1))
    seen, cursor = [], None
    while True:
        page = sessions.session_rows(filters, limit, after=cursor)
        seen += [row.session_id for row in page.rows]
        if page.next_cursor is None:
            return seen
        cursor = page.next_cursor


@pytest.mark.parametrize("limit", [1, 2, 5, 50])
@pytest.mark.parametrize("chunk", [1, 3, 1000])
def test_walking_the_newest_traces_pages_in_order(interleaved, monkeypatch, limit, chunk):
    monkeypatch.setattr(sessions, "WALK_CHUNK", chunk)
    monkeypatch.setattr(sessions, "WALK_CHUNKS", 10_000)

    assert walk(limit) == interleaved


@pytest.mark.parametrize("limit", [1, 4])
def test_summing_every_trace_pages_in_the_same_order(interleaved, monkeypatch, limit):
    monkeypatch.setattr(sessions, "WALK_CHUNKS", 0)  # the walk gives up at once

    assert walk(limit) == interleaved


def test_a_page_of_the_walk_holds_the_same_totals_as_the_sum(interleaved, monkeypatch):
    filters = sessions.SessionFilters(since=T0 - timedelta(hours=1), until=T0 + timedelta(hours=1))
    walked = sessions.session_rows(filters, 5)
    assert sessions._latest_sessions(filters, 6, None) == interleaved[:6]  # the walk ran
    monkeypatch.setattr(sessions, "WALK_CHUNKS", 0)
    summed = sessions.session_rows(filters, 5)

    assert [vars(row) for row in walked.rows] == [vars(row) for row in summed.rows]
    assert walked.next_cursor == summed.next_cursor
