"""The console's score panels: a trace's or a span's scores, and forms to add one."""

from __future__ import annotations

from typing import Any

from django import template
from django.db.models import Exists, OuterRef

from traces_app.models import Invocation, Score, ScoreDefinition, Trace

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


@register.inclusion_tag("traces_app/_tool_scores.html")
def tool_scores(tool: str, time_range: Any, limit: int = 20_000) -> dict[str, Any]:
    """Render a tool's scores over a range: per chart bucket and score, how many and what.

    A score counts for a tool when its span is one of the tool's calls; buckets are the
    range's chart buckets of the score's time. Reads at most `limit` scores.
    """
    # Through the span's trace, whose time bounds keep the probe to the trace's partitions.
    calls_in_trace = Invocation.objects.filter(
        trace_id=OuterRef("pk"),
        span_id=OuterRef(OuterRef("span_id")),
        tool_name=tool,
        started_at__gte=OuterRef("started_at"),
        started_at__lte=OuterRef("ended_at"),
    )
    calls = Trace.objects.filter(pk=OuterRef("trace_id")).filter(Exists(calls_in_trace))
    scores = (
        Score.objects.filter(created_at__gte=time_range.since, created_at__lt=time_range.until)
        .exclude(span_id="")
        .filter(Exists(calls))
        .values_list("created_at", "name", "data_type", "value", "label")[:limit]
    )
    groups: dict[tuple[Any, str], list[tuple[str, float | None, str]]] = {}
    for created_at, name, data_type, value, label in scores:
        key = (time_range.bucket_of(created_at), name)
        groups.setdefault(key, []).append((data_type, value, label))
    rows = [
        {"bucket": bucket, "name": name, "count": len(values), "summary": _summary(values)}
        for (bucket, name), values in sorted(groups.items(), key=lambda item: item[0], reverse=True)
    ]
    return {"rows": rows, "tool": tool, "truncated": len(scores) == limit}


def _summary(values: list[tuple[str, float | None, str]]) -> str:
    """Say what a group of one score's values holds: the mean, the share true, the labels."""
    kind = values[0][0]
    if kind == "numeric":
        numbers = [value for _, value, _ in values if value is not None]
        return f"mean {sum(numbers) / len(numbers):.3g}, min {min(numbers):g}, max {max(numbers):g}"
    if kind == "boolean":
        true = sum(label == "true" for _, _, label in values)
        return f"{true} true, {len(values) - true} false ({true / len(values):.0%} true)"
    counts: dict[str, int] = {}
    for _, _, label in values:
        counts[label] = counts.get(label, 0) + 1
    return ", ".join(f"{label} {count}" for label, count in sorted(counts.items()))
