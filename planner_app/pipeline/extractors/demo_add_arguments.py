"""Read the demo MCP server's add tool's arguments: a request that is exactly a + b. No Django."""

from __future__ import annotations

from planner_app.pipeline.extractors.calculator_arguments import extract_calculation
from planner_app.pipeline.extractors.request_text import Extraction, found_arguments, needs_llm
from tools_app.builtins.calculator import Call, Chain, Literal, Negate, Node, Range, parse


def _integer(node: Node | Range) -> int | None:
    """Return the integer a literal (or a negated literal) stands for, else None."""
    if isinstance(node, Negate):
        value = _integer(node.operand)
        return None if value is None else -value
    if isinstance(node, Literal) and isinstance(node.value, int):
        return node.value
    return None


def extract_two_integer_sum(request: str) -> Extraction:
    """Return {a, b} for a tool that adds two integers, when the request is exactly a + b.

    The request is read as the calculator reads it, so every wording it knows ("2 plus 3",
    "add 2 to 40", "1,250 + 370", "加") works; anything but the sum of two whole numbers
    ("sum of 1 to 100", "7 + 8 + 9", "2.5 + 1") is refused, and the planner moves on to
    the next candidate, which can do more.
    """
    calculation = extract_calculation(request)
    if calculation.needs_llm:
        return calculation
    expression = calculation.arguments["expression"]
    tree = parse(expression)
    terms: list[Node | Range] = []
    if isinstance(tree, Chain) and len(tree.rest) == 1 and tree.rest[0][0] == "+":
        terms = [tree.first, tree.rest[0][2]]
    elif isinstance(tree, Call) and tree.function.name == "sum":
        terms = list(tree.arguments)  # "sum of 2 and 3" reads as sum(2,3)
    integers = [_integer(term) for term in terms]
    if len(integers) != 2 or None in integers:
        return needs_llm(f"{expression} is not the sum of two whole numbers, all this tool adds")
    a, b = integers
    return found_arguments({"a": a, "b": b}, f"{calculation.reason}: the sum of {a} and {b}")
