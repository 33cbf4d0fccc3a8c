"""Reading the demo MCP tools' arguments: add(a, b) and sha256(text), only what each can do."""

from __future__ import annotations

import pytest

from planner_app.pipeline.extraction import DEMO_ADD_TOOL, DEMO_SHA256_TOOL, extract_arguments
from traces_app.demo_spans import REQUESTS_BY_TOOL


@pytest.mark.parametrize(
    ("request_text", "arguments"),
    [
        ("what is 2 plus 3", {"a": 2, "b": 3}),
        ("add 2 to 40", {"a": 2, "b": 40}),
        ("what is 1,250 plus 370", {"a": 1250, "b": 370}),
        ("sum of 2 and 40", {"a": 2, "b": 40}),
        ("-3 + 5", {"a": -3, "b": 5}),
        ("计算 25 加 4", {"a": 25, "b": 4}),
    ],
)
def test_it_reads_the_two_numbers_of_a_sum(request_text: str, arguments: dict) -> None:
    found = extract_arguments(DEMO_ADD_TOOL, request_text)
    assert (found.arguments, found.needs_llm) == (arguments, False)


@pytest.mark.parametrize(
    "request_text",
    [
        "sum of 3, 4 and 5",  # three numbers
        "7 + 8 + 9",
        "sum of 1 to 100",  # a range
        "2.5 + 1",  # not whole
        "2 - 3",  # not a sum
        "what is 2^63 + 1",  # a power inside
        "what is 12 times 4",
        "add the invoice lines",  # no numbers
    ],
)
def test_it_refuses_any_other_calculation(request_text: str) -> None:
    found = extract_arguments(DEMO_ADD_TOOL, request_text)
    assert found.needs_llm and found.arguments == {}


def test_every_demo_request_for_add_is_a_sum_it_can_read() -> None:
    for request_text in REQUESTS_BY_TOOL[DEMO_ADD_TOOL]:
        found = extract_arguments(DEMO_ADD_TOOL, request_text)
        assert not found.needs_llm and set(found.arguments) == {"a", "b"}, request_text


@pytest.mark.parametrize(
    ("request_text", "text"),
    [
        ("sha256 of 'INV-2026-0042'", "INV-2026-0042"),
        ("sha-256 digest of hello", "hello"),
        ("Hash 'hello' with sha256", "hello"),
    ],
)
def test_it_reads_the_text_of_a_sha256_request(request_text: str, text: str) -> None:
    found = extract_arguments(DEMO_SHA256_TOOL, request_text)
    assert (found.arguments, found.needs_llm) == ({"text": text}, False)


@pytest.mark.parametrize(
    ("request_text", "why"),
    [
        ("md5 of report.pdf", "asks for md5"),
        ("base64 encode 'user:secret'", "asks for base64_encode"),
        ("sha512 checksum of the release notes", "asks for sha512"),
    ],
)
def test_it_leaves_other_digests_to_other_tools(request_text: str, why: str) -> None:
    found = extract_arguments(DEMO_SHA256_TOOL, request_text)
    assert found.needs_llm and why in found.reason


def test_every_demo_request_for_sha256_is_one_it_can_read() -> None:
    for request_text in REQUESTS_BY_TOOL[DEMO_SHA256_TOOL]:
        found = extract_arguments(DEMO_SHA256_TOOL, request_text)
        assert not found.needs_llm and set(found.arguments) == {"text"}, request_text
