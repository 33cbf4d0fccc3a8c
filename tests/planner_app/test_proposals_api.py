"""/api/v1/proposals over real HTTP: list, read, apply and dismiss, with the `tune` scope."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, assume, given
from hypothesis import settings as hypothesis_settings
from schemathesis import GenerationMode

from planner_app import ruleset_versions
from planner_app.models import IntentRule, Proposal, RuleSetVersion
from planner_app.tasks import refresh_proposals_task
from tests.ares_site import test_api_fuzz as fuzzing
from tests.planner_app.fake_llm import FakeLlm
from tests.planner_app.proposal_rows import HOSTILE, evidence, make_proposal
from tests.planner_app.proposals_worked import (
    LEIJI,
    PLANNED,
    TALLY,
    record_llm_traffic,
    record_planned_traffic,
    site_lacks_the_words,
)

pytestmark = pytest.mark.django_db(transaction=True)

api_schema, local_only = fuzzing.api_schema, fuzzing.local_only  # the fuzzer's fixtures


@pytest.fixture
def tune(live_server: Any, make_key: Callable[..., str]) -> Iterator[httpx.Client]:
    """An HTTP client for the live server's /api/v1/, holding a key with the tune scope."""
    headers = {"Authorization": f"Bearer {make_key('tune')}"}
    with httpx.Client(base_url=f"{live_server.url}/api/v1", headers=headers, timeout=30) as client:
        yield client


def sum_en_keywords() -> list[str]:
    return IntentRule.objects.get(name="sum-en").keywords


def test_it_lists_proposals_the_most_supported_first(
    tune: httpx.Client, default_rules: None
) -> None:
    low = make_proposal("tally")
    high = make_proposal("reckon", evidence_count=9)
    body = tune.get("/proposals").json()
    assert [item["id"] for item in body["items"]] == [high.pk, low.pk]
    item = body["items"][1]
    assert item["change"] == "add 'tally' to rule sum-en"
    assert item["backtest"]["newly_planned_count"] == 2
    assert "newly_planned" not in item["backtest"]  # examples only in the detail
    assert item["url"] == f"/proposals/{low.pk}/"
    assert body["next_cursor"] is None


def test_it_filters_by_status_and_kind(tune: httpx.Client, default_rules: None) -> None:
    make_proposal("tally")
    dismissed = make_proposal("reckon", status=Proposal.Status.DISMISSED)
    mapping = make_proposal("count", kind=Proposal.Kind.MAPPING, key="mapping:x")
    assert [i["id"] for i in tune.get("/proposals?status=dismissed").json()["items"]] == [
        dismissed.pk
    ]
    assert [i["id"] for i in tune.get("/proposals?kind=mapping").json()["items"]] == [mapping.pk]
    assert tune.get("/proposals?status=open&kind=workflow").json()["items"] == []


def test_it_pages_through_every_proposal_once(tune: httpx.Client, default_rules: None) -> None:
    made = {make_proposal(f"word{n}", evidence_count=n % 3).pk for n in range(7)}
    seen, cursor, pages = [], None, 0
    while True:
        answer = tune.get(
            "/proposals", params={"limit": 3, **({"cursor": cursor} if cursor else {})}
        )
        body = answer.json()
        seen += [item["id"] for item in body["items"]]
        counts = [item["evidence_count"] for item in body["items"]]
        assert counts == sorted(counts, reverse=True)
        pages += 1
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert (sorted(seen), len(seen), pages) == (sorted(made), 7, 3)


@pytest.mark.parametrize(
    ("query", "detail"),
    [
        ("status=closed", "status"),
        ("kind=rules", "kind"),
        ("limit=0", "limit"),
        ("limit=501", "limit"),
        ("cursor=bm90LWEtY3Vyc29y", "cursor is not one this API returned"),
        ("sort=-evidence", "unknown query parameter: sort"),
    ],
)
def test_it_refuses_bad_list_parameters(tune: httpx.Client, query: str, detail: str) -> None:
    answer = tune.get(f"/proposals?{query}")
    assert answer.status_code == 422, answer.text
    assert detail in answer.json()["detail"]


def test_it_needs_a_key_with_the_tune_scope(
    live_server: Any, make_key: Callable[..., str], default_rules: None
) -> None:
    proposal = make_proposal()
    url = f"{live_server.url}/api/v1/proposals"
    assert httpx.get(url).status_code == 401
    read_only = {"Authorization": f"Bearer {make_key('read', 'plan')}"}
    for answer in (
        httpx.get(url, headers=read_only),
        httpx.post(f"{url}/{proposal.pk}/apply", headers=read_only),
        httpx.post(f"{url}/{proposal.pk}/dismiss", headers=read_only),
    ):
        assert answer.status_code == 403
        assert answer.json()["detail"] == "API key lacks the 'tune' scope"
    assert Proposal.objects.get().status == "open"


def test_it_reads_one_proposal_with_its_requests_and_backtest(
    tune: httpx.Client, default_rules: None
) -> None:
    proposal = make_proposal(evidence=[evidence(HOSTILE)])
    body = tune.get(f"/proposals/{proposal.pk}").json()
    assert body["evidence"][0]["request"] == HOSTILE  # JSON carries the text as it was
    assert [e["request"] for e in body["backtest"]["newly_planned"]] == [
        "tally 3 and 4",
        "tally 10 and 20",
    ]
    assert body["ops"] == proposal.ops and body["status"] == "open"


@pytest.mark.parametrize("path", ["/proposals/999", "/proposals/0", "/proposals/-3",
                                  f"/proposals/{10**30}", "/proposals/999/apply",
                                  "/proposals/999/dismiss"])  # fmt: skip
def test_an_unknown_proposal_is_a_404(tune: httpx.Client, path: str) -> None:
    answer = tune.post(path) if path.endswith(("apply", "dismiss")) else tune.get(path)
    assert answer.status_code == 404, answer.text
    assert answer.json()["detail"].startswith("no proposal #")


def test_an_id_that_is_not_a_number_is_a_422(tune: httpx.Client) -> None:
    answer = tune.get("/proposals/tally")
    assert answer.status_code == 422
    assert "proposal_id" in answer.json()["detail"]


def test_applying_makes_a_rule_set_version_once(tune: httpx.Client, default_rules: None) -> None:
    proposal = make_proposal()
    before = ruleset_versions.latest_number()
    answer = tune.post(f"/proposals/{proposal.pk}/apply", json={"seen_version": before})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert (body["status"], body["applied_version"]) == ("applied", before + 1)
    assert body["decided_by"].startswith("API key 'test agent' (ares_")
    assert "tally" in sum_en_keywords()
    assert f"proposal #{proposal.pk}" in RuleSetVersion.objects.get(number=before + 1).change
    again = tune.post(f"/proposals/{proposal.pk}/apply")
    assert again.status_code == 409
    assert "already applied by API key 'test agent'" in again.json()["detail"]
    assert ruleset_versions.latest_number() == before + 1


def test_applying_without_a_body_applies(tune: httpx.Client, default_rules: None) -> None:
    proposal = make_proposal()
    assert tune.post(f"/proposals/{proposal.pk}/apply").status_code == 200
    assert tune.post(f"/proposals/{make_proposal('reckon').pk}/apply", json={}).status_code == 200
    assert {"tally", "reckon"} <= set(sum_en_keywords())


def test_a_stale_seen_version_applies_nothing(tune: httpx.Client, default_rules: None) -> None:
    proposal = make_proposal()
    seen = ruleset_versions.latest_number()
    with ruleset_versions.editing():
        rule = IntentRule.objects.get(name="sum-en")
        rule.keywords = [*rule.keywords, "summed"]
        rule.save()
    answer = tune.post(f"/proposals/{proposal.pk}/apply", json={"seen_version": seen})
    assert answer.status_code == 409, answer.text
    assert "changed since" in answer.json()["detail"]
    assert "tally" not in sum_en_keywords()
    assert Proposal.objects.get().status == "open"
    assert ruleset_versions.latest_number() == seen + 1


def test_a_change_that_no_longer_fits_is_a_409(tune: httpx.Client, default_rules: None) -> None:
    ops = [{"op": "add_words", "rule": "sum-renamed", "keywords": ["tally"], "patterns": []}]
    proposal = make_proposal(ops=ops)
    before = ruleset_versions.latest_number()
    answer = tune.post(f"/proposals/{proposal.pk}/apply")
    assert answer.status_code == 409, answer.text
    assert "sum-renamed" in answer.json()["detail"]
    assert ruleset_versions.latest_number() == before
    assert Proposal.objects.get().status == "open"


@pytest.mark.parametrize(
    ("content", "headers", "status", "detail"),
    [
        (b"{not json", {"Content-Type": "application/json"}, 400, ""),
        (b"[1]", {"Content-Type": "application/json"}, 422, "JSON object"),
        (b'{"seen_version": "3"}', {"Content-Type": "application/json"}, 422, "seen_version"),
        (b'{"seen_version": -1}', {"Content-Type": "application/json"}, 422, "seen_version"),
        (b'{"seen": 3}', {"Content-Type": "application/json"}, 422, "seen"),
        (b'{"seen_version": 3}', {"Content-Type": "text/plain"}, 415, "application/json"),
    ],
)
def test_it_refuses_a_bad_apply_body(
    tune: httpx.Client, default_rules: None, content: bytes, headers: dict, status: int, detail: str
) -> None:
    proposal = make_proposal()
    answer = tune.post(f"/proposals/{proposal.pk}/apply", content=content, headers=headers)
    assert answer.status_code == status, answer.text
    assert detail in answer.json()["detail"]
    assert Proposal.objects.get().status == "open"


def test_dismissing_keeps_it_decided(tune: httpx.Client, default_rules: None) -> None:
    proposal = make_proposal()
    answer = tune.post(f"/proposals/{proposal.pk}/dismiss")
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == "dismissed"
    for path in ("dismiss", "apply"):
        again = tune.post(f"/proposals/{proposal.pk}/{path}")
        assert again.status_code == 409, again.text
        assert "dismissed" in again.json()["detail"]
    assert "tally" not in sum_en_keywords()


def test_two_callers_applying_at_once_make_one_version(
    tune: httpx.Client, default_rules: None
) -> None:
    proposal = make_proposal()
    before = ruleset_versions.latest_number()
    start, answers = threading.Barrier(2), []

    def apply() -> None:
        start.wait()
        answers.append(tune.post(f"/proposals/{proposal.pk}/apply").status_code)

    threads = [threading.Thread(target=apply) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(answers) == [200, 409]
    assert ruleset_versions.latest_number() == before + 1


def test_a_staff_session_needs_the_csrf_token_to_apply(
    live_server: Any, django_user_model: Any, default_rules: None
) -> None:
    django_user_model.objects.create_superuser("operator", "", "operator-pass-123")
    proposal = make_proposal()
    with httpx.Client(base_url=live_server.url, timeout=30) as browser:
        login = browser.get("/admin/login/")
        token = login.cookies["csrftoken"]
        browser.post("/admin/login/", data={"username": "operator", "password": "operator-pass-123",
                     "csrfmiddlewaretoken": token, "next": "/admin/"})  # fmt: skip
        assert browser.get("/api/v1/proposals").json()["items"][0]["id"] == proposal.pk
        refused = browser.post(f"/api/v1/proposals/{proposal.pk}/apply")
        assert refused.status_code == 403 and Proposal.objects.get().status == "open"
        token = browser.cookies["csrftoken"]
        done = browser.post(
            f"/api/v1/proposals/{proposal.pk}/apply", headers={"X-CSRFToken": token}
        )
        assert done.status_code == 200, done.text
        assert done.json()["decided_by"] == "operator"


def test_the_schema_documents_the_endpoints_and_their_errors(tune: httpx.Client) -> None:
    paths = tune.get("/openapi.json").json()["paths"]
    apply = paths["/api/v1/proposals/{proposal_id}/apply"]["post"]
    assert {"200", "404", "409", "422"} <= set(apply["responses"])
    assert "seen_version" in str(apply["requestBody"])
    assert "/api/v1/proposals" in paths


def test_the_worked_example_for_an_agent_over_the_api(
    tune: httpx.Client,
    live_server: Any,
    make_key: Callable[..., str],
    fake_llm: FakeLlm,
    llm_settings: None,
    default_rules: None,
) -> None:
    """累计 requests an LLM served are proposed, applied and planned; a rollback undoes it."""
    site_lacks_the_words()
    record_llm_traffic(live_server, make_key, fake_llm, {**TALLY, **LEIJI})
    record_planned_traffic(live_server, make_key)
    planner = httpx.Client(
        base_url=f"{live_server.url}/api/v1", timeout=30,
        headers={"Authorization": f"Bearer {make_key('plan', 'execute')}"},
    )  # fmt: skip
    assert planner.post("/plan", json={"request": "累计 3 和 4"}).json()["needs_llm"] is True
    assert "proposed" in refresh_proposals_task()  # the periodic job's task

    listed = tune.get("/proposals", params={"status": "open", "kind": "rule"}).json()["items"]
    by_change = {item["change"]: item for item in listed}
    assert {"add 'tally' to rule sum-en", "add '累计' to rule sum-zh"} <= set(by_change)
    leiji = by_change["add '累计' to rule sum-zh"]
    assert (leiji["target"], leiji["evidence_count"]) == ("Summation", len(LEIJI))
    detail = tune.get(f"/proposals/{leiji['id']}").json()
    assert sorted(e["request"] for e in detail["backtest"]["newly_planned"]) == sorted(LEIJI)
    assert detail["backtest"]["newly_needs_llm_count"] == 0
    assert {e["served_by"] for e in detail["evidence"]} == {"calculator"}

    seen = leiji["ruleset_version"]
    applied = tune.post(f"/proposals/{leiji['id']}/apply", json={"seen_version": seen}).json()
    assert applied["applied_version"] == seen + 1
    plan = planner.post("/plan", json={"request": "累计 3 和 4"}).json()
    assert plan["needs_llm"] is False
    assert [(s["tool"], s["arguments"]) for s in plan["steps"]] == [
        ("calculator", {"expression": "sum(3,4)"})
    ]
    ran = planner.post("/execute", json={"request": "累计 10 和 20"}).json()
    assert ran["path"] == "planner" and ran["results"][0]["data"]["result"] == 30
    for request in PLANNED:  # what the rules planned before, they still plan
        assert planner.post("/plan", json={"request": request}).json()["needs_llm"] is False

    ruleset_versions.rollback(seen)
    assert planner.post("/plan", json={"request": "累计 3 和 4"}).json()["needs_llm"] is True
    refresh_proposals_task()
    again = tune.get(f"/proposals/{leiji['id']}").json()
    assert (again["status"], again["applied_version"]) == ("open", None)


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=str)
@pytest.mark.parametrize("label", [op for op in fuzzing.OPERATIONS if "/proposals" in op])
def test_it_holds_to_its_schema_with_proposals_stored(
    api_schema: Any, live_server: Any, make_key: Callable[..., str], default_rules: None,
    label: str, mode: GenerationMode,
) -> None:  # fmt: skip
    """Schemathesis on the proposals' operations with rows to find, apply and refuse."""
    stored = [make_proposal(word).pk for word in ("tally", "reckon", "summed")]
    gone = [{"op": "add_words", "rule": "no-such-rule", "keywords": ["x"]}]
    ids = [*stored, make_proposal("gone", ops=gone).pk, max(stored) + 100]  # and one absent
    method, path = label.split(" ", 1)
    operation = api_schema[path][method]
    headers = {"Authorization": f"Bearer {make_key('tune')}"}

    @given(case=operation.as_strategy(generation_mode=mode))
    @hypothesis_settings(max_examples=30, derandomize=True, database=None, deadline=None,
                         suppress_health_check=list(HealthCheck))  # fmt: skip
    def fuzz(case: Any) -> None:
        assume(not (mode is GenerationMode.NEGATIVE and fuzzing.is_valid_on_the_wire(case)))
        if "proposal_id" in (case.path_parameters or {}) and mode is GenerationMode.POSITIVE:
            generated = case.path_parameters["proposal_id"]
            case.path_parameters["proposal_id"] = ids[abs(generated) % len(ids)]
        answer = case.call_and_validate(base_url=live_server.url, headers=headers)
        statuses.add(answer.status_code)

    statuses: set[int] = set()
    fuzz()
    if mode is GenerationMode.POSITIVE:  # it reached stored rows, not only 404s
        assert 200 in statuses, statuses
    if mode is GenerationMode.POSITIVE and method == "POST":
        assert 409 in statuses, statuses  # decided already, or the change no longer fits
