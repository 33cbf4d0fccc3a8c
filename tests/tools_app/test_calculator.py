"""The calculator built-in: results, exactness, refusals with actionable messages, properties."""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tools_app.builtins.calculator import (
    MAX_LENGTH,
    PARAMETERS,
    RETURNS,
    CalculatorError,
    calculator,
    evaluate,
    parse,
)

MORTGAGE = "(400000*(0.065/12)*(1+0.065/12)^360)/((1+0.065/12)^360-1)"


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("1+1", 2),
        ("100*(100+1)/2", 5050),
        ("sin(pi/2)+cos(0)", 2),
        ("gcd(12,18)", 6),
        ("factorial(10)", 3628800),
        ("nCr(10,3)", 120),
        ("variance(1..5)", 2),
        ("isPrime(17)", 1),
        ("isPrime(18)", 0),
        ("isPrime(1)", 0),
        ("isPrime(2147483647)", 1),
        ("isPrime(3215031751)", 0),  # A strong pseudoprime to bases 2, 3, 5 and 7.
        ("3100000000000*0.15", 4.65e11),
        ("sqrt(16)", 4),
        ("sqrt(2)", 2**0.5),
        ("2^10", 1024),
        ("2**10", 1024),
        ("2**3**2", 512),
        ("2^3^2", 512),
        ("-2^2", -4),
        ("(-2)^2", 4),
        ("2^-1", 0.5),
        ("2*-3", -6),
        ("--3", 3),
        ("+3", 3),
        ("2+3*4", 14),
        ("(2+3)*4", 20),
        ("10-4-3", 3),
        ("100/10/5", 2),
        ("7/2", 3.5),
        ("10%3", 1),
        ("5.5%2", 1.5),
        ("log(100)", 2),
        ("log(8,2)", 3),
        ("log(125,5)", 3),
        ("ln(e)", 1),
        ("exp(0)", 1),
        ("round(3.14159,2)", 3.14),
        ("round(2.7)", 3),
        ("round(1234,-2)", 1200),
        ("nPr(5,2)", 20),
        ("nCr(3,5)", 0),
        ("lcm(4,6)", 12),
        ("lcm(2,3,4)", 12),
        ("gcd(12,18,8)", 2),
        ("mean(1,2,3,4,5)", 3),
        ("mean(1,2)", 1.5),
        ("median(3,1,2)", 2),
        ("median(4,1,3,2)", 2.5),
        ("stddev(2,4,4,4,5,5,7,9)", 2),
        ("variance(2,4,4,4,5,5,7,9)", 4),
        ("min(3,1,2)", 1),
        ("max(3,1,2)", 3),
        ("sum(1,2,3)", 6),
        ("sum(1..100)", 5050),
        ("sum(1..3, 10)", 16),
        ("sum(1..2*3)", 21),
        ("pow(2,8)", 256),
        ("abs(-3)", 3),
        ("floor(2.7)", 2),
        ("floor(-2.5)", -3),
        ("ceil(2.1)", 3),
        ("tan(0)", 0),
        ("asin(1)*2", 3.141592653589793),
        ("acos(1)", 0),
        ("atan(1)*4", 3.141592653589793),
        ("1e3", 1000),
        ("2.5E-4", 0.00025),
        (".5+1.", 1.5),
        ("PI", 3.141592653589793),
        (" 1 +\t2 ", 3),
    ],
)
def test_it_evaluates(expression: str, expected: int | float) -> None:
    assert evaluate(expression) == pytest.approx(expected, rel=1e-15, abs=1e-15)


@pytest.mark.parametrize(
    ("expression", "cents"),
    [
        (MORTGAGE, 2528.27),
        ("50000*(1.15^10)", 202277.89),
        ("400000*(0.065/12)/(1-(1+0.065/12)^-360)", 2528.27),
    ],
)
def test_it_gets_money_right_to_the_cent(expression: str, cents: float) -> None:
    assert round(evaluate(expression), 2) == cents


def test_it_never_rounds_results() -> None:
    assert evaluate(MORTGAGE) != round(evaluate(MORTGAGE), 2)
    assert evaluate("1/3") == 1 / 3


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("factorial(20)", 2432902008176640000),
        ("factorial(30)/factorial(28)", 870),
        ("(2^80+2)/2", 2**79 + 1),  # Beyond a float's precision: exact only as int division.
        ("2^100", 2**100),
        ("nCr(1000,500) % 1000", math.comb(1000, 500) % 1000),
        ("100*(100+1)/2", 5050),
        ("sin(pi/2)+cos(0)", 2),
        ("1e3", 1000),
    ],
)
def test_it_returns_integral_results_as_exact_ints(expression: str, expected: int) -> None:
    result = evaluate(expression)
    assert type(result) is int
    assert result == expected


def test_it_keeps_whole_floats_beyond_2_pow_53_as_floats() -> None:
    assert type(evaluate("1e20")) is float


@pytest.mark.parametrize("name", ["nPr", "npr", "NPR", "nPR"])
def test_it_reads_function_names_in_any_case(name: str) -> None:
    assert evaluate(f"{name}(5,2)") == 20


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("", "expression is empty"),
        ("   ", "expression is empty"),
        ("@#$", "unexpected character '@' at position 1"),
        ("1 + * 2", "unexpected '*' at position 5"),
        ("1+", "unexpected end of expression"),
        ("(1+2", "missing ')' to close '(' at position 1"),
        ("(1+2))*3", "unexpected ')' at position 6"),
        ("sqrt(4", "missing ')' to close '(' at position 5"),
        ("2 pi", "unexpected 'pi' at position 3 (missing operator? write 2*pi"),
        ("sqr(4)", "unknown function 'sqr' (did you mean sqrt?)"),
        ("isprim(7)", "unknown function 'isprim' (did you mean isPrime?)"),
        ("frobnicate(1)", "unknown function 'frobnicate'; the functions are sqrt, abs"),
        ("x+1", "unknown name 'x' at position 1"),
        ("pi(2)", "'pi' at position 1 is a constant, not a function"),
        ("sqrt + 1", "sqrt at position 1 is a function: call it like sqrt(...)"),
        ("__import__('os')", 'unexpected character "\'" at position 12'),
        ("__import__(1)", "unknown function '__import__'"),
        ("()", "unexpected ')' at position 2"),
        ("().__class__", "unexpected character '.' at position 3"),
        ("(1).__class__", "unexpected character '.' at position 4"),
        ("lambda: 1", "unexpected character ':' at position 7"),
        ("[x for x in range(9)]", "unexpected character '[' at position 1"),
        ("'abc'", 'unexpected character "\'" at position 1'),
        ("1,000", "unexpected ',' at position 2 (commas only separate function arguments"),
        ("1..5", "unexpected '..' at position 2 (ranges like 1..5 are only allowed"),
        ("10**10**10", "10^10000000000 is too large"),
        ("9^9^9", "9^387420489 is too large"),
        ("2^100000", "2^100000 is too large"),
        ("2^5000*2^5000*2^5000", "result is too large"),
        ("1.5^100000", "result is too large to represent (overflow)"),
        ("10^400*1.5", "result is too large to represent (overflow)"),
        ("exp(1000)", "result is too large to represent (overflow)"),
        ("1e999", "number 1e999 at position 1 is too large"),
        ("factorial(1001)", "factorial is limited to n <= 1000, got 1001"),
        ("factorial(-1)", "factorial is only defined for n >= 0, got -1"),
        ("factorial(2.5)", "factorial expects whole numbers, got 2.5"),
        ("nCr(100000,50000)", "nCr(100000, 50000) is too large"),
        ("nPr(100000,50000)", "nPr(100000, 50000) is too large"),
        ("nCr(-1,2)", "nCr needs n >= 0 and r >= 0"),
        ("lcm(2^3000, 3^2000, 5^1500, 7^1000)", "lcm is too large"),
        ("isPrime(10^30)", "isPrime is limited to numbers below"),
        ("(" * 500 + "1", "nested too deeply (more than 50 levels)"),
        ("(" * 300 + "1" + ")" * 300, "nested too deeply (more than 50 levels)"),
        ("-" * 600 + "1", "nested too deeply (more than 50 levels)"),
        ("1" * 10_000, f"10000 characters long; the limit is {MAX_LENGTH}"),
        ("1/0", "division by zero at position 2"),
        ("1/(2-2)", "division by zero at position 2"),
        ("1.5/0.0", "division by zero at position 4"),
        ("10%0", "modulo by zero at position 3"),
        ("0^-1", "division by zero (0 raised to a negative power)"),
        ("(-8)^(1/3)", "a negative number raised to a fractional power ((-8)^0.333"),
        ("sqrt(-1)", "sqrt of a negative number (-1) has no real result"),
        ("log(0)", "log is only defined for positive numbers, got 0"),
        ("log(8, 1)", "log base must be positive and not 1, got 1"),
        ("ln(-1)", "ln is only defined for positive numbers, got -1"),
        ("asin(2)", "asin is only defined from -1 to 1, got 2"),
        ("gcd(12)", "gcd expects 2 or more arguments, got 1"),
        ("gcd(1.5, 3)", "gcd expects whole numbers, got 1.5"),
        ("sqrt(1,2)", "sqrt expects 1 argument, got 2"),
        ("log(1,2,3)", "log expects 1 or 2 arguments, got 3"),
        ("nCr(5)", "nCr expects 2 arguments, got 1"),
        ("max()", "max expects 1 or more arguments, got 0"),
        ("sqrt(1..3)", "sqrt expects 1 argument, got 3"),
        ("round(1.5, 0.5)", "round's digits must be a whole number, got 0.5"),
        ("variance(5..1)", "range at position 11 is empty"),
        ("sum(1.5..3)", "range at position 8 needs whole-number bounds"),
        ("sum(1..100000)", "range at position 6 has more than 10000 numbers"),
    ],
)
def test_it_refuses_bad_input_with_an_actionable_message(expression: str, message: str) -> None:
    with pytest.raises(CalculatorError, match=re.escape(message)):
        evaluate(expression)


def test_it_refuses_an_expression_that_is_not_text() -> None:
    with pytest.raises(CalculatorError, match="expression must be a string, got int"):
        evaluate(42)  # type: ignore[arg-type]


def test_calculator_error_is_a_value_error() -> None:
    assert issubclass(CalculatorError, ValueError)


def test_calculator_returns_the_result_with_the_expression() -> None:
    assert calculator("6*7") == {"result": 42, "expression": "6*7"}


def test_calculator_raises_on_bad_input() -> None:
    with pytest.raises(CalculatorError, match="division by zero"):
        calculator("1/0")


def test_it_describes_its_arguments_and_result_as_json_schema() -> None:
    expression = PARAMETERS["properties"]["expression"]
    assert PARAMETERS["required"] == ["expression"]
    assert PARAMETERS["additionalProperties"] is False
    assert (expression["type"], expression["minLength"], expression["maxLength"]) == (
        "string",
        1,
        MAX_LENGTH,
    )
    assert set(RETURNS["required"]) == set(calculator("1+1"))


def test_it_caches_parsed_expressions() -> None:
    expression = "12345 + 0.5 * 3"
    evaluate(expression)
    hits = parse.cache_info().hits
    assert evaluate(expression) == 12346.5
    assert parse.cache_info().hits == hits + 1


# ---------------------------------------------------------------------------------------
# Properties: random + - * / trees against an independent reference.

Tree = Any  # An int leaf, or (operator, left, right).

small_ints = st.integers(min_value=-12, max_value=12)


def trees(operators: str) -> st.SearchStrategy[Tree]:
    """Return a strategy for expression trees over small ints and the given operators."""
    return st.recursive(
        small_ints,
        lambda children: st.tuples(st.sampled_from(operators), children, children),
        max_leaves=12,
    )


def text(tree: Tree) -> str:
    """Write a tree fully parenthesised; negative leaves appear as unary minus."""
    if isinstance(tree, int):
        return str(tree)
    operator, left, right = tree
    return f"({text(left)} {operator} {text(right)})"


def exact(tree: Tree) -> Fraction:
    """Return the exact value of a tree; ZeroDivisionError when it divides by zero."""
    if isinstance(tree, int):
        return Fraction(tree)
    operator, left, right = tree
    a, b = exact(left), exact(right)
    return {"+": a + b, "-": a - b, "*": a * b}[operator] if operator != "/" else a / b


def documented(tree: Tree) -> int | float:
    """Return a tree's value by the documented rules: ints stay exact, inexact / gives floats.

    Comparing against this, rather than only within a tolerance of the exact value, keeps
    the test deterministic: float cancellation (0.1 + 0.2 - 0.3) cannot make it flaky.
    """
    if isinstance(tree, int):
        return tree
    operator, left, right = tree
    a, b = documented(left), documented(right)
    if operator == "/":
        if isinstance(a, int) and isinstance(b, int) and b and a % b == 0:
            return a // b
        return a / b
    return {"+": a + b, "-": a - b, "*": a * b}[operator]


def whole_to_int(value: int | float) -> int | float:
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    return value


@given(trees("+-*"))
def test_it_is_exact_on_integer_arithmetic(tree: Tree) -> None:
    result = evaluate(text(tree))
    assert type(result) is int
    assert result == exact(tree)


@given(trees("+-*/"))
def test_it_follows_exact_arithmetic_with_division(tree: Tree) -> None:
    try:
        expected = documented(tree)
    except ZeroDivisionError:
        with pytest.raises(CalculatorError, match="division by zero"):
            evaluate(text(tree))
        return
    result = evaluate(text(tree))
    assert result == whole_to_int(expected)
    if isinstance(expected, int):  # Every division was exact, so no float was involved.
        assert result == exact(tree)


@given(
    st.lists(st.integers(min_value=0, max_value=12), min_size=1, max_size=10),
    st.lists(st.sampled_from("+-*/"), min_size=9, max_size=9),
)
def test_it_gives_products_precedence_and_associates_left(
    numbers: list[int], operators: list[str]
) -> None:
    flat = str(numbers[0]) + "".join(
        f" {operator} {number}" for operator, number in zip(operators, numbers[1:], strict=False)
    )
    # The tree a grammar-school reader builds: products first, everything left to right.
    terms: list[Tree] = [numbers[0]]
    signs: list[str] = []
    for operator, number in zip(operators, numbers[1:], strict=False):
        if operator in "*/":
            terms[-1] = (operator, terms[-1], number)
        else:
            signs.append(operator)
            terms.append(number)
    tree = terms[0]
    for sign, term in zip(signs, terms[1:], strict=True):
        tree = (sign, tree, term)
    try:
        expected = documented(tree)
    except ZeroDivisionError:
        with pytest.raises(CalculatorError, match="division by zero"):
            evaluate(flat)
        return
    assert evaluate(flat) == whole_to_int(expected)
