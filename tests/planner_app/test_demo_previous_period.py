"""ares_demo --previous-period: the period before the window too, so changes mean something."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone

from traces_app.models import Invocation

SPANS = 600


def run_demo(*args: str) -> str:
    out = io.StringIO()
    call_command("ares_demo", "--invocations", str(SPANS), "--no-demo-server", *args,
                 stdout=out, stderr=io.StringIO())  # fmt: skip
    return out.getvalue()


@pytest.mark.django_db
def test_it_records_the_day_before_with_a_fifth_less_traffic() -> None:
    assert "Recorded 1080 new spans (0 already there)" in run_demo("--previous-period")
    day_ago = timezone.now() - timedelta(days=1)
    current = Invocation.objects.filter(started_at__gte=day_ago).count()
    before = Invocation.objects.filter(
        started_at__lt=day_ago, started_at__gte=day_ago - timedelta(days=1)
    ).count()
    assert abs(current - SPANS) <= 5 and abs(before - 480) <= 5  # a trace or so at the edge
    assert Invocation.objects.count() == 1080


@pytest.mark.django_db
def test_it_stays_idempotent_with_the_previous_period() -> None:
    run_demo("--previous-period")
    assert "Recorded 0 new spans (1080 already there)" in run_demo("--previous-period")


@pytest.mark.django_db
def test_the_overview_compares_the_day_with_the_demos_day_before(admin_client: Client) -> None:
    run_demo("--previous-period")
    overview = admin_client.get("/", {"range": "24h"}).context["overview"]
    assert overview.previous.calls > 400
    change = overview.changes["calls"]
    assert not change.absent and change.text.startswith("+")  # a fifth less before: up now


@pytest.mark.django_db
def test_without_it_the_previous_day_is_empty(admin_client: Client) -> None:
    run_demo()
    overview = admin_client.get("/", {"range": "24h"}).context["overview"]
    # Whole UTC hours: the range's first hour holds the demo's first spans, and no more.
    assert overview.previous.calls < SPANS / 10


@pytest.mark.django_db
def test_twice_the_window_must_fit_the_retention(settings: object) -> None:
    days = settings.ARES_RETENTION_DAYS / 2 + 1  # type: ignore[attr-defined]
    with pytest.raises(CommandError, match="twice, with --previous-period"):
        run_demo("--previous-period", "--days", str(days))
