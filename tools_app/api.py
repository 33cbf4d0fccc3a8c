"""REST endpoints of tools_app: list tool contracts, execute a tool through the engine."""

from __future__ import annotations

import dataclasses
from typing import Any

from django.http import HttpRequest
from ninja import Router

from tools_app.engine import CallContext
from tools_app.schemas import ExecuteIn, ToolOut, ToolResultOut
from tools_app.site_engine import get_engine
from tools_app.specs import ToolCall, ToolSpec
from traces_app.http.auth import ApiKeyAuth, key_or_staff
from traces_app.http.errors import WITH_BODY, responses

router = Router(tags=["tools"])


@router.get(
    "/tools", auth=key_or_staff("read"), response=responses(list[ToolOut]), summary="List tools"
)
def list_tools(request: HttpRequest, include_disabled: bool = False) -> list[dict[str, Any]]:
    specs = get_engine().registry.list(enabled_only=not include_disabled)
    return [_contract(spec) for spec in specs]


def _contract(spec: ToolSpec) -> dict[str, Any]:
    fields = dataclasses.fields(spec)
    contract = {f.name: getattr(spec, f.name) for f in fields if f.name != "function"}
    return {**contract, "llm_name": spec.llm_name}


@router.post(
    "/tools/{name}/execute",
    auth=ApiKeyAuth("execute"),
    response=responses(ToolResultOut, *WITH_BODY),
    summary="Execute a tool: validated, limited, timed out, retried and recorded",
)
def execute_tool(request: HttpRequest, name: str, payload: ExecuteIn) -> dict[str, Any]:
    """Run one call; a failing tool is a result with success=false, not an HTTP error."""
    context = CallContext(
        chosen_by="external",
        agent=payload.agent,
        request_text=payload.request_text,
        parent_span_id=payload.parent_span_id,
        **({"trace_id": payload.trace_id.lower()} if payload.trace_id else {}),
    )
    result = get_engine().execute(ToolCall(name, payload.arguments, payload.call_id), context)
    return result.as_dict()
