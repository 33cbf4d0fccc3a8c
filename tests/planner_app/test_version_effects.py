"""What a rule-set version did: its page against the raw spans, markers on the charts."""

from __future__ import annotations

import json
import random
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from planner_app.models import RuleSetVersion
from planner_app.version_effects import (
    NO_RULE,
    Share,
    change_text,
    effect_of,
    outcome_of,
    version_markers,
    wilson_interval,
)
from tests.planner_app.version_traffic import (
    EXPECTED,
    SHAPES,
    count,
    make_version,
    read_cells,
    record_request,
)
from traces_app.models import Invocation, Trace

NOW = datetime.now(UTC).replace(microsecond=0)
SUM = ["add 3 and 4", "sum of 2 and 9", "tally 3 and 4", "tally up 5 and 6"]
OTHER = ["what is the weather in Paris", "hello there"]


@pytest.mark.parametrize(
    ("shape", "expected"), [(s, e) for s, e in EXPECTED.items() if s != "planner stopped"]
)
def test_outcome_of_reads_each_shape(shape: str, expected: Any) -> None:
    outcome = outcome_of("t", "r", NOW, SHAPES[shape])
    found = (outcome.planned, outcome.planner_first, bool(outcome.planner_ok), outcome.fallback)
    assert found == (
        expected.planned,
        expected.planner_first,
        expected.planner_ok,
        expected.fallback,
    )


@pytest.mark.parametrize(
    ("part", "whole", "low", "high"),
    [
        (0, 10, 0.0, 0.2775),
        (10, 10, 0.7225, 1.0),
        (5, 10, 0.2366, 0.7634),
        (48, 50, 0.8654, 0.9889),
    ],
)
def test_wilson_interval_matches_the_published_values(
    part: int, whole: int, low: float, high: float
) -> None:
    found = wilson_interval(part, whole)
    assert found is not None
    assert found[0] == pytest.approx(low, abs=1e-3) and found[1] == pytest.approx(high, abs=1e-3)


def test_a_share_of_nothing_has_no_rate_and_the_change_says_why() -> None:
    assert Share(0, 0).rate is None and wilson_interval(0, 0) is None
    assert change_text(Share(0, 0), Share(3, 4)) == "– (a side has no requests)"
    assert change_text(Share(1, 4), Share(3, 4)) == "after vs before: +50.0 points"
    assert change_text(Share(3, 4), Share(1, 4)) == "after vs before: -50.0 points"


def _traffic(seed: int, since: datetime, until: datetime, n: int) -> list[tuple[str, str]]:
    """Record n requests of random shapes and texts in [since, until); return (text, shape)."""
    rng = random.Random(seed)
    seconds = int((until - since).total_seconds())
    made = []
    for _ in range(n):
        text, shape = rng.choice(SUM + OTHER), rng.choice(list(SHAPES))
        record_request(since + timedelta(seconds=rng.randrange(seconds)), text, shape,
                       with_llm_span=rng.random() < 0.5)  # fmt: skip
        made.append((text, shape))
    return made


def _capability(text: str) -> str:
    """Return the row a request falls in under v2's rules (sum-en with "tally"), by hand."""
    return "Summation" if text in SUM else text


def _page(admin_client: Any, number: int) -> str:
    response = admin_client.get(f"/planner/versions/{number}/")
    assert response.status_code == 200
    return response.content.decode()


@pytest.mark.parametrize("seed", [1, 2])
def test_the_version_page_agrees_with_the_recorded_spans(
    admin_client: Any, default_rules: None, seed: int
) -> None:
    make_version("before", NOW - timedelta(hours=10))
    version = make_version("add tally", NOW - timedelta(hours=2), add_sum_word="tally")
    before = _traffic(seed, NOW - timedelta(hours=4), version.created_at, 60)
    after = _traffic(seed + 100, version.created_at, NOW - timedelta(minutes=1), 60)
    _traffic(seed + 200, NOW - timedelta(hours=9), NOW - timedelta(hours=4, minutes=5), 10)  # out

    html = _page(admin_client, version.number)
    cells = read_cells(html)
    for side, made in (("before", before), ("after", after)):
        expected = count([shape for _, shape in made])
        assert cells.rows["requests"][side] == str(expected["requests"])
        assert cells.rows["planned"][side] == str(expected["planned"])
        without_llm, success, fallbacks = (cells.attrs[str(i)][side] for i in (1, 2, 3))
        assert (without_llm["data-part"], without_llm["data-whole"]) == (
            str(expected["planner_first"]),
            str(expected["requests"]),
        )
        assert (success["data-part"], success["data-whole"]) == (
            str(expected["planner_ok"]),
            str(expected["planned"]),
        )
        assert fallbacks["data-part"] == str(expected["fallbacks"])
        for capability in {_capability(text) for text, _ in before + after}:
            shapes = [shape for text, shape in made if _capability(text) == capability]
            want = count(shapes)
            row = cells.rows["Summation" if capability == "Summation" else NO_RULE]
            if capability != "Summation":
                continue  # the other texts share the unmatched row, checked below
            assert row[f"requests-{side}"] == str(want["requests"])
            assert cells.attrs["Summation"][f"success-{side}"]["data-part"] == str(
                want["planner_ok"]
            )
            assert row[f"fallbacks-{side}"] == str(want["fallbacks"])
        unmatched = count([shape for text, shape in made if _capability(text) != "Summation"])
        assert cells.rows[NO_RULE][f"requests-{side}"] == str(unmatched["requests"])


def test_the_page_counts_agree_with_a_plain_count_of_the_spans(
    admin_client: Any, default_rules: None
) -> None:
    """The same figures counted a second way: straight from the Invocation rows."""
    version = make_version("add tally", NOW - timedelta(hours=1), add_sum_word="tally")
    _traffic(7, version.created_at, NOW, 80)
    traces = Trace.objects.filter(started_at__gte=version.created_at).exclude(request_text="")
    spans = Invocation.objects.filter(trace__in=traces, kind="tool").exclude(status="stopped")
    requests = spans.values("trace_id").distinct().count()
    planned = spans.filter(chosen_by="planner").values("trace_id").distinct().count()
    failed = spans.filter(chosen_by="planner", status="error").values("trace_id").distinct()

    cells = read_cells(_page(admin_client, version.number))
    assert cells.rows["requests"]["after"] == str(requests)
    assert cells.rows["planned"]["after"] == str(planned)
    assert cells.attrs["2"]["after"]["data-part"] == str(planned - failed.count())


def test_the_next_version_ends_the_span_and_the_before_is_as_long(
    admin_client: Any, default_rules: None
) -> None:
    v2 = make_version("v2", NOW - timedelta(hours=3))
    make_version("v3", NOW - timedelta(hours=2))
    record_request(v2.created_at, SUM[0], "planner ok")  # at the version's moment: after
    record_request(v2.created_at + timedelta(minutes=30), SUM[0], "planner failed")
    record_request(NOW - timedelta(hours=1), SUM[0], "planner failed")  # v3's
    record_request(v2.created_at - timedelta(minutes=59), SUM[0], "llm only")
    record_request(v2.created_at - timedelta(minutes=61), SUM[0], "llm only")  # too early

    html = _page(admin_client, v2.number)
    cells = read_cells(html)
    assert cells.rows["requests"]["before"] == "1" and cells.rows["requests"]["after"] == "2"
    assert cells.attrs["2"]["after"]["data-part"] == "1"  # one of the two planner runs ok
    assert "until v3" in html and "1.0 h" in html
    assert 'id="next-version" href="/planner/versions/3/"' in html
    assert "after vs before: " in html


def test_an_empty_side_says_so(admin_client: Any, default_rules: None) -> None:
    version = make_version("quiet", NOW - timedelta(hours=1))
    html = _page(admin_client, version.number)
    assert 'id="before-empty"' in html and 'id="after-empty"' in html
    assert "– (a side has no requests)" in html
    assert "No requests on either side." in html


def test_the_page_shows_what_changed_and_escapes_it(admin_client: Any, default_rules: None) -> None:
    version = make_version("<script>alert(1)</script>", NOW - timedelta(hours=1),
                           add_sum_word="tally")  # fmt: skip
    RuleSetVersion.objects.filter(pk=version.pk).update(change="<script>alert(1)</script>")
    html = _page(admin_client, version.number)
    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "keywords +tally" in html


def test_an_unknown_version_is_a_clear_404(admin_client: Any, default_rules: None) -> None:
    response = admin_client.get("/planner/versions/999/")
    assert response.status_code == 404
    assert "No rule-set version v999: the versions are v1 to v1." in response.content.decode()
    assert admin_client.get("/planner/versions/abc/").status_code == 404


def test_the_page_is_for_staff_only(client: Any, default_rules: None) -> None:
    response = client.get("/planner/versions/1/")
    assert response.status_code == 302 and "login" in response["Location"]


def test_the_version_list_links_each_version_page(admin_client: Any, default_rules: None) -> None:
    make_version("v2", NOW - timedelta(hours=1))
    html = admin_client.get("/admin/planner_app/rulesetversion/").content.decode()
    assert 'class="version-page" href="/planner/versions/2/"' in html
    assert 'class="version-page" href="/planner/versions/1/"' in html


def _figure(html: str, chart_id: str) -> dict[str, Any]:
    found = re.search(rf'<script id="{chart_id}-figure" type="application/json">(.*?)</script>',
                      html, re.S)  # fmt: skip
    assert found, f"no figure {chart_id}"
    return json.loads(found.group(1))


def test_the_overview_marks_the_versions_of_its_range(
    admin_client: Any, default_rules: None
) -> None:
    old = make_version("long ago", NOW - timedelta(days=3))
    version = make_version('add "tally" <b>', NOW - timedelta(hours=2), add_sum_word="tally")
    RuleSetVersion.objects.filter(pk=version.pk).update(change='add "tally" <b>')
    record_request(NOW - timedelta(hours=1), SUM[0], "planner ok")
    html = admin_client.get("/?range=24h").content.decode()
    for chart_id in ("calls-over-time",):  # the tokens chart is empty: no figure
        layout = _figure(html, chart_id)["layout"]
        texts = [a["text"] for a in layout["annotations"]]
        assert (
            f'<a href="/planner/versions/{version.number}/" target="_self">v{version.number}</a>'
            in texts
        )
        assert not any(f"v{old.number}<" in text for text in texts)  # outside the range
        hover = [a["hovertext"] for a in layout["annotations"]]
        assert "add &quot;tally&quot; &lt;b&gt;" in hover
        lines = [s for s in layout["shapes"] if s["type"] == "line"]
        assert any(s["x0"].startswith(version.created_at.strftime("%Y-%m-%dT%H:%M")) for s in lines)
    assert 'class="chart-marker" href="/planner/versions/' in html
    assert "annotations" not in json.dumps(_figure(html, "by-chooser")["layout"])


def test_tool_and_evidence_charts_mark_the_versions(admin_client: Any, default_rules: None) -> None:
    version = make_version("v2", NOW - timedelta(hours=2))
    record_request(NOW - timedelta(hours=1), SUM[0], "planner ok")
    marker = f'<a href="/planner/versions/{version.number}/" target="_self">v{version.number}</a>'
    tool = admin_client.get("/tools/calculator/?range=24h").content.decode()
    for chart_id in ("success-rate", "latency"):
        assert marker in [a["text"] for a in _figure(tool, chart_id)["layout"]["annotations"]]
    evidence = admin_client.get("/evidence/Summation/?range=24h").content.decode()
    figure_ids = re.findall(r'<script id="([\w-]+)-figure"', evidence)
    assert figure_ids
    layout = _figure(evidence, figure_ids[0])["layout"]
    assert marker in [a["text"] for a in layout["annotations"]]


def test_version_markers_are_bounded_and_oldest_first(default_rules: None) -> None:
    for hours in (5, 4, 3):
        make_version(f"{hours} h ago", NOW - timedelta(hours=hours))
    markers = version_markers(NOW - timedelta(hours=4, minutes=30), NOW)
    assert [m.label for m in markers] == ["v3", "v4"]
    assert markers[0].url == "/planner/versions/3/" and markers[0].title == "4 h ago"


def test_a_side_reads_the_requests_nearest_the_version_and_says_it_was_cut(
    default_rules: None,
) -> None:
    version = make_version("v2", NOW - timedelta(hours=2))
    near_after = record_request(version.created_at + timedelta(minutes=1), SUM[0], "planner ok")
    record_request(version.created_at + timedelta(minutes=50), SUM[0], "planner failed")
    near_before = record_request(version.created_at - timedelta(minutes=1), SUM[0], "llm only")
    record_request(version.created_at - timedelta(minutes=50), SUM[0], "planner failed")

    effect = effect_of(version, NOW, limit=1)

    assert [o.trace_id for o in effect.after.outcomes] == [near_after] and effect.after.more
    assert [o.trace_id for o in effect.before.outcomes] == [near_before] and effect.before.more
    assert not effect_of(version, NOW, limit=2).after.more


def test_try_the_planner_and_the_evidence_link_the_version_in_force(
    admin_client: Any, default_rules: None
) -> None:
    version = make_version("add tally", NOW - timedelta(hours=1), add_sum_word="tally")
    link = f'href="/planner/versions/{version.number}/"'
    tried = admin_client.get("/planner/try?request=tally+3+and+4").content.decode()
    assert f'<a id="plan-version" {link}>v{version.number}</a>' in tried
    record_request(NOW - timedelta(minutes=30), SUM[0], "planner ok")
    assert link in admin_client.get("/evidence/Summation/").content.decode()
