"""The session pages through the test client: access, the list, one session, escaping, links."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from tests.traces_app.test_sessions_api import conversation_spans, tool, turn
from traces_app.ingest.recording import record_invocations
from traces_app.schemas import InvocationIn


@pytest.fixture
def conversation(db: None) -> dict[str, Any]:
    spans, ids = conversation_spans()
    record_invocations([InvocationIn.model_validate(span) for span in spans])
    return ids


def session_ids_on(response: Any) -> list[str]:
    return re.findall(r'class="session-link" href="/sessions/([^"]+)/"', response.content.decode())


def test_it_sends_visitors_to_the_login(client: Client, conversation: dict[str, Any]) -> None:
    for path in ("/sessions/", "/sessions/s-71/"):
        response = client.get(path)
        assert response.status_code == 302
        assert "login" in response["Location"]


def test_it_lists_sessions_latest_first(admin_client: Client, conversation: dict) -> None:
    response = admin_client.get("/sessions/", {"range": "6h"})

    assert response.status_code == 200
    assert session_ids_on(response) == ["s-71", "s-72"]
    row = re.search(r'href="/sessions/s-71/".*?</tr>', response.content.decode(), re.S).group(0)
    assert re.search(r'class="num turns">3<', row)
    assert "web_search" in row and "weather" in row


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"range": "6h", "agent": "converter"}, ["s-72"]),
        ({"range": "6h", "q": "71"}, ["s-71"]),
        ({"range": "6h", "sort": "-cost"}, ["s-72", "s-71"]),
        ({"range": "1h"}, []),  # the conversation is two hours old
    ],
)
def test_it_filters_the_list(admin_client: Client, conversation: dict, params, expected) -> None:
    assert session_ids_on(admin_client.get("/sessions/", params)) == expected


def test_it_reports_a_bad_filter_and_keeps_the_rest(admin_client: Client, conversation) -> None:
    response = admin_client.get("/sessions/", {"range": "6h", "sort": "sideways", "q": "72"})

    assert response.status_code == 200
    assert "Order:" in response.content.decode()
    assert session_ids_on(response) == ["s-72"]


def test_it_shows_the_first_page_for_a_bad_cursor(admin_client: Client, conversation) -> None:
    response = admin_client.get("/sessions/", {"range": "6h", "after": "%%%"})

    assert response.status_code == 200
    assert "showing the first page" in response.content.decode()
    assert session_ids_on(response) == ["s-71", "s-72"]


def test_it_shows_a_session_with_text_escaped(admin_client: Client, conversation) -> None:
    response = admin_client.get("/sessions/s-71/")

    page = response.content.decode()
    assert response.status_code == 200
    assert page.count('class="turn"') == 3
    assert "Try again &lt;b&gt;please&lt;/b&gt;" in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "<script>alert(1)" not in page
    assert 'id="cross-turn-spirals"' in page
    for trace_id in conversation["turns"]:
        assert f'href="/traces/{trace_id}/"' in page


def test_it_answers_404_for_an_unknown_session(admin_client: Client, conversation) -> None:
    assert admin_client.get("/sessions/nobody/").status_code == 404


def test_a_session_id_with_a_slash_and_a_question_mark_has_its_page(admin_client: Client) -> None:
    odd = "team/a?b#c"
    record_invocations([InvocationIn.model_validate(tool(turn(odd, "hi"), "calculator", 0))])

    listed = admin_client.get("/sessions/", {"range": "6h"})
    link = re.search(r'class="session-link" href="([^"]+)"', listed.content.decode()).group(1)
    response = admin_client.get(link)

    assert link == "/sessions/team/a%3Fb%23c/"
    assert response.status_code == 200
    assert "team/a?b#c" in response.content.decode()


def test_the_trace_page_links_its_session(admin_client: Client, conversation) -> None:
    trace_id = conversation["turns"][0]

    page = admin_client.get(f"/traces/{trace_id}/").content.decode()

    assert 'id="trace-session" href="/sessions/s-71/"' in page


def test_the_traces_page_filters_by_session(admin_client: Client, conversation) -> None:
    response = admin_client.get("/traces/", {"range": "6h", "session": "s-71"})

    page = response.content.decode()
    shown = set(re.findall(r'href="/traces/([0-9a-f]{32})/"', page))
    assert shown == set(conversation["turns"])
    assert 'id="session-link" href="/sessions/s-71/"' in page
    assert "session=s-71" in re.search(r'id="api-link" href="([^"]+)"', page).group(1)


def test_the_session_page_links_its_traces_over_a_range_that_holds_them(
    admin_client: Client, conversation
) -> None:
    page = admin_client.get("/sessions/s-71/").content.decode()
    link = re.search(r'id="session-traces" href="([^"]+)"', page).group(1).replace("&amp;", "&")

    listed = admin_client.get(link).content.decode()

    assert set(re.findall(r'href="/traces/([0-9a-f]{32})/"', listed)) == set(conversation["turns"])
