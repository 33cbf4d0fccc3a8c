"""Scoring from the console: a staff user's thumbs up or down, or any defined score."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.admin.views.decorators import staff_member_required
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import NoReverseMatch, reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from traces_app.models import ScoreDefinition
from traces_app.scores.judgements import check_values, store_scores
from traces_app.scores.score_api import read_item


@staff_member_required
@require_POST
def add_score(request: HttpRequest) -> HttpResponse:
    """Store one score sent by the console's form; say how it went on the page it came from."""
    fields = request.POST
    name = fields.get("name", "").strip()
    raw = {
        "name": name,
        "value": _typed_value(name, fields.get("value", "")),
        "source": "human",
        "comment": fields.get("comment", ""),
        "trace_id": fields.get("trace_id", ""),
        "span_id": fields.get("span_id", ""),
    }
    item = read_item(0, raw)
    check_values([item])
    user = request.user.get_username()  # type: ignore[union-attr]
    store_scores([item], f"user {user}")
    if item.status == "accepted":
        where = f"span {raw['span_id']}" if raw["span_id"] else "this trace"
        messages.success(request, f"Scored {where}: {name} = {fields.get('value', '')}.")
    else:
        reasons = "; ".join(f"{field}: {reason}" for field, reason in item.errors)
        messages.error(request, f"The score was not stored: {reasons}")
    return HttpResponseRedirect(_back(request, raw["trace_id"], raw["span_id"]))


def _typed_value(name: str, text: str) -> object:
    """Return a form's value text as its definition's type: true/false, a number, a label."""
    definition = ScoreDefinition.objects.filter(name=name).first()
    text = text.strip()
    if definition is None or definition.data_type == "categorical":
        return text
    if definition.data_type == "boolean":
        return {"true": True, "false": False}.get(text.lower(), text)
    try:
        return float(text)
    except ValueError:
        return text


def _back(request: HttpRequest, trace_id: str, span_id: str) -> str:
    target = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(target, {request.get_host()}, request.is_secure()):
        target = ""
    if not target:
        try:
            target = reverse("trace-detail", args=[trace_id])
        except NoReverseMatch:  # no trace id: go to the list
            target = reverse("traces")
    return target.split("#")[0] + (f"#span-{span_id}" if span_id else "#scores")
