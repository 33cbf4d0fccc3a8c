"""Admin pages: traces, invocations and failure spirals read-only; API keys issued and revoked."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html

from traces_app.models import (
    SCOPES,
    ApiKey,
    FailureSpiral,
    Invocation,
    OtlpProducer,
    Score,
    ScoreDefinition,
    Trace,
)
from traces_app.tasks import recompute_trace_totals_task
from traces_app.templatetags.console import usd


class ErrorKindFilter(admin.AllValuesFieldListFilter):
    """The error kinds recorded, the empty one named: a link with no text names nothing."""

    def choices(self, changelist: Any) -> Any:
        for choice in super().choices(changelist):
            yield {**choice, "display": "(no error)"} if choice["display"] == "" else choice


class ReadOnlyAdmin(admin.ModelAdmin):
    """Records are written by agents and the engine, never edited by hand."""

    show_full_result_count = False  # a COUNT(*) over millions of spans on every page is slow

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


def pretty_json(value: Any) -> str:
    """Return a JSON value as an escaped, indented <pre> block."""
    text = json.dumps(value, indent=2, ensure_ascii=False, default=str)
    return format_html('<pre class="json">{}</pre>', text)


def cost_display(field: str, description: str = "Cost (USD)") -> Any:
    """Return an admin column showing a float cost as the console does (0.00867305, not ...002)."""

    @admin.display(description=description, ordering=field)
    def show(self: admin.ModelAdmin, obj: Any) -> str:
        return usd(getattr(obj, field))

    return show


class InvocationInline(admin.TabularInline):
    model = Invocation
    extra = 0
    can_delete = False
    show_change_link = True
    ordering = ["started_at", "pk"]
    fields = ["started_at", "kind", "tool_name", "model", "status", "error_kind", "latency_ms",
              "input_tokens", "output_tokens", "chosen_by", "ran_on", "attempt"]  # fmt: skip
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Trace)
class TraceAdmin(ReadOnlyAdmin):
    list_display = ["trace_id", "started_at", "agent", "short_request", "status", "tool_calls",
                    "failed_calls", "llm_calls", "input_tokens", "output_tokens",
                    "cost"]  # fmt: skip
    list_filter = ["status", "dialect", "started_at"]
    search_fields = ["=trace_id", "agent", "session_id", "request_text"]
    date_hierarchy = "started_at"
    inlines = [InvocationInline]
    actions = ["recompute_totals"]
    exclude = ["cost_usd"]
    readonly_fields = ["cost"]
    cost = cost_display("cost_usd")

    def get_formset_kwargs(
        self, request: HttpRequest, obj: Any, inline: Any, prefix: str
    ) -> dict[str, Any]:
        """Read the inline's spans within the trace's time bounds: its partitions only."""
        kwargs = super().get_formset_kwargs(request, obj, inline, prefix)
        if isinstance(inline, InvocationInline) and obj is not None and obj.pk:
            kwargs["queryset"] = kwargs["queryset"].filter(
                started_at__gte=obj.started_at, started_at__lte=obj.ended_at
            )
        return kwargs

    @admin.display(description="Request")
    def short_request(self, trace: Trace) -> str:
        text = trace.request_text
        return text if len(text) <= 80 else text[:79] + "…"

    @admin.action(description="Recompute totals from stored spans (background task)")
    def recompute_totals(self, request: HttpRequest, queryset: QuerySet[Trace]) -> None:
        trace_ids = list(queryset.values_list("pk", flat=True))
        for trace_id in trace_ids:
            transaction.on_commit(lambda t=trace_id: recompute_trace_totals_task.delay(t))
        self.message_user(request, f"Queued a recount of {len(trace_ids)} trace(s).")


@admin.register(Invocation)
class InvocationAdmin(ReadOnlyAdmin):
    list_display = ["started_at", "kind", "tool_name", "status", "error_kind", "latency_ms",
                    "chosen_by", "ran_on", "agent", "attempt", "trace_link"]  # fmt: skip
    list_filter = ["kind", "status", "chosen_by", ("error_kind", ErrorKindFilter), "started_at"]
    search_fields = ["tool_name", "=trace__trace_id", "=span_id", "=tool_call_id", "agent"]
    date_hierarchy = "started_at"
    list_select_related = False
    exclude = ["arguments", "result", "cost_usd"]
    readonly_fields = ["cost", "arguments_json", "result_json"]
    cost = cost_display("cost_usd")

    @admin.display(description="Trace")
    def trace_link(self, invocation: Invocation) -> str:
        return format_html(
            '<a href="../trace/{}/change/">{}…</a>', invocation.trace_id, invocation.trace_id[:8]
        )

    @admin.display(description="Arguments")
    def arguments_json(self, invocation: Invocation) -> str:
        return pretty_json(invocation.arguments)

    @admin.display(description="Result")
    def result_json(self, invocation: Invocation) -> str:
        return pretty_json(invocation.result)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        names = [f.name for f in Invocation._meta.fields if f.name not in self.exclude]
        return names + self.readonly_fields


@admin.register(FailureSpiral)
class FailureSpiralAdmin(ReadOnlyAdmin):
    list_display = ["started_at", "tool_name", "kind", "error_kind", "attempts", "resolution",
                    "wasted_tokens", "wasted_ms", "wasted_cost", "trace_link"]  # fmt: skip
    list_filter = ["tool_name", "kind", "resolution", "started_at"]
    search_fields = ["tool_name", "=trace__trace_id"]
    date_hierarchy = "started_at"
    exclude = ["wasted_cost_usd"]
    readonly_fields = [
        *(f.name for f in FailureSpiral._meta.fields if f.name != "wasted_cost_usd"),
        "wasted_cost",
        "trace_link",
    ]
    wasted_cost = cost_display("wasted_cost_usd", "Wasted cost (USD)")

    @admin.display(description="Trace")
    def trace_link(self, spiral: FailureSpiral) -> str:
        url = reverse("admin:traces_app_trace_change", args=[spiral.trace_id])
        return format_html('<a href="{}">{}…</a>', url, spiral.trace_id[:8])


@admin.register(OtlpProducer)
class OtlpProducerAdmin(ReadOnlyAdmin):
    """Services sending OpenTelemetry spans, and the tool spans they send incomplete."""

    list_display = ["name", "dialect", "tool_spans", "missing_tool_name", "missing_status",
                    "missing_arguments", "last_seen_at"]  # fmt: skip
    list_filter = ["dialect"]
    search_fields = ["name"]
    exclude = ["recent_incomplete"]
    readonly_fields = ["recent_incomplete_json"]

    @admin.display(description="Newest tool spans missing attributes")
    def recent_incomplete_json(self, producer: OtlpProducer) -> str:
        return pretty_json(producer.recent_incomplete)


class ApiKeyCreationForm(forms.ModelForm):
    scopes = forms.MultipleChoiceField(
        choices=[(name, f"{name}: {text}") for name, text in SCOPES.items()],
        widget=forms.CheckboxSelectMultiple,
    )

    class Meta:
        model = ApiKey
        fields = ["name", "scopes", "expires_at"]


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = ["name", "prefix", "scopes", "created_at", "last_used_at", "expires_at",
                    "revoked_at"]  # fmt: skip
    list_filter = ["revoked_at"]
    search_fields = ["name", "prefix"]
    actions = ["revoke"]

    def get_form(self, request: HttpRequest, obj: Any = None, **kwargs: Any) -> Any:
        if obj is None:
            kwargs["form"] = ApiKeyCreationForm
        return super().get_form(request, obj, **kwargs)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        if obj is None:
            return []
        return ["prefix", "scopes", "created_by", "created_at", "last_used_at", "revoked_at"]

    def get_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        if obj is None:
            return ["name", "scopes", "expires_at"]
        return ["name", "prefix", "scopes", "created_by", "created_at", "last_used_at",
                "expires_at", "revoked_at"]  # fmt: skip

    def save_model(self, request: HttpRequest, obj: ApiKey, form: Any, change: bool) -> None:
        if change:
            super().save_model(request, obj, form, change)
            return
        obj.scopes = sorted(form.cleaned_data["scopes"])
        obj.created_by = request.user
        raw_key = obj.set_new_key()
        super().save_model(request, obj, form, change)
        messages.warning(
            request,
            format_html(
                "Key created. Copy it now, it will not be shown again: "
                '<code id="new-api-key">{}</code>',
                raw_key,
            ),
        )

    @admin.action(description="Revoke selected keys")
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> None:
        count = queryset.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())
        self.message_user(request, f"Revoked {count} key(s).")


@admin.register(ScoreDefinition)
class ScoreDefinitionAdmin(admin.ModelAdmin):
    """Scores' names, types and ranges or labels: every score sent is checked against them."""

    list_display = ["name", "data_type", "allowed", "description"]
    list_filter = ["data_type"]
    search_fields = ["name", "description"]

    @admin.display(description="Values")
    def allowed(self, definition: ScoreDefinition) -> str:
        if definition.data_type == "categorical":
            return ", ".join(definition.categories)
        if definition.data_type == "boolean":
            return "true, false"
        low = "−∞" if definition.min_value is None else f"{definition.min_value:g}"
        high = "∞" if definition.max_value is None else f"{definition.max_value:g}"
        return f"{low} to {high}"


@admin.register(Score)
class ScoreAdmin(ReadOnlyAdmin):
    list_display = ["name", "shown_value", "source", "target", "pending", "reported_by",
                    "created_at"]  # fmt: skip
    list_filter = ["name", "source", "pending", "data_type"]
    search_fields = ["=trace_id", "=span_id", "=client_id", "comment", "reported_by"]
    date_hierarchy = "created_at"

    @admin.display(description="Value")
    def shown_value(self, score: Score) -> str:
        return score.shown_value

    @admin.display(description="Scores")
    def target(self, score: Score) -> str:
        url = reverse("trace-detail", args=[score.trace_id])
        anchor = f"#span-{score.span_id}" if score.span_id else ""
        label = f"span {score.span_id}" if score.span_id else "the whole trace"
        return format_html('<a href="{}{}">{}</a>', url, anchor, label)
