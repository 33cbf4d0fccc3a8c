"""Management commands: demo data and the development admin login."""

from __future__ import annotations

import io

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from traces_app.models import Invocation, Trace


def run(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_ares_demo_records_whole_realistic_traces() -> None:
    assert "Recorded 500 new spans" in run("ares_demo", "--invocations", "500")
    assert Invocation.objects.count() == 500
    assert Invocation.objects.filter(kind="llm").exists()
    assert Invocation.objects.filter(status="error").exists()
    assert {"builtin", "remote", "mcp:time"} <= set(
        Invocation.objects.values_list("ran_on", flat=True)
    )
    spans_per_trace = sum(Trace.objects.values_list("span_count", flat=True))
    assert spans_per_trace == 500


@pytest.mark.django_db
def test_ares_demo_is_idempotent_for_the_same_seed() -> None:
    run("ares_demo", "--invocations", "300")
    assert "0 new spans (300 already there)" in run("ares_demo", "--invocations", "300")
    assert Invocation.objects.count() == 300


@pytest.mark.django_db
def test_ensure_admin_creates_a_login_that_works_and_prints_it_again(settings, tmp_path) -> None:
    settings.VAR_DIR = tmp_path
    first = run("ensure_admin", "--username", "demo-admin")
    username, password = first.strip().removeprefix("Admin login: ").split(" / ")
    assert get_user_model().objects.get(username=username).check_password(password)
    assert run("ensure_admin", "--username", "demo-admin") == first


@pytest.mark.django_db
def test_ensure_admin_does_not_print_a_password_that_was_changed(settings, tmp_path) -> None:
    settings.VAR_DIR = tmp_path
    run("ensure_admin", "--username", "demo-admin")
    user = get_user_model().objects.get(username="demo-admin")
    user.set_password("changed-by-the-operator")
    user.save()
    assert "password changed since set-up" in run("ensure_admin", "--username", "demo-admin")
