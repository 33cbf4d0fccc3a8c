"""REST endpoints of the planner: plan a request, and execute through the Bridge."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Field, Router, Schema

from planner_app import bridge
from planner_app.services import plan_request
from tools_app.engine import CallContext
from traces_app.auth import ApiKeyAuth
from traces_app.schemas import NAME_PATTERN, TRACE_ID_PATTERN

router = Router(tags=["planner"])


class PlanIn(Schema):
    request: str = Field(min_length=1, max_length=4000, description="The user's request")


class ExecuteIn(Schema):
    tool: str | None = Field(default=None, max_length=200, description="A tool name, if any")
    arguments: dict[str, Any] | str | None = None
    request: str = Field(default="", max_length=4000, description="The user's request")
    fallback: bool = Field(default=True, description="Plan from the request if the tool fails")
    call_id: str = Field(default="", max_length=200, pattern=NAME_PATTERN)
    trace_id: str | None = Field(default=None, pattern=TRACE_ID_PATTERN)
    agent: str = Field(default="", max_length=200, pattern=NAME_PATTERN)


@router.post("/plan", auth=ApiKeyAuth("plan"), summary="Plan a request, with the explanation")
def create_plan(request: HttpRequest, payload: PlanIn) -> dict[str, Any]:
    return plan_request(payload.request).as_dict()


@router.post(
    "/execute", auth=ApiKeyAuth("execute"), summary="Run a tool or a request through the Bridge"
)
def execute_through_bridge(request: HttpRequest, payload: ExecuteIn) -> dict[str, Any]:
    """Run the named tool, or plan from the request when there is none or it is unknown."""
    context = CallContext(
        chosen_by="external",
        agent=payload.agent,
        **({"trace_id": payload.trace_id.lower()} if payload.trace_id else {}),
    )
    outcome = bridge.execute(
        payload.tool,
        payload.arguments,
        payload.request,
        context,
        call_id=payload.call_id,
        fallback=payload.fallback,
    )
    return outcome.as_dict()
