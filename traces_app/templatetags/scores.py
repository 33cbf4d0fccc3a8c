"""The console's score panels: a trace's or a span's scores, and forms to add one."""

from __future__ import annotations

from typing import Any

from django import template

from traces_app.models import Score, ScoreDefinition

register = template.Library()


@register.inclusion_tag("traces_app/_score_panel.html", takes_context=True)
def score_panel(context: template.Context, trace_id: str, span_id: str = "") -> dict[str, Any]:
    """Render the scores of a trace (span_id empty) or of one of its spans, with the forms.

    The trace's scores and the definitions are read once per page, for every panel on it.
    """
    cache = context.render_context.setdefault("score_panels", {})
    if trace_id not in cache:
        scores = list(Score.objects.filter(trace_id=trace_id).order_by("created_at"))
        cache[trace_id] = scores
    if "definitions" not in cache:
        cache["definitions"] = list(ScoreDefinition.objects.all())
    request = context.get("request")
    return {
        "trace_id": trace_id,
        "span_id": span_id,
        "scores": [score for score in cache[trace_id] if score.span_id == span_id],
        "definitions": cache["definitions"],
        "next": request.get_full_path() if request else "",
        "csrf_token": context.get("csrf_token"),
        "messages": context.get("messages") if not span_id else None,
    }


@register.simple_tag
def score_filter_choices() -> list[str]:
    """Return what the traces page's score filter offers: each name, and name:value."""
    choices = []
    for definition in ScoreDefinition.objects.all():
        choices.append(definition.name)
        if definition.data_type == "boolean":
            choices += [f"{definition.name}:true", f"{definition.name}:false"]
        elif definition.data_type == "categorical":
            choices += [f"{definition.name}:{label}" for label in definition.categories]
    return choices
