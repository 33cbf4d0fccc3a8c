"""The planner's pages: try a request (see the plan explained, run it), backtest rules, and
the sandbox chat."""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.contrib.admin.views.decorators import staff_member_required
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from planner_app import backtest, bridge, sandbox_stream
from planner_app.agents.sandbox_runner import LLM_MODES, MODES, llm_problem_of
from planner_app.agents.site_agents import HOW_TO_CONFIGURE
from planner_app.discovery.backends import BackendUnavailable
from planner_app.discovery.site_router import get_router
from planner_app.forms import MAX_HISTORY_CHARS, MAX_HISTORY_MESSAGES, SandboxForm
from planner_app.models import Agent, IntentRule, RuleSetVersion, Workflow
from planner_app.pipeline.planner import Plan
from planner_app.pipeline.ruleset import RuleSet
from planner_app.services import plan_request, recent_evidence
from tools_app.engine import CallContext
from tools_app.site_engine import get_engine
from traces_app.schemas import is_trace_id

MAX_REQUEST_CHARS = 4000


def read_request_text(value: str | None) -> tuple[str, str]:
    """Return the request text and an error message ('' when it can be planned)."""
    text = (value or "").strip()
    if not text:
        return "", "Type a request to plan."
    if len(text) > MAX_REQUEST_CHARS:
        return "", f"The request is {len(text):,} characters long; the limit is 4,000."
    return text, ""


def explained(plan: Plan) -> dict[str, Any]:
    """Return the plan's explanation arranged for the template's tables."""
    explanation = plan.explanation
    chosen = {step.capability: step.tool for step in plan.steps}
    how = explanation.get("arguments", {})
    return {
        "plan": plan,
        "rules_matched": explanation["rules_matched"],
        "capabilities": explanation["capabilities"],
        "capabilities_dropped": explanation["capabilities_dropped"],
        "candidates": [
            {"capability": capability, "scores": scores, "chosen": chosen.get(capability)}
            for capability, scores in explanation["candidates"].items()
        ],
        "steps": [
            {
                "step": step,
                "arguments": as_json(step.arguments),
                "how": how.get(step.step_id, {}).get("how", ""),
            }
            for step in plan.steps
        ],
        "rejected": explanation["rejected"],
    }


def routed(text: str) -> dict[str, Any]:
    """Return the tools the router would offer for the request (as discovery does), or why not."""
    try:
        return {"routing": get_router().search(text).explain()}
    except BackendUnavailable as exc:
        return {"routing_error": f"The router cannot run: {exc}"}


def as_json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


@staff_member_required
@require_http_methods(["GET", "POST"])
def try_planner(request: HttpRequest) -> HttpResponse:
    """Plan a request and show the whole explanation; on POST, run it through the Bridge."""
    data = request.POST if request.method == "POST" else request.GET
    context: dict[str, Any] = {
        "request_text": data.get("request", ""),
        "from_rule": IntentRule.objects.filter(name=data.get("rule", "")).first(),
    }
    if "request" not in data:
        return render(request, "planner_app/try.html", context)
    text, error = read_request_text(data["request"])
    if error:
        context["error"] = error
        return render(request, "planner_app/try.html", context, status=400)
    if request.method == "POST":
        outcome = bridge.execute(
            None, None, text, CallContext(chosen_by="planner", agent="try-the-planner")
        )
        plan = outcome.plan or plan_request(text)
        context["outcome"] = outcome
        context["results"] = [
            {"result": result, "data": as_json(result.data), "error": result.error}
            for result in outcome.results
        ]
    else:
        plan = plan_request(text)
    context.update(explained(plan), **routed(text))
    context["rules_matched"] = with_admin_links(context["rules_matched"])
    return render(request, "planner_app/try.html", context)


def with_admin_links(matches: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Return the matched rules, each with the address of its page in the admin."""
    names = [match["rule"] for match in matches]
    ids = dict(IntentRule.objects.filter(name__in=names).values_list("name", "pk"))
    change = "admin:planner_app_intentrule_change"
    return [
        {**match, "admin_url": reverse(change, args=[ids[match["rule"]]])}
        if match["rule"] in ids
        else match
        for match in matches
    ]


def read_limit(value: str | None) -> tuple[int, str]:
    """Return N, the number of recorded requests to replay, and an error message."""
    if value in (None, ""):
        return backtest.DEFAULT_REQUESTS, ""
    try:
        limit = int(value)
    except ValueError:
        limit = 0
    if not 1 <= limit <= backtest.MAX_REQUESTS:
        return 0, f"N must be a whole number from 1 to {backtest.MAX_REQUESTS:,}."
    return limit, ""


@staff_member_required
@require_http_methods(["GET", "POST"])
def backtest_rules(request: HttpRequest) -> HttpResponse:
    """Compare the current rules with an older version (the previous one by default) or a
    draft over recent requests.

    The form posts because a pasted draft can be far longer than a URL should be.
    """
    current, _ = backtest.current_snapshot()
    data = request.POST
    context: dict[str, Any] = {
        "versions": RuleSetVersion.objects.only("number", "change", "created_at"),
        "current_version": current.version,
        "limit": data.get("limit", backtest.DEFAULT_REQUESTS),
        "selected": data.get("version") or str(backtest.previous_version(current.version) or ""),
        "draft": data.get("draft", ""),
        "max_requests": backtest.MAX_REQUESTS,
    }
    if request.method == "GET":
        return render(request, "planner_app/backtest.html", context)
    limit, error = read_limit(data.get("limit"))
    other, label = None, ""
    if not error:
        other, label, error = _other_ruleset(data.get("draft", ""), data.get("version", ""))
    if error:
        context["error"] = error
        return render(request, "planner_app/backtest.html", context, status=400)
    before, after = backtest.in_order(current, other)
    context["report"] = backtest.backtest(
        backtest.recent_requests(limit), before, after, get_engine().registry, recent_evidence
    )
    labels = {current.version: f"v{current.version}", other.version: label}
    context["before_label"], context["after_label"] = labels[before.version], labels[after.version]
    return render(request, "planner_app/backtest.html", context)


def _other_ruleset(draft: str, version: str) -> tuple[RuleSet | None, str, str]:
    """Return the rule set to compare with, its label, and an error message."""
    if draft.strip():
        try:
            return backtest.draft_ruleset(draft), "draft", ""
        except backtest.DraftError as exc:
            return None, "", f"The draft cannot be used: {exc}"
    try:
        number = int(version)
        return backtest.version_ruleset(number), f"v{number}", ""
    except (ValueError, RuleSetVersion.DoesNotExist):
        return None, "", "Choose a recorded version, or paste a draft."


@staff_member_required
@require_GET
def sandbox_page(request: HttpRequest) -> HttpResponse:
    """Show the sandbox chat: agents (and whether each has an LLM), paths, workflows."""
    agents = [
        {"agent": agent, "has_llm": llm_problem_of(agent) is None}
        for agent in Agent.objects.order_by("name")
    ]
    site_problem = llm_problem_of(None)
    context = {
        "agents": agents,
        "site_has_llm": site_problem is None,
        "how_to_configure": HOW_TO_CONFIGURE,
        "modes": MODES.items(),
        "llm_modes": LLM_MODES,
        "workflows": Workflow.objects.order_by("name").only("name", "description"),
        "max_chars": SandboxForm.base_fields["message"].max_length,
        "max_history": MAX_HISTORY_MESSAGES,
        "max_history_chars": MAX_HISTORY_CHARS,
    }
    return render(request, "planner_app/sandbox.html", context)


@staff_member_required
@require_POST
def sandbox_run(request: HttpRequest) -> HttpResponse:
    """Start a sandbox task and stream its events (text/event-stream); bad input is a 400."""
    form = SandboxForm(request.POST)
    if not form.is_valid():
        return JsonResponse(
            {"error": form.first_error(), "fields": form.errors.get_json_data()}, status=400
        )
    events = sandbox_stream.stream_events(form.task(), settings.ARES_SANDBOX_TIMEOUT_S)
    response = StreamingHttpResponse(events, content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # nginx: pass each event on as it comes
    return response


@staff_member_required
@require_POST
def sandbox_stop(request: HttpRequest) -> HttpResponse:
    """Ask for a running sandbox task to stop; its stream says when it has (202)."""
    trace_id = request.POST.get("trace_id", "")
    if not is_trace_id(trace_id):
        return JsonResponse(
            {"error": "trace_id must be the 32 hex digits of the task's trace."}, status=400
        )
    trace_id = trace_id.lower()  # as the sandbox makes them
    sandbox_stream.request_stop(trace_id, request.user.get_username())
    return JsonResponse({"trace_id": trace_id, "stop": "requested"}, status=202)
