"""A recurring three-tool chain, end to end in a real Chromium: proposed, applied, edited, run.

An outside agent reports the same chain three times through POST /api/v1/invocations over
real HTTP (json_tools finds an order's price, the calculator triples it, hash_tool labels
the total); the operator refreshes the Proposals page, reads the proposed workflow with its
data flow, applies it, opens it in the editor, changes its input, saves and runs it, and
the run carries the new input through every step.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from planner_app.models import Proposal, Workflow, WorkflowRun
from tests.ares_site import conftest as browser_fixtures
from tests.ares_site.browser import assert_stayed_local
from tests.planner_app.test_proposal_chains import report_chain, run_arguments
from tools_app.configured_builtins import builtin_specs
from tools_app.engine import ToolEngine
from tools_app.registry import ToolRegistry

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

browser = browser_fixtures.browser
page = browser_fixtures.page
staff_page = browser_fixtures.staff_page
screenshot = browser_fixtures.screenshot

NAME = "json_tools-calculator-hash_tool"


@pytest.fixture
def engine() -> Iterator[ToolEngine]:
    """A real engine over the built-in tools that records nothing: the agent's own."""
    engine = ToolEngine(ToolRegistry(builtin_specs()))
    yield engine
    engine.close()


def test_a_recurring_chain_is_proposed_applied_edited_and_run_in_the_browser(
    staff_page: Any,
    live_server: Any,
    make_key: Callable[..., str],
    engine: ToolEngine,
    default_rules: None,
    screenshot: Any,
) -> None:
    headers = {"Authorization": f"Bearer {make_key('report')}"}
    with httpx.Client(base_url=f"{live_server.url}/api/v1", headers=headers) as api:
        now = datetime.now(UTC).replace(microsecond=0)
        for minutes, price in enumerate((12.5, 40.25, 7.75)):
            report_chain(api, price, now - timedelta(minutes=10 - minutes), engine)

    page = staff_page
    page.goto(f"{live_server.url}/proposals/?kind=workflow")
    page.click("#refresh-button")
    assert "Proposals refreshed" in page.locator("#message").inner_text()
    row = page.locator("#proposals tbody tr", has_text=NAME)
    assert row.locator(".evidence-count").inner_text() == "3"
    row.locator("a.proposal-title").click()

    definition = json.loads(page.locator("#workflow-definition").inner_text())
    steps = definition["steps"]
    assert [step["tool"] for step in steps] == ["json_tools", "calculator", "hash_tool"]
    assert steps[1]["arguments"] == {"expression": "{$s1.value} * 3"}
    assert steps[2]["arguments"] == {"operation": "md5", "text": "total:{$s2.result}"}
    figures = dict(
        zip(
            page.locator("#backtest-figures th").all_inner_texts(),
            page.locator("#backtest-figures td").all_inner_texts(),
            strict=True,
        )
    )
    assert (figures["traces"], figures["explained"]) == ("3", "3")
    assert sorted(page.locator("#evidence td.request").all_inner_texts()) == sorted(
        f"label the order at {price}" for price in (12.5, 40.25, 7.75)
    )
    screenshot(page, "proposal-workflow")
    page.click("#apply-button")
    assert f"saved workflow {NAME}" in page.locator("#message").inner_text()
    assert Proposal.objects.get(kind="workflow").status == "applied"

    # The operator opens it, gives it an order of their own, saves and runs it.
    page.click("#open-in-editor")
    saved = json.loads(page.locator("#id_definition").input_value())
    assert saved == definition
    document = json.dumps({"order": {"price": 100, "currency": "EUR"}})
    saved["steps"][0]["arguments"]["text"] = document
    page.fill("#id_definition", json.dumps(saved))
    page.click("input[name=_save]")
    assert "was changed successfully" in page.locator("ul.messagelist").inner_text()

    workflow = Workflow.objects.get(name=NAME)
    page.check(f"input[name=_selected_action][value='{workflow.pk}']")
    page.select_option("select[name=action]", "run_now")
    page.click("button[name=index]")
    assert f"{NAME}: success" in page.locator("ul.messagelist").inner_text().lower()
    [(_, _, found), (_, total_args, total), (_, label_args, label)] = run_arguments(
        WorkflowRun.objects.get(workflow=workflow)
    )
    assert found["value"] == 100
    assert total_args == {"expression": "100 * 3"} and total["result"] == 300
    assert label_args == {"operation": "md5", "text": "total:300"}
    assert label["result"] == hashlib.md5(b"total:300").hexdigest()
    assert_stayed_local(page, live_server)
