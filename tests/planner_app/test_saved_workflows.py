"""Saved workflows (Path 3): validated on save, run through the Bridge, progress recorded."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.test import Client

from ares_site.celery import app as celery_app
from planner_app.models import Workflow, WorkflowRun
from planner_app.tasks import run_workflow_task, start_run
from traces_app.models import Invocation

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.django_db(transaction=True)

CHAIN = {
    "steps": [
        {"id": "total", "tool": "calculator", "arguments": {"expression": "100*(100+1)/2"}},
        {"id": "shout", "tool": "string_utils",
         "arguments": {"operation": "upper", "text": "total is {$total.result}"}},
    ]
}  # fmt: skip


def saved(definition: dict, name: str = "chain") -> Workflow:
    workflow = Workflow(name=name, description="add up then shout", definition=definition)
    workflow.full_clean()
    workflow.save()
    return workflow


def test_it_runs_a_saved_chain_and_records_each_step(default_rules: None) -> None:
    run = start_run(saved(CHAIN), background=False)
    assert run.status == "success"
    steps = {s["step_id"]: s for s in run.progress["steps"]}
    assert steps["shout"]["result"]["data"]["result"] == "TOTAL IS 5050"
    assert run.started_at and run.ended_at
    spans = Invocation.objects.filter(trace_id=run.trace_id).order_by("started_at")
    assert [(s.tool_name, s.chosen_by, s.agent) for s in spans] == [
        ("calculator", "workflow", "workflow:chain"),
        ("string_utils", "workflow", "workflow:chain"),
    ]


def test_it_falls_back_to_the_planner_for_a_step_whose_tool_failed(default_rules: None) -> None:
    definition = {
        "steps": [
            {"id": "decode", "tool": "hash_tool",
             "arguments": {"operation": "base64_decode", "text": "%%%"},
             "request": "gcd of 12 and 18"},
        ]
    }  # fmt: skip
    run = start_run(saved(definition), background=False)
    assert run.status == "success"
    [step] = run.progress["steps"]
    assert step["result"]["tool"] == "calculator"
    assert step["result"]["data"]["result"] == 6
    chosen = set(
        Invocation.objects.filter(trace_id=run.trace_id).values_list("chosen_by", flat=True)
    )
    assert chosen == {"workflow", "planner"}


def test_it_skips_what_depends_on_a_failed_step(default_rules: None) -> None:
    definition = {
        "steps": [
            {"id": "bad", "tool": "calculator", "arguments": {"expression": "1/0"}},
            {"id": "after", "tool": "calculator", "arguments": {"expression": "{$bad.result}+1"}},
            {"id": "other", "tool": "calculator", "arguments": {"expression": "2+2"}},
        ]
    }  # fmt: skip
    run = start_run(saved(definition), background=False)
    assert run.status == "partial_failure"
    statuses = {s["step_id"]: s["status"] for s in run.progress["steps"]}
    assert statuses == {"bad": "failed", "after": "skipped", "other": "success"}


@pytest.mark.parametrize(
    ("definition", "message"),
    [
        ({"steps": []}, "has no steps"),
        ({"steps": [{"id": "a", "tool": "nope"}]}, "nope"),
        ({"steps": [{"id": "a", "tool": "calculator", "depends_on": ["b"]},
                    {"id": "b", "tool": "calculator", "depends_on": ["a"]}]}, "a -> b -> a"),
        ({"steps": [{"id": "a", "tool": "calculator", "colour": "red"}]}, "unknown field"),
        ("not an object", "steps"),
    ],
)  # fmt: skip
def test_it_refuses_a_bad_workflow_on_save(definition: Any, message: str) -> None:
    with pytest.raises(ValidationError) as caught:
        Workflow(name="bad", definition=definition).full_clean()
    assert message in str(caught.value)


def test_the_admin_runs_a_workflow(default_rules: None) -> None:
    workflow = saved(CHAIN)
    client = Client()
    client.force_login(get_user_model().objects.create_superuser("ops", "", "pw-for-tests"))
    response = client.post(
        "/admin/planner_app/workflow/",
        {"action": "run_now", "_selected_action": [workflow.pk]},
        follow=True,
    )
    assert "Chain: success" in response.content.decode()
    run = WorkflowRun.objects.get()
    page = client.get(f"/admin/planner_app/workflowrun/{run.pk}/change/").content.decode()
    assert "<b>shout</b> string_utils — success" in page


@pytest.mark.redis
def test_a_celery_worker_runs_a_workflow_and_saves_progress(
    default_rules: None, redis_worker: tuple[str, str]
) -> None:
    broker, queue = redis_worker
    run = WorkflowRun.objects.create(workflow=saved(CHAIN), trace_id=uuid.uuid4().hex)
    with celery_app.connection_for_write(broker) as connection:
        run_workflow_task.apply_async(args=[run.pk], queue=queue, connection=connection)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        run.refresh_from_db()
        if run.status in ("success", "failed", "partial_failure"):
            break
        time.sleep(0.2)
    assert run.status == "success"
    assert [s["status"] for s in run.progress["steps"]] == ["success", "success"]


def test_a_workflow_is_imported_from_json(tmp_path: Path) -> None:
    from io import StringIO

    from django.core.management import CommandError, call_command

    path = tmp_path / "chain.json"
    path.write_text('{"name": "imported", "steps": [{"id": "a", "tool": "calculator", '
                    '"arguments": {"expression": "1+1"}}]}')  # fmt: skip
    out = StringIO()
    call_command("import_workflow", str(path), stdout=out)
    assert "saved workflow imported (1 steps)" in out.getvalue()
    assert Workflow.objects.get(name="imported").definition["steps"][0]["tool"] == "calculator"
    path.write_text('{"name": "broken", "steps": [{"id": "a", "tool": "nope"}]}')
    with pytest.raises(CommandError, match="nope"):
        call_command("import_workflow", str(path))


@pytest.mark.parametrize("name", ["nightly-report", "invoice-check"])
def test_the_example_workflows_run_on_the_built_in_tools(default_rules: None, name: str) -> None:
    module = __import__("planner_app.migrations.0006_example_workflows", fromlist=["x"])
    description, definition = module.WORKFLOWS[name]
    Workflow.objects.filter(name=name).delete()  # shipped by the migration, unless flushed
    workflow = saved(definition, name=name)  # full_clean: valid against the tools' contracts
    run = start_run(workflow, background=False)
    assert run.status == "success", run.progress
    results = {s["step_id"]: s["result"]["data"] for s in run.progress["steps"]}
    if name == "nightly-report":
        assert results["headline"]["result"] == "NIGHTLY REPORT: 3662 CALLS, 152.6 AN HOUR"
    else:
        assert results["with_tax"]["result"] == 258.59
