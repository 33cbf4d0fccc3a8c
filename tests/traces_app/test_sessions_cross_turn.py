"""Spirals across turns: the same tool failing the same way at a turn's end and the next start."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from traces_app.sessions import ToolCall, cross_turn_spirals

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def calls(text: str) -> list[list[ToolCall]]:
    """Return turns of calls from 'a! b | a! | c': turns split by |, ! a timeout, ? not found."""
    turns = []
    for number, part in enumerate(text.split("|")):
        turn = []
        for index, word in enumerate(part.split()):
            failed = word[-1] in "!?"
            kind = {"!": "timeout", "?": "not_found"}.get(word[-1], "")
            turn.append(
                ToolCall(f"t{number}", f"s{number}{index}", word.rstrip("!?"),
                         "error" if failed else "ok", kind, T0 + timedelta(seconds=index))
            )  # fmt: skip
        turns.append(turn)
    return turns


@pytest.mark.parametrize(
    ("turns", "expected"),
    [
        pytest.param("a! | a!", [("a", 2, (1, 2))], id="end of one, start of the next"),
        pytest.param("b a! a! | a! a! b", [("a", 4, (1, 2))], id="runs on both sides"),
        pytest.param("a! | | a!", [("a", 2, (1, 3))], id="a turn without tools does not break"),
        pytest.param("a! | a! | a!", [("a", 3, (1, 2, 3))], id="three turns"),
        pytest.param("a! b | a!", [], id="the turn ended on another call"),
        pytest.param("a! | b a!", [], id="the next turn started with another call"),
        pytest.param("a! | a?", [], id="another error kind"),
        pytest.param("a | a", [], id="successes"),
        pytest.param("a! a! a!", [], id="one turn: an ordinary spiral, not across turns"),
        pytest.param("a! | a! b! | b!", [("a", 2, (1, 2)), ("b", 2, (2, 3))], id="two"),
    ],
)
def test_it_finds_failures_that_cross_a_turn(turns: str, expected: list) -> None:
    found = cross_turn_spirals(calls(turns))

    assert [(s.tool_name, s.attempts, s.turns) for s in found] == expected
    assert all(s.error_kind for s in found)


def test_it_numbers_turns_from_the_page_start() -> None:
    found = cross_turn_spirals(calls("a! | a!"), first_number=101)

    assert found[0].turns == (101, 102)
