"""The token budget of one agent task: how much tool output may go back to the model.

The budget bounds the task's context: the tool output fed back may fill at most a share
of it (30 % of 8,000 tokens by default), one output at most `per_output_max`, and once
a call's prompt and answer reach 90 % of it, the next call is the last, without tools.
An output that does not fit is reduced, never silently cut: a list of results keeps its
top items, text keeps its head, and either way a marker says what was left out.
`fit` says how it cut (truncated, compressed or omitted: traces_app.models.ResultReduction)
and how many tokens it dropped, so the tool's span can record it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from tools_app.formatting import estimate_tokens, format_result, truncate
from tools_app.specs import ToolResult

TOP_ITEMS = 3
MIN_USEFUL_TOKENS = 30  # below this, a cut output says nothing: leave it out, say so

# How an output was cut: the values of traces_app.models.ResultReduction.
TRUNCATED, COMPRESSED, OMITTED = "truncated", "compressed", "omitted"


@dataclass(frozen=True)
class FittedOutput:
    """A tool output as it goes back to the model, and what the budget did to it."""

    text: str
    reduction: str = ""  # "" when it fit, else TRUNCATED, COMPRESSED or OMITTED
    tokens_dropped: int = 0  # the output's tokens minus the tokens sent back

    @property
    def cut(self) -> bool:
        return bool(self.reduction)

    def __iter__(self) -> Iterator[Any]:
        """Unpack as (text, cut), as fit returned before it said how it cut."""
        return iter((self.text, self.cut))


@dataclass
class TokenBudget:
    max_tokens: int = 8000
    tool_share: float = 0.3
    per_output_max: int = 1000
    exhausted_at: float = 0.9
    tool_tokens: int = 0  # tool output fed back so far
    context_tokens: int = 0  # the latest LLM call's prompt and answer

    @property
    def tool_cap(self) -> int:
        return int(self.max_tokens * self.tool_share)

    @property
    def is_exhausted(self) -> bool:
        return self.context_tokens >= self.exhausted_at * self.max_tokens

    def allowance(self) -> int:
        """Return the tokens the next tool output may take."""
        return max(0, min(self.per_output_max, self.tool_cap - self.tool_tokens))

    def record_call(self, input_tokens: int, output_tokens: int) -> None:
        self.context_tokens = input_tokens + output_tokens

    def fit(self, result: ToolResult) -> FittedOutput:
        """Return the result's text as it may go back to the model, and how it was cut."""
        text, allowance = result.text, self.allowance()
        tokens = estimate_tokens(text)
        if tokens <= allowance:
            self.tool_tokens += tokens
            return FittedOutput(text)
        if allowance < MIN_USEFUL_TOKENS:
            text = (
                f"[{result.tool} output left out: this task's tool-output budget of "
                f"{self.tool_cap} tokens is spent ({tokens} tokens not shown)]"
            )
            fitted = FittedOutput(text, OMITTED, tokens)
        else:
            text, reduction = _reduced(result, allowance)
            if text == result.text:  # within the characters allowed after all
                reduction = ""
            fitted = FittedOutput(text, reduction, max(0, tokens - estimate_tokens(text)))
        self.tool_tokens += estimate_tokens(text)
        return fitted


def _reduced(result: ToolResult, allowance: int) -> tuple[str, str]:
    """Return the result within `allowance` tokens (top items of a list, else the head), and how."""
    items_key, items = _result_list(result.data) if result.success else (None, None)
    if items is not None and len(items) > TOP_ITEMS:
        marker = f" [reduced to the top {TOP_ITEMS} of {len(items)} results for the token budget]"
        data = (
            items[:TOP_ITEMS]
            if items_key is None
            else {**result.data, items_key: items[:TOP_ITEMS]}
        )
        room = allowance - estimate_tokens(marker)
        text = truncate(format_result(result.tool, data, max_tokens=room), room) + marker
        return text, COMPRESSED
    return truncate(result.text, allowance), TRUNCATED


def _result_list(data: Any) -> tuple[str | None, list | None]:
    """Return the list of results in data (itself, or its first list value) with its key."""
    if isinstance(data, list):
        return None, data
    if isinstance(data, dict):
        for key, value in data.items():
            if isinstance(value, list):
                return key, value
    return None, None
