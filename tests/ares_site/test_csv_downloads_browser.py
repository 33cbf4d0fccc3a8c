"""CSV downloads in a real Chromium: a cell a spreadsheet would run as a formula is quoted.

Names are reported through the ingest API, the CSV is downloaded from the page with the
chart's own button, as staff, and read back with Python's csv module.
"""

from __future__ import annotations

import csv
import secrets
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import make_span

pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("rollups_and_rules_afresh")]

# Tool names (and a model name) a spreadsheet would run, and what the CSV must hold.
FORMULAS = {
    "=cmd|' /C calc'!A0": "'=cmd|' /C calc'!A0",
    "@SUM(1)": "'@SUM(1)",
    "+1-2": "'+1-2",
    "-x": "'-x",
}
MODEL = '=HYPERLINK("http://127.0.0.1/x","click")'


def download_csv(page: Any, chart_id: str, tmp_path: Path) -> list[dict[str, str]]:
    """Click the chart's Download CSV button; return the file's rows by column."""
    page.click(f"#{chart_id} details.numbers summary")
    with page.expect_download() as download:
        page.click(f"#{chart_id} button.csv")
    target = tmp_path / f"{chart_id}.csv"
    download.value.save_as(target)
    with target.open(newline="", encoding="utf-8") as file:
        return list(csv.DictReader(file))


def test_it_quotes_formula_names_in_the_waterfall_csv(
    staff_page: Any, live_server: Any, api: httpx.Client, tmp_path: Path
) -> None:
    trace_id = secrets.token_hex(16)
    spans = [make_span(trace_id=trace_id, tool_name=name) for name in FORMULAS]
    spans.append(
        make_span(trace_id=trace_id, kind="llm", tool_name="", chosen_by=None, ran_on=None,
                  model=MODEL, input_tokens=10)
    )  # fmt: skip
    assert api.post("/invocations", json={"invocations": spans}).json()["accepted"] == 5

    staff_page.goto(f"{live_server.url}/traces/{trace_id}/")
    rows = download_csv(staff_page, "waterfall", tmp_path)

    assert sorted(row["Name"] for row in rows) == sorted([*FORMULAS.values(), "'" + MODEL])
    assert {row["Latency (ms)"] for row in rows} == {"3.5"}  # numbers stay numbers
    assert {row["Chosen by"] for row in rows} == {"llm", "-"}  # a lone "-" holds no formula


def test_it_keeps_a_negative_number_a_number(
    staff_page: Any, live_server: Any, api: httpx.Client, tmp_path: Path
) -> None:
    failures = [
        make_span(tool_name="calculator", status="error", error_kind="timeout", latency_ms=900.0)
        for _ in range(3)
    ]
    assert api.post("/invocations", json={"invocations": failures}).json()["accepted"] == 3

    staff_page.goto(f"{live_server.url}/tools/calculator/")
    rows = download_csv(staff_page, "evidence-score", tmp_path)

    negatives = [row["Evidence"] for row in rows if row["Calls"] == "3"]
    assert negatives and all(float(value) < 0 for value in negatives), negatives
    assert all(value.startswith("-") for value in negatives)  # no quote before the sign


def test_it_quotes_cells_that_start_with_a_tab_or_a_carriage_return(
    staff_page: Any, live_server: Any, api: httpx.Client, tmp_path: Path
) -> None:
    # Ingest strips leading whitespace from names, so these cells are put in the page's
    # table directly: the download must neutralize whatever the table holds.
    trace_id = secrets.token_hex(16)
    api.post("/invocations", json={"invocations": [make_span(trace_id=trace_id)]})
    staff_page.goto(f"{live_server.url}/traces/{trace_id}/")
    staff_page.evaluate(
        """() => {
          const cells = document.querySelectorAll('#waterfall tbody tr td');
          cells[2].textContent = '\\tx';
          cells[3].textContent = '\\rx';
          cells[4].textContent = '-3.5';
          cells[5].textContent = '+2';
        }"""
    )
    (row,) = download_csv(staff_page, "waterfall", tmp_path)

    assert (row["Name"], row["Status"]) == ("'\tx", "'\rx")
    assert (row["Starts at (ms)"], row["Latency (ms)"]) == ("-3.5", "+2")


def test_it_leaves_names_that_start_with_a_tab_to_the_ingest_which_strips_it(
    api: httpx.Client,
) -> None:
    spans = [make_span(tool_name="\tx"), make_span(tool_name="\rx")]

    assert api.post("/invocations", json={"invocations": spans}).json()["accepted"] == 2
    assert {span["tool_name"] for span in api.get("/invocations").json()["items"]} == {"x"}
