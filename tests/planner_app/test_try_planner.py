"""Try the planner over the test client: what it says it matched and read."""

from __future__ import annotations

import html
import re

import pytest
from django.test import Client


def rules_matched(page: str) -> dict[str, str]:
    """Return the Rules matched table: each rule and the words it matched."""
    table = re.search(r'(?s)<table id="rules-matched">.*?</table>', page)[0]
    rows = re.findall(r"(?s)<tr[^>]*><td>(.*?)</td><td>(.*?)</td>", table)
    return {text_of(rule): text_of(words) for rule, words in rows}


def text_of(cell: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", cell)).strip()


@pytest.mark.parametrize(
    ("request_text", "rule", "words"),
    [
        ("what is 17% of 2,340", "math-words", "17%"),
        ("what is 2.5% of 80", "math-words", "2.5%"),
        ("what is 12*34", "arithmetic", "12*34"),
    ],
)
def test_it_lists_whole_numbers_as_the_words_matched(
    admin_client: Client, default_rules: None, request_text: str, rule: str, words: str
) -> None:
    page = admin_client.get("/planner/try", {"request": request_text}).content.decode()
    assert rules_matched(page)[rule] == words


@pytest.mark.parametrize(
    ("request_text", "read"),
    [
        ("calculate 3, 4 and 5", "numbers in several places ('3', '4', '5')"),
        ("calculate 3,400 and 5", "numbers in several places ('3400', '5')"),
        ("the product of 3, 4 and 5", "read list function -> 3*4*5"),
    ],
)
def test_it_says_it_read_a_list_as_its_numbers(
    admin_client: Client, default_rules: None, request_text: str, read: str
) -> None:
    page = admin_client.get("/planner/try", {"request": request_text}).content.decode()
    assert read in html.unescape(page)
    assert "'3,4'" not in html.unescape(page)
