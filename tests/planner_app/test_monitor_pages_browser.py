"""The Monitors pages in a real Chromium: the list, a firing monitor's alerts and deliveries,
and the links from an alert to the traces behind it."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone

from planner_app.monitors.evaluation import evaluate_monitors
from tests.ares_site import conftest as browser_fixtures
from tests.ares_site.browser import assert_stayed_local
from tests.planner_app import notify_records
from tests.planner_app.monitor_spans import calls, monitor, reporter, send
from tests.planner_app.receivers import HttpReceiver

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

browser = browser_fixtures.browser
page = browser_fixtures.page
staff_page = browser_fixtures.staff_page
screenshot = browser_fixtures.screenshot
HOSTILE = "<script>alert('x')</script> errors"


@pytest.fixture
def receiver(settings: Any, receiver: HttpReceiver) -> HttpReceiver:
    """The receiver, with webhooks to loopback allowed."""
    settings.ARES_NOTIFY_ALLOW_PRIVATE = True
    return receiver


def test_a_firing_monitor_shows_its_alert_deliveries_and_traces(
    staff_page: Any, live_server: Any, receiver: HttpReceiver, screenshot: Any
) -> None:
    failing = calls(2, status="error", at=timezone.now())
    send(reporter(), failing + calls(1, at=timezone.now()))
    fired = monitor(name=HOSTILE, description="<b>not bold</b>",
                    channels=[notify_records.webhook(receiver.url)])  # fmt: skip
    monitor(name="quiet one", metric="calls", scope="site", target="", threshold=1000)
    assert evaluate_monitors().fired == 1
    receiver.wait_for(1)

    page = staff_page
    page.goto(f"{live_server.url}/")
    page.click("nav >> text=Monitors")
    assert page.locator("#firing-count").inner_text() == "1 of 2 monitors firing."
    row = page.locator(f"#monitors tr[data-monitor='{fired.pk}']")
    assert row.locator(".monitor-name").inner_text() == HOSTILE  # shown as text, not run
    assert row.locator(".state").inner_text() == "Firing"
    assert row.locator(".value").inner_text() == "66.7%"
    assert row.locator(".threshold").inner_text() == "above 20.0%"
    screenshot(page, "monitors")

    row.locator(".monitor-name").click()
    assert page.locator("#monitor-name").inner_text() == HOSTILE
    assert page.locator("#monitor-description").inner_text() == "<b>not bold</b>"
    event = page.locator("#events tr[data-event='1']")
    assert event.locator(".kind").inner_text() == "Fired"
    assert "error rate of tool calculator was 66.7%" in event.locator(".message").inner_text()
    delivery = page.locator("tr.deliveries-of[data-event='1'] tr.delivery")
    assert "Delivered" in delivery.inner_text()
    screenshot(page, "monitor-detail")

    event.locator(".trace-link").first.click()
    page.wait_for_url("**/traces/*/")
    assert page.url.rstrip("/").rsplit("/", 1)[-1] in {s["trace_id"] for s in failing}

    page.go_back()
    page.locator("#events tr[data-event='1'] .window-link").click()
    page.wait_for_url("**/traces/?*")
    links = page.locator("#traces tbody td.time a")
    listed = {links.nth(i).get_attribute("href").strip("/").rsplit("/", 1)[-1]
              for i in range(links.count())}  # fmt: skip
    assert listed == {span["trace_id"] for span in failing}  # the failing ones, only
    assert_stayed_local(page, live_server)


def test_an_unknown_monitor_is_a_404_page(staff_page: Any, live_server: Any) -> None:
    response = staff_page.goto(f"{live_server.url}/monitors/999999/")
    assert response.status == 404
    assert "No monitor #999999" in staff_page.locator("main").inner_text()
