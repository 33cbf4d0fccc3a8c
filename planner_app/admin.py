"""Admin pages for the planner: rules, capabilities, mappings, profiles, weights, versions."""

from __future__ import annotations

import json
import re
from contextlib import AbstractContextManager, nullcontext
from typing import Any
from urllib.parse import urlencode

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.utils import unquote
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from planner_app import rules_guard, ruleset_versions
from planner_app.models import (
    Agent,
    Capability,
    CapabilityMapping,
    IntentRule,
    RuleSetVersion,
    ScoreRule,
    ScoringWeights,
    ToolProfile,
    Workflow,
    WorkflowRun,
)
from planner_app.tasks import start_run


class PlannerAdminMedia:
    css = {"all": ["planner_app/css/admin.css"]}


# The page's hidden field: the rule-set version it was opened at (see VersionedForm).
VERSION_FIELD = "ruleset_version"


class VersionedForm(forms.ModelForm):
    """A form of a versioned row, refused when the row changed since its page was opened.

    The page carries the version it was opened at; `opened_at` sets `opened_version`
    from it per request. The check runs under the rule-set lock (VersionedAdmin), so no
    other save can slip in between it and this one.
    """

    opened_version: int | None = None

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if self.opened_version is not None and self.instance.pk and self.has_changed():
            changes = ruleset_versions.changed_since(self.instance, self.opened_version)
            if changes:
                raise forms.ValidationError(
                    f"{changes} Your edit was not saved. What you typed is still in the form: "
                    "check it against those changes and save again to apply it.",
                    code="stale",
                )
        return data


def opened_version(request: HttpRequest) -> int | None:
    """Return the version the posted page was opened at (0 if not a number), or None.

    None: a GET, or a post from outside the admin's pages, with nothing to compare.
    """
    marker = request.POST.get(VERSION_FIELD)
    if marker is None:
        return None
    return int(marker) if marker.isdigit() else 0  # 0 is no version: changed_since says so


def opened_at(form: type[forms.ModelForm], request: HttpRequest) -> type[forms.ModelForm]:
    """Return `form` checking edits against the version the posted page was opened at."""
    opened = opened_version(request)
    if opened is None:
        return form
    return type(form.__name__, (form,), {"opened_version": opened})


def editing(request: HttpRequest) -> AbstractContextManager[None]:
    """Lock the rules for a post (it may save), so its checks and its version are one step."""
    if request.method == "POST":
        return ruleset_versions.editing(request.user)
    return nullcontext()


def with_version(extra_context: dict[str, Any] | None) -> dict[str, Any]:
    """Add the version the page is opened at, read before the rows the page shows."""
    return {**(extra_context or {}), VERSION_FIELD: ruleset_versions.latest_number()}


class VersionedAdmin(admin.ModelAdmin):
    """Saves and deletes here make rule-set versions credited to the operator.

    A post runs under the rule-set lock in one transaction with the version it makes;
    a row changed since its page was opened is not saved over (VersionedForm).
    """

    Media = PlannerAdminMedia
    form = VersionedForm
    changelist_form: type[forms.ModelForm] = VersionedForm

    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        with editing(request):
            return super().changeform_view(
                request, object_id, form_url, with_version(extra_context)
            )

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        with editing(request):
            return super().changelist_view(request, with_version(extra_context))

    def delete_view(
        self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        with editing(request):
            refused = self._refuse_stale_delete(request, object_id)
            return refused or super().delete_view(request, object_id, with_version(extra_context))

    def _refuse_stale_delete(self, request: HttpRequest, object_id: str) -> HttpResponse | None:
        """Send a deletion confirmed on a page older than the row's last change back to it."""
        opened = opened_version(request)
        row = self.get_object(request, unquote(object_id)) if opened is not None else None
        changes = row and ruleset_versions.changed_since(row, opened)
        if not changes:
            return None
        self.message_user(request, f"{changes} Nothing was deleted.", messages.ERROR)
        return HttpResponseRedirect(request.path)  # the confirmation again, as it is now

    def get_form(self, request: HttpRequest, *args: Any, **kwargs: Any) -> type[forms.ModelForm]:
        return opened_at(super().get_form(request, *args, **kwargs), request)

    def get_changelist_form(self, request: HttpRequest, **kwargs: Any) -> type[forms.ModelForm]:
        kwargs.setdefault("form", self.changelist_form)
        return opened_at(super().get_changelist_form(request, **kwargs), request)


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


class CapabilityChoices(forms.CheckboxSelectMultiple):
    """Capabilities as labelled checkboxes in columns.

    The admin's two-box filter widget puts aria-label on plain spans, which screen readers
    ignore (axe: aria-prohibited-attr); a checkbox per capability has a real label.
    """

    def __init__(self, attrs: dict[str, Any] | None = None) -> None:
        super().__init__({"class": "capability-choices", **(attrs or {})})


class CapabilityForm(VersionedForm):
    class Meta:
        model = Capability
        fields = ["name", "description", "input_type", "output_type", "subsumes", "depends_on"]
        widgets = {"subsumes": CapabilityChoices, "depends_on": CapabilityChoices}

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


class LabelledRowsForm(forms.ModelForm):
    """A form of a table row (inline or list_editable) whose inputs say what they are.

    Those tables show a column heading, not a <label>, so screen readers would hear only
    "text field"; each input gets an aria-label naming its column and its row.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        row = str(self.instance) if self.instance.pk else "new row"
        for name, field in self.fields.items():
            label = field.label or name.replace("_", " ")
            field.widget.attrs.setdefault("aria-label", f"{label} of {row}")


class MappingForm(VersionedForm, LabelledRowsForm):
    class Meta:
        model = CapabilityMapping
        fields = ["tool", "weight"]


class LabelledRowsFormSet(forms.BaseInlineFormSet):
    """An inline formset whose delete boxes say which row they delete."""

    def add_fields(self, form: forms.Form, index: int | None) -> None:
        super().add_fields(form, index)
        if "DELETE" in form.fields:
            row = str(form.instance) if form.instance.pk else "this new row"
            form.fields["DELETE"].widget.attrs["aria-label"] = f"Delete {row}"


class MappingInline(admin.TabularInline):
    model = CapabilityMapping
    form = MappingForm
    formset = LabelledRowsFormSet
    extra = 1

    def get_formset(self, request: HttpRequest, obj: Any = None, **kwargs: Any) -> Any:
        kwargs.setdefault("form", opened_at(self.form, request))
        return super().get_formset(request, obj, **kwargs)


class LinesField(forms.CharField):
    """A list of strings edited as text: one item per line (or, with `commas`, per comma).

    A JSON list (what the field used to take) is still read as one, so pasted exports work.
    """

    widget = forms.Textarea(attrs={"rows": 6, "cols": 60})

    def __init__(self, *args: Any, commas: bool = False, **kwargs: Any) -> None:
        self.commas = commas
        kwargs.setdefault("required", False)
        super().__init__(*args, strip=False, **kwargs)

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, list):
            return "\n".join(value)
        return value

    def to_python(self, value: Any) -> list[str]:
        text = super().to_python(value) or ""
        as_json = _json_list(text)
        if as_json is not None:
            items = as_json
        else:
            separators = r"[\n,，、]" if self.commas else r"\n"
            items = re.split(separators, text)
        return list(dict.fromkeys(item.strip() for item in items if item.strip()))


def _json_list(text: str) -> list[str] | None:
    """Return the text as a JSON list of strings, or None when it is not one."""
    if not text.lstrip().startswith("["):
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return value
    return None


class IntentRuleForm(VersionedForm):
    keywords = LinesField(
        commas=True,
        help_text="One per line, or separated by commas: <code>sum, add, plus</code>. English "
        "words match whole words and plurals; others (中文) match as substrings.",
    )
    patterns = LinesField(
        help_text="Regular expressions, one per line (commas belong to the expression), "
        "matched case-insensitively.",
    )

    class Meta:
        model = IntentRule
        fields = ["name", "keywords", "patterns", "language", "capabilities", "goal",
                  "priority", "enabled"]  # fmt: skip
        widgets = {"capabilities": CapabilityChoices}

    def clean_patterns(self) -> list[str]:
        patterns = self.cleaned_data["patterns"]
        problems = []
        for number, pattern in enumerate(patterns, start=1):
            try:
                re.compile(pattern)
            except re.error as exc:
                problems.append(f"line {number}: invalid regular expression {pattern!r}: {exc}")
        if problems:
            raise forms.ValidationError(problems)
        return patterns


class IntentRuleRowForm(VersionedForm, LabelledRowsForm):
    class Meta:
        model = IntentRule
        fields = ["priority", "enabled"]


def try_link(rule: IntentRule) -> str:
    """Return the Try page's address for a request that the rule matches, coming from the rule."""
    query = {"request": f"{rule.keywords[0]} "} if rule.keywords else {}  # patterns: type one
    return f"{reverse('planner-try')}?{urlencode({**query, 'rule': rule.name})}"


@admin.register(Capability)
class CapabilityAdmin(VersionedAdmin):
    form = CapabilityForm
    list_display = ["name", "description", "input_type", "output_type"]
    search_fields = ["name", "description"]
    inlines = [MappingInline]


@admin.register(IntentRule)
class IntentRuleAdmin(VersionedAdmin):
    form = IntentRuleForm
    list_display = ["name", "priority", "enabled", "language", "keyword_list", "goal", "try_it"]
    list_editable = ["priority", "enabled"]
    list_filter = ["enabled", "language", "capabilities"]
    search_fields = ["name", "goal", "keywords"]
    readonly_fields = ["try_it"]
    changelist_form = IntentRuleRowForm

    @admin.display(description="Keywords")
    def keyword_list(self, rule: IntentRule) -> str:
        return ", ".join(rule.keywords)

    @admin.display(description="Try it")
    def try_it(self, rule: IntentRule) -> str:
        if not rule.pk:
            return "Save the rule first."
        return format_html(
            '<a class="try-rule" href="{}">Try this rule in the planner</a> '
            "(saved changes apply at once)",
            try_link(rule),
        )


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
    Media = PlannerAdminMedia
    list_display = ["number", "created_at", "created_by", "change", "what_it_did"]
    readonly_fields = ["number", "created_at", "created_by", "change", "what_it_did",
                       "changes_from_previous"]  # fmt: skip
    exclude = ["snapshot"]
    actions = ["compare", "roll_back"]

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        notice = rules_guard.guard_notice()
        if notice is not None and request.method == "GET":  # where the operator looks
            self.message_user(request, format_html(
                "The guard rolled the planner's rules back: {}. The rules in force are v{}. "
                '<a href="{}">What the rolled-back version did</a>.',
                notice.text, notice.now, notice.version_url), messages.WARNING)  # fmt: skip
        return super().changelist_view(request, extra_context)

    @admin.display(description="What it did")
    def what_it_did(self, version: RuleSetVersion) -> str:
        url = reverse("planner-version", args=[version.number])
        return format_html('<a class="version-page" href="{}">v{} since, against before</a>',
                           url, version.number)  # fmt: skip

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="Changes from the previous version")
    def changes_from_previous(self, version: RuleSetVersion) -> str:
        previous = RuleSetVersion.objects.filter(number__lt=version.number).first()
        if previous is None:
            return "(the first version)"
        lines = ruleset_versions.diff(previous.snapshot, version.snapshot) or ["(no difference)"]
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
            "lines": ruleset_versions.diff(old.snapshot, new.snapshot),
        }
        return TemplateResponse(request, "planner_app/compare_versions.html", context)

    @admin.action(description="Roll back to the selected version")
    def roll_back(self, request: HttpRequest, queryset: QuerySet[RuleSetVersion]) -> Any:
        if queryset.count() != 1:
            self.message_user(request, "Select exactly one version.", messages.ERROR)
            return None
        target = queryset.get()
        if request.POST.get("confirmed") != "yes":
            return self._confirm_rollback(request, target)
        marker = request.POST.get(VERSION_FIELD, "")
        try:
            version = ruleset_versions.rollback(
                target.number, request.user, seen=int(marker) if marker.isdigit() else None
            )
        except ruleset_versions.RulesChanged as exc:  # the page showed a diff that is out of date
            self.message_user(request, str(exc), messages.ERROR)
            return self._confirm_rollback(request, target)
        self.message_user(request, f"Rolled back: now v{version.number} ({version.change}).")
        return None

    def _confirm_rollback(self, request: HttpRequest, target: RuleSetVersion) -> HttpResponse:
        """Show what rolling back would change, with a button that does it."""
        current = RuleSetVersion.objects.order_by("-number").first()
        context = {
            **self.admin_site.each_context(request),
            "title": f"Roll back to v{target.number}?",
            "target": target,
            "current": current,
            "lines": ruleset_versions.diff(current.snapshot, target.snapshot),
            "action_checkbox_name": ACTION_CHECKBOX_NAME,
            "opts": self.model._meta,
        }
        return TemplateResponse(request, "planner_app/confirm_rollback.html", context)


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


@admin.register(ScoreRule)
class ScoreRuleAdmin(VersionedAdmin):
    """How scores count in a tool's evidence; versioned with the rules."""

    list_display = ["score_name", "operator", "threshold", "weight", "enabled", "note"]
    list_editable = ["enabled"]
    list_filter = ["enabled", "score_name"]


# Monitors and proposals (planner_app/monitors/, proposals/): registered there, with actions.
from planner_app.monitors import monitor_admin  # noqa: E402, F401
from planner_app.monitors.notify import channel_admin  # noqa: E402, F401
from planner_app.proposals import proposal_admin  # noqa: E402, F401
