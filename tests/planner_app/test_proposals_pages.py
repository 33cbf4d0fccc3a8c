"""The Proposals pages over the test client: list, detail, apply, dismiss, refresh, the admin."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from planner_app import ruleset_versions
from planner_app.models import IntentRule, Proposal
from tests.planner_app.proposal_rows import HOSTILE, backtest, evidence, make_proposal


def sum_en_keywords() -> list[str]:
    return IntentRule.objects.get(name="sum-en").keywords


def seen_version_of(page: str) -> str:
    return re.search(r'name="seen_version" value="(\d+)"', page)[1]


def test_the_menu_and_try_the_planner_link_to_the_page(
    admin_client: Client, default_rules: None
) -> None:
    overview = admin_client.get("/").content.decode()
    assert '<a href="/proposals/">Proposals</a>' in overview
    tried = admin_client.get("/planner/try", {"request": "tally 3 and 4"}).content.decode()
    assert 'id="proposals-crumb"' in tried and 'href="/proposals/"' in tried


def test_the_list_shows_open_proposals_the_most_supported_first(
    admin_client: Client, default_rules: None
) -> None:
    low = make_proposal("tally")
    high = make_proposal("reckon", evidence_count=7)
    make_proposal("count", status=Proposal.Status.DISMISSED)
    page = admin_client.get("/proposals/").content.decode()
    rows = re.findall(r'<tr data-proposal="(\d+)">', page)
    assert rows == [str(high.pk), str(low.pk)]
    assert "Add &quot;tally&quot; to sum-en (Summation)" in page
    assert '<td class="num newly-planned status-ok">2</td>' in page
    assert ">open (2)</option>" in page and ">dismissed (1)</option>" in page


@pytest.mark.parametrize(
    ("query", "shown"),
    [("status=dismissed", ["count"]), ("status=all", ["reckon", "tally", "count"]),
     ("kind=mapping", []), ("status=all&kind=rule", ["reckon", "tally", "count"])],
)  # fmt: skip
def test_the_list_filters_by_status_and_kind(
    admin_client: Client, default_rules: None, query: str, shown: list[str]
) -> None:
    make_proposal("tally", evidence_count=2)
    make_proposal("reckon", evidence_count=7)
    make_proposal("count", status=Proposal.Status.DISMISSED, evidence_count=1)
    page = admin_client.get(f"/proposals/?{query}").content.decode()
    titles = re.findall(r'class="proposal-title"[^>]*>Add &quot;(\w+)&quot;', page)
    assert titles == shown


@pytest.mark.parametrize("query", ["status=closed", "kind=%3Cb%3Erule", "status=all&kind=x"])
def test_a_bad_filter_says_so_and_shows_the_open_ones(
    admin_client: Client, default_rules: None, query: str
) -> None:
    make_proposal()
    answer = admin_client.get(f"/proposals/?{query}")
    page = answer.content.decode()
    assert answer.status_code == 400
    assert 'id="filter-errors"' in page and "choose one of" in page
    assert "<b>rule" not in page
    assert len(re.findall(r"<tr data-proposal=", page)) == 1


def test_the_list_says_where_proposals_come_from_when_there_are_none(
    admin_client: Client, default_rules: None
) -> None:
    page = admin_client.get("/proposals/").content.decode()
    assert "No open proposal yet" in page


def test_the_detail_shows_the_requests_the_change_and_the_backtest(
    admin_client: Client, default_rules: None
) -> None:
    proposal = make_proposal(backtest=backtest(["tally 3 and 4"], breaks=["add up my bill"]))
    page = admin_client.get(f"/proposals/{proposal.pk}/").content.decode()
    assert "<li>add &#x27;tally&#x27; to rule sum-en</li>" in page
    newly = re.search(r'(?s)<table id="backtest-newly_planned".*?</table>', page)[0]
    assert "tally 3 and 4" in newly and "needs the LLM" in newly
    assert "/planner/try?request=tally%203%20and%204" in newly
    broken = re.search(r'(?s)<table id="backtest-newly_needs_llm".*?</table>', page)[0]
    assert "add up my bill" in broken
    assert re.search(r'id="count-newly-needs-llm">1<', page)
    evidence_table = re.search(r'(?s)<table id="evidence">.*?</table>', page)[0]
    assert evidence_table.count("<tr>") == 3  # the header and two requests
    assert seen_version_of(page) == str(ruleset_versions.latest_number())


def test_request_texts_are_escaped_everywhere(admin_client: Client, default_rules: None) -> None:
    proposal = make_proposal(
        title=f"Add {HOSTILE}", why=HOSTILE, target=HOSTILE, evidence=[evidence(HOSTILE)],
        backtest=backtest([HOSTILE]),
    )  # fmt: skip
    for url in ("/proposals/", f"/proposals/{proposal.pk}/"):
        page = admin_client.get(url).content.decode()
        assert "<script>window.__pwned" not in page and "<img src=x" not in page
        assert "&lt;script&gt;window.__pwned = 1&lt;/script&gt;" in page


def test_a_reopened_proposal_shows_what_was_decided_and_what_undid_it(
    admin_client: Client, default_rules: None
) -> None:
    proposal = make_proposal()
    entry = {
        "status": "applied",
        "by": "API key 'ci' (ares_abc…)",
        "at": "2026-12-01T10:00:00",
        "applied_version": 7,
        "undone_by": {"version": 9, "change": f"guard: {HOSTILE}"},
    }
    Proposal.objects.filter(pk=proposal.pk).update(history=[entry])  # fmt: skip
    page = admin_client.get(f"/proposals/{proposal.pk}/").content.decode()
    history = page[page.index('id="history"') : page.index("</div>", page.index('id="history"'))]
    assert "Applied as v7 by API key &#x27;ci&#x27; (ares_abc…) at 2026-12-01T10:00:00" in history
    assert "the rules are now v9 (guard: &lt;script&gt;window.__pwned" in history
    assert "before applying it again" in history
    assert (
        'id="history"'
        not in admin_client.get(f"/proposals/{make_proposal('tot').pk}/").content.decode()
    )


def test_an_unknown_proposal_is_a_404_page(admin_client: Client) -> None:
    answer = admin_client.get("/proposals/99999/")
    assert answer.status_code == 404
    assert "There is no proposal #99999" in answer.content.decode()
    assert admin_client.post("/proposals/99999/apply", {"seen_version": "1"}).status_code == 404
    assert admin_client.post("/proposals/99999/dismiss").status_code == 404
    for path in (f"/proposals/{10**30}/apply", f"/proposals/{10**30}/dismiss"):
        assert admin_client.post(path, {"seen_version": "1"}).status_code == 404
    assert admin_client.get(f"/proposals/{10**30}/").status_code == 404


def test_applying_from_the_page_makes_a_version(admin_client: Client, default_rules: None) -> None:
    proposal = make_proposal()
    seen = seen_version_of(admin_client.get(f"/proposals/{proposal.pk}/").content.decode())
    answer = admin_client.post(
        f"/proposals/{proposal.pk}/apply", {"seen_version": seen}, follow=True
    )
    page = answer.content.decode()
    assert answer.redirect_chain == [(f"/proposals/{proposal.pk}/", 302)]
    assert f"Applied: the rules are now v{int(seen) + 1}." in page
    assert 'id="decided"' in page and "by admin" in page and 'id="apply-button"' not in page
    assert f'href="/planner/versions/{int(seen) + 1}/" id="applied-version"' in page
    assert "tally" in sum_en_keywords()


def test_a_stale_page_applies_nothing_and_says_so(
    admin_client: Client, default_rules: None
) -> None:
    proposal = make_proposal()
    seen = seen_version_of(admin_client.get(f"/proposals/{proposal.pk}/").content.decode())
    with ruleset_versions.editing():
        rule = IntentRule.objects.get(name="sum-en")
        rule.keywords = [*rule.keywords, "summed"]
        rule.save()
    answer = admin_client.post(f"/proposals/{proposal.pk}/apply", {"seen_version": seen})
    page = answer.content.decode()
    assert answer.status_code == 409
    assert "The rules changed since you opened this page" in page and "Nothing was changed" in page
    assert seen_version_of(page) == str(int(seen) + 1)  # the page now carries the new version
    assert "tally" not in sum_en_keywords() and Proposal.objects.get().status == "open"


@pytest.mark.parametrize("seen", [None, "", "v3", "-1"])
def test_a_post_without_the_pages_version_applies_nothing(
    admin_client: Client, default_rules: None, seen: str | None
) -> None:
    proposal = make_proposal()
    data = {} if seen is None else {"seen_version": seen}
    answer = admin_client.post(f"/proposals/{proposal.pk}/apply", data)
    assert answer.status_code == 400
    assert "did not say which rule-set version it showed" in answer.content.decode()
    assert Proposal.objects.get().status == "open"


def test_applying_twice_says_who_applied_it(admin_client: Client, default_rules: None) -> None:
    proposal = make_proposal()
    seen = str(ruleset_versions.latest_number())
    admin_client.post(f"/proposals/{proposal.pk}/apply", {"seen_version": seen})
    answer = admin_client.post(f"/proposals/{proposal.pk}/apply", {"seen_version": seen})
    assert answer.status_code == 409
    assert "was already applied by admin" in answer.content.decode()
    assert ruleset_versions.latest_number() == int(seen) + 1


def test_a_change_that_no_longer_fits_is_refused_on_the_page(
    admin_client: Client, default_rules: None
) -> None:
    ops = [{"op": "add_words", "rule": "sum-gone", "keywords": ["tally"], "patterns": []}]
    proposal = make_proposal(ops=ops)
    seen = str(ruleset_versions.latest_number())
    answer = admin_client.post(f"/proposals/{proposal.pk}/apply", {"seen_version": seen})
    assert answer.status_code == 409
    assert "no rule named &#x27;sum-gone&#x27;" in answer.content.decode()


def test_dismissing_from_the_page(admin_client: Client, default_rules: None) -> None:
    proposal = make_proposal()
    page = admin_client.post(f"/proposals/{proposal.pk}/dismiss", follow=True).content.decode()
    assert "Dismissed: Add &quot;tally&quot;" in page
    assert "comes back only if more than 2 requests support it" in page
    assert Proposal.objects.get().status == "dismissed"


def test_the_posts_need_staff_and_the_csrf_token(
    client: Client, django_user_model: Any, default_rules: None
) -> None:
    proposal = make_proposal()
    seen = str(ruleset_versions.latest_number())
    assert client.post(f"/proposals/{proposal.pk}/apply", {"seen_version": seen}).status_code == 302
    django_user_model.objects.create_user("viewer", password="viewer-pass-123")
    client.login(username="viewer", password="viewer-pass-123")
    assert client.get("/proposals/").status_code == 302  # to the login: staff only
    django_user_model.objects.create_superuser("operator", "", "operator-pass-123")
    strict = Client(enforce_csrf_checks=True)
    strict.login(username="operator", password="operator-pass-123")
    assert strict.post(f"/proposals/{proposal.pk}/apply", {"seen_version": seen}).status_code == 403
    assert strict.post(f"/proposals/{proposal.pk}/dismiss").status_code == 403
    assert strict.get(f"/proposals/{proposal.pk}/apply").status_code == 405
    assert Proposal.objects.get().status == "open"


def test_refresh_now_mines_the_traffic(admin_client: Client, default_rules: None) -> None:
    page = admin_client.post("/proposals/refresh", follow=True).content.decode()
    assert "Proposals refreshed: 0 proposed from 0 recorded requests" in page


@pytest.mark.django_db(transaction=True)
def test_refresh_now_leaves_the_mining_to_the_workers_when_there_are_some(
    admin_client: Client, default_rules: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from planner_app.tasks import refresh_proposals_task

    queued = []
    monkeypatch.setattr(refresh_proposals_task, "delay", lambda: queued.append(1))  # the broker
    conf = refresh_proposals_task.app.conf
    eager, conf.task_always_eager = conf.task_always_eager, False
    try:
        page = admin_client.post("/proposals/refresh", follow=True).content.decode()
    finally:
        conf.task_always_eager = eager
    assert "A refresh is queued for a worker" in page and queued == [1]


def test_a_workflow_proposal_shows_its_definition_and_opens_in_the_editor(
    admin_client: Client, default_rules: None
) -> None:
    definition = {"steps": [
        {"id": "s1", "tool": "calculator", "arguments": {"expression": "2+2"}, "depends_on": []},
        {"id": "s2", "tool": "calculator", "arguments": {"expression": "{$s1.result} * 10"},
         "depends_on": ["s1"]},
    ]}  # fmt: skip
    proposal = make_proposal(
        kind=Proposal.Kind.WORKFLOW, key="workflow:calculator>calculator",
        title="Workflow calculator → calculator", target="calc-then-scale", ops=[],
        workflow_definition=definition, backtest={"traces": 3, "explained": 3, "problems": []},
    )  # fmt: skip
    page = admin_client.get(f"/proposals/{proposal.pk}/").content.decode()
    assert "{$s1.result}" in page and 'id="workflow-definition"' in page
    assert re.search(r"<th scope=\"row\">explained</th><td>3</td>", page)
    seen = seen_version_of(page)
    answer = admin_client.post(
        f"/proposals/{proposal.pk}/apply", {"seen_version": seen}, follow=True
    )
    page = answer.content.decode()
    assert answer.status_code == 200, page
    workflow = Proposal.objects.get().workflow
    assert workflow is not None and workflow.definition == definition
    assert f'href="/admin/planner_app/workflow/{workflow.pk}/change/"' in page
    assert "Open in the editor" in page


def test_the_admin_lists_and_decides_proposals(admin_client: Client, default_rules: None) -> None:
    tally, reckon = make_proposal("tally"), make_proposal("reckon")
    changelist = admin_client.get("/admin/planner_app/proposal/").content.decode()
    assert "Add &quot;tally&quot; to sum-en" in changelist
    assert f'href="/proposals/{tally.pk}/"' in changelist
    detail = admin_client.get(f"/admin/planner_app/proposal/{tally.pk}/change/")
    assert (
        detail.status_code == 200
        and "add &#x27;tally&#x27; to rule sum-en" in detail.content.decode()
    )
    answer = admin_client.post(
        "/admin/planner_app/proposal/",
        {"action": "apply_selected", "_selected_action": [tally.pk, reckon.pk]},
        follow=True,
    )
    page = answer.content.decode()
    assert "applied (rule-set v" in page
    assert {"tally", "reckon"} <= set(sum_en_keywords())
    again = admin_client.post(
        "/admin/planner_app/proposal/",
        {"action": "dismiss_selected", "_selected_action": [tally.pk]},
        follow=True,
    ).content.decode()
    assert "not dismissed: Proposal #" in again and "was already applied by admin" in again
    assert admin_client.get("/admin/planner_app/proposal/add/").status_code == 403


def test_the_requests_behind_it_show_when_in_utc(admin_client: Client, default_rules: None) -> None:
    entry = {**evidence("tally 3 and 4"), "at": "2026-11-30T13:04:05.250000+01:00"}
    odd = {**evidence("tally 10 and 20"), "at": "<not a moment>"}
    proposal = make_proposal(evidence=[entry, odd])
    page = admin_client.get(f"/proposals/{proposal.pk}/").content.decode()
    assert "<td>2026-11-30 12:04:05</td>" in page
    assert "<td>&lt;not a moment&gt;</td>" in page
