"""The token budget of one agent task: how much tool output may go back to the model.

The budget bounds the task's context: the tool output fed back may fill at most a share
of it (30 % of 8,000 tokens by default), one output at most `per_output_max`, and once
a call's prompt and answer reach 90 % of it, the next call is the last, without tools.
An output that does not fit is reduced, never silently cut: a list of results keeps its
top items, text keeps its head, and either way a marker says what was left out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tools_app.formatting import estimate_tokens, format_result, truncate
from tools_app.specs import ToolResult

TOP_ITEMS = 3
MIN_USEFUL_TOKENS = 30  # below this, a cut output says nothing: leave it out, say so


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

    def fit(self, result: ToolResult) -> tuple[str, bool]:
        """Return the result's text as it may go back to the model, and whether it was cut."""
        text, allowance = result.text, self.allowance()
        tokens = estimate_tokens(text)
        if tokens > allowance:
            if allowance < MIN_USEFUL_TOKENS:
                text = (
                    f"[{result.tool} output left out: this task's tool-output budget of "
                    f"{self.tool_cap} tokens is spent ({tokens} tokens not shown)]"
                )
            else:
                text = _reduced(result, allowance)
        self.tool_tokens += estimate_tokens(text)
        return text, text != result.text


def _reduced(result: ToolResult, allowance: int) -> str:
    """Return the result within `allowance` tokens: top items of a list, else the head."""
    items_key, items = _result_list(result.data) if result.success else (None, None)
    if items is not None and len(items) > TOP_ITEMS:
        marker = f" [reduced to the top {TOP_ITEMS} of {len(items)} results for the token budget]"
        data = (
            items[:TOP_ITEMS]
            if items_key is None
            else {**result.data, items_key: items[:TOP_ITEMS]}
        )
        room = allowance - estimate_tokens(marker)
        return truncate(format_result(result.tool, data, max_tokens=room), room) + marker
    return truncate(result.text, allowance)


def _result_list(data: Any) -> tuple[str | None, list | None]:
    """Return the list of results in data (itself, or its first list value) with its key."""
    if isinstance(data, list):
        return None, data
    if isinstance(data, dict):
        for key, value in data.items():
            if isinstance(value, list):
                return key, value
    return None, None
