"""The admin of monitors: define and edit them, silence, unsilence, evaluate now; their alerts.

An edit carries the version the form was opened at. A monitor saved by someone else since
is refused with a form error naming who changed what (the other save is kept, and so is
this form's input, to reapply); the state fields are never written by a form, only by
evaluation.py.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db import connection
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html

from planner_app.monitors import monitor_edits
from planner_app.monitors.evaluation import evaluate
from planner_app.monitors.metrics import monitor_problems, target_text, value_text
from planner_app.monitors.records import Monitor, MonitorEvent

STALE = (
    "Someone saved this monitor since you opened it (it is at version {now}, you opened "
    "version {seen}). Nothing of yours was saved and their change is kept: compare it with "
    "the values below (yours), then save again to apply yours over it."
)

RACED = (
    "Someone saved this monitor at the same moment (it is at version {now}, you opened "
    "version {seen}). Nothing of yours was saved: make your change again on it as it is now."
)


class MonitorForm(forms.ModelForm):
    seen_version = forms.IntegerField(widget=forms.HiddenInput, required=False)

    class Meta:
        model = Monitor
        fields = [*monitor_edits.DEFINITION_FIELDS, "channels"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.fields["seen_version"].initial = self.instance.version

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        for field, reason in monitor_problems(cleaned).items():
            if field in self.fields and field not in self.errors:
                self.add_error(field, reason)
        if self.instance.pk:
            self._check_version(cleaned.get("seen_version"))
        return cleaned

    def _check_version(self, seen: int | None) -> None:
        """Refuse the save if the monitor moved past the version this form was opened at."""
        rows = Monitor.objects.filter(pk=self.instance.pk)
        if connection.features.has_select_for_update:
            rows = rows.select_for_update()  # held until the admin's transaction ends
        now = rows.values_list("version", flat=True).first()
        if seen is None or now != seen:
            self.data = self.data.copy()  # the form shown again carries the version now
            self.data["seen_version"] = str(now)
            raise forms.ValidationError(STALE.format(now=now, seen=seen))


@admin.register(Monitor)
class MonitorAdmin(admin.ModelAdmin):
    form = MonitorForm
    list_display = ["name", "watches", "state", "shown_value", "threshold", "window_minutes",
                    "silenced", "enabled", "page"]  # fmt: skip
    list_filter = ["state", "metric", "scope", "enabled"]
    search_fields = ["name", "target", "description"]
    filter_horizontal = ["channels"]
    readonly_fields = ["state", "state_since", "transitions", "last_value", "last_evaluated_at",
                       "last_notified_at", "silenced_until", "silence_reason", "version",
                       "created_by", "created_at", "updated_at"]  # fmt: skip
    actions = ["silence_for_an_hour", "unsilence", "evaluate_now"]

    @admin.display(description="Watches")
    def watches(self, monitor: Monitor) -> str:
        return f"{monitor.get_metric_display()} of {target_text(monitor)}"

    @admin.display(description="Value")
    def shown_value(self, monitor: Monitor) -> str:
        return value_text(monitor.metric, monitor.last_value)

    @admin.display(description="Silenced", boolean=True)
    def silenced(self, monitor: Monitor) -> bool:
        return monitor.silenced_until is not None and monitor.silenced_until > timezone.now()

    @admin.display(description="Page")
    def page(self, monitor: Monitor) -> str:
        return format_html('<a href="{}">alerts</a>', reverse("monitor-detail", args=[monitor.pk]))

    def save_model(
        self, request: HttpRequest, obj: Monitor, form: forms.Form, change: bool
    ) -> None:
        if not change:
            obj.created_by = f"user {request.user.get_username()}"
            obj.save()
            return
        fields = {name: form.cleaned_data[name] for name in monitor_edits.DEFINITION_FIELDS}
        saved = monitor_edits.save_edit(obj.pk, form.cleaned_data["seen_version"], fields)
        obj.version, obj.updated_at = saved.version, saved.updated_at

    def changeform_view(
        self, request: HttpRequest, object_id: str | None = None, form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:  # fmt: skip
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except monitor_edits.StaleEdit:  # saved by someone else between the check and the save
            current = Monitor.objects.filter(pk=object_id).values_list("version", flat=True)
            seen = request.POST.get("seen_version", "?")
            messages.error(request, RACED.format(now=current.first(), seen=seen))
            return HttpResponseRedirect(request.path)

    @admin.action(description="Silence for an hour (events recorded, nothing sent)")
    def silence_for_an_hour(self, request: HttpRequest, queryset: QuerySet[Monitor]) -> None:
        until = timezone.now() + timedelta(hours=1)
        reason = f"silenced in the admin by {request.user.get_username()}"
        for pk in queryset.values_list("pk", flat=True):
            monitor_edits.silence(pk, until, reason)
        self.message_user(request, f"{queryset.count()} silenced until {until:%H:%M} UTC.")

    @admin.action(description="Unsilence")
    def unsilence(self, request: HttpRequest, queryset: QuerySet[Monitor]) -> None:
        for pk in queryset.values_list("pk", flat=True):
            monitor_edits.unsilence(pk)
        self.message_user(request, f"{queryset.count()} unsilenced.")

    @admin.action(description="Evaluate now")
    def evaluate_now(self, request: HttpRequest, queryset: QuerySet[Monitor]) -> None:
        now = timezone.now()
        for monitor in queryset.filter(enabled=True):
            event = evaluate(monitor, now)
            if event is not None:
                self.message_user(request, event.message, messages.WARNING)
                continue
            value = value_text(monitor.metric, monitor.last_value)
            self.message_user(request, f"{monitor.name}: {monitor.get_state_display()}, "
                              f"value {value}, no change.")  # fmt: skip


@admin.register(MonitorEvent)
class MonitorEventAdmin(admin.ModelAdmin):
    """The alerts: read-only, as recorded."""

    list_display = ["at", "monitor", "number", "kind", "value", "threshold", "silenced"]
    list_filter = ["kind", "silenced", "monitor"]
    search_fields = ["message", "monitor__name"]
    readonly_fields = [field.name for field in MonitorEvent._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
