"""Chart helpers: readable latency labels, empty charts, the log-scale switch."""

from __future__ import annotations

import plotly.graph_objects as go
import pytest

from traces_app.charts import latency_bin_label, make_chart, readable_ms


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (0.42, "0.42 ms"),
        (3.16, "3.2 ms"),
        (251.2, "251 ms"),
        (1584.9, "1.6 s"),
        (31622.8, "32 s"),
        (251188.6, "4.2 min"),
    ],
)
def test_it_reads_a_latency_as_people_do(ms: float, text: str) -> None:
    assert readable_ms(ms) == text


def test_it_labels_a_histogram_bin_readably() -> None:
    assert latency_bin_label(25118.9, 31622.8) == "25 s – 32 s"
    assert latency_bin_label(60000.0, 60000.0) == "≥ 1 min"


def chart(y: list, **layout: object):
    return make_chart("c", "C", [go.Scatter(x=[1, 2], y=y)], ["x", "y"], [[1, 2]], **layout)


@pytest.mark.parametrize(
    ("y", "empty"),
    [([0, 0], True), ([None, None], True), ([0, 3], False)],
)
def test_a_chart_of_only_zeros_or_gaps_is_empty(y: list, empty: bool) -> None:
    assert chart(y).is_empty is empty


def test_a_latency_axis_offers_a_log_scale() -> None:
    assert chart([1, 2], yaxis={"title": {"text": "ms"}}).offers_log_scale
    assert chart([1, 2], yaxis={"title": {"text": "Latency (ms)"}}).offers_log_scale
    assert not chart([1, 2], yaxis={"title": {"text": "tokens"}}).offers_log_scale
