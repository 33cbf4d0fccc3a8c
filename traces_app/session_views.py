"""The session pages: sessions of a time range (filtered, paged), and one session's turns."""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

from django import forms
from django.contrib.admin.views.decorators import staff_member_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from traces_app import sessions
from traces_app.forms import error_messages
from traces_app.http.paging import BadCursor
from traces_app.models import SpanRollup
from traces_app.rollups.ranges import TimeRange, range_context
from traces_app.views import _known, _without

# Sessions a page lists: each row sums all its turns in the range, so fewer than traces.
PAGE_SIZE = 25


class SessionFilterForm(forms.Form):
    agent = forms.CharField(max_length=200, required=False)
    q = forms.CharField(max_length=200, required=False, label="Session id")
    sort = forms.ChoiceField(
        choices=[(key, label) for key, (_, _, label) in sessions.SESSION_SORTS.items()],
        required=False,
        label="Order",
    )

    def filters(self, time_range: TimeRange) -> sessions.SessionFilters:
        """Return the list's filters: the range and the valid fields (a bad one is left out)."""
        self.is_valid()
        cleaned = getattr(self, "cleaned_data", {})
        return sessions.SessionFilters(
            since=time_range.since,
            until=time_range.until,
            agent=cleaned.get("agent", ""),
            q=cleaned.get("q", ""),
            sort=cleaned.get("sort") or sessions.DEFAULT_SORT,
        )


@staff_member_required
def session_list(request: HttpRequest) -> HttpResponse:
    """List the sessions whose traces started in a time range, latest activity first."""
    context = range_context(request.GET, timezone.now())
    form = SessionFilterForm(request.GET)
    filters = form.filters(context["time_range"])  # type: ignore[arg-type]
    problems = error_messages(form)
    try:
        page = sessions.session_rows(filters, PAGE_SIZE, after=request.GET.get("after"))
    except BadCursor as exc:
        page = sessions.session_rows(filters, PAGE_SIZE)
        problems.append(f"Page: {exc}; showing the first page.")
    context.update(
        form=form,
        filter_errors=problems,
        page=page,
        tool_turns=sessions.TOOL_TURNS,
        sort=filters.sort,
        page_query=_without(request, "after"),
        api_query=_api_query(filters),
        agents=_known(SpanRollup, "agent", context["time_range"]),  # type: ignore[arg-type]
    )
    return render(request, "traces_app/sessions.html", context)


def _api_query(filters: sessions.SessionFilters) -> str:
    """Return the query of GET /api/v1/sessions that lists what the page lists."""
    values: dict[str, Any] = {"agent": filters.agent, "q": filters.q, "sort": filters.sort}
    values = {name: value for name, value in values.items() if value}
    values.update(since=filters.since.isoformat(), until=filters.until.isoformat())  # type: ignore[union-attr]
    return urlencode(values)


@staff_member_required
def session_detail(request: HttpRequest, session_id: str) -> HttpResponse:
    """Show one session: its totals, then its turns in order with requests, answers, tools."""
    problems: list[str] = []
    try:
        found = sessions.session_detail(session_id, after=request.GET.get("after"))
    except sessions.UnknownSession:
        raise Http404("No trace has this session id.") from None
    except BadCursor as exc:
        found = sessions.session_detail(session_id)
        problems.append(f"Page: {exc}; showing the first turns.")
    totals = found.totals
    # The traces page, filtered to the session, over a range that holds all its turns.
    traces_query = urlencode(
        {
            "session": session_id,
            "since": (totals["first_at"] - timedelta(minutes=1)).isoformat(),
            "until": (totals["last_at"] + timedelta(minutes=1)).isoformat(),
        }
    )
    context = {
        "session": found,
        "totals": totals,
        "filter_errors": problems,
        "traces_query": traces_query,
        "later": request.GET.get("after"),
    }
    return render(request, "traces_app/session_detail.html", context)
