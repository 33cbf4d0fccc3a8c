"""The site's engine: built-in tools recorded into traces, operator settings applied live."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tools_app import site_engine
from tools_app.builtins import calculator
from tools_app.engine import CallContext
from tools_app.models import ToolSetting
from tools_app.specs import ErrorKind, ToolCall
from traces_app.models import Invocation, Trace


@pytest.fixture
def engine(settings: Any) -> Any:
    settings.ARES_TOOL_SETTINGS_CHECK_S = 0  # look at the settings on every call
    site_engine.refresh_tool_settings(force=True)
    return site_engine.get_engine()


def _stored(trace_id: str) -> list[Invocation]:
    return list(Invocation.objects.filter(trace_id=trace_id).order_by("attempt"))


@pytest.mark.django_db(transaction=True)
def test_it_records_every_call_as_a_traced_invocation(engine: Any) -> None:
    context = CallContext(agent="math-tutor", chosen_by="planner", request_text="1+1?")
    result = engine.execute(ToolCall("calculator", '{"expression": "1+1"}', "call_7"), context)
    assert result.data == {"result": 2, "expression": "1+1"}
    [span] = _stored(context.trace_id)
    assert (span.tool_name, span.tool_call_id, span.chosen_by, span.ran_on) == (
        "calculator", "call_7", "planner", "builtin",
    )  # fmt: skip
    assert span.status == "ok" and span.result == {"result": 2, "expression": "1+1"}
    trace = Trace.objects.get(pk=context.trace_id)
    assert (trace.agent, trace.request_text, trace.tool_calls) == ("math-tutor", "1+1?", 1)


@pytest.mark.django_db(transaction=True)
def test_it_records_coercions_beside_the_arguments_sent(engine: Any) -> None:
    context = CallContext()
    call = ToolCall("string_utils", {"operation": "substring", "text": "hello", "start": "1"})
    assert engine.execute(call, context).data["result"] == "ello"
    [span] = _stored(context.trace_id)
    assert span.arguments["start"] == "1"
    assert span.coercions == ['start: string "1" -> integer 1']


@pytest.mark.django_db(transaction=True)
def test_it_records_a_failed_call_with_its_error_kind(engine: Any) -> None:
    context = CallContext()
    result = engine.execute(ToolCall("calculator", {"expression": "1/0"}), context)
    assert result.error.kind == ErrorKind.INVALID_ARGUMENTS
    [span] = _stored(context.trace_id)
    assert (span.status, span.error_kind) == ("error", "invalid_arguments")
    assert "division by zero" in span.error_message


@pytest.mark.django_db(transaction=True)
def test_it_applies_an_operators_settings_without_a_restart(engine: Any) -> None:
    setting = ToolSetting.objects.create(name="calculator", enabled=False, description="Do maths.")
    result = site_engine.get_engine().execute(ToolCall("calculator", {"expression": "2+2"}))
    assert result.error.kind == ErrorKind.DISABLED
    assert site_engine.get_engine().registry.get("calculator").description == "Do maths."
    setting.delete()
    result = site_engine.get_engine().execute(ToolCall("calculator", {"expression": "2+2"}))
    assert result.data["result"] == 4
    description = site_engine.get_engine().registry.get("calculator").description
    assert description == calculator.DESCRIPTION


@pytest.mark.django_db
def test_it_refuses_a_setting_for_an_unknown_tool() -> None:
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError, match="no tool named 'calculater'"):
        ToolSetting(name="calculater").full_clean()


def test_it_executes_a_tool_over_http_with_an_execute_key(
    live_server: Any, make_key: Any, engine: Any
) -> None:
    url = f"{live_server.url}/api/v1/tools/calculator/execute"
    body = {"arguments": '{"expression": "factorial(10)"}', "call_id": "c1", "agent": "bot"}
    response = httpx.post(
        url, json=body, headers={"Authorization": f"Bearer {make_key('execute')}"}
    )
    assert response.status_code == 200, response.text
    result = response.json()
    assert (result["success"], result["data"]["result"], result["call_id"]) == (True, 3628800, "c1")
    span = Invocation.objects.get(tool_call_id="c1")
    assert (span.chosen_by, span.agent) == ("external", "bot")


def test_it_needs_the_execute_scope_to_run_tools(live_server: Any, make_key: Any) -> None:
    url = f"{live_server.url}/api/v1/tools/calculator/execute"
    headers = {"Authorization": f"Bearer {make_key('report', 'read')}"}
    response = httpx.post(url, json={"arguments": {"expression": "1"}}, headers=headers)
    assert response.status_code == 403
    assert "execute" in response.json()["detail"]


def test_it_lists_tool_contracts(live_server: Any, make_key: Any) -> None:
    response = httpx.get(
        f"{live_server.url}/api/v1/tools", headers={"Authorization": f"Bearer {make_key('read')}"}
    )
    calculator = {tool["name"]: tool for tool in response.json()}["calculator"]
    assert calculator["parameters"]["required"] == ["expression"]
    assert (calculator["side_effect"], calculator["idempotent"], calculator["timeout_s"]) == (
        "read_only", True, 10,
    )  # fmt: skip
    assert "Summation" in calculator["capabilities"]
