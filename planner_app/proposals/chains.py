"""Workflow proposals: tool chains that recur in recorded traces, with their data flow.

A chain is calls of one trace, in order, each after the first taking a value of an
earlier one's output: an output's value (a whole field, a list item, an object) equal to
one of the call's arguments, or its text inside a string argument. Values that say
little (null, booleans, small whole numbers, strings under 3 characters) never link,
nor does an output value that only echoes the producer's own arguments. Only calls that
succeeded and that no planner or workflow chose count: a workflow's own runs would
otherwise propose it again. When the same tools in the same order recur in at least
MIN_SUPPORT traces, the chain becomes a workflow: an argument that takes the same
reference (`{$s1.date}`, or text around one, `"id: {$s1.result}"`) in at least half of
those traces holds that reference, any other argument the value it had most often (an
argument that varied and came from no output is listed as an input for the operator to
edit). A chain is proposed only when every step after the first keeps a reference, its
tools are in the registry and the definition passes validate_workflow (a reference whose
types do not fit is dropped first). Each trace is read up to MAX_CALLS calls and
MAX_CHAINS_PER_TRACE chains, each payload up to MAX_NODES values, and the data flow of
the MAX_EVALUATED most frequent chains is read from their newest FLOW_TRACES traces, so
big or dense traffic costs a bounded time.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from planner_app.proposals.candidates import Candidate
from planner_app.proposals.traffic import Call, Served
from planner_app.workflows.graph import (
    ProblemKind,
    WorkflowError,
    validate_workflow,
    workflow_from_json,
)
from tools_app.registry import ToolRegistry

MIN_SUPPORT = 3  # traces a chain must recur in
MIN_LENGTH, MAX_LENGTH = 2, 5  # steps of a proposed chain
MAX_CALLS = 40  # calls of one trace considered (the first ones)
MAX_CHAINS_PER_TRACE = 400  # chains enumerated in one trace
MAX_NODES = 200  # values read from one call's arguments or result
MAX_DEPTH = 6  # levels read into a payload
MAX_PROPOSED = 20
MAX_EVALUATED = 200  # recurring chains whose data flow is worked out, the most frequent first
FLOW_TRACES = 200  # a chain's newest traces its data flow is read from
MIN_TEXT = 3  # characters of a string that may link two calls
MIN_INTERPOLATED = 4  # characters of a string that may link from inside longer text
IGNORED_CHOOSERS = frozenset({"planner", "workflow"})
NAME_MAX = 100  # planner_app.models.Workflow.name

_KEY = re.compile(r"[A-Za-z0-9_-]+\Z")  # an object key a reference path can name
_REFERENCE_LIKE = re.compile(r"\{\$")
_TYPE_PROBLEMS = {ProblemKind.TYPE_MISMATCH, ProblemKind.UNKNOWN_OUTPUT_FIELD}

ArgPath = tuple[str | int, ...]


# Values -----------------------------------------------------------------------------------


def _normal(value: Any) -> Any:
    """Return the value with every number a float, so 5 and 5.0 compare equal."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, dict):
        return {str(key): _normal(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_normal(item) for item in value]
    return str(value)


def _canon(value: Any) -> str:
    """Return a text equal for two values exactly when they are the same JSON value."""
    if isinstance(value, str):  # the common cases without json.dumps, each its own prefix
        return "s" + value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f"n{float(value)!r}"
    return "j" + json.dumps(_normal(value), sort_keys=True, ensure_ascii=False, default=str)


def _distinctive(value: Any) -> bool:
    """Return whether a value says enough that seeing it again is no coincidence."""
    if value is None or isinstance(value, bool):
        return False
    if isinstance(value, int | float):
        return math.isfinite(value) and not (float(value).is_integer() and abs(value) < 10)
    if isinstance(value, str):
        return len(value.strip()) >= MIN_TEXT
    if isinstance(value, dict):
        return any(_distinctive(item) for item in value.values())
    if isinstance(value, list):
        return any(_distinctive(item) for item in value)
    return False


def _text_of(value: Any) -> str:
    """Return a value as a reference interpolates it into text (graph.resolve)."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _occurs_in(text: str, whole: str) -> bool:
    """Return whether `text` occurs in `whole` as a token, not inside a longer word or number."""
    return next(_token_starts(text, whole), None) is not None


def _token_starts(text: str, whole: str) -> Iterator[int]:
    """Yield where `text` starts in `whole` with no word character (or decimals) glued to it."""
    start = whole.find(text)
    while start >= 0:
        end = start + len(text)
        glued_before = _is_word(text[0]) and start > 0 and _is_word(whole[start - 1])
        glued_after = (
            _is_word(text[-1])
            and end < len(whole)
            and (_is_word(whole[end]) or whole[end] == "." and whole[end + 1 : end + 2].isdigit())
        )
        if not glued_before and not glued_after:
            yield start
        start = whole.find(text, start + 1)


def _replace_tokens(whole: str, text: str, reference: str) -> str:
    """Return `whole` with each token occurrence of `text` replaced by the reference."""
    parts, at = [], 0
    for start in _token_starts(text, whole):
        if start >= at:
            parts += [whole[at:start], reference]
            at = start + len(text)
    return "".join(parts) + whole[at:]


def _is_word(character: str) -> bool:
    # ASCII only: a number in Chinese text ("合计23.25元") stands apart as a token.
    return character.isascii() and (character.isalnum() or character == "_")


def _output_nodes(value: Any, path: str = "", depth: int = 0) -> Iterator[tuple[str, Any]]:
    """Yield (reference path, value) for the output and what it holds, depth first."""
    yield path, value
    if depth >= MAX_DEPTH:
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and _KEY.match(key):
                yield from _output_nodes(item, f"{path}.{key}" if path else key, depth + 1)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _output_nodes(item, f"{path}[{index}]", depth + 1)


def _argument_nodes(
    value: Any, path: ArgPath = (), depth: int = 0
) -> Iterator[tuple[ArgPath, Any]]:
    """Yield (path, value) for every value in the arguments but the arguments themselves."""
    if depth >= MAX_DEPTH:
        return
    items = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list)
        else ()
    )
    for key, item in items:
        yield (*path, key), item
        yield from _argument_nodes(item, (*path, key), depth + 1)


def _bounded(nodes: Iterator[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    result = []
    for node in nodes:
        if len(result) >= MAX_NODES:
            break
        result.append(node)
    return result


def _path_text(path: ArgPath) -> str:
    """Return an argument path as text: `items[0]`, `options.mode`."""
    text = ""
    for segment in path:
        text += f"[{segment}]" if isinstance(segment, int) else (f".{segment}" if text else segment)
    return text


def _reference(step_id: str, path: str) -> str:
    separator = "." if path and not path.startswith("[") else ""
    return f"{{${step_id}{separator}{path}}}"


# One call's data --------------------------------------------------------------------------


@dataclass
class _CallData:
    """A call's argument and output values, indexed for finding where values flow."""

    call: Call
    arguments: list[tuple[ArgPath, Any]]
    sources: dict[str, str]  # canonical value -> reference path, for distinctive outputs
    texts: list[tuple[str, str]]  # (text, reference path) that may appear inside a string
    canons: set[str]  # the canonical argument values
    strings: list[str]  # the string argument values
    joined: str  # the string argument values, joined by NUL: one search for a text in any

    @classmethod
    def of(cls, call: Call) -> _CallData:
        arguments = _bounded(_argument_nodes(call.arguments))
        canons = {_canon(value) for _, value in arguments}
        own = canons | {_canon(call.arguments)}
        sources: dict[str, str] = {}
        texts: list[tuple[str, str]] = []
        for path, value in _bounded(_output_nodes(call.result)):
            canon = _canon(value)
            if not _distinctive(value) or canon in own or canon in sources:
                continue  # the first (outermost) path names a value that appears twice
            sources[canon] = path
            text = _text_of(value)
            if not isinstance(value, str | dict | list) or len(text) >= MIN_INTERPOLATED:
                texts.append((text, path))
        texts.sort(key=lambda item: -len(item[0]))
        strings = [value for _, value in arguments if isinstance(value, str)]
        return cls(call, arguments, sources, texts, canons, strings, "\0".join(strings))


def _templates(value: Any, producers: list[tuple[str, _CallData]]) -> list[str]:
    """Return the references (or texts holding them) that would give this argument value.

    `producers` are the earlier steps, nearest first: a value two of them hold is taken
    from the nearest.
    """
    found: list[str] = []
    canon = _canon(value)
    for step_id, data in producers:
        path = data.sources.get(canon)
        if path is not None:
            found.append(_reference(step_id, path))
            break
    if isinstance(value, str) and not _REFERENCE_LIKE.search(value):
        found += _interpolations(value, producers)
    return found


def _interpolations(value: str, producers: list[tuple[str, _CallData]]) -> list[str]:
    """Return `value` with each output text found inside it replaced by its reference."""
    found, combined, placed = [], value, ""
    for step_id, data in producers:
        for text, path in data.texts:
            if text in value and text != value and _occurs_in(text, value):
                reference = _reference(step_id, path)
                found.append(_replace_tokens(value, text, reference))
                if text not in placed:  # never replace inside a reference put in already
                    combined = _replace_tokens(combined, text, reference)
                    placed += reference
    if combined != value and combined not in found:
        found.append(combined)
    return found


def _feeds(later: _CallData, earlier: _CallData) -> bool:
    """Return whether a value of the earlier call's output is in the later call's arguments."""
    if not later.canons.isdisjoint(earlier.sources):
        return True
    return any(
        text in value and text != value and _occurs_in(text, value)
        for text, _ in earlier.texts
        if text in later.joined
        for value in later.strings
    )


# Chains -----------------------------------------------------------------------------------


@dataclass
class _Occurrence:
    """Where a chain of tools appears in one trace: the trace and the chain's calls."""

    served: Served
    calls: list[_CallData]


def _chains_of(served: Served) -> dict[tuple[str, ...], _Occurrence]:
    """Return each chain in a trace (its first occurrence), keyed by its tools in order."""
    kept = [
        call
        for call in served.calls
        if call.ok
        and call.chosen_by not in IGNORED_CHOOSERS
        and isinstance(call.arguments, dict | None)
    ]
    calls = [_CallData.of(call) for call in kept[:MAX_CALLS]]
    feeds = {j: {i for i in range(j) if _feeds(calls[j], calls[i])} for j in range(len(calls))}
    found: dict[tuple[str, ...], _Occurrence] = {}
    stack = [[i] for i in reversed(range(len(calls))) if any(i in f for f in feeds.values())]
    enumerated = 0
    while stack and enumerated < MAX_CHAINS_PER_TRACE:
        chain = stack.pop()
        if len(chain) >= MIN_LENGTH:
            enumerated += 1
            tools = tuple(calls[i].call.tool for i in chain)
            found.setdefault(tools, _Occurrence(served, [calls[i] for i in chain]))
        if len(chain) < MAX_LENGTH:
            members = set(chain)
            for j in reversed(range(chain[-1] + 1, len(calls))):
                if feeds[j] & members:
                    stack.append([*chain, j])
    return found


def _is_part_of(short: tuple[str, ...], long: tuple[str, ...]) -> bool:
    """Return whether `short` is `long` with some tools left out."""
    rest = iter(long)
    return len(short) < len(long) and all(tool in rest for tool in short)


def recurring_chains(traffic: list[Served]) -> dict[tuple[str, ...], list[_Occurrence]]:
    """Return the chains that recur in at least MIN_SUPPORT traces, with where they occur."""
    seen: dict[tuple[str, ...], list[_Occurrence]] = defaultdict(list)
    for served in traffic:
        for tools, occurrence in _chains_of(served).items():
            seen[tools].append(occurrence)
    return {tools: found for tools, found in seen.items() if len(found) >= MIN_SUPPORT}


# Data flow --------------------------------------------------------------------------------


@dataclass
class _Slot:
    """One argument of one step across the traces: its values and the references seen."""

    step_id: str
    path: ArgPath
    values: list[Any] = field(default_factory=list)  # one per trace that has it
    templates: Counter[str] = field(default_factory=Counter)


@dataclass
class DataFlow:
    """A chain's workflow steps, and what the traces said about each argument."""

    steps: list[dict[str, Any]]
    links: list[dict[str, Any]]  # {"step", "argument", "reference", "held"}
    inputs: list[dict[str, Any]]  # arguments that varied and came from no output
    dropped: list[dict[str, Any]]  # references whose types do not fit, with the problem
    explained: int  # traces in which every link holds
    read: int  # traces read (the newest FLOW_TRACES)


def data_flow(
    tools: tuple[str, ...], found: list[_Occurrence], registry: ToolRegistry | None = None
) -> DataFlow:
    """Return the steps of a chain, each argument a reference where the traces agree on one."""
    ids = [f"s{number}" for number in range(1, len(tools) + 1)]
    found = sorted(found, key=lambda occurrence: occurrence.served.at, reverse=True)
    found, newest = found[:FLOW_TRACES], found[0]
    slots, per_trace = _slots(ids, found)
    chosen = _outermost(
        {key: reference for key, slot in slots.items() if (reference := _held(slot, len(found)))}
    )
    dropped: list[dict[str, Any]] = []
    if registry is not None:
        chosen, dropped = _fitting(ids, tools, newest, slots, chosen, registry)
    links = [
        {"step": step_id, "argument": _path_text(path), "reference": reference,
         "held": slots[(step_id, path)].templates[reference]}
        for (step_id, path), reference in chosen.items()
    ]  # fmt: skip
    explained = sum(
        all(reference in seen.get(key, ()) for key, reference in chosen.items())
        for seen in per_trace
    )
    steps = _steps(ids, tools, newest, slots, chosen)
    return DataFlow(steps, links, _inputs(slots, chosen), dropped, explained, len(found))


def _slots(
    ids: list[str], found: list[_Occurrence]
) -> tuple[dict[tuple[str, ArgPath], _Slot], list[dict[tuple[str, ArgPath], list[str]]]]:
    """Return every argument's values and references over the traces, and each trace's."""
    slots: dict[tuple[str, ArgPath], _Slot] = {}
    per_trace = []
    for occurrence in found:
        seen: dict[tuple[str, ArgPath], list[str]] = {}
        for position, data in enumerate(occurrence.calls):
            producers = [(ids[i], occurrence.calls[i]) for i in reversed(range(position))]
            for path, value in data.arguments:
                key = (ids[position], path)
                slot = slots.setdefault(key, _Slot(*key))
                slot.values.append(value)
                seen[key] = _templates(value, producers)
                slot.templates.update(set(seen[key]))
        per_trace.append(seen)
    return slots, per_trace


def _held(slot: _Slot, traces: int) -> str | None:
    """Return the reference an argument takes in at least half the traces (and two), if any."""
    if not slot.templates:
        return None
    # The most traces first; then the shortest text: a whole reference over interpolation.
    reference, count = max(slot.templates.items(), key=lambda item: (item[1], -len(item[0])))
    return reference if count >= 2 and 2 * count >= traces else None


def _outermost(chosen: dict[tuple[str, ArgPath], str]) -> dict[tuple[str, ArgPath], str]:
    """Return the chosen references but those inside an argument that is a reference itself."""
    return {
        (step_id, path): reference
        for (step_id, path), reference in chosen.items()
        if not any((step_id, path[:cut]) in chosen for cut in range(1, len(path)))
    }


def _fitting(
    ids: list[str],
    tools: tuple[str, ...],
    newest: _Occurrence,
    slots: dict[tuple[str, ArgPath], _Slot],
    chosen: dict[tuple[str, ArgPath], str],
    registry: ToolRegistry,
) -> tuple[dict[tuple[str, ArgPath], str], list[dict[str, Any]]]:
    """Return the references whose types fit, each checked alone, and those dropped."""
    kept, dropped = {}, []
    for key, reference in chosen.items():
        steps = _steps(ids, tools, newest, slots, {key: reference})
        problems = [
            problem
            for problem in _problems({"steps": steps}, "check", registry)
            if problem.kind in _TYPE_PROBLEMS
        ]
        if problems:
            dropped.append({"step": key[0], "argument": _path_text(key[1]),
                            "reference": reference, "problem": str(problems[0])})  # fmt: skip
        else:
            kept[key] = reference
    return kept, dropped


def _steps(
    ids: list[str],
    tools: tuple[str, ...],
    newest: _Occurrence,
    slots: dict[tuple[str, ArgPath], _Slot],
    chosen: dict[tuple[str, ArgPath], str],
) -> list[dict[str, Any]]:
    """Return the workflow's steps: the newest trace's arguments, references put in."""
    return [
        {"id": ids[i], "tool": tools[i],
         "arguments": _arguments(ids[i], data.call.arguments or {}, (), slots, chosen)}
        for i, data in enumerate(newest.calls)
    ]  # fmt: skip


def _arguments(
    step_id: str,
    value: Any,
    path: ArgPath,
    slots: dict[tuple[str, ArgPath], _Slot],
    chosen: dict[tuple[str, ArgPath], str],
) -> Any:
    """Return one argument: its reference, its parts, or the value it had most often."""
    if path and (step_id, path) in chosen:
        return chosen[(step_id, path)]
    if isinstance(value, dict):
        return {
            key: _arguments(step_id, item, (*path, key), slots, chosen)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [
            _arguments(step_id, item, (*path, index), slots, chosen)
            for index, item in enumerate(value)
        ]
    slot = slots.get((step_id, path))
    return _most_common(slot.values, value) if slot is not None else value


def _most_common(values: list[Any], newest: Any) -> Any:
    """Return the value seen most often, the newest one among equally common ones."""
    counts = Counter(_canon(value) for value in values)
    best = max(counts.values())
    if counts[_canon(newest)] == best:
        return newest
    return next(value for value in values if counts[_canon(value)] == best)


def _inputs(
    slots: dict[tuple[str, ArgPath], _Slot], chosen: dict[tuple[str, ArgPath], str]
) -> list[dict[str, Any]]:
    """Return the arguments that varied across the traces and hold no reference."""
    inputs = []
    for (step_id, path), slot in slots.items():
        covered = any((step_id, path[:cut]) in chosen for cut in range(1, len(path) + 1))
        if covered or isinstance(slot.values[0], dict | list):
            continue
        distinct = Counter(_canon(value) for value in slot.values)
        if len(distinct) > 1:
            value_of = {_canon(value): value for value in reversed(slot.values)}
            examples = [value_of[canon] for canon, _ in distinct.most_common(5)]
            inputs.append({"step": step_id, "argument": _path_text(path),
                           "distinct": len(distinct), "examples": examples})  # fmt: skip
    return inputs


# Proposals --------------------------------------------------------------------------------


def propose_workflows(traffic: list[Served], registry: ToolRegistry) -> list[Candidate]:
    """Return a workflow proposal per recurring chain whose data flow makes a valid workflow.

    Longer chains go first; a chain that is part of a proposed one seen as often is not
    proposed again, so a chain's parts come only when the whole is not a workflow or when
    they recur more often than it.
    """
    chains = sorted(
        recurring_chains(traffic).items(),
        key=lambda item: (-len(item[0]), -len(item[1]), item[0]),
    )
    proposed: dict[tuple[str, ...], Candidate] = {}
    for tools, found in _most_frequent(chains):
        if any(
            _is_part_of(tools, other) and candidate.backtest["traces"] >= len(found)
            for other, candidate in proposed.items()
        ):
            continue
        if all(tool in registry for tool in tools):
            candidate = _candidate(tools, found, registry)
            if candidate is not None:
                proposed[tools] = candidate
    ranked = sorted(proposed.items(), key=lambda item: (-item[1].backtest["traces"], -len(item[0])))
    return [candidate for _, candidate in ranked][:MAX_PROPOSED]


def _most_frequent(
    chains: list[tuple[tuple[str, ...], list[_Occurrence]]],
) -> list[tuple[tuple[str, ...], list[_Occurrence]]]:
    """Return the MAX_EVALUATED most frequent chains, in the order given."""
    kept = {id(item) for item in sorted(chains, key=lambda item: -len(item[1]))[:MAX_EVALUATED]}
    return [item for item in chains if id(item) in kept]


def workflow_name(tools: tuple[str, ...]) -> str:
    """Return the proposed workflow's name: its tools joined by '-', at most NAME_MAX long."""
    name = "-".join(re.sub(r"[^A-Za-z0-9_.]+", "_", tool) for tool in tools)
    if len(name) <= NAME_MAX:
        return name
    return f"{name[: NAME_MAX - 9]}-{_digest(tools)}"


def proposal_key(tools: tuple[str, ...]) -> str:
    """Return the proposal's key, `workflow:<tools joined by >>`, at most 300 characters."""
    key = "workflow:" + ">".join(tools)
    return key if len(key) <= 300 else f"{key[:291]}-{_digest(tools)}"


def _digest(tools: tuple[str, ...]) -> str:
    return hashlib.sha256(">".join(tools).encode()).hexdigest()[:8]


def _candidate(
    tools: tuple[str, ...], found: list[_Occurrence], registry: ToolRegistry
) -> Candidate | None:
    """Return the chain's proposal, or None when its data flow does not make a workflow."""
    flow = data_flow(tools, found, registry)
    linked = {link["step"] for link in flow.links}
    if any(step["id"] not in linked for step in flow.steps[1:]):
        return None  # a step whose input the traces do not agree on: no chain to propose
    definition = {"steps": flow.steps}
    name = workflow_name(tools)
    if _problems(definition, name, registry) or _reference_like_constants(flow.steps, flow.links):
        return None
    evidence = sorted((o.served for o in found), key=lambda s: s.at, reverse=True)
    backtest = {
        "traces": len(found),
        "explained": flow.explained,
        **({"read": flow.read} if flow.read < len(found) else {}),
        "links": flow.links,
        "inputs": flow.inputs,
        "dropped": flow.dropped,
        "problems": [item["problem"] for item in flow.dropped],
    }
    return Candidate(
        kind="workflow",
        key=proposal_key(tools),
        title=f"New workflow: {' → '.join(tools)}",
        target=name,
        why=_why(tools, len(found), flow),
        evidence=evidence,  # all of it: the store keeps EVIDENCE_SHOWN and counts the rest
        workflow=definition,
        backtest=backtest,
    )


def _problems(definition: dict[str, Any], name: str, registry: ToolRegistry) -> list[Any]:
    try:
        return validate_workflow(workflow_from_json({**definition, "name": name}), registry)
    except WorkflowError as exc:
        return list(exc.problems)


def _reference_like_constants(
    steps: list[dict[str, Any]], links: list[dict[str, Any]]
) -> list[str]:
    """Return where a recorded value would read as a reference that no link put there."""
    placed = {(link["step"], link["argument"]) for link in links}
    found = []
    for step in steps:
        for where, value in _argument_nodes(step["arguments"]):
            covered = any(
                (step["id"], _path_text(where[:cut])) in placed for cut in range(1, len(where) + 1)
            )
            if not covered and isinstance(value, str) and _REFERENCE_LIKE.search(value):
                found.append(f"{step['id']}.{_path_text(where)}")
    return found


def _why(tools: tuple[str, ...], traces: int, flow: DataFlow) -> str:
    """Return why the workflow is proposed, in a sentence or three."""
    why = (
        f"{' → '.join(tools)} ran in this order in {traces} traces, each step taking an "
        f"earlier one's output; the data flow below holds in {flow.explained} of "
        + (f"the newest {flow.read} of them." if flow.read < traces else "them.")
    )
    if flow.inputs:
        names = ", ".join(f"{item['step']}.{item['argument']}" for item in flow.inputs)
        why += (
            f" Varied from trace to trace and came from no earlier step: {names}; each holds "
            "its most common recorded value: edit it before saving."
        )
    return why
