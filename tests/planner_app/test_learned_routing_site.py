"""Routing learns from what the site recorded: spans sent over real HTTP move the tools offered.

The case: a relay tool whose description ("Kick a Zephyr runner by its handle.") shares no
word with how people ask for it ("restart the nightly photo backup"), among tools whose
descriptions do (photos, backups, nightly jobs). By description alone it is not offered;
once the REST API has recorded it serving such requests, a new wording of them offers it,
placed there by its history; when it then keeps failing for them, it drops, while caller
faults and stopped calls leave it where it was. A tool registered later is still found by
its description, and with no history the routing is the one with ARES_ROUTER_HISTORY=off.

The live-refresh tests run the production server (gunicorn) in its own process, so only
what it reads back from the database can reach its router: on the default setup (no
broker, tasks inline) and with Celery (a real Redis and worker), where an agent with active
discovery, run by the server after the outcome landed, is offered the tool by it.
"""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from planner_app.discovery.site_history import reset_site_history
from planner_app.discovery.site_router import get_router
from planner_app.models import Agent
from tests.conftest import ROOT, make_span, subprocess_env
from tests.planner_app.conftest import in_site_registry
from tests.planner_app.fake_llm import FakeLlm, say
from tests.traces_app.test_unavailable_db import gunicorn_client
from tools_app.configured_builtins import builtin_specs
from tools_app.specs import ToolSpec
from traces_app.models import Invocation

pytestmark = pytest.mark.django_db(transaction=True)

OBJECT = {"type": "object", "properties": {"handle": {"type": "string"}}}
TARGET = "mcp.relay.kick"
TOP_K = 5
# Requests the relay tool served, none in the words of its description.
SERVED = [
    "restart the nightly photo backup",
    "the photo backup got stuck overnight, restart it",
    "nightly backup of the photos stalled, restart it please",
    "photo backup is stuck again, restart the nightly run",
    "restart the stuck photo backup from last night",
    "our nightly photos backup hangs, restart it",
]
NEW_WORDING = "please restart the photos backup that stalled last night"
# More requests like those, for the failures recorded later (none is NEW_WORDING).
FAILED_FOR = [
    "restart the nightly photo backup again",
    "restart the photo backup, it stalled overnight",
    "the nightly photos backup is stuck, restart it",
    "restart last night's stuck photo backup",
    "photo backup stalled last night, restart it",
    "restart the nightly backup of the photos, it hangs",
    "restart the stalled nightly photo backup",
    "photos backup stuck overnight, please restart",
]
DEADLINE_S = 120  # a bound for giving up, never a measured timing


def mcp_spec(server: str, tool: str, description: str) -> ToolSpec:
    return ToolSpec(
        name=f"mcp.{server}.{tool}",
        description=description,
        parameters=OBJECT,
        function=lambda **_: {"done": True},
        ran_on=f"mcp:{server}",
    )


DEMO_TOOLS = [
    mcp_spec("relay", "kick", "Kick a Zephyr runner by its handle."),
    mcp_spec("gallery", "resize_photo", "Resize a photo to a given width."),
    mcp_spec("gallery", "tag_photo", "Tag a photo with labels."),
    mcp_spec("vault", "list_backups", "List the backups of a database."),
    mcp_spec("vault", "restore_backup", "Restore a database from one of its backups."),
    mcp_spec("cron", "schedule_job", "Schedule a nightly job at a time."),
    mcp_spec("cron", "cancel_job", "Cancel a scheduled job."),
]
NEW_TOOL = mcp_spec("vault", "verify_backup", "Verify that a photo backup finished intact.")


@pytest.fixture
def demo_tools(settings: Any) -> Iterator[None]:
    """The demo tools in the site's registry; the history read again before every routing."""
    settings.ARES_ROUTER_HISTORY_REFRESH_S = 0
    reset_site_history()  # an earlier test's outcomes went with its database
    yield from in_site_registry(DEMO_TOOLS)
    reset_site_history()


@pytest.fixture
def planner_api(live_server: Any, make_key: Callable[..., str]) -> Iterator[httpx.Client]:
    """A client for the live server's /api/v1/ with a key that reports, reads and plans."""
    headers = {"Authorization": f"Bearer {make_key('report', 'read', 'plan')}"}
    with httpx.Client(base_url=f"{live_server.url}/api/v1", headers=headers, timeout=60) as client:
        yield client


def tool_span(tool: str, request: str, status: str = "ok", error_kind: str = "") -> dict:
    """Return one tool span of a trace of its own, holding the user's request."""
    span = make_span(
        trace_id=secrets.token_hex(16),
        tool_name=tool,
        ran_on=f"mcp:{tool.split('.')[1]}" if tool.startswith("mcp.") else "builtin",
        agent="ops-bot",
        request_text=request,
        arguments={"handle": "photos"},
        status=status,
    )
    if status != "ok":
        span.update(result=None, error_kind=error_kind, error_message=f"{error_kind or status}")
    return span


def record(client: httpx.Client, spans: list[dict]) -> None:
    """Send spans through the REST API; every one must be stored."""
    response = client.post("/invocations", json={"invocations": spans})
    assert response.status_code == 200, response.text
    assert response.json()["accepted"] == len(spans), response.text


def route(client: httpx.Client, tool: str, server: str = "") -> dict[str, Any]:
    """Return the routing of one tool request as the API explains it."""
    response = client.post("/planner/route", json={"tool": tool, "server": server})
    assert response.status_code == 200, response.text
    return response.json()


def offered(routing: dict[str, Any], tool: str) -> dict[str, Any] | None:
    """Return a tool's entry in the routing's top k, None when it is not offered."""
    entries = [entry for entry in routing["tools"][:TOP_K] if entry["tool"] == tool]
    return entries[0] if entries else None


def rank(routing: dict[str, Any], tool: str) -> int | None:
    """Return a tool's place in the routing's top k (0 first), None when it is not there."""
    names = [entry["tool"] for entry in routing["tools"][:TOP_K]]
    return names.index(tool) if tool in names else None


def route_until(
    client: httpx.Client, tool: str, holds: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    """Route `tool` until the routing satisfies `holds`; return the last routing."""
    deadline = time.monotonic() + DEADLINE_S
    routing = route(client, tool)
    while not holds(routing) and time.monotonic() < deadline:
        time.sleep(0.5)
        routing = route(client, tool)
    return routing


def outcomes(routing: dict[str, Any]) -> int:
    return routing.get("history", {}).get("outcomes", 0)


def test_a_new_wording_of_requests_a_tool_served_offers_it_by_its_history(
    demo_tools: None, planner_api: httpx.Client
) -> None:
    before = route(planner_api, NEW_WORDING)
    assert offered(before, TARGET) is None, "its description alone must not find it"
    assert "history" not in before

    record(planner_api, [tool_span(TARGET, request) for request in SERVED])
    after = route_until(planner_api, NEW_WORDING, lambda r: outcomes(r) >= len(SERVED))

    entry = offered(after, TARGET)
    assert entry is not None, after["tools"]
    assert entry["placed_by"] == "history"
    assert entry["succeeded_like"] >= 1 and entry["failed_like"] == 0
    assert entry["closest"] in SERVED
    assert re.search(r"\b\d+ past requests? like this one succeeded", entry["why"]), entry
    assert entry["closest"] in entry["why"]
    assert (after["history"]["outcomes"], after["history"]["tools"]) == (len(SERVED), 1)


def test_caller_faults_and_stopped_calls_leave_a_tool_where_it_was(
    demo_tools: None, planner_api: httpx.Client
) -> None:
    # A success of another tool for an unrelated request with each batch: once the routing
    # counts the second, the spans sent with it were read too.
    marker = tool_span("hash_tool", "sha256 of the word hello")
    record(planner_api, [*(tool_span(TARGET, request) for request in SERVED), marker])
    was = route_until(planner_api, NEW_WORDING, lambda r: outcomes(r) >= len(SERVED) + 1)
    place, entry = rank(was, TARGET), offered(was, TARGET)
    assert place is not None, was["tools"]

    faults = [tool_span(TARGET, r, "error", "invalid_arguments") for r in FAILED_FOR]
    stopped = [tool_span(TARGET, r, "stopped") for r in FAILED_FOR]
    marker = tool_span("hash_tool", "sha256 of the word world")
    record(planner_api, [*faults, *stopped, marker])
    now = route_until(planner_api, NEW_WORDING, lambda r: outcomes(r) >= len(SERVED) + 2)

    assert outcomes(now) == len(SERVED) + 2, "caller faults and stops are no outcomes"
    assert rank(now, TARGET) == place
    moved = offered(now, TARGET)
    assert (moved["succeeded_like"], moved["failed_like"]) == (
        entry["succeeded_like"],
        entry["failed_like"],
    )
    # The learned term is scaled over all tools, so the second marker moves it a little
    # (0.2% seen); 8 of these counted as failures would take it out of the top 5.
    assert moved["history_score"] == pytest.approx(entry["history_score"], rel=0.02)


def test_a_tool_that_keeps_failing_for_such_requests_drops(
    demo_tools: None, planner_api: httpx.Client
) -> None:
    record(planner_api, [tool_span(TARGET, request) for request in SERVED])
    was = route_until(planner_api, NEW_WORDING, lambda r: outcomes(r) >= len(SERVED))
    place = rank(was, TARGET)
    assert place is not None, was["tools"]

    record(planner_api, [tool_span(TARGET, r, "error", "tool_error") for r in FAILED_FOR])
    total = len(SERVED) + len(FAILED_FOR)
    now = route_until(planner_api, NEW_WORDING, lambda r: outcomes(r) >= total)

    assert outcomes(now) == total
    dropped = rank(now, TARGET)
    assert dropped is None or dropped > place, now["tools"]
    entry = offered(now, TARGET)
    if entry is not None:  # still offered, lower: its explanation counts the failures
        assert entry["failed_like"] >= 1 and "failed" in entry["why"]


@pytest.fixture
def register_new_tool() -> Iterator[Callable[[], None]]:
    """Return a function that puts NEW_TOOL in the site's registry, for this test only."""
    registered = iter(())

    def register() -> None:
        nonlocal registered
        registered = in_site_registry([NEW_TOOL])
        next(registered)

    yield register
    next(registered, None)


def test_a_tool_registered_after_the_history_is_found_by_its_description(
    demo_tools: None, planner_api: httpx.Client, register_new_tool: Callable[[], None]
) -> None:
    crowd = ["mcp.vault.list_backups", "mcp.vault.restore_backup", "mcp.gallery.tag_photo",
             "mcp.cron.schedule_job", "mcp.gallery.resize_photo", TARGET]  # fmt: skip
    # Other tools served this very request and ones like it: history they have, it has none.
    asks = [
        "verify the photo backup finished intact",
        "check that the photo backup finished",
        "did the photo backup finish intact",
        "confirm the nightly photo backup finished",
        "verify that the photo backup finished",
        "verify the photos backup finished intact",
    ]
    record(planner_api, [tool_span(tool, ask) for tool in crowd for ask in asks])
    request = "verify the photo backup finished intact"
    routing = route_until(planner_api, request, lambda r: outcomes(r) >= len(crowd) * len(asks))
    assert outcomes(routing) == len(crowd) * len(asks)
    assert offered(routing, NEW_TOOL.name) is None  # not registered yet

    register_new_tool()
    routing = route(planner_api, request)
    entry = offered(routing, NEW_TOOL.name)
    assert entry is not None, routing["tools"]
    assert entry["placed_by"] in ("description", "new tool slot")
    assert "history_score" not in entry
    assert "no past requests like this one" in entry["why"] or "new tool slot" in entry["why"]


COLD_REQUESTS = [
    ("restart the nightly photo backup", ""),
    ("resize a photo", "gallery"),
    ("evaluate an arithmetic expression", "math"),
    ("list the backups of the orders database", ""),
    ("what time is it in Tokyo", "time"),
]


def ranked(routing: dict[str, Any]) -> list[tuple[str, str, float]]:
    return [(e["server"], e["tool"], round(e["score"], 9)) for e in routing["tools"]]


def test_with_no_history_the_routing_is_the_one_with_history_off(
    demo_tools: None, planner_api: httpx.Client, settings: Any
) -> None:
    settings.ARES_ROUTER_HISTORY = "on"
    with_history = [route(planner_api, tool, server) for tool, server in COLD_REQUESTS]
    settings.ARES_ROUTER_HISTORY = "off"
    without = [route(planner_api, tool, server) for tool, server in COLD_REQUESTS]

    assert [ranked(r) for r in with_history] == [ranked(r) for r in without]
    assert all("history" not in r for r in with_history)
    assert all(e["placed_by"] == "description" for r in with_history for e in r["tools"])
    assert any(r["tools"] for r in with_history)


def test_in_process_routing_uses_the_same_history_as_the_api(
    demo_tools: None, planner_api: httpx.Client
) -> None:
    record(planner_api, [tool_span(TARGET, request) for request in SERVED])
    over_http = route_until(planner_api, NEW_WORDING, lambda r: outcomes(r) >= len(SERVED))
    in_process = get_router().search(NEW_WORDING).explain()
    assert ranked(over_http) == ranked(in_process)
    assert offered(in_process, TARGET) is not None


# Live refresh: the production server in its own process.


@pytest.fixture
def server_key(make_key: Callable[..., str]) -> dict[str, str]:
    return {"Authorization": f"Bearer {make_key('report', 'read', 'plan', 'chat')}"}


BUILT_INS = [spec.name for spec in builtin_specs()]
FINGERPRINT = "make a fingerprint of the release notes for the audit"


def live_refresh_case(client: httpx.Client) -> None:
    """Record a success of hash_tool for a request its description lacks; the server's
    routing must come to offer it for that request with that outcome as its evidence."""
    before = route(client, FINGERPRINT)
    assert "history" not in before
    assert "history_score" not in (offered(before, "hash_tool") or {})
    record(client, [tool_span("hash_tool", FINGERPRINT)])
    routing = route_until(client, FINGERPRINT, lambda r: "hash_tool" in learned_from(r))
    assert learned_from(routing)["hash_tool"] == FINGERPRINT, routing["tools"]
    assert outcomes(routing) == 1


def learned_from(routing: dict[str, Any]) -> dict[str, str]:
    """Return the offered tools that have history, each with its closest past request."""
    return {e["tool"]: e.get("closest") for e in routing["tools"][:TOP_K] if "history_score" in e}


def test_a_tool_only_its_history_offers_is_placed_by_history(
    planner_api: httpx.Client, settings: Any
) -> None:
    settings.ARES_ROUTER_HISTORY_REFRESH_S = 0
    before = route(planner_api, FINGERPRINT)
    assert before["tools"] == [], "by their descriptions, no built-in fits"
    record(planner_api, [tool_span("hash_tool", FINGERPRINT)])
    after = route_until(planner_api, FINGERPRINT, lambda r: outcomes(r) >= 1)
    entry = offered(after, "hash_tool")
    assert entry is not None, after
    assert entry["placed_by"] == "history", after["tools"]
    assert not entry["why"].startswith("its description matches"), entry


def test_a_new_outcome_reaches_the_servers_routing_on_the_default_setup(
    tmp_path: Path, server_key: dict[str, str]
) -> None:
    env = subprocess_env(ARES_ROUTER_HISTORY_REFRESH_S="1", DATABASE_CONN_MAX_AGE="0")
    env.pop("CELERY_BROKER_URL", None)  # no broker: tasks run eagerly, in the server
    with gunicorn_client(env, tmp_path / "gunicorn.log") as client:
        client.base_url = f"{client.base_url}/api/v1"
        client.headers.update(server_key)
        live_refresh_case(client)


@pytest.fixture
def celery_worker(transactional_db: None, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A real Celery worker on the default queue of a real Redis; yield (broker, its log)."""
    broker = os.environ.get("CELERY_TEST_BROKER_URL")
    if not broker:
        pytest.skip("set CELERY_TEST_BROKER_URL=redis://... to run against a real broker")
    log_path = tmp_path / "worker.log"
    with log_path.open("w") as log:
        worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "ares_site", "worker", "--pool=solo",
             "--purge", "--without-gossip", "--without-mingle", "--without-heartbeat",
             "--loglevel=INFO"],
            cwd=ROOT, env=subprocess_env(CELERY_BROKER_URL=broker), stdout=log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            yield broker, log_path
        finally:
            worker.terminate()
            worker.wait(timeout=30)


@pytest.mark.redis
def test_a_new_outcome_reaches_the_servers_routing_with_celery(
    tmp_path: Path,
    server_key: dict[str, str],
    celery_worker: tuple[str, Path],
    fake_llm: FakeLlm,
) -> None:
    broker, worker_log = celery_worker
    Agent.objects.create(name="auditor", tools=BUILT_INS, discovery="active")
    fake_llm.script(
        say(f"<tool_request>\nserver: release notes\ntool: {FINGERPRINT}\n</tool_request>"),
        say("done"),
    )
    env = subprocess_env(
        ARES_ROUTER_HISTORY_REFRESH_S="1", DATABASE_CONN_MAX_AGE="0", CELERY_BROKER_URL=broker,
        ARES_LLM_BASE_URL=fake_llm.base_url, ARES_LLM_MODEL="fake-model",
    )  # fmt: skip
    with gunicorn_client(env, tmp_path / "gunicorn.log") as client:
        client.base_url = f"{client.base_url}/api/v1"
        client.headers.update(server_key)
        live_refresh_case(client)
        # The server's agents discover tools with the same history: an active-discovery
        # task started now is offered hash_tool by it.
        message = {"role": "user", "content": FINGERPRINT}
        answer = client.post("/chat", json={"agent": "auditor", "messages": [message]})
        assert answer.status_code == 200, answer.text
    found = Invocation.objects.get(trace_id=answer.json()["trace_id"], tool_name="tool_discovery")
    [routed] = found.result["routing"]
    assert learned_from(routed).get("hash_tool") == FINGERPRINT, routed
    assert "hash_tool" in found.result["loaded"]
    # The server sent its tasks to the worker (tasks were not run inline).
    deadline = time.monotonic() + DEADLINE_S
    while "recount_rollups_task" not in worker_log.read_text() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert "recount_rollups_task" in worker_log.read_text(), worker_log.read_text()[-3000:]
