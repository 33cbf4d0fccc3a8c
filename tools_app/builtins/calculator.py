"""The calculator built-in tool: a safe, bounded arithmetic evaluator. No Django here.

A small recursive-descent parser turns the expression into an immutable tree, which is
cached, then evaluated. No Python `eval` and no Python grammar: only numbers, the
operators + - * / % ^ **, parentheses, the constants pi and e, and the functions in
FUNCTIONS exist, so there is nothing else to escape to.

Limits (each refused with a CalculatorError naming the problem):
- expressions of at most MAX_LENGTH characters, nested at most MAX_DEPTH levels deep;
- integers of at most MAX_INT_BITS bits (about 3,000 digits), checked *before* a power,
  factorial, nPr or nCr is computed, so 10^10^10 is refused at once; this also keeps
  every result below Python's 4,300-digit int-to-text limit;
- factorial of at most MAX_FACTORIAL (exact integers, 1000! is 2,568 digits);
- at most MAX_ARGUMENTS arguments per call, ranges included;
- isPrime below ISPRIME_LIMIT, where Miller-Rabin with 13 fixed bases is exact;
- division or modulo by zero, and any NaN or infinite result, are errors.

Integers stay exact (factorial(20) is exact, 6/3 is the int 2); other results are floats
with full precision, and a float that is a whole number below 2**53 comes back as an int.
"""

from __future__ import annotations

import difflib
import math
import re
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, NamedTuple, TypeAlias

from tools_app.specs import ErrorKind, ToolFailure, ToolSpec

Number: TypeAlias = int | float

MAX_LENGTH = 1000
MAX_DEPTH = 50  # Each level costs several Python frames; the limit is 1000.
MAX_INT_BITS = 10_000
MAX_FACTORIAL = 1000
MAX_ARGUMENTS = 10_000
ISPRIME_LIMIT = 3_317_044_064_679_887_385_961_981
EXACT_FLOAT_LIMIT = 2**53

DESCRIPTION = (
    "Evaluate an arithmetic expression exactly as written and return the number. "
    "Supports + - * / % and ^ or ** for powers, parentheses, pi and e, and the functions "
    "sqrt abs sin cos tan asin acos atan log (base 10, or log(x, base)) ln exp floor ceil "
    "round(x, digits) min max sum pow factorial nPr nCr gcd lcm isPrime mean median "
    "variance stddev (population). Integer ranges a..b expand inside argument lists: "
    "mean(1..10). Angles are in radians. Write numbers without thousands separators."
)

PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "expression": {
            "type": "string",
            "minLength": 1,
            "maxLength": MAX_LENGTH,
            "description": (
                "The expression, e.g. '(400000*(0.065/12))/(1-(1+0.065/12)^-360)' or "
                "'variance(1..5)'. Commas only separate function arguments."
            ),
        }
    },
    "required": ["expression"],
    "additionalProperties": False,
}

RETURNS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "result": {
            "type": "number",
            "description": "The value at full precision; round it yourself for display.",
        },
        "expression": {"type": "string", "description": "The expression as given."},
    },
    "required": ["result", "expression"],
    "additionalProperties": False,
}


class CalculatorError(ValueError):
    """An expression that cannot be evaluated; the message says what is wrong and where."""


# ---------------------------------------------------------------------------------------
# Tokens


class Token(NamedTuple):
    kind: str  # "number", "name", "op" or "end"
    text: str
    position: int  # 1-based, as an LLM reading the message would count


_TOKEN_PATTERN = re.compile(
    r"""
    (?P<space>\s+)
    | (?P<op>\*\*|\.\.|[-+*/%^(),])
    # "1..5" is a range, so a decimal point may not be followed by another point.
    | (?P<number>(?:[0-9]+(?:\.(?!\.)[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?)
    | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
    """,
    re.VERBOSE,
)


def tokenize(expression: str) -> list[Token]:
    """Split an expression into tokens, ending with an "end" token."""
    tokens = []
    index = 0
    while index < len(expression):
        match = _TOKEN_PATTERN.match(expression, index)
        if match is None:
            raise CalculatorError(
                f"unexpected character {expression[index]!r} at position {index + 1}"
            )
        if match.lastgroup != "space":
            tokens.append(Token(match.lastgroup or "", match.group(), index + 1))
        index = match.end()
    tokens.append(Token("end", "", len(expression) + 1))
    return tokens


# ---------------------------------------------------------------------------------------
# Functions


class Function(NamedTuple):
    name: str
    implementation: Callable[..., Number]
    min_args: int
    max_args: int | None  # None: any number


def _whole(value: Number, function: str) -> int:
    """Return value as an int, or refuse it if it is not a whole number."""
    if isinstance(value, int):
        return value
    if value.is_integer():
        return int(value)
    raise CalculatorError(f"{function} expects whole numbers, got {value!r}")


def _ensure_bits(bits: float, what: str) -> None:
    """Refuse an integer result estimated to need more than MAX_INT_BITS bits."""
    if bits > MAX_INT_BITS:
        raise CalculatorError(f"{what} is too large (more than about 3,000 digits)")


def _sqrt(x: Number) -> Number:
    if x < 0:
        raise CalculatorError(f"sqrt of a negative number ({x!r}) has no real result")
    if isinstance(x, int):
        root = math.isqrt(x)
        if root * root == x:
            return root
    return math.sqrt(x)


def _log(x: Number, base: Number = 10) -> Number:
    if x <= 0:
        raise CalculatorError(f"log is only defined for positive numbers, got {x!r}")
    if base <= 0 or base == 1:
        raise CalculatorError(f"log base must be positive and not 1, got {base!r}")
    if base == 10:
        result = math.log10(x)
    elif base == 2:
        result = math.log2(x)
    else:
        result = math.log(x, base)
    # Floating point gives log(125, 5) = 3.0000000000000004; prefer the exact answer.
    exponent = round(result)
    if isinstance(x, int) and isinstance(base, int) and exponent >= 0 and base**exponent == x:
        return exponent
    return result


def _ln(x: Number) -> float:
    if x <= 0:
        raise CalculatorError(f"ln is only defined for positive numbers, got {x!r}")
    return math.log(x)


def _inverse_trig(name: str, implementation: Callable[[float], float]) -> Callable[..., float]:
    def checked(x: Number) -> float:
        if not -1 <= x <= 1:
            raise CalculatorError(f"{name} is only defined from -1 to 1, got {x!r}")
        return implementation(x)

    return checked


def _round(x: Number, digits: Number = 0) -> Number:
    if not float(digits).is_integer():
        raise CalculatorError(f"round's digits must be a whole number, got {digits!r}")
    places = int(digits)
    if not -308 <= places <= 308:
        raise CalculatorError(f"round's digits must be from -308 to 308, got {places}")
    return round(x, places) if places else round(x)


def _power(base: Number, exponent: Number) -> Number:
    if base == 0 and exponent < 0:
        raise CalculatorError("division by zero (0 raised to a negative power)")
    if base < 0 and not float(exponent).is_integer():
        raise CalculatorError(
            f"a negative number raised to a fractional power (({base!r})^{exponent!r}) "
            "has no real result"
        )
    if isinstance(base, int) and isinstance(exponent, int) and exponent > 0 and abs(base) > 1:
        _ensure_bits(exponent * math.log2(abs(base)), f"{base}^{exponent}")
    return base**exponent


def _factorial(n: Number) -> int:
    n = _whole(n, "factorial")
    if n < 0:
        raise CalculatorError(f"factorial is only defined for n >= 0, got {n}")
    if n > MAX_FACTORIAL:
        raise CalculatorError(f"factorial is limited to n <= {MAX_FACTORIAL}, got {n}")
    return math.factorial(n)


def _choose_arguments(name: str, n: Number, r: Number) -> tuple[int, int]:
    n, r = _whole(n, name), _whole(r, name)
    if n < 0 or r < 0:
        raise CalculatorError(f"{name} needs n >= 0 and r >= 0, got {name}({n}, {r})")
    return n, r


def _permutations(n: Number, r: Number) -> int:
    n, r = _choose_arguments("nPr", n, r)
    _ensure_bits(min(r, n) * math.log2(max(n, 2)), f"nPr({n}, {r})")
    return math.perm(n, r)


def _combinations(n: Number, r: Number) -> int:
    n, r = _choose_arguments("nCr", n, r)
    smaller = 0 if r > n else min(r, n - r)  # nCr(n, r) = nCr(n, n - r), and 0 when r > n.
    _ensure_bits(smaller * math.log2(max(n, 2)), f"nCr({n}, {r})")
    return math.comb(n, r)


def _gcd(*values: Number) -> int:
    return math.gcd(*(_whole(value, "gcd") for value in values))


def _lcm(*values: Number) -> int:
    numbers = [_whole(value, "lcm") for value in values]
    # The lcm is at most the product, so its size bounds the work before computing it.
    _ensure_bits(sum(abs(number).bit_length() for number in numbers), "lcm")
    return math.lcm(*numbers)


_WITNESSES = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41)


def _is_prime(n: Number) -> int:
    """Return 1 if n is prime, else 0, by Miller-Rabin, exact below ISPRIME_LIMIT."""
    n = _whole(n, "isPrime")
    if n >= ISPRIME_LIMIT:
        raise CalculatorError(f"isPrime is limited to numbers below {ISPRIME_LIMIT}")
    if n < 2:
        return 0
    if n in _WITNESSES:
        return 1
    if any(n % p == 0 for p in _WITNESSES):
        return 0
    odd, twos = n - 1, 0
    while odd % 2 == 0:
        odd, twos = odd // 2, twos + 1
    for witness in _WITNESSES:
        x = pow(witness, odd, n)
        if x in (1, n - 1):
            continue
        for _ in range(twos - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return 0
    return 1


FUNCTIONS: dict[str, Function] = {
    function.name.lower(): function
    for function in (
        Function("sqrt", _sqrt, 1, 1),
        Function("abs", abs, 1, 1),
        Function("sin", math.sin, 1, 1),
        Function("cos", math.cos, 1, 1),
        Function("tan", math.tan, 1, 1),
        Function("asin", _inverse_trig("asin", math.asin), 1, 1),
        Function("acos", _inverse_trig("acos", math.acos), 1, 1),
        Function("atan", math.atan, 1, 1),
        Function("log", _log, 1, 2),
        Function("ln", _ln, 1, 1),
        Function("exp", math.exp, 1, 1),
        Function("floor", math.floor, 1, 1),
        Function("ceil", math.ceil, 1, 1),
        Function("round", _round, 1, 2),
        Function("min", lambda *values: min(values), 1, None),
        Function("max", lambda *values: max(values), 1, None),
        Function("sum", lambda *values: sum(values), 1, None),
        Function("pow", _power, 2, 2),
        Function("factorial", _factorial, 1, 1),
        Function("nPr", _permutations, 2, 2),
        Function("nCr", _combinations, 2, 2),
        Function("gcd", _gcd, 2, None),
        Function("lcm", _lcm, 2, None),
        Function("isPrime", _is_prime, 1, 1),
        Function("mean", lambda *values: statistics.mean(values), 1, None),
        Function("median", lambda *values: statistics.median(values), 1, None),
        Function("variance", lambda *values: statistics.pvariance(values), 1, None),
        Function("stddev", lambda *values: statistics.pstdev(values), 1, None),
    )
}

CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e}


def _arity(function: Function) -> str:
    """Describe how many arguments a function takes, e.g. "2 or more arguments"."""
    low, high = function.min_args, function.max_args
    if high is None:
        count = f"{low} or more"
    elif low == high:
        count = str(low)
    else:
        count = f"{low} or {high}" if high == low + 1 else f"{low} to {high}"
    return f"{count} argument{'' if count == '1' else 's'}"


# ---------------------------------------------------------------------------------------
# The tree


@dataclass(frozen=True, slots=True)
class Literal:
    value: Number


@dataclass(frozen=True, slots=True)
class Negate:
    operand: Node


@dataclass(frozen=True, slots=True)
class Chain:
    """A left-associative run like a - b + c, kept flat so long sums need no deep recursion."""

    first: Node
    rest: tuple[tuple[str, int, Node], ...]  # (operator, position, operand)


@dataclass(frozen=True, slots=True)
class Power:
    base: Node
    exponent: Node
    position: int


@dataclass(frozen=True, slots=True)
class Range:
    start: Node
    end: Node
    position: int


@dataclass(frozen=True, slots=True)
class Call:
    function: Function
    arguments: tuple[Node | Range, ...]
    position: int


Node: TypeAlias = Literal | Negate | Chain | Power | Call


# ---------------------------------------------------------------------------------------
# Parsing


def _describe(token: Token) -> str:
    return "end of expression" if token.kind == "end" else repr(token.text)


def _suggestion(name: str, candidates: list[str]) -> str:
    """Return " (did you mean X?)" for the closest known name, spelled as documented."""
    close = difflib.get_close_matches(name.lower(), candidates, n=1)
    if not close:
        return ""
    return f" (did you mean {FUNCTIONS[close[0]].name if close[0] in FUNCTIONS else close[0]}?)"


class _Parser:
    """Recursive descent over the tokens; precedence from loosest to tightest:

    sum (+ -) < product (* / %) < unary minus < power (^ **, right-associative),
    so -2^2 is -(2^2) and 2^-1 is 0.5, as in Python and most calculators.
    """

    def __init__(self, expression: str) -> None:
        self.tokens = tokenize(expression)
        self.index = 0
        self.depth = 0

    @property
    def current(self) -> Token:
        return self.tokens[self.index]

    def advance(self) -> Token:
        token = self.tokens[self.index]
        self.index += 1
        return token

    def unexpected(self) -> CalculatorError:
        token = self.current
        where = "" if token.kind == "end" else f" at position {token.position}"
        message = f"unexpected {_describe(token)}{where}"
        if token.text == ",":
            message += " (commas only separate function arguments; write 1000, not 1,000)"
        elif token.text == "..":
            message += " (ranges like 1..5 are only allowed in a function's arguments)"
        elif token.kind in ("number", "name") or token.text == "(":
            # Only reachable right after a complete operand: "2 pi", "2(3)", "sin(1)(2)".
            message += " (missing operator? write 2*pi, not 2 pi)"
        return CalculatorError(message)

    def close(self, opening: Token) -> None:
        """Consume the ')' that matches the opening token, or say which one is unclosed."""
        if self.current.kind == "end":
            raise CalculatorError(
                f"missing ')' to close {opening.text!r} at position {opening.position}"
            )
        if self.current.text != ")":
            raise self.unexpected()
        self.advance()

    def descend(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise CalculatorError(
                f"expression is nested too deeply (more than {MAX_DEPTH} levels) "
                f"at position {self.current.position}"
            )

    def parse(self) -> Node:
        if self.current.kind == "end":
            raise CalculatorError("expression is empty")
        node = self.parse_sum()
        if self.current.kind != "end":
            raise self.unexpected()
        return node

    def parse_chain(self, operators: str, parse_operand: Callable[[], Node]) -> Node:
        first = parse_operand()
        rest = []
        while self.current.kind == "op" and self.current.text in operators:
            operator = self.advance()
            rest.append((operator.text, operator.position, parse_operand()))
        return Chain(first, tuple(rest)) if rest else first

    def parse_sum(self) -> Node:
        return self.parse_chain("+-", self.parse_product)

    def parse_product(self) -> Node:
        return self.parse_chain("*/%", self.parse_unary)

    def parse_unary(self) -> Node:
        if self.current.text not in ("-", "+"):
            return self.parse_power()
        sign = self.advance().text
        self.descend()
        operand = self.parse_unary()
        self.depth -= 1
        return Negate(operand) if sign == "-" else operand

    def parse_power(self) -> Node:
        base = self.parse_primary()
        if self.current.text not in ("^", "**"):
            return base
        position = self.advance().position
        self.descend()
        exponent = self.parse_unary()
        self.depth -= 1
        return Power(base, exponent, position)

    def parse_primary(self) -> Node:
        token = self.current
        if token.kind == "number":
            self.advance()
            return Literal(self.number(token))
        if token.kind == "name":
            self.advance()
            return self.parse_name(token)
        if token.text == "(":
            self.advance()
            self.descend()
            node = self.parse_sum()
            self.depth -= 1
            self.close(token)
            return node
        raise self.unexpected()

    def number(self, token: Token) -> Number:
        is_integer = token.text.isdigit()
        value = int(token.text) if is_integer else float(token.text)
        if not is_integer and math.isinf(value):
            raise CalculatorError(f"number {token.text} at position {token.position} is too large")
        return value

    def parse_name(self, token: Token) -> Node:
        name = token.text.lower()
        is_call = self.current.text == "("
        if name in CONSTANTS:
            if is_call:
                raise CalculatorError(
                    f"{token.text!r} at position {token.position} is a constant, not a function"
                )
            return Literal(CONSTANTS[name])
        if name in FUNCTIONS:
            if not is_call:
                raise CalculatorError(
                    f"{FUNCTIONS[name].name} at position {token.position} is a function: "
                    f"call it like {FUNCTIONS[name].name}(...)"
                )
            return self.parse_call(FUNCTIONS[name], token.position)
        if is_call:
            hint = _suggestion(name, list(FUNCTIONS)) or "; the functions are " + ", ".join(
                function.name for function in FUNCTIONS.values()
            )
            raise CalculatorError(f"unknown function {token.text!r}{hint}")
        hint = _suggestion(name, list(CONSTANTS) + list(FUNCTIONS))
        raise CalculatorError(
            f"unknown name {token.text!r} at position {token.position}{hint}; "
            "only the constants pi and e are defined"
        )

    def parse_call(self, function: Function, position: int) -> Call:
        opening = self.advance()
        self.descend()
        arguments: list[Node | Range] = []
        if self.current.text != ")":
            arguments.append(self.parse_argument())
            while self.current.text == ",":
                self.advance()
                arguments.append(self.parse_argument())
        self.depth -= 1
        self.close(opening)
        return Call(function, tuple(arguments), position)

    def parse_argument(self) -> Node | Range:
        start = self.parse_sum()
        if self.current.text != "..":
            return start
        position = self.advance().position
        return Range(start, self.parse_sum(), position)


@lru_cache(maxsize=1024)
def parse(expression: str) -> Node:
    """Return the tree of an expression, refusing anything outside the calculator language."""
    if len(expression) > MAX_LENGTH:
        raise CalculatorError(
            f"expression is {len(expression)} characters long; the limit is {MAX_LENGTH}"
        )
    return _Parser(expression).parse()


# ---------------------------------------------------------------------------------------
# Evaluation


def _checked(value: Number) -> Number:
    """Return value, refusing NaN, infinity and integers beyond MAX_INT_BITS."""
    if isinstance(value, float) and not math.isfinite(value):
        raise CalculatorError("result is too large to represent (overflow)")
    if isinstance(value, int):
        _ensure_bits(value.bit_length(), "result")
    return value


def _divide(left: Number, right: Number, position: int) -> Number:
    if right == 0:
        raise CalculatorError(f"division by zero at position {position}")
    if isinstance(left, int) and isinstance(right, int) and left % right == 0:
        return left // right  # Exact, even for integers too large for a float.
    return left / right


def _apply(operator: str, left: Number, right: Number, position: int) -> Number:
    if operator == "+":
        return left + right
    if operator == "-":
        return left - right
    if operator == "*":
        return left * right
    if operator == "/":
        return _divide(left, right, position)
    if right == 0:
        raise CalculatorError(f"modulo by zero at position {position}")
    return left % right


def _expand(argument: Node | Range) -> list[Number]:
    """Return the values of one argument: one number, or every integer of a range."""
    if not isinstance(argument, Range):
        return [_evaluate(argument)]
    start, end = _evaluate(argument.start), _evaluate(argument.end)
    where = f"range at position {argument.position}"
    if not (float(start).is_integer() and float(end).is_integer()):
        raise CalculatorError(f"{where} needs whole-number bounds, got {start!r}..{end!r}")
    start, end = int(start), int(end)
    if start > end:
        raise CalculatorError(f"{where} is empty: {start}..{end} counts up from start to end")
    if end - start + 1 > MAX_ARGUMENTS:
        raise CalculatorError(f"{where} has more than {MAX_ARGUMENTS} numbers")
    return list(range(start, end + 1))


def _call(call: Call) -> Number:
    function = call.function
    values: list[Number] = []
    for argument in call.arguments:
        values.extend(_expand(argument))
        if len(values) > MAX_ARGUMENTS:
            raise CalculatorError(f"{function.name} got more than {MAX_ARGUMENTS} arguments")
    if len(values) < function.min_args or (
        function.max_args is not None and len(values) > function.max_args
    ):
        raise CalculatorError(f"{function.name} expects {_arity(function)}, got {len(values)}")
    return function.implementation(*values)


def _evaluate(node: Node) -> Number:
    match node:
        case Literal(value):
            return value
        case Negate(operand):
            return -_evaluate(operand)
        case Chain(first, rest):
            value = _evaluate(first)
            for operator, position, operand in rest:
                value = _checked(_apply(operator, value, _evaluate(operand), position))
            return value
        case Power(base, exponent, _):
            return _checked(_power(_evaluate(base), _evaluate(exponent)))
        case Call():
            return _checked(_call(node))
    raise TypeError(f"not a calculator node: {node!r}")


def _normalised(value: Number) -> Number:
    """Return a whole float below 2**53 as an int (5050.0 -> 5050), anything else unchanged."""
    if isinstance(value, float) and value.is_integer() and abs(value) < EXACT_FLOAT_LIMIT:
        return int(value)
    return value


def evaluate(expression: str) -> Number:
    """Return the value of an arithmetic expression, or raise CalculatorError."""
    if not isinstance(expression, str):
        raise CalculatorError(f"expression must be a string, got {type(expression).__name__}")
    tree = parse(expression)
    try:
        return _normalised(_evaluate(tree))
    except OverflowError:
        # Mixing a huge int with a float, or a float power past 1e308.
        raise CalculatorError("result is too large to represent (overflow)") from None
    except ValueError as error:
        if isinstance(error, CalculatorError):
            raise
        raise CalculatorError(f"math error: {error}") from None


def calculator(expression: str) -> dict[str, Any]:
    """Evaluate the expression for the tool layer and return the result with the expression."""
    return {"result": evaluate(expression), "expression": expression}


def run_tool(expression: str) -> dict[str, Any]:
    """Run the calculator as a tool: a bad expression is an invalid_arguments result."""
    try:
        return calculator(expression)
    except CalculatorError as error:
        raise ToolFailure(str(error), ErrorKind.INVALID_ARGUMENTS) from None


SPEC = ToolSpec(
    name="calculator",
    description=DESCRIPTION,
    parameters=PARAMETERS,
    returns=RETURNS,
    function=run_tool,
    timeout_s=10,
    capabilities=(
        "Arithmetic", "Summation", "ExpressionEvaluation", "DiscreteMath",
        "Statistics", "NumberTheory", "Probability",
    ),
)  # fmt: skip
