"""REST endpoints of the planner's proposals: list and read them, apply or dismiss one.

Every operation needs the `tune` scope (or a staff session, with CSRF for the posts):
reading proposals shows recorded request texts, and applying one changes the rules.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from django.http import HttpRequest
from ninja import Field, Query, Router, Schema
from ninja.errors import HttpError
from pydantic import ConfigDict, StrictInt

from planner_app.models import Proposal
from planner_app.proposals import decisions
from traces_app.http.auth import key_or_staff
from traces_app.http.bodies import read_body, read_json_body
from traces_app.http.errors import WITH_BODY, ErrorOut, responses
from traces_app.http.paging import BadCursor, keyset_page
from traces_app.schemas import InvalidItem, validated

router = Router(tags=["proposals"])


class ProposalFilter(Schema):
    status: Literal["open", "applied", "dismissed"] | None = Field(
        None, description="Only proposals in this state (default: all)"
    )
    kind: Literal["rule", "mapping", "workflow"] | None = None
    cursor: str | None = Field(None, description="next_cursor of the page before")
    limit: int = Field(50, ge=1, le=500)


class ProposalOut(Schema):
    id: int
    kind: str
    key: str = Field(description="What is proposed, stable across refreshes")
    title: str
    target: str = Field(description="The capability, or the workflow's name")
    why: str
    status: str = Field(description="open, applied or dismissed")
    change: str = Field(description="The change in words")
    ops: list[dict[str, Any]] = Field(description="The change as operations on the rules")
    evidence_count: int = Field(description="Recorded requests behind it")
    backtest: dict[str, Any] = Field(description="The backtest's counts (the detail has examples)")
    ruleset_version: int = Field(description="The rule-set version it was backtested against")
    applied_version: int | None = Field(description="The rule-set version applying it made")
    workflow_id: int | None = Field(description="The workflow applying it saved")
    decided_by: str | None
    decided_at: datetime | None
    created_at: datetime
    updated_at: datetime
    url: str = Field(description="Its page on the console")

    @staticmethod
    def resolve_change(proposal: Proposal) -> str:
        return decisions.described(proposal)

    @staticmethod
    def resolve_backtest(proposal: Proposal) -> dict[str, Any]:
        return decisions.backtest_counts(proposal)

    @staticmethod
    def resolve_decided_by(proposal: Proposal) -> str | None:
        if proposal.decided_by:
            return proposal.decided_by.get_username()
        return proposal.decided_via or None

    @staticmethod
    def resolve_url(proposal: Proposal) -> str:
        return decisions.page_of(proposal)


class ProposalDetailOut(ProposalOut):
    workflow_definition: dict[str, Any] | None
    evidence: list[dict[str, Any]] = Field(description="The requests behind it (the newest)")
    history: list[dict[str, Any]] = Field(
        description="Earlier decisions undone since: status, by, at, applied_version, undone_by"
    )
    backtest: dict[str, Any] = Field(
        description="Counts, and examples labelled newly_planned, newly_needs_llm, changed"
    )

    @staticmethod
    def resolve_backtest(proposal: Proposal) -> dict[str, Any]:
        return proposal.backtest


class ProposalPage(Schema):
    items: list[ProposalOut]
    next_cursor: str | None


class ApplyIn(Schema):
    model_config = ConfigDict(extra="forbid")

    seen_version: StrictInt | None = Field(
        None,
        ge=0,
        le=2**31,
        description="The rule-set version you reviewed it at: if the rules changed since, "
        "nothing is applied (409)",
    )


APPLY_BODY = {
    "requestBody": {
        "required": False,
        "content": {"application/json": {"schema": ApplyIn.model_json_schema()}},
    }
}


@router.get(
    "/proposals",
    auth=key_or_staff("tune"),
    response=responses(ProposalPage),
    summary="List the planner's proposals, the most supported first",
)
def list_proposals(request: HttpRequest, filters: Query[ProposalFilter]) -> dict[str, Any]:
    proposals = Proposal.objects.select_related("decided_by")
    if filters.status:
        proposals = proposals.filter(status=filters.status)
    if filters.kind:
        proposals = proposals.filter(kind=filters.kind)
    try:
        page = keyset_page(proposals, filters.limit, after=filters.cursor, key=decisions.BY_SUPPORT)
    except BadCursor:
        raise HttpError(422, "cursor is not one this API returned") from None
    return {"items": page.rows, "next_cursor": page.next_cursor}


@router.get(
    "/proposals/{proposal_id}",
    auth=key_or_staff("tune"),
    response=responses(ProposalDetailOut, 404),
    summary="One proposal: the requests behind it, its backtest and the change",
)
def get_proposal(request: HttpRequest, proposal_id: int) -> Proposal:
    return _found(proposal_id)


@router.post(
    "/proposals/{proposal_id}/apply",
    auth=key_or_staff("tune"),
    response=responses(ProposalDetailOut, *WITH_BODY, 404, others={409: ErrorOut}),
    summary="Apply a proposal: a new rule-set version (or a saved workflow)",
    openapi_extra=APPLY_BODY,
)
def apply_proposal(request: HttpRequest, proposal_id: int) -> Proposal:
    """Apply it once; 409 if it was decided already, the rules changed since
    `seen_version`, or the change no longer fits the rules."""
    seen = _seen_version(request)
    _found(proposal_id)
    return _decided(decisions.apply, proposal_id, request, seen)


@router.post(
    "/proposals/{proposal_id}/dismiss",
    auth=key_or_staff("tune"),
    response=responses(ProposalDetailOut, 404, others={409: ErrorOut}),
    summary="Dismiss a proposal: it comes back only if its evidence grows",
)
def dismiss_proposal(request: HttpRequest, proposal_id: int) -> Proposal:
    _found(proposal_id)
    return _decided(decisions.dismiss, proposal_id, request, None)


def _found(proposal_id: int) -> Proposal:
    """Return the proposal, or raise 404 naming the id."""
    proposal = decisions.find(proposal_id)
    if proposal is None:
        raise HttpError(404, f"no proposal #{proposal_id}")
    return proposal


def _seen_version(request: HttpRequest) -> int | None:
    """Return the body's seen_version; no body (or `{}`) is none."""
    if not read_body(request).strip():
        return None
    body = read_json_body(request)
    if not isinstance(body, dict):
        raise HttpError(422, f"body must be a JSON object {{...}}, got {type(body).__name__}")
    try:
        return validated(ApplyIn, body).seen_version
    except InvalidItem as exc:
        raise HttpError(422, str(exc)) from None


def _decided(action: Any, proposal_id: int, request: HttpRequest, seen: int | None) -> Proposal:
    """Run apply or dismiss as the caller; a refusal is a 409 saying why."""
    try:
        user, key = decisions.acting_user(request), decisions.acting_key(request)
        return action(proposal_id, user, seen, key)
    except decisions.Refused as exc:
        raise HttpError(exc.status, str(exc)) from None
