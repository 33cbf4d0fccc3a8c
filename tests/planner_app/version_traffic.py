"""Recorded traffic for the version-effect and guard tests: requests of known outcome.

Each request is stored as real spans (record_invocations, the ingest path); what the test
expects is counted from the labels it was generated with, not from the code under test.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from html.parser import HTMLParser
from typing import Any

from planner_app import ruleset_versions
from planner_app.models import IntentRule, RuleSetVersion
from tests.conftest import make_span
from traces_app.ingest.recording import record_invocations
from traces_app.schemas import InvocationIn

# A request's shape: the tool calls it holds, (chosen_by, status) in order.
SHAPES: dict[str, list[tuple[str, str]]] = {
    "planner ok": [("planner", "ok")],
    "planner failed": [("planner", "error")],
    "planner two steps, second failed": [("planner", "ok"), ("planner", "error")],
    "llm only": [("llm", "ok")],
    "llm failed only": [("llm", "error")],
    "fallback ok": [("llm", "error"), ("planner", "ok")],
    "fallback failed": [("external", "error"), ("planner", "error")],
    "planner after an ok llm call": [("llm", "ok"), ("planner", "ok")],
    "planner stopped": [("planner", "stopped")],  # no tool call left: not a request
}


@dataclass(frozen=True)
class Expected:
    """What a request of a shape counts as, written out by hand per shape."""

    request: bool
    planned: bool
    planner_first: bool
    planner_ok: bool
    fallback: bool


EXPECTED = {
    "planner ok": Expected(True, True, True, True, False),
    "planner failed": Expected(True, True, True, False, False),
    "planner two steps, second failed": Expected(True, True, True, False, False),
    "llm only": Expected(True, False, False, False, False),
    "llm failed only": Expected(True, False, False, False, False),
    "fallback ok": Expected(True, True, False, True, True),
    "fallback failed": Expected(True, True, False, False, True),
    "planner after an ok llm call": Expected(True, True, False, True, False),
    "planner stopped": Expected(False, False, False, False, False),
}


def record_request(at: datetime, request: str, shape: str, *, with_llm_span: bool = True) -> str:
    """Store one request of a shape starting at `at`; return its trace id."""
    trace_id = secrets.token_hex(16)
    spans = []
    if with_llm_span:  # an agent's model call first: not a tool call, in no count
        llm = make_span(
            trace_id=trace_id,
            kind="llm",
            tool_name="",
            model="fake-model",
            started_at=at.isoformat(),
            request_text=request,
            arguments=None,
        )
        del llm["chosen_by"], llm["ran_on"]
        spans.append(llm)
    for step, (chosen_by, status) in enumerate(SHAPES[shape], start=1):
        moment = at + timedelta(milliseconds=10 * step)
        failed = {"error_kind": "tool_error", "error_message": "boom"} if status == "error" else {}
        spans.append(make_span(trace_id=trace_id, chosen_by=chosen_by, status=status,
                               started_at=moment.isoformat(), request_text=request,
                               tool_call_id=f"call_{step}", **failed))  # fmt: skip
    record_invocations([InvocationIn.model_validate(span) for span in spans])
    return trace_id


def make_version(change: str, at: datetime, *, add_sum_word: str = "") -> RuleSetVersion:
    """Make a rule-set version (adding a word to sum-en if asked) and date it `at`."""
    with ruleset_versions.editing():
        if add_sum_word:
            rule = IntentRule.objects.get(name="sum-en")
            rule.keywords = [*rule.keywords, add_sum_word]
            rule.save()
        version = ruleset_versions.record_version(change) if not add_sum_word else None
    version = version or RuleSetVersion.objects.order_by("-number").first()
    RuleSetVersion.objects.filter(pk=version.pk).update(created_at=at)
    version.refresh_from_db()
    return version


class CellReader(HTMLParser):
    """Collect the text of every element with an id or a class inside rows with data-*."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[str, dict[str, str]] = {}
        self.attrs: dict[str, dict[str, dict[str, str]]] = {}
        self._row: str | None = None
        self._cell: str | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = {name: value or "" for name, value in attrs}
        if tag == "tr":
            key = found.get("data-capability") or found.get("data-figure")
            self._row = key
            if key is not None:
                self.rows.setdefault(key, {})
                self.attrs.setdefault(key, {})
        elif tag in ("td", "th") and self._row is not None:
            self._cell = (found.get("class") or "").replace("num", "").strip() or tag
            self._text = []
            self.attrs[self._row][self._cell] = found

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self._row is not None:
            self.rows[self._row][self._cell] = " ".join("".join(self._text).split())
            self._cell = None
        elif tag == "tr":
            self._row = None


def read_cells(html: str) -> CellReader:
    reader = CellReader()
    reader.feed(html)
    return reader


def count(shapes: list[str]) -> dict[str, Any]:
    """Count what a list of shapes should give, from EXPECTED alone."""
    expected = [EXPECTED[shape] for shape in shapes]
    return {
        "requests": sum(e.request for e in expected),
        "planned": sum(e.planned for e in expected),
        "planner_first": sum(e.planner_first for e in expected),
        "planner_ok": sum(e.planner_ok for e in expected),
        "fallbacks": sum(e.fallback for e in expected),
    }
