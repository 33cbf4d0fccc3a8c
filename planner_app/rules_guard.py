"""The guard: roll the newest rule-set version back when the planner does worse under it.

Off by default (ARES_PLANNER_GUARD). When on, a periodic job judges the newest version
once its first N planned requests (ARES_PLANNER_GUARD_REQUESTS) are recorded: the
planner's success over them against its success over the N planned requests before the
version. When it fell by more than ARES_PLANNER_GUARD_MARGIN (in points of success
rate, after vs before), the rules are rolled back to the version before, and the new
version's note says "guard: rolled back vN: ..." (the overview and the versions pages
show it). With fewer than N requests on either side it decides nothing.

A version is judged only while it is the newest: once rolled back it never is again.
The first version, rollbacks (an operator's own undo) and the guard's own versions are
not judged. Two guards at once roll back once: the rollback runs under the rules lock
and only if the version judged is still the newest (ruleset_versions.rollback's seen).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import QuerySet
from django.urls import reverse

from planner_app import ruleset_versions
from planner_app.models import RuleSetVersion
from planner_app.version_effects import (
    Share,
    Tally,
    planned_requests,
    recorded_requests,
    requests_between,
)
from traces_app.models import Trace

NOTE_PREFIX = "guard: "
ROLLBACK_PREFIX = "rolled back to "
# Decisions.
NOT_JUDGED = "not judged"
WAITING = "waiting"  # fewer than N planned requests since the version
TOO_LITTLE_BEFORE = "too little before"  # fewer than N before it: nothing to compare with
KEPT = "kept"
ROLL_BACK = "roll back"  # judged worse, not rolled back yet
ROLLED_BACK = "rolled back"
SUPERSEDED = "superseded"  # the rules changed before the rollback (another guard, an operator)
FAR_FUTURE = timedelta(days=36500)
# Decisions that the requests they rest on no longer change (their 2N requests are all
# recorded): kept per version in this process, so the minute's job does not read them again.
SETTLED = (KEPT, TOO_LITTLE_BEFORE, NOT_JUDGED)
_settled: dict[tuple[int, int, datetime, int, float], GuardVerdict] = {}


@dataclass(frozen=True)
class GuardVerdict:
    """What the guard decided about a version, and the figures it decided on."""

    version: int
    decision: str
    why: str
    before: Share | None = None
    after: Share | None = None
    rolled_back_as: int | None = None


def is_judged(version: RuleSetVersion) -> bool:
    """Return whether the guard judges this version (not the first, a rollback or its own)."""
    change = version.change
    return version.number > 1 and not change.startswith((NOTE_PREFIX, ROLLBACK_PREFIX))


def judge(version: RuleSetVersion, requests: int, margin: float) -> GuardVerdict:
    """Return the guard's verdict on a version, reading the recorded requests only."""
    if not is_judged(version):
        return GuardVerdict(version.number, NOT_JUDGED, _not_judged_why(version))
    start = version.created_at
    after_q = planned_requests(requests_between(start, start + FAR_FUTURE))
    after = _success(after_q.order_by("started_at", "trace_id"), requests)
    if after.whole < requests:
        return GuardVerdict(version.number, WAITING,
                            f"{after.whole} of the {requests} planned requests it judges on "
                            f"have been recorded since v{version.number}", after=after)  # fmt: skip
    before_q = planned_requests(requests_between(start - FAR_FUTURE, start))
    before = _success(before_q.order_by("-started_at", "-trace_id"), requests)
    if before.whole < requests:
        return GuardVerdict(version.number, TOO_LITTLE_BEFORE,
                            f"only {before.whole} planned requests were recorded before "
                            f"v{version.number}, fewer than the {requests} it compares with: "
                            "nothing decided", before, after)  # fmt: skip
    # Rounded: 0.9 - 0.8 is 0.0999..., and a fall of exactly the margin is within it.
    fall = round((before.rate or 0.0) - (after.rate or 0.0), 9)
    figures = (
        f"planner success {after.percent} ({after.part} of {after.whole}) over its first "
        f"{requests} planned requests against {before.percent} ({before.part} of "
        f"{before.whole}) over the {requests} before"
    )
    if fall > margin:
        why = f"{figures}: a fall of {fall * 100:.1f} points, more than the margin of " \
              f"{margin * 100:.1f}"  # fmt: skip
        return GuardVerdict(version.number, ROLL_BACK, why, before, after)
    why = f"{figures}: after vs before {-fall * 100:+.1f} points, within the margin of " \
          f"{margin * 100:.1f}"  # fmt: skip
    return GuardVerdict(version.number, KEPT, why, before, after)


def judge_with_settings(version: RuleSetVersion) -> GuardVerdict:
    """Return the verdict with the configured N and margin."""
    return judge(version, settings.ARES_PLANNER_GUARD_REQUESTS, settings.ARES_PLANNER_GUARD_MARGIN)


def _success(traces: QuerySet[Trace], requests: int) -> Share:
    """Return the planner's success over the first `requests` planned requests of a query."""
    outcomes, _ = recorded_requests(traces, limit=requests)
    tally = Tally()
    for outcome in outcomes:
        tally.add(outcome)
    return tally.success


def _not_judged_why(version: RuleSetVersion) -> str:
    if version.number <= 1:
        return "the first version: there is nothing to roll back to"
    if version.change.startswith(NOTE_PREFIX):
        return "the guard's own rollback"
    return "a rollback: the guard does not undo an operator's undo"


def guard_newest_version() -> GuardVerdict | None:
    """Judge the newest version and roll it back when it fell by more than the margin.

    None when the guard is off (ARES_PLANNER_GUARD) or there is no version yet.
    """
    if not settings.ARES_PLANNER_GUARD:
        return None
    newest = RuleSetVersion.objects.order_by("-number").defer("snapshot").first()
    if newest is None:
        return None
    key = (newest.pk, newest.number, newest.created_at, settings.ARES_PLANNER_GUARD_REQUESTS,
           settings.ARES_PLANNER_GUARD_MARGIN)  # fmt: skip
    if key in _settled:
        return _settled[key]
    verdict = judge_with_settings(newest)
    if verdict.decision in SETTLED:
        _settled[key] = verdict
    if verdict.decision != ROLL_BACK:
        return verdict
    return _roll_back(newest, verdict)


def _roll_back(version: RuleSetVersion, verdict: GuardVerdict) -> GuardVerdict:
    """Restore the version before `version`, if `version` is still the newest; say so."""
    previous = RuleSetVersion.objects.filter(number__lt=version.number).order_by("-number").first()
    assert previous is not None  # is_judged: never the first version
    try:
        with transaction.atomic():
            made = ruleset_versions.rollback(previous.number, seen=version.number)
            made.change = f"{NOTE_PREFIX}rolled back v{version.number}: {verdict.why}"[:300]
            made.save(update_fields=["change"])
    except ruleset_versions.RulesChanged:
        why = "the rules changed before the rollback (another guard or an operator): " \
              "nothing rolled back"  # fmt: skip
        return replace(verdict, decision=SUPERSEDED, why=why)
    return replace(verdict, decision=ROLLED_BACK, rolled_back_as=made.number)


@dataclass(frozen=True)
class GuardNotice:
    """The banner of a guard's rollback still in effect: what it said, and where to look."""

    text: str
    version_url: str  # the page of the version it rolled back
    now: int


def guard_notice() -> GuardNotice | None:
    """Return the banner to show when the newest version is a rollback by the guard."""
    newest = RuleSetVersion.objects.order_by("-number").only("number", "change").first()
    if newest is None or not newest.change.startswith(NOTE_PREFIX):
        return None
    rolled = newest.change.removeprefix(f"{NOTE_PREFIX}rolled back v").split(":", 1)[0]
    url = reverse("planner-version", args=[int(rolled)]) if rolled.isdigit() else ""
    return GuardNotice(newest.change.removeprefix(NOTE_PREFIX), url, newest.number)


def verdict_of(version: RuleSetVersion) -> GuardVerdict:
    """Return what the guard did or would do about a version, as its page says it."""
    rolled = RuleSetVersion.objects.filter(
        change__startswith=f"{NOTE_PREFIX}rolled back v{version.number}:"
    ).order_by("number").only("number", "change").first()  # fmt: skip
    if rolled is not None:
        why = f"as v{rolled.number}: {rolled.change.split(': ', 2)[-1]}"
        return GuardVerdict(version.number, ROLLED_BACK, why, rolled_back_as=rolled.number)
    verdict = judge_with_settings(version)
    newest = RuleSetVersion.objects.order_by("-number").values_list("number", flat=True).first()
    if verdict.decision == NOT_JUDGED or newest == version.number:
        return verdict
    why = f"v{version.number} is no longer the newest version, and the guard judges only the " \
          f"newest; on its figures it would say {verdict.decision}: {verdict.why}"  # fmt: skip
    return replace(verdict, decision=NOT_JUDGED, why=why)
