"""The admin of notification channels and deliveries.

Channels: kind-specific checks (the API's), the webhook's signing secret shown to staff (it
is derived, never stored), the recent deliveries with their tries, and an action that sends
a test notification. Deliveries are read-only, with their tries; an action retries chosen
ones now.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.loader import render_to_string
from django.utils import timezone
from django.utils.html import format_html

from planner_app.monitors.notify.channel_checks import MAX_EMAILS, channel_problems
from planner_app.monitors.notify.senders import send_test
from planner_app.monitors.notify.signing import signing_secret
from planner_app.monitors.records import Delivery, DeliveryAttempt, NotificationChannel

RECENT_DELIVERIES = 20


class ChannelForm(forms.ModelForm):
    url = forms.URLField(
        label="URL", required=False, max_length=1000, assume_scheme="https",
        help_text="Webhook and Slack channels: http(s), a public address (loopback and "
        "private networks only with ARES_NOTIFY_ALLOW_PRIVATE=1)",
    )  # fmt: skip
    email_lines = forms.CharField(
        label="Email addresses", required=False, widget=forms.Textarea(attrs={"rows": 3}),
        help_text=f"Email channels: one address a line (at most {MAX_EMAILS})",
    )  # fmt: skip

    class Meta:
        model = NotificationChannel
        fields = ["name", "kind", "url", "enabled"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["email_lines"].initial = "\n".join(self.instance.emails or [])

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        emails = [line.strip() for line in cleaned.get("email_lines", "").splitlines()]
        cleaned["emails"] = [address for address in emails if address]
        if "kind" in cleaned:
            problems = channel_problems(cleaned["kind"], cleaned.get("url", ""), cleaned["emails"])
            for field, reason in problems.items():
                self.add_error("email_lines" if field == "emails" else field, reason)
        return cleaned

    def save(self, commit: bool = True) -> NotificationChannel:
        self.instance.emails = self.cleaned_data["emails"]
        return super().save(commit)


@admin.register(NotificationChannel)
class NotificationChannelAdmin(admin.ModelAdmin):
    form = ChannelForm
    list_display = ["name", "kind", "destination", "enabled", "monitor_count"]
    list_filter = ["kind", "enabled"]
    search_fields = ["name", "url"]
    readonly_fields = ["secret", "recent_deliveries", "created_at"]
    actions = ["send_test_notification"]

    def get_fields(self, request: HttpRequest, obj: NotificationChannel | None = None) -> list:
        fields = ["name", "kind", "url", "email_lines", "enabled"]
        return [*fields, "secret", "recent_deliveries", "created_at"] if obj else fields

    @admin.display(description="Sends to")
    def destination(self, channel: NotificationChannel) -> str:
        return channel.url or ", ".join(channel.emails or [])

    @admin.display(description="Monitors")
    def monitor_count(self, channel: NotificationChannel) -> int:
        return channel.monitors.count()

    @admin.display(description="Signing secret")
    def secret(self, channel: NotificationChannel) -> str:
        if channel.kind != NotificationChannel.Kind.WEBHOOK or not channel.secret_salt:
            return "(webhook channels only)"
        return format_html(
            "<code>{}</code><br>Verify <code>X-Ares-Signature: sha256=HMAC-SHA256(secret, raw "
            "body)</code> on the receiver; derived from SECRET_KEY, never stored.",
            signing_secret(channel),
        )

    @admin.display(description=f"Last {RECENT_DELIVERIES} deliveries")
    def recent_deliveries(self, channel: NotificationChannel) -> str:
        deliveries = channel.deliveries.select_related("channel", "event__monitor")
        recent = list(deliveries.prefetch_related("tries").order_by("-pk")[:RECENT_DELIVERIES])
        return render_to_string("planner_app/_deliveries.html", {"deliveries": recent})

    @admin.action(description="Send a test notification")
    def send_test_notification(
        self, request: HttpRequest, queryset: QuerySet[NotificationChannel]
    ) -> None:
        for channel in queryset:
            result = send_test(channel, timezone.now())
            if result.ok:
                self.message_user(request, f"The test to {channel.name!r} was delivered.")
            else:
                failure = f"The test to {channel.name!r} failed: {result.error}"
                self.message_user(request, failure, messages.ERROR)


class DeliveryAttemptInline(admin.TabularInline):
    model = DeliveryAttempt
    fields = readonly_fields = ["number", "at", "ok", "status_code", "latency_ms", "error"]
    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Delivery)
class DeliveryAdmin(admin.ModelAdmin):
    list_display = ["event", "channel", "status", "attempts", "next_attempt_at", "delivered_at",
                    "last_error"]  # fmt: skip
    list_filter = ["status", "channel"]
    list_select_related = ["event__monitor", "channel"]
    readonly_fields = ["event", "channel", "status", "attempts", "next_attempt_at",
                       "claimed_until", "claimed_by", "delivered_at", "last_error",
                       "created_at"]  # fmt: skip
    inlines = [DeliveryAttemptInline]
    actions = ["retry_now"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.action(description="Retry now (one more try each)")
    def retry_now(self, request: HttpRequest, queryset: QuerySet[Delivery]) -> None:
        retried = queryset.exclude(status=Delivery.Status.DELIVERED).update(
            status=Delivery.Status.PENDING, next_attempt_at=timezone.now()
        )
        self.message_user(request, f"{retried} will be tried by the next delivery run.")
