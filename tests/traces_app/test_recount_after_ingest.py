"""A rollup recount that fails after ingest (inline, without a broker) is not ingest's error."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from django.db import OperationalError

from tests.conftest import make_span
from traces_app import tasks
from traces_app.ingest import recording
from traces_app.models import Invocation, RollupMark

pytestmark = pytest.mark.django_db(transaction=True)


def test_spans_stored_are_accepted_when_the_inline_recount_after_them_fails(
    report: Callable[..., httpx.Response], monkeypatch: pytest.MonkeyPatch, settings: Any
):
    """SQLite busy with other writers made the inline task retry, and its Retry was a 500."""
    settings.ARES_ROLLUP_REFRESH_INTERVAL_S = 0

    def locked() -> int:
        raise OperationalError("database is locked")

    monkeypatch.setattr(tasks, "recount_all_marked_rollups", locked)
    monkeypatch.setattr(recording._recount_throttle, "asked_at", None)
    spans = [make_span(), make_span()]

    answer = report(*spans)

    assert answer.status_code == 200, answer.text
    assert answer.json()["accepted"] == 2
    assert Invocation.objects.filter(span_id__in=[span["span_id"] for span in spans]).count() == 2
    assert RollupMark.objects.exists()  # left for the next recount
