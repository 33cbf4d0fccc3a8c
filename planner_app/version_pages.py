"""The page of a rule-set version: what changed, what it did since, and the guard's verdict."""

from __future__ import annotations

from django.conf import settings
from django.contrib.admin.views.decorators import staff_member_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET

from planner_app import ruleset_versions
from planner_app.models import RuleSetVersion
from planner_app.rules_guard import guard_notice, verdict_of
from planner_app.version_effects import REQUESTS_READ, change_text, effect_of, span_text


@staff_member_required
@require_GET
def version_page(request: HttpRequest, number: int) -> HttpResponse:
    """Show a version's change and its requests against the same span of time before it."""
    version = RuleSetVersion.objects.filter(number=number).select_related("created_by").first()
    if version is None:
        newest = ruleset_versions.latest_number()
        message = (
            f"No rule-set version v{number}: the versions are v1 to v{newest}."
            if newest
            else f"No rule-set version v{number}: no version is recorded yet."
        )
        return render(request, "planner_app/not_found.html", {"message": message}, status=404)
    effect = effect_of(version, timezone.now())
    previous = effect.previous
    context = {
        "version": version,
        "effect": effect,
        "span": span_text(effect.after.until - effect.after.since),
        "requests_read": REQUESTS_READ,
        "lines": ruleset_versions.diff(previous.snapshot, version.snapshot) if previous else [],
        "admin_url": reverse("admin:planner_app_rulesetversion_change", args=[version.pk]),
        "versions_url": reverse("admin:planner_app_rulesetversion_changelist"),
        "guard_on": settings.ARES_PLANNER_GUARD,
        "guard_requests": settings.ARES_PLANNER_GUARD_REQUESTS,
        "guard_margin": settings.ARES_PLANNER_GUARD_MARGIN * 100,
        "effect_rows": [(label, b, a, change_text(b, a)) for label, b, a in effect.rows],
        "verdict": verdict_of(version),
        "guard_notice": guard_notice(),
    }
    return render(request, "planner_app/version.html", context)
