"""The built-in `recall` tool: an earlier tool result of the agent's own session, found again.

The token budget (token_budget.py) keeps the prompt small by sending the model a cut form
of a long output; the full result stays in the trace store. `recall` lets the model fetch
it back, by the call's id (the cut output names it) or by a query ranked with TF-IDF over
the session's earlier results: their tool names, arguments and result text. A result is
split into parts (a list's items, or a text's paragraphs), so a query finds the one item
the cut left out, and a long result comes back part by part (`offset`), each answer sized
to what the budget allows now.

Only the agent's own results are read: the same agent, in the same session (in the same
trace when the task has no session). An id of another session or agent is answered as
unknown, so recall never says what other conversations hold. No Django here: the loop
gets the trace store's reads as a RecallStore (session_results.py is the site's).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from tools_app.formatting import estimate_tokens, format_error
from tools_app.specs import ErrorKind, ToolCall, ToolError, ToolFailure, ToolResult, ToolSpec
from tools_app.validation import ArgumentsError, validate_arguments

logger = logging.getLogger(__name__)

RECALL_TOOL = "recall"
MAX_MATCHES = 3  # parts a query returns at most
PART_TOKENS = 150  # a text is split into parts of about this size
SEARCHED_RESULTS = 100  # a query searches the session's newest results, at most this many
TRUNCATED_KEY = "__truncated__"  # how the trace store marks a payload it had to cut
WORD = re.compile(r"(?u)\b\w\w+\b")  # a word as TfidfVectorizer's default tokenizer sees one

PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "call_id": {
            "type": "string",
            "minLength": 1,
            "maxLength": 200,
            "description": "The id of an earlier tool call of this conversation, as a cut "
            "output names it: returns that call's full result, part by part.",
        },
        "query": {
            "type": "string",
            "minLength": 1,
            "maxLength": 500,
            "description": "Words to look for in this conversation's earlier tool results: "
            "returns the best matching parts. With call_id: only in that call's result.",
        },
        "offset": {
            "type": "integer",
            "minimum": 0,
            "description": "With call_id: skip this many parts (as the last answer says).",
        },
    },
    "additionalProperties": False,
}
DESCRIPTION = (
    "Fetch again an earlier tool result of this conversation that was cut to save tokens: "
    "by its call id, or by words to look for. Give call_id, query, or both."
)
HOW_TO_RECALL = (
    '[the full output is kept: call recall with call_id "{call_id}" for the rest, '
    "or with a query for the part you need]"
)


@dataclass(frozen=True)
class EarlierResult:
    """One earlier tool call as the trace store holds it."""

    call_id: str
    tool: str
    arguments: Any
    result: Any  # the full result as recorded (bounded by ARES_PAYLOAD_MAX_BYTES)
    ok: bool
    error: str
    trace_id: str
    started_at: datetime


@dataclass(frozen=True)
class RecallScope:
    """Whose results recall may read: the task's agent, its session (or its trace)."""

    agent: str
    session_id: str
    trace_id: str


class RecallStore(Protocol):
    """The trace store's reads recall needs; each returns newest first, own results only."""

    def with_call_id(self, scope: RecallScope, call_id: str) -> list[EarlierResult]: ...

    def searchable(self, scope: RecallScope, limit: int) -> list[EarlierResult]: ...


def recall_spec() -> ToolSpec:
    """Return the recall tool's contract, as the model is shown it."""
    return ToolSpec(RECALL_TOOL, DESCRIPTION, PARAMETERS, _not_in_a_task, ran_on="builtin")


def recall_hint(call_id: str) -> str:
    """Return what a cut output adds: that recall can fetch the rest, by this call id."""
    return HOW_TO_RECALL.format(call_id=call_id)


def run_recall(
    store: RecallStore, scope: RecallScope, call: ToolCall, allowance: int
) -> ToolResult:
    """Answer one recall call from the store, within `allowance` tokens; never raises."""
    try:
        arguments = validate_arguments(PARAMETERS, call.arguments).arguments
    except ArgumentsError as exc:
        error = ToolError(ErrorKind.INVALID_ARGUMENTS, "invalid arguments", tuple(exc.problems))
        return _failed(call, error)
    call_id, query = arguments.get("call_id", ""), arguments.get("query", "").strip()
    if not call_id and not query:
        message = "give call_id (an earlier call's id) or query (words to look for), or both"
        return _failed(call, ToolError(ErrorKind.INVALID_ARGUMENTS, message))
    try:
        if call_id:
            offset = arguments.get("offset", 0)
            return _by_call_id(store, scope, call, call_id, query, offset, allowance)
        return _by_query(store, scope, call, query, allowance)
    except Exception as exc:  # the store is a database: its failure is this call's, not the task's
        logger.warning("recall %r failed: %r", call.arguments, exc, exc_info=True)
        return _failed(call, ToolError(ErrorKind.TOOL_ERROR, f"{type(exc).__name__}: {exc}"))


def refused_recall(call: ToolCall, agent: str) -> ToolResult:
    """Return the answer to a recall call of an agent whose allow-list leaves it out."""
    message = f"{agent or 'this agent'} is not allowed to call {RECALL_TOOL!r}"
    return _failed(call, ToolError(ErrorKind.PERMISSION_DENIED, message))


def recall_span_fields(call: ToolCall, result: ToolResult) -> dict[str, Any]:
    """Return the fields of a recall call's tool span, as the engine records any tool's."""
    fields = {
        "tool_name": RECALL_TOOL,
        "tool_call_id": "".join(ch if ch.isprintable() else "?" for ch in call.id)[:200],
        "chosen_by": "llm",
        "ran_on": "builtin",
        "arguments": call.arguments,
        "result": result.data,
        "status": "ok" if result.success else "error",
        "result_tokens": estimate_tokens(result.text),
    }
    if result.error is not None:
        fields.update(error_kind=str(result.error.kind), error_message=result.text)
    return fields


# By call id ---------------------------------------------------------------------------


def _by_call_id(
    store: RecallStore,
    scope: RecallScope,
    call: ToolCall,
    call_id: str,
    query: str,
    offset: int,
    allowance: int,
) -> ToolResult:
    found = store.with_call_id(scope, call_id)
    if not found:
        return _failed(call, ToolError(ErrorKind.NOT_FOUND, _unknown_id(scope, call_id)))
    earlier = found[0]  # the newest, when a model reused an id in another turn
    parts = result_parts(earlier)
    if query:
        order = _ranked(query, [_searchable_text(earlier, part) for part in parts])
        chosen = order[:MAX_MATCHES]
        if not chosen:
            note = f"nothing in this result matches {query!r}; recall without a query reads it all"
            return _succeeded(call, earlier, [], note, {"matches": 0})
        return _succeeded(call, earlier, *_fit_parts(parts, chosen, allowance, earlier, False))
    if offset >= len(parts):
        message = f"offset {offset} is past the end: call {call_id!r} has {len(parts)} part(s)"
        return _failed(call, ToolError(ErrorKind.INVALID_ARGUMENTS, message))
    following = range(offset, len(parts))
    return _succeeded(call, earlier, *_fit_parts(parts, following, allowance, earlier, True))


def _unknown_id(scope: RecallScope, call_id: str) -> str:
    where = f"session {scope.session_id!r}" if scope.session_id else "this task"
    return (
        f"no earlier tool call with id {call_id!r} in {where} of agent {scope.agent!r}; recall "
        "reads only this conversation's own results: use an id an earlier tool message "
        "names, or call recall with a query instead"
    )


# By query -----------------------------------------------------------------------------


def _by_query(
    store: RecallStore, scope: RecallScope, call: ToolCall, query: str, allowance: int
) -> ToolResult:
    results = store.searchable(scope, SEARCHED_RESULTS)
    candidates = [(earlier, index, part) for earlier in results
                  for index, part in enumerate(result_parts(earlier))]  # fmt: skip
    texts = [_searchable_text(earlier, part) for earlier, _, part in candidates]
    best = _ranked(query, texts)[:MAX_MATCHES]
    matches = [candidates[i] for i in best]
    room = max(1, (allowance - 40) // max(1, len(matches)))
    shown = [
        {
            "call_id": earlier.call_id,
            "tool": earlier.tool,
            "arguments": earlier.arguments,
            "part": index + 1,
            "parts": len(result_parts(earlier)),
            "text": _cut(part, room),
        }
        for earlier, index, part in matches
    ]
    data = {"query": query, "searched_results": len(results), "matches": shown}
    if not shown:
        what = "has no earlier tool results yet" if not results else "has nothing matching"
        text = f"recall: this conversation {what} {query!r} ({len(results)} results searched)"
        return ToolResult(call.id, RECALL_TOOL, True, data=data, text=text)
    lines = [f"recall: the best matches for {query!r} in this conversation's earlier results:"]
    lines += [
        f"- {m['tool']} call {m['call_id']} ({_compact(m['arguments'])}), "
        f"part {m['part']}/{m['parts']}: {m['text']}"
        for m in shown
    ]
    return ToolResult(call.id, RECALL_TOOL, True, data=data, text="\n".join(lines))


def _ranked(query: str, texts: Sequence[str]) -> list[int]:
    """Return the indexes of the texts matching the query, best first (ties: earlier first).

    Only the texts containing one of the query's words are weighed (their TF-IDF against
    the query's): the others score 0 anyway, and tokenising every part of 200 results of
    15 KB took over a second here.
    """
    words = {word.lower() for word in WORD.findall(query)}
    if not words:
        return []
    candidates = [i for i, text in enumerate(texts) if any(w in text.lower() for w in words)]
    if not candidates:
        return []
    # Imported here: scikit-learn costs ~90 MB, and only agents that recall need it.
    from sklearn.feature_extraction.text import TfidfVectorizer

    vectorizer = TfidfVectorizer(sublinear_tf=True)
    matrix = vectorizer.fit_transform([*(texts[i] for i in candidates), query])
    scores = (matrix[:-1] @ matrix[-1].T).toarray().ravel()  # rows are L2-normalised
    order = sorted(range(len(candidates)), key=lambda n: (-scores[n], candidates[n]))
    return [candidates[n] for n in order if scores[n] > 0]


# Parts of a result ---------------------------------------------------------------------


def result_parts(earlier: EarlierResult) -> list[str]:
    """Return the result as parts: a list's items, else its text in paragraphs of ~150 tokens."""
    if not earlier.ok:
        return [earlier.error or "the call failed"]
    data = earlier.result
    if isinstance(data, dict) and data.get(TRUNCATED_KEY):
        note = f"[stored cut: the result had {data.get('original_bytes', '?')} bytes] "
        return _text_parts(note + str(data.get("preview", "")))
    items = _items(data)
    if items is not None:
        return [_compact(item) for item in items] or ["[]"]
    return _text_parts(data if isinstance(data, str) else _compact(data))


def _items(data: Any) -> list | None:
    """Return the list in a result (itself, or its first list value), as the budget cuts it."""
    if isinstance(data, list):
        return data
    if isinstance(data, dict):
        return next((value for value in data.values() if isinstance(value, list)), None)
    return None


def _text_parts(text: str) -> list[str]:
    """Split text at line ends into parts of about PART_TOKENS tokens (long lines are cut)."""
    limit, parts, current = PART_TOKENS * 4, [], ""
    for line in text.splitlines() or [""]:
        while len(line) > limit:
            if current:
                parts.append(current)
                current = ""
            parts.append(line[:limit])
            line = line[limit:]
        if current and len(current) + len(line) + 1 > limit:
            parts.append(current)
            current = ""
        current = f"{current}\n{line}" if current else line
    if current or not parts:
        parts.append(current)
    return parts


def _searchable_text(earlier: EarlierResult, part: str) -> str:
    return f"{earlier.tool} {_compact(earlier.arguments)} {part}"


# Answers -------------------------------------------------------------------------------


def _fit_parts(
    parts: list[str],
    indexes: Sequence[int],
    allowance: int,
    earlier: EarlierResult,
    in_order: bool,
) -> tuple[list[dict[str, Any]], str, dict[str, Any]]:
    """Return the parts (in the order given) that fit in the allowance, a footer, the counts.

    `in_order`: the parts from an offset on, so the footer says where the rest starts.
    """
    room = max(1, allowance - estimate_tokens(_header(earlier)) - 40)
    shown: list[dict[str, Any]] = []
    for index in indexes:
        text = f"[{index + 1}/{len(parts)}] {parts[index]}"
        if shown and estimate_tokens(text) > room:
            break
        shown.append({"part": index + 1, "text": _cut(parts[index], room)})
        room -= estimate_tokens(text) + 1
        if room <= 0:
            break
    last = shown[-1]["part"]  # parts are 1-based; the next offset is the last part shown
    rest = len(parts) - last if in_order else 0
    footer = (
        f"[parts {shown[0]['part']}-{last} of {len(parts)}; recall with call_id "
        f'"{earlier.call_id}" and offset {last} for the rest]'
        if rest
        else f"[{len(shown)} of {len(parts)} part(s) shown]"
    )
    return shown, footer, {"parts": len(parts), "next_offset": last if rest else None}


def _succeeded(
    call: ToolCall,
    earlier: EarlierResult,
    shown: list[dict[str, Any]],
    footer: str,
    counts: dict[str, Any],
) -> ToolResult:
    data = {
        "call_id": earlier.call_id,
        "tool": earlier.tool,
        "arguments": earlier.arguments,
        "trace_id": earlier.trace_id,
        "called_at": earlier.started_at.isoformat(),
        "ok": earlier.ok,
        "shown": shown,
        **counts,
    }
    body = [f"[{part['part']}/{counts.get('parts', '?')}] {part['text']}" for part in shown]
    text = "\n".join([_header(earlier), *body, footer])
    return ToolResult(call.id, RECALL_TOOL, True, data=data, text=text)


def _header(earlier: EarlierResult) -> str:
    outcome = "returned" if earlier.ok else "failed"
    return (
        f"recall: {earlier.tool} call {earlier.call_id} ({_compact(earlier.arguments)}) "
        f"{outcome}, at {earlier.started_at:%Y-%m-%d %H:%M:%S}:"
    )


def _failed(call: ToolCall, error: ToolError) -> ToolResult:
    return ToolResult(call.id, RECALL_TOOL, False, error=error,
                      text=format_error(RECALL_TOOL, error))  # fmt: skip


def _cut(text: str, tokens: int) -> str:
    limit = max(40, tokens * 4)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _compact(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def _not_in_a_task(**arguments: Any) -> Any:
    """Stand in for recall outside an agent task, where there is no session to read."""
    raise ToolFailure("recall works only inside an agent task", ErrorKind.UNAVAILABLE)
