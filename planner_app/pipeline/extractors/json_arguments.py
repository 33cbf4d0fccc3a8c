"""Read json_tools' arguments: a JSON document in the request and what to do with it. No Django."""

from __future__ import annotations

import re
from typing import Any

from planner_app.pipeline.extractors.request_text import (
    Extraction,
    english_words,
    found_arguments,
    ignoring_case,
    needs_llm,
)

_VALIDATE = ignoring_case(
    english_words(r"valid|validate|validity|check|verify|lint|correct|well[-\s]formed|parse|parses")
    + "|合法|有效|校验|验证|检查|正确"
)
_PRETTY = ignoring_case(
    english_words(r"pretty|prettify|pretty-print|beautify|indent|indented|reformat|readable")
    + "|美化|格式化|缩进|排版"
)
_FORMAT = ignoring_case(english_words(r"format|formatted"))
_MINIFY = ignoring_case(
    english_words(r"minify|minified|compact|compress|one\s+line|single\s+line") + "|压缩|一行"
)
_POINTER = re.compile(r"(?<![\w/])(/[A-Za-z0-9_~.\-]+(?:/[A-Za-z0-9_~.\-]+)*)")
_QUERY = ignoring_case(
    english_words(r"get|extract|read|value|field|query|lookup|look\s+up")
    + "|取出|提取|获取|读取|字段|值"
)
_INDENT = ignoring_case(
    r"indent(?:ation)?(?:\s+(?:of|by|with|=|:))?\s*(?P<a>[0-9])|(?P<b>[0-9])\s*[- ]?spaces?"
    r"|缩进\s*(?P<c>[0-9])"
)
_SORT_KEYS = ignoring_case(
    english_words(r"sort(?:ed)?\s+(?:the\s+)?keys|keys\s+sorted") + "|键排序|排序键"
)


def json_document(request: str) -> tuple[str, str] | None:
    """Return (the JSON document's text, the request around it), or None if there is none."""
    starts = [index for index in (request.find("{"), request.find("[")) if index >= 0]
    if not starts:
        return None
    start = min(starts)
    end = request.rfind("}" if request[start] == "{" else "]")
    if end <= start:
        return None
    return request[start : end + 1], f"{request[:start]} {request[end + 1 :]}"


def _pretty_options(around: str) -> dict[str, Any]:
    options: dict[str, Any] = {}
    indent = _INDENT.search(around)
    if indent:
        options["indent"] = int(indent["a"] or indent["b"] or indent["c"])
    if _SORT_KEYS.search(around):
        options["sort_keys"] = True
    return options


def extract_json(request: str) -> Extraction:
    """Return json_tools' operation and the JSON document of the request."""
    found = json_document(request)
    if found is None:
        return needs_llm("no JSON document in the request")
    document, around = found
    validate, pretty = _VALIDATE.search(around), _PRETTY.search(around)
    if validate and pretty:
        return needs_llm(f"two operations named ({validate[0]!r} and {pretty[0]!r})")
    if validate:
        return found_arguments(
            {"operation": "validate", "text": document}, "validate the JSON document"
        )
    if _MINIFY.search(around):
        arguments = {"operation": "pretty_print", "text": document, "indent": 0}
        return found_arguments(arguments, "one compact line: pretty_print with indent 0")
    if pretty or _FORMAT.search(around):
        arguments = {"operation": "pretty_print", "text": document, **_pretty_options(around)}
        return found_arguments(arguments, "pretty-print the JSON document")
    pointer = _POINTER.search(around)
    if pointer and _QUERY.search(around):
        arguments = {"operation": "query", "text": document, "pointer": pointer[1]}
        return found_arguments(arguments, f"read the value at {pointer[1]}")
    return needs_llm("a JSON document but no operation named (validate, pretty-print, query)")
