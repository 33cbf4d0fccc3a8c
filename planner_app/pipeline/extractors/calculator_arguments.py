"""Read the calculator's expression from a request, in three stages.

1. whole-request patterns (calculator_patterns.py), each using every number in the request
   and no other, and refusals for maths the calculator does not do;
2. rewrites into calculator syntax (calculator_rewrites.py);
3. here: the one arithmetic span of the rewritten text, which must parse in the calculator's
   language, with no other number and no operation word left outside it: anything left
   over means the request says more than the expression would, and the LLM must read it.
"""

from __future__ import annotations

import re

from planner_app.pipeline.extractors.calculator_patterns import (
    CALCULATOR_PATTERNS,
    parsed_calculation,
)
from planner_app.pipeline.extractors.calculator_rewrites import calculator_syntax
from planner_app.pipeline.extractors.request_numbers import HAS_DIGIT, normalise
from planner_app.pipeline.extractors.request_text import (
    Extraction,
    english_words,
    ignoring_case,
    needs_llm,
)
from tools_app.builtins.calculator import CONSTANTS, FUNCTIONS

_NAMES = "|".join(sorted([function.name for function in FUNCTIONS.values()] + list(CONSTANTS)))
_SPAN = ignoring_case(rf"(?:(?<![A-Za-z])(?:{_NAMES})(?![A-Za-z])|[0-9.+\-*/%^(),\s])+")
_HAS_OPERATION = ignoring_case(r"[0-9.)a-z]\s*[-+*/%^]|[a-z]\s*\(")
_OPERATION_WORDS = ignoring_case(
    english_words(
        r"plus|minus|times|divided|multiplied|multiply|divide|add|subtract|power|squared?|"
        r"cubed?|root|sqrt|factorial|log|logarithm|ln|sin|cos|tan|sine|cosine|tangent|mean|"
        r"average|median|variance|deviation|sum|total|product|difference|quotient|percent|"
        r"mod|modulo|remainder|gcd|lcm|prime|half|double|twice"
    )
    + "|加|减|乘|除|次方|次幂|平方|立方|根号|阶乘|对数|平均|余数|倍|方差|标准差|中位数|公约数"
    + "|公倍数|质数|素数|百分之|开方|正弦|余弦|正切|绝对值|再|然后|"
    + english_words("then")
)


_SPACE_BY_OPERATOR = re.compile(r"\s*([-+*/%^(),])\s*")


def _trimmed(span: str) -> str:
    """Return a span without sentence punctuation around it or spaces beside operators.

    Spaces between two numbers stay: "1 2" must fail to parse, not become 12.
    """
    expression = _SPACE_BY_OPERATOR.sub(r"\1", span.strip(" \t\n,."))
    if expression.count("(") > expression.count(")") and expression.startswith("("):
        expression = expression[1:].strip()
    if expression.count(")") > expression.count("(") and expression.endswith(")"):
        expression = expression[:-1].strip()
    return _without_outer_parentheses(expression)


def _without_outer_parentheses(expression: str) -> str:
    """Return "(3+5)" as "3+5"; leave "(3+4)*(5)" alone."""
    while expression.startswith("(") and expression.endswith(")"):
        depth = 0
        for index, char in enumerate(expression):
            depth += {"(": 1, ")": -1}.get(char, 0)
            if depth == 0 and index < len(expression) - 1:
                return expression
        expression = expression[1:-1].strip()
    return expression


def _list_parts(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """Return a span cut at its commas outside parentheses: the items of a list.

    Thousands separators are gone by now (the rewrite), and the calculator takes a comma
    only between a function's arguments, so "3, 4" or "3,4" here are two numbers, never
    one written "3,4".
    """
    parts, depth, part_start = [], 0, start
    for index in range(start, end):
        char = text[index]
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth <= 0:
            parts.append((part_start, index))
            part_start = index + 1
    return [*parts, (part_start, end)]


def _spans(text: str) -> list[tuple[int, int]]:
    """Return where the text holds arithmetic: runs of numbers and operators, lists cut."""
    return [
        (start, end)
        for match in _SPAN.finditer(text)
        for start, end in _list_parts(text, *match.span())
        if HAS_DIGIT.search(text, start, end)
    ]


def _expression_in(text: str, applied: list[str]) -> Extraction:
    """Return the request's one arithmetic expression, or why there is none to trust."""
    where = _spans(text)
    spans = [text[start:end] for start, end in where]
    if not spans:
        return needs_llm("no number found in the request")
    outside = text
    for start, end in reversed(where):  # from the end, so earlier positions stay valid
        outside = f"{outside[:start]} {outside[end:]}"
    leftover = _OPERATION_WORDS.search(outside)
    if leftover:
        place = f"the expression {_trimmed(spans[0])}" if len(spans) == 1 else "any expression"
        return needs_llm(f"{leftover[0]!r} is left outside {place}")
    if len(spans) > 1:
        parts = ", ".join(repr(_trimmed(span)) for span in spans[:4])
        more = f" and {len(spans) - 4} more" if len(spans) > 4 else ""
        return needs_llm(f"numbers in several places ({parts}{more}), not one expression")
    expression = _trimmed(spans[0])
    if not _HAS_OPERATION.search(expression):
        return needs_llm(f"only the number {expression}, no operation on it")
    how = f"read {', '.join(applied)}" if applied else "an arithmetic expression"
    return parsed_calculation(expression, f"{how} -> {expression}")


def extract_calculation(request: str) -> Extraction:
    """Return the calculator's expression for an English or Chinese request."""
    text = normalise(request)
    for pattern in CALCULATOR_PATTERNS:
        match = pattern.regex.search(text)
        if match:
            found = pattern.read(match, text)
            if found is not None:
                return found
    return _expression_in(*calculator_syntax(text))
