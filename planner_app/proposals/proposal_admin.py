"""The admin's view of proposals: read-only rows, with actions that apply or dismiss them.

The Proposals page (/proposals/) is where an operator reviews one (its requests and its
backtest); the admin lists, searches and decides them in bulk, through the same store
functions, so a refusal is a message here too, never an error page.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html

from planner_app.models import Proposal
from planner_app.proposals import decisions


@admin.register(Proposal)
class ProposalAdmin(admin.ModelAdmin):
    list_display = ["title", "kind", "target", "evidence_count", "status", "backtested_on",
                    "applied_version", "updated_at", "page"]  # fmt: skip
    list_filter = ["status", "kind"]
    search_fields = ["title", "key", "target"]
    ordering = ["status", "-evidence_count", "key"]
    fields = ["page", "title", "kind", "key", "target", "why", "change", "status",
              "evidence_count", "ruleset_version", "applied_version", "workflow",
              "dismissed_evidence", "decided_by", "decided_at", "created_at",
              "updated_at"]  # fmt: skip
    readonly_fields = fields
    actions = ["apply_selected", "dismiss_selected"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # proposals come from recorded traffic

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # decided by the actions, never edited

    @admin.display(description="Backtested on", ordering="ruleset_version")
    def backtested_on(self, proposal: Proposal) -> str:
        return f"v{proposal.ruleset_version}"

    @admin.display(description="The change")
    def change(self, proposal: Proposal) -> str:
        return decisions.described(proposal)

    @admin.display(description="Review")
    def page(self, proposal: Proposal) -> str:
        return format_html('<a href="{}">evidence and backtest</a>', decisions.page_of(proposal))

    @admin.action(description="Apply the selected proposals (one rule-set version each)")
    def apply_selected(self, request: HttpRequest, queryset: QuerySet[Proposal]) -> None:
        self._decide(request, queryset, decisions.apply, "applied")

    @admin.action(description="Dismiss the selected proposals")
    def dismiss_selected(self, request: HttpRequest, queryset: QuerySet[Proposal]) -> None:
        self._decide(request, queryset, decisions.dismiss, "dismissed")

    def _decide(
        self, request: HttpRequest, queryset: QuerySet[Proposal], action: Any, done: str
    ) -> None:
        for pk, title in queryset.order_by("pk").values_list("pk", "title"):
            try:
                proposal = action(pk, request.user)
            except decisions.Refused as exc:
                self.message_user(request, f"{title}: not {done}: {exc}", messages.ERROR)
                continue
            version = f" (rule-set v{proposal.applied_version})" if proposal.applied_version else ""
            self.message_user(request, f"{title}: {done}{version}.", messages.SUCCESS)
