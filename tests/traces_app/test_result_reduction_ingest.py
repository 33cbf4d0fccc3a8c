"""What the token budget cut, sent through POST /api/v1/invocations and read back."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from traces_app.models import Invocation


def test_it_stores_and_reads_back_what_the_budget_cut(
    api: httpx.Client, report: Callable[..., httpx.Response], span: Callable[..., dict]
) -> None:
    sent = span(result_tokens=5000, result_reduction="compressed", result_tokens_dropped=4700)
    assert report(sent).json()["accepted"] == 1
    row = Invocation.objects.get(trace_id=sent["trace_id"])
    assert (row.result_reduction, row.result_tokens_dropped) == ("compressed", 4700)
    [read] = api.get(f"/traces/{sent['trace_id']}").json()["spans"]
    assert (read["result_reduction"], read["result_tokens_dropped"]) == ("compressed", 4700)


def test_a_span_the_budget_did_not_cut_says_so(
    api: httpx.Client, report: Callable[..., httpx.Response], span: Callable[..., dict]
) -> None:
    sent = span()
    report(sent)
    [read] = api.get(f"/traces/{sent['trace_id']}").json()["spans"]
    assert (read["result_reduction"], read["result_tokens_dropped"]) == ("", 0)


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"result_reduction": "shortened"}, "result_reduction"),
        ({"result_tokens_dropped": -1, "result_reduction": "truncated"}, "result_tokens_dropped"),
        ({"result_tokens_dropped": 12}, "result_tokens_dropped"),  # dropped, yet not cut
    ],
)
def test_bad_cut_fields_are_refused_naming_the_field(
    report: Callable[..., httpx.Response],
    span: Callable[..., dict],
    problem: Any,
    fields: dict[str, Any],
    field: str,
) -> None:
    response = report(span(**fields))
    assert response.json()["rejected"] == 1
    assert field in problem(response)
    assert not Invocation.objects.exists()


def test_the_trace_page_says_what_the_budget_cut(
    report: Callable[..., httpx.Response], span: Callable[..., dict], admin_client: Any
) -> None:
    cut, whole = span(result_reduction="omitted", result_tokens_dropped=812), span()
    whole["trace_id"] = cut["trace_id"]
    report(cut, whole)
    html = admin_client.get(f"/traces/{cut['trace_id']}/").content.decode()
    assert html.count('class="budget-cut"') == 1
    assert "Left out (the budget was spent): 812 tokens not shown to the model" in html
