"""The traces admin: its filters name every choice; costs read as the console shows them."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.conftest import make_span
from traces_app.ingest.recording import record_invocations
from traces_app.models import FailureSpiral, Invocation
from traces_app.schemas import InvocationIn

pytestmark = pytest.mark.django_db


def test_it_names_the_empty_error_kind_in_the_filter(admin_client: Any) -> None:
    spans = [make_span(), make_span(status="error", error_kind="timeout")]
    record_invocations([InvocationIn.model_validate(span) for span in spans])
    page = admin_client.get("/admin/traces_app/invocation/").content.decode()
    assert '<a href="?error_kind=">(no error)</a>' in page
    assert '<a href="?error_kind=timeout">timeout</a>' in page
    assert '<a href="?error_kind="></a>' not in page


def test_it_rounds_costs_on_every_admin_page(admin_client: Any) -> None:
    """A summed float cost (0.008673050000000002) shows as 0.00867305, lists and records alike."""
    trace_id = "c0" * 16
    spans = [
        make_span(trace_id=trace_id, arguments={"expression": "1/0"}, status="error",
                  error_kind="timeout", result=None, cost_usd=cost)
        for cost in (0.00289101, 0.00289102, 0.00289102000000002)
    ]  # fmt: skip
    record_invocations([InvocationIn.model_validate(span) for span in spans])
    invocation = Invocation.objects.filter(trace_id=trace_id).last()
    spiral = FailureSpiral.objects.get(trace_id=trace_id)
    assert repr(spiral.wasted_cost_usd) != "0.00867305"  # the float noise is stored
    pages = {
        "/admin/traces_app/trace/": "0.00867305",
        f"/admin/traces_app/trace/{trace_id}/change/": "0.00867305",
        f"/admin/traces_app/invocation/{invocation.pk}/change/": "0.00289102",
        "/admin/traces_app/failurespiral/": "0.00867305",
        f"/admin/traces_app/failurespiral/{spiral.pk}/change/": "0.00867305",
    }
    for path, shown in pages.items():
        page = admin_client.get(path).content.decode()
        assert shown in page, path
        assert not re.search(r"0\.00\d{10,}", page), path
