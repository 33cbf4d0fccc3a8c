"""Charts for the dashboard pages: a plotly figure plus the numbers behind it as a table.

Views build a Chart; `templates/charts/chart.html` renders the figure (drawn by
static/ares_site/js/charts.js with the plotly.js we serve ourselves), its numbers as a
table, and a CSV download of that table. A chart without JavaScript is still its table.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from functools import cache
from html import escape
from typing import Any
from urllib.parse import urlencode

import plotly.graph_objects as go
import plotly.io as pio
from plotly.io.json import to_json_plotly

LAYOUT: dict[str, Any] = {
    "height": 300,
    "margin": {"l": 60, "r": 20, "t": 30, "b": 50},
    "hovermode": "x unified",
    "legend": {"orientation": "h", "y": -0.25},
}


@cache
def white_template() -> dict[str, Any]:
    """Return plotly_white's layout part, read once, on the first chart.

    Not at import: reading it loads plotly's figure classes (~13 MB), which a process that
    only ingests spans never needs. And not per figure: go.Figure(template="plotly_white")
    deep-copies and validates the whole template each time (~45 ms, most of a page's time).
    """
    return {"layout": pio.templates["plotly_white"].layout.to_plotly_json()}


@dataclass(frozen=True)
class Chart:
    id: str
    title: str
    figure: dict[str, Any]
    columns: Sequence[str]
    rows: Sequence[Sequence[Any]] = field(default_factory=list)
    markers: Sequence[Marker] = ()  # moments marked on the time axis (with_markers)
    # Per plotly trace, per point: the traces page that lists what the point counts
    # (bucket_drilldown, category_drilldown); "" where there is none.
    drill: Sequence[Sequence[str]] = ()

    @property
    def figure_id(self) -> str:
        return f"{self.id}-figure"

    @property
    def drill_id(self) -> str:
        return f"{self.id}-drill"

    @property
    def is_empty(self) -> bool:
        """Return whether the chart has nothing to draw: no rows, or only zeros and gaps.

        The page then says "no data" instead of drawing bare axes.
        """
        if not self.rows:
            return True
        for trace in self.figure.get("data", []):
            values = trace.get("x" if trace.get("orientation") == "h" else "y") or []
            if any(value not in (None, 0, 0.0, "") for value in values):
                return False
        return True

    @property
    def offers_log_scale(self) -> bool:
        """Return whether the y axis is a latency in ms, where spikes flatten the rest."""
        yaxis = self.figure.get("layout", {}).get("yaxis", {})
        title = str(yaxis.get("title", {}).get("text", ""))
        return yaxis.get("type") != "category" and (title == "ms" or "(ms)" in title)


def make_chart(
    chart_id: str,
    title: str,
    traces: Sequence[go.BaseTraceType],
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],
    **layout: Any,
) -> Chart:
    """Return a chart of plotly traces, with the table of numbers it shows."""
    # The traces and layout are validated by plotly as they are built; the figure is their JSON.
    figure = {
        "data": [trace.to_plotly_json() for trace in traces],
        "layout": {"template": white_template(), **LAYOUT, **go.Layout(**layout).to_plotly_json()},
    }
    return Chart(chart_id, title, json.loads(to_json_plotly(figure)), list(columns), list(rows))


@dataclass(frozen=True)
class Marker:
    """A moment marked on a chart's time axis: a vertical line with a short label and a link."""

    at: datetime
    label: str  # "v7": short, drawn above the line
    url: str
    title: str = ""  # what happened then, on hover and in the chart's list of marks


MARKER_COLOUR = "#7a5af8"


def with_markers(chart: Chart, markers: Sequence[Marker]) -> Chart:
    """Return the chart with each marker drawn as a dashed vertical line labelled with a link.

    The label and the hover text are escaped: plotly reads annotation text as HTML.
    """
    if not markers:
        return chart
    figure = {**chart.figure, "layout": dict(chart.figure.get("layout", {}))}
    layout = figure["layout"]
    layout["shapes"] = [*layout.get("shapes", []), *(_line(marker) for marker in markers)]
    layout["annotations"] = [
        *layout.get("annotations", []),
        *(_label(marker) for marker in markers),
    ]
    return replace(chart, figure=figure, markers=list(markers))


def _line(marker: Marker) -> dict[str, Any]:
    return {
        "type": "line", "xref": "x", "yref": "paper", "x0": marker.at.isoformat(),
        "x1": marker.at.isoformat(), "y0": 0, "y1": 1,
        "line": {"color": MARKER_COLOUR, "width": 2, "dash": "dash"},
    }  # fmt: skip


def _label(marker: Marker) -> dict[str, Any]:
    return {
        # Inside the plot, at its top: the margin above is where the mode bar floats.
        "x": marker.at.isoformat(), "xref": "x", "y": 1, "yref": "paper", "yanchor": "top",
        "xanchor": "left", "showarrow": False, "font": {"color": MARKER_COLOUR, "size": 11},
        "text": f'<a href="{escape(marker.url)}" target="_self">{escape(marker.label)}</a>',
        "hovertext": escape(marker.title) or escape(marker.label),
    }  # fmt: skip


TRACES_PAGE = "/traces/"


def bucket_drilldown(
    chart: Chart,
    bucket: timedelta,
    filters: Mapping[str, str] | None = None,
    by_series: Mapping[str, Mapping[str, str]] | None = None,
) -> Chart:
    """Return the chart with each point linked to the traces of its time bucket.

    A point at x opens the traces page for [x, x + bucket) with the filters (a tool, a
    status), plus its series' own (the failures series: status error). Points whose x is
    not a moment get no link.
    """
    links = []
    for trace in chart.figure.get("data", []):
        extra = {**(filters or {}), **(by_series or {}).get(trace.get("name", ""), {})}
        links.append([_bucket_link(x, bucket, extra) for x in trace.get("x") or []])
    return replace(chart, drill=links)


def category_drilldown(chart: Chart, url_of: Mapping[str, str]) -> Chart:
    """Return the chart with each bar linked to the page `url_of` names for its category."""
    links = [
        [url_of.get(str(x), "") for x in trace.get("x") or []]
        for trace in chart.figure.get("data", [])
    ]
    return replace(chart, drill=links)


def _bucket_link(x: Any, bucket: timedelta, filters: Mapping[str, str]) -> str:
    try:
        since = datetime.fromisoformat(str(x))
    except ValueError:
        return ""
    if since.utcoffset() is None:
        since = since.replace(tzinfo=UTC)  # plotly writes naive moments: ours are UTC
    until = since + bucket
    query = {"since": since.isoformat(), "until": until.isoformat(), **filters}
    return f"{TRACES_PAGE}?{urlencode(query)}"


def readable_ms(ms: float) -> str:
    """Return a latency as people read it: 0.4 ms, 12 ms, 250 ms, 1.6 s, 32 s, 4.2 min."""
    if ms >= 60_000:
        return f"{ms / 60_000:.2g} min"
    if ms >= 1000:
        return f"{ms / 1000:.2g} s" if ms < 10_000 else f"{ms / 1000:.0f} s"
    return f"{ms:.2g} ms" if ms < 10 else f"{ms:.0f} ms"


def latency_bin_label(low: float, high: float) -> str:
    """Return a latency histogram bin's label: "25 s – 32 s" rather than "25118.9-31622.8"."""
    return f"≥ {readable_ms(low)}" if high <= low else f"{readable_ms(low)} – {readable_ms(high)}"
