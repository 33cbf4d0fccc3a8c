"""Admin pages for the planner: rules, capabilities, mappings, profiles, weights, versions."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils.html import format_html_join

from planner_app import rulesets
from planner_app.models import (
    Agent,
    Capability,
    CapabilityMapping,
    IntentRule,
    RuleSetVersion,
    ScoringWeights,
    ToolProfile,
    Workflow,
    WorkflowRun,
)
from planner_app.tasks import start_run


class VersionedAdmin(admin.ModelAdmin):
    """Saves and deletes here make rule-set versions credited to the operator."""

    def changeform_view(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        with rulesets.acting_user(request.user):
            return super().changeform_view(request, *args, **kwargs)

    def changelist_view(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        with rulesets.acting_user(request.user):
            return super().changelist_view(request, *args, **kwargs)

    def delete_view(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        with rulesets.acting_user(request.user):
            return super().delete_view(request, *args, **kwargs)


def _reaches(start: Capability, target: Capability, relation: str) -> list[str] | None:
    """Return the path from start to target through `relation` links, or None."""
    stack = [(start, [start.name])]
    seen = set()
    while stack:
        current, path = stack.pop()
        if current.pk == target.pk:
            return path
        if current.pk in seen:
            continue
        seen.add(current.pk)
        stack.extend((nxt, [*path, nxt.name]) for nxt in getattr(current, relation).all())
    return None


class CapabilityForm(forms.ModelForm):
    class Meta:
        model = Capability
        fields = ["name", "description", "input_type", "output_type", "subsumes", "depends_on"]

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        for relation in ("subsumes", "depends_on"):
            for other in data.get(relation) or []:
                if self.instance.pk and other.pk == self.instance.pk:
                    self.add_error(relation, f"{other} cannot {relation.replace('_', ' ')} itself")
                    continue
                path = _reaches(other, self.instance, relation) if self.instance.pk else None
                if path:
                    cycle = " -> ".join([self.instance.name, *path])
                    self.add_error(relation, f"this would make a cycle: {cycle}")
        return data


class MappingInline(admin.TabularInline):
    model = CapabilityMapping
    extra = 1


@admin.register(Capability)
class CapabilityAdmin(VersionedAdmin):
    form = CapabilityForm
    list_display = ["name", "description", "input_type", "output_type"]
    search_fields = ["name", "description"]
    filter_horizontal = ["subsumes", "depends_on"]
    inlines = [MappingInline]


@admin.register(IntentRule)
class IntentRuleAdmin(VersionedAdmin):
    list_display = ["name", "priority", "enabled", "language", "keywords", "goal"]
    list_editable = ["priority", "enabled"]
    list_filter = ["enabled", "language", "capabilities"]
    search_fields = ["name", "goal", "keywords"]
    filter_horizontal = ["capabilities"]


@admin.register(CapabilityMapping)
class CapabilityMappingAdmin(VersionedAdmin):
    list_display = ["capability", "tool", "weight"]
    list_editable = ["weight"]
    list_filter = ["capability"]
    search_fields = ["tool", "capability__name"]


@admin.register(ToolProfile)
class ToolProfileAdmin(VersionedAdmin):
    list_display = ["tool", "cost", "latency_ms", "deterministic", "composable", "side_effects"]
    search_fields = ["tool"]


@admin.register(ScoringWeights)
class ScoringWeightsAdmin(VersionedAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return not ScoringWeights.objects.exists()


@admin.register(RuleSetVersion)
class RuleSetVersionAdmin(admin.ModelAdmin):
    list_display = ["number", "created_at", "created_by", "change"]
    readonly_fields = ["number", "created_at", "created_by", "change", "changes_from_previous"]
    exclude = ["snapshot"]
    actions = ["compare", "roll_back"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="Changes from the previous version")
    def changes_from_previous(self, version: RuleSetVersion) -> str:
        previous = RuleSetVersion.objects.filter(number__lt=version.number).first()
        if previous is None:
            return "(the first version)"
        lines = rulesets.diff(previous.snapshot, version.snapshot) or ["(no difference)"]
        return format_html_join("", "<div>{}</div>", ((line,) for line in lines))

    @admin.action(description="Compare two selected versions")
    def compare(self, request: HttpRequest, queryset: QuerySet[RuleSetVersion]) -> Any:
        if queryset.count() != 2:
            self.message_user(request, "Select exactly two versions.", messages.ERROR)
            return None
        old, new = sorted(queryset, key=lambda v: v.number)
        context = {
            **self.admin_site.each_context(request),
            "title": f"v{old.number} → v{new.number}",
            "old": old,
            "new": new,
            "lines": rulesets.diff(old.snapshot, new.snapshot),
        }
        return TemplateResponse(request, "planner_app/compare_versions.html", context)

    @admin.action(description="Roll back to the selected version")
    def roll_back(self, request: HttpRequest, queryset: QuerySet[RuleSetVersion]) -> None:
        if queryset.count() != 1:
            self.message_user(request, "Select exactly one version.", messages.ERROR)
            return
        version = rulesets.rollback(queryset.get().number, request.user)
        self.message_user(request, f"Rolled back: now v{version.number} ({version.change}).")


class RunInline(admin.TabularInline):
    model = WorkflowRun
    extra = 0
    can_delete = False
    show_change_link = True
    fields = ["created_at", "status", "started_at", "ended_at", "trace_id"]
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Workflow)
class WorkflowAdmin(admin.ModelAdmin):
    list_display = ["name", "description", "updated_at"]
    search_fields = ["name", "description"]
    inlines = [RunInline]
    actions = ["run_now", "run_in_background"]

    @admin.action(description="Run now (in this request)")
    def run_now(self, request: HttpRequest, queryset: QuerySet[Workflow]) -> None:
        for workflow in queryset:
            run = start_run(workflow, background=False)
            level = messages.SUCCESS if run.status == "success" else messages.WARNING
            self.message_user(request, f"{workflow}: {run.status} (run {run.pk})", level)

    @admin.action(description="Run in the background (Celery worker)")
    def run_in_background(self, request: HttpRequest, queryset: QuerySet[Workflow]) -> None:
        for workflow in queryset:
            run = start_run(workflow, background=True)
            self.message_user(request, f"{workflow}: queued as run {run.pk}")


@admin.register(WorkflowRun)
class WorkflowRunAdmin(admin.ModelAdmin):
    list_display = ["workflow", "created_at", "status", "started_at", "ended_at", "trace_id"]
    list_filter = ["status", "workflow"]
    readonly_fields = ["workflow", "status", "trace_id", "created_at", "started_at",
                       "ended_at", "error", "steps"]  # fmt: skip
    exclude = ["progress"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="Steps")
    def steps(self, run: WorkflowRun) -> str:
        rows = [
            (s.get("step_id"), s.get("tool"), s.get("status"), s.get("error") or "",
             s.get("started_at") or "", s.get("ended_at") or "")
            for s in run.progress.get("steps", [])
        ]  # fmt: skip
        return format_html_join("", "<div><b>{}</b> {} — {} {} <small>{} → {}</small></div>", rows)


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    list_display = ["name", "model", "tool_list", "max_iterations", "discovery", "updated_at"]
    list_filter = ["discovery", "tool_calling", "parallel_tools"]
    search_fields = ["name", "description", "model"]
    readonly_fields = ["updated_at"]
    fieldsets = [
        (None, {"fields": ["name", "description", "system_prompt", "tools"]}),
        ("Loop", {"fields": ["max_iterations", "parallel_tools", "tool_timeout_s",
                             "token_budget", "discovery", "tool_calling"]}),
        ("LLM endpoint (empty: the ARES_LLM_* settings)",
         {"fields": ["model", "base_url", "api_key"]}),
        (None, {"fields": ["updated_at"]}),
    ]  # fmt: skip

    @admin.display(description="Tools")
    def tool_list(self, agent: Agent) -> str:
        return ", ".join(agent.tools) if agent.tools else "(none)"
