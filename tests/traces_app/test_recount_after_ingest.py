"""Ingest never recounts rollups: it leaves its marks to the beat's periodic job and to pages."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from django.conf import settings

from tests.conftest import make_span
from traces_app import tasks
from traces_app.models import RollupMark, ToolRollup
from traces_app.rollups import range_totals

pytestmark = pytest.mark.django_db(transaction=True)

STARTED = datetime.now(UTC) - timedelta(minutes=5)
HOUR = STARTED.replace(minute=0, second=0, microsecond=0)


@pytest.fixture
def recounts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Return the list of recounts run from now on: by the task, or by a page."""
    ran: list[str] = []
    recount_all = tasks.recount_all_marked_rollups
    recount_range = range_totals.recount_marked_rollups

    def task_recount(*args: Any, **kwargs: Any) -> int:
        ran.append("task")
        return recount_all(*args, **kwargs)

    def page_recount(*args: Any, **kwargs: Any) -> Any:
        ran.append("page")
        return recount_range(*args, **kwargs)

    monkeypatch.setattr(tasks, "recount_all_marked_rollups", task_recount)
    monkeypatch.setattr(range_totals, "recount_marked_rollups", page_recount)
    return ran


def calculator_calls(report: Callable[..., httpx.Response], count: int) -> None:
    """Post `count` calculator calls in one batch, started STARTED."""
    spans = [make_span(started_at=STARTED.isoformat()) for _ in range(count)]
    answer = report(*spans)
    assert answer.status_code == 200, answer.text
    assert answer.json()["accepted"] == count


def test_an_ingest_request_with_marks_pending_does_not_recount(
    report: Callable[..., httpx.Response], recounts: list[str]
) -> None:
    assert settings.CELERY_TASK_ALWAYS_EAGER  # no broker: a recount asked for would run here
    calculator_calls(report, 2)
    assert RollupMark.objects.exists()  # pending from the first batch

    calculator_calls(report, 3)

    assert recounts == []
    assert not ToolRollup.objects.exists()
    assert RollupMark.objects.filter(bucket_start=HOUR, tool_name="calculator").count() == 2


def test_the_periodic_job_recounts_the_marks_ingest_left(
    report: Callable[..., httpx.Response], recounts: list[str]
) -> None:
    calculator_calls(report, 2)
    calculator_calls(report, 3)

    tasks.periodic_job_task.delay("recount-marked-rollups").get()

    assert recounts == ["task"]
    assert ToolRollup.objects.get(tool_name="calculator", bucket_start=HOUR).calls == 5
    assert not RollupMark.objects.exists()


def test_a_page_recounts_the_marks_of_its_range_before_rendering(
    report: Callable[..., httpx.Response],
    recounts: list[str],
    session_client: Callable[..., httpx.Client],
) -> None:
    calculator_calls(report, 4)

    page = session_client(is_staff=True).get("/tools/", params={"range": "24h"})

    assert page.status_code == 200
    assert recounts == ["page"]
    assert ToolRollup.objects.get(tool_name="calculator", bucket_start=HOUR).calls == 4
    assert not RollupMark.objects.exists()
