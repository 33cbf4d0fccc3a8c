"""Stop reaches a sandbox task in another process: gunicorn with two sync workers.

A sync worker streaming a task serves nothing else, so the stop request is necessarily
served by the other worker; the task must stop all the same (the SandboxStop row).
"""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.contrib.auth import get_user_model

from planner_app.models import Agent, SandboxStop
from tests.conftest import subprocess_env
from tests.planner_app.fake_llm import FakeLlm, held, say
from tests.traces_app.test_unavailable_db import gunicorn_client
from traces_app.models import Invocation

pytestmark = pytest.mark.django_db(transaction=True)
PASSWORD = "a-long-enough-password"


def csrf_of(page: str) -> str:
    return re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)


def log_in(client: httpx.Client) -> None:
    token = csrf_of(client.get("/admin/login/").text)
    data = {"username": "operator", "password": PASSWORD, "csrfmiddlewaretoken": token}
    assert client.post("/admin/login/", data=data).status_code == 302


def events(lines: Any) -> Any:
    """Yield the stream's events as they come (comment lines skipped)."""
    for line in lines:
        if line.startswith("data:"):
            yield json.loads(line[5:])


def test_a_stop_served_by_another_worker_stops_the_task(tmp_path: Path, fake_llm: FakeLlm) -> None:
    get_user_model().objects.create_user("operator", password=PASSWORD, is_staff=True)
    Agent.objects.create(name="math-tutor", tools=["calculator"])
    release = threading.Event()
    fake_llm.script(held(release, say("too late")))
    env = subprocess_env(
        ARES_LLM_BASE_URL=fake_llm.base_url, ARES_LLM_MODEL="fake-model", DATABASE_CONN_MAX_AGE="0"
    )
    try:
        with gunicorn_client(env, tmp_path / "gunicorn.log", workers=2) as client:
            log_in(client)
            token = csrf_of(client.get("/sandbox/").text)
            form = {"agent": "math-tutor", "mode": "llm", "message": "6*7, slowly",
                    "csrfmiddlewaretoken": token}  # fmt: skip
            with client.stream("POST", "/sandbox/run", data=form) as response:
                stream = events(response.iter_lines())
                accepted = next(stream)
                assert next(stream)["type"] == "started"
                stop = client.post(
                    "/sandbox/stop",
                    data={"trace_id": accepted["trace_id"], "csrfmiddlewaretoken": token},
                )
                assert stop.status_code == 202
                rest = list(stream)
    finally:
        release.set()
    log = (tmp_path / "gunicorn.log").read_text()
    assert [event["type"] for event in rest] == ["stopping", "final"], log
    assert rest[-1]["finish_reason"] == "cancelled"
    agent = Invocation.objects.get(trace_id=accepted["trace_id"], kind="agent")
    assert (agent.error_kind, agent.result["finish_reason"]) == ("cancelled", "cancelled")
    assert len(fake_llm.requests) == 1
    assert not SandboxStop.objects.exists()
    # Two workers served: the stream's and the stop's.
    assert len(set(re.findall(r"Booting worker with pid: (\d+)", log))) == 2
