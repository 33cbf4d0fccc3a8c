"""Calculator arguments, stage 1: whole-request patterns (sums, nPr, nCr, primes, circles).

Each pattern uses every number in the request and no other; refusals name maths the
calculator does not do (derivatives, equations, prime factors).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from planner_app.pipeline.extractors.request_numbers import (
    INTEGER,
    NUMBER,
    NUMBER_TOKEN,
    as_operand,
    numbers_in,
    plain_number,
)
from planner_app.pipeline.extractors.request_text import (
    Extraction,
    english_words,
    found_arguments,
    ignoring_case,
    needs_llm,
)
from tools_app.builtins.calculator import CalculatorError, parse


@dataclass(frozen=True, slots=True)
class Pattern:
    """A named regex; `read` turns its match into an Extraction, or None to try the next."""

    name: str
    regex: re.Pattern[str]
    read: Callable[[re.Match[str], str], Extraction | None]


def parsed_calculation(expression: str, reason: str) -> Extraction:
    """Return a calculator call, if the expression parses in the calculator's language."""
    try:
        parse(expression)
    except CalculatorError as error:
        return needs_llm(f"read {expression!r}, which the calculator cannot parse ({error})")
    return found_arguments({"expression": expression}, reason)


def _refusal(why: str) -> Callable[[re.Match[str], str], Extraction]:
    def read(match: re.Match[str], text: str) -> Extraction:
        return needs_llm(f"{why} ({match[0].strip()!r})")

    return read


def _outside(match: re.Match[str], text: str) -> str:
    return f"{text[: match.start()]} {text[match.end() :]}"


def _uses_every_number(match: re.Match[str], text: str) -> bool:
    """Return whether the match holds every number of the request (else it says more)."""
    return not numbers_in(_outside(match, text))


_SUM_QUALIFIER = ignoring_case(
    english_words(r"squares?|cubes?|odd|even|primes?|reciprocals?|multiples?|digits?")
    + "|平方|立方|奇数|偶数|质数|素数|倒数|倍数"
)


def _range_sum(low_text: str, high_text: str, text: str) -> Extraction:
    """Return the closed form of the sum of the integers low..high."""
    qualifier = _SUM_QUALIFIER.search(text)
    if qualifier:
        return needs_llm(f"a sum of {qualifier[0]} over a range is not the plain range sum")
    low, high = plain_number(low_text), plain_number(high_text)
    if not (INTEGER.match(low) and INTEGER.match(high)):
        return needs_llm(f"a sum from {low} to {high} needs whole-number bounds")
    a, b = sorted((int(low), int(high)))
    if a == 1:
        return parsed_calculation(f"{b}*({b}+1)/2", f"sum of the integers 1..{b} -> n(n+1)/2 form")
    first, last = as_operand(str(a)), as_operand(str(b))
    return parsed_calculation(
        f"({last}-{first}+1)*({first}+{last})/2",
        f"sum of the integers {a}..{b} -> (b-a+1)(a+b)/2 form",
    )


def _read_range_sum(match: re.Match[str], text: str) -> Extraction | None:
    if not _uses_every_number(match, text):
        return None
    return _range_sum(match["a"], match["b"], text)


def _read_written_out_sum(match: re.Match[str], text: str) -> Extraction | None:
    """Read 1+2+3+...+100: consecutive first terms, then the last one."""
    if not _uses_every_number(match, text):
        return None
    if float(plain_number(match["next"])) != float(plain_number(match["a"])) + 1:
        return None
    return _range_sum(match["a"], match["b"], text)


def _read_first_n_sum(match: re.Match[str], text: str) -> Extraction | None:
    if not _uses_every_number(match, text):
        return None
    return _range_sum("1", match["n"] or match["zh"], text)


_PERMUTATION_WORDS = ignoring_case(
    english_words(r"permutations?|arrangements?|arrange[sd]?|arranging|nPr|orderings?")
    + "|排列|排法|排成|排队"
)
_COMBINATION_WORDS = ignoring_case(
    english_words(
        r"combinations?|binomial\s+coefficients?|nCr"
        r"|(?:ways|how\s+many)(?:\s+\w+){0,4}\s+(?:choose|select|pick)|committees?|teams?\s+of"
    )
    + "|组合|选法|取法|种选|种取"
)
_FROM_BETWEEN = ignoring_case(english_words(r"from|out\s+of|of|among"))


def _choose(n: str, r: str, permutation: bool, how: str) -> Extraction:
    function = "nPr" if permutation else "nCr"
    return parsed_calculation(
        f"{function}({plain_number(n)},{plain_number(r)})", f"{how} -> {function}(n, r)"
    )


def _read_choose_notation(match: re.Match[str], text: str) -> Extraction | None:
    if not _uses_every_number(match, text):
        return None
    return _choose(match["n"], match["r"], match["kind"] != "C", match[0].strip())


def _read_n_choose_r(match: re.Match[str], text: str) -> Extraction | None:
    if not _uses_every_number(match, text):
        return None
    permutation = _PERMUTATION_WORDS.search(text) is not None
    return _choose(match["n"], match["r"], permutation, f"{match['n']} choose {match['r']}")


def _read_arrangements(match: re.Match[str], text: str) -> Extraction | None:
    """Read permutations and combinations named in words, from the request's numbers."""
    numbers = list(NUMBER_TOKEN.finditer(text))
    permutation = _PERMUTATION_WORDS.search(text) is not None
    if len(numbers) == 1 and permutation and INTEGER.match(numbers[0][0]):
        n = numbers[0][0]
        return parsed_calculation(
            f"factorial({n})", f"arrangements of all {n} items -> factorial(n)"
        )
    if len(numbers) != 2:
        return None
    n, r = numbers[0][0], numbers[1][0]
    if _FROM_BETWEEN.search(text[numbers[0].end() : numbers[1].start()]):
        n, r = r, n  # "3 out of 10": the pool is the second number.
    what = "permutations" if permutation else "combinations"
    return _choose(n, r, permutation, f"{what} of {plain_number(r)} from {plain_number(n)}")


_PRIME_OTHER_QUESTION = ignoring_case(
    english_words(
        r"primes|prime\s+factors?|factori[sz]\w*|below|under|less|between|list|how\s+many|"
        r"first|next|nth|largest|smallest|greater|up\s+to|all|twin|coprime|relatively"
    )
    + "|以内|以下|以上|之间|小于|大于|哪些|多少个|几个|列出|第|前|因数|因子|分解|互质"
)


def _read_is_prime(match: re.Match[str], text: str) -> Extraction | None:
    other = _PRIME_OTHER_QUESTION.search(text)
    if other:
        return needs_llm(f"a question about primes beyond one number ({other[0]!r})")
    numbers = numbers_in(text)
    if len(numbers) != 1 or not INTEGER.match(numbers[0]):
        return None
    return parsed_calculation(f"isPrime({numbers[0]})", "is it prime -> isPrime (1 yes, 0 no)")


_AREA = ignoring_case(english_words("area") + "|面积")
_RADIUS = ignoring_case(english_words("radius|diameter") + "|半径|直径")
_DIAMETER = ignoring_case(english_words("diameter") + "|直径")
_CIRCUMFERENCE = ignoring_case(english_words("circumference|perimeter") + "|周长")


def _formula(
    needs: re.Pattern[str] | None, count: int, build: Callable[[list[str]], str], what: str
) -> Callable[[re.Match[str], str], Extraction | None]:
    """Return a reader for a formula that uses exactly `count` numbers, all of the request's."""

    def read(match: re.Match[str], text: str) -> Extraction | None:
        numbers = numbers_in(text)
        if len(numbers) != count or (needs is not None and not needs.search(text)):
            return None
        expression = build([as_operand(number) for number in numbers])
        return parsed_calculation(expression, f"{what} -> {expression}")

    return read


def _read_circle(match: re.Match[str], text: str) -> Extraction | None:
    numbers = numbers_in(text)
    if len(numbers) != 1 or not _RADIUS.search(text):
        return None
    size, diameter = as_operand(numbers[0]), _DIAMETER.search(text) is not None
    if _AREA.search(text):
        expression = f"pi*({size}/2)**2" if diameter else f"pi*{size}**2"
        return parsed_calculation(expression, f"area of a circle, pi*r**2 -> {expression}")
    if _CIRCUMFERENCE.search(text):
        expression = f"pi*{size}" if diameter else f"2*pi*{size}"
        return parsed_calculation(expression, f"circumference of a circle, 2*pi*r -> {expression}")
    return None


_SUM_FILLERS = (
    r"(?:\s+(?:of|up|all|the|every|each|from|consecutive|whole|natural|positive|"
    r"integers?|numbers?))*"
)
_RANGE_TO = r"\s*(?:to|through|thru|until|till|\.\.|-)\s*"

CALCULATOR_PATTERNS: tuple[Pattern, ...] = (
    Pattern(
        "prime factors",
        ignoring_case(
            english_words(r"prime\s+factors?|prime\s+factori[sz]ation|factori[sz]e")
            + "|质因数|因式分解"
        ),
        _refusal("prime factorisation is not a calculator function"),
    ),
    Pattern(
        "maths beyond one expression",
        ignoring_case(
            english_words(
                r"derivatives?|differentiate|integrals?|integrate|area\s+under|limit\s+of|"
                r"equations?|roots\s+of|quadratic|matrix|matrices|determinant|"
                r"probability|odds|convert|conversion|interest|loan|mortgage|velocity|speed"
            )
            + r"|导数|求导|积分|方程|矩阵|行列式|概率|换算|利息|贷款|[0-9]{4}-[0-9]{2}-[0-9]{2}"
        ),
        _refusal("this needs more than evaluating one expression"),
    ),
    Pattern(
        "sum written out: 1+2+...+n",
        re.compile(
            rf"(?<![0-9.+])(?<!\+\s)(?P<a>{NUMBER})\s*\+\s*(?P<next>{NUMBER})\s*\+\s*"
            rf"(?:{NUMBER}\s*\+\s*)*"
            rf"(?:\.{{2,}}|…|⋯|etc\.?)\s*\+\s*(?P<b>{NUMBER})"
        ),
        _read_written_out_sum,
    ),
    Pattern(
        "sum over a range",
        ignoring_case(
            english_words(r"sum|summation|total")
            + _SUM_FILLERS
            + rf"\s+(?P<a>{NUMBER}){_RANGE_TO}(?P<b>{NUMBER})"
        ),
        _read_range_sum,
    ),
    Pattern(
        "adding up a range",
        # "add 3 to 5" is 3+5: adding reads as a range only with "from" or "up".
        ignoring_case(
            english_words(r"add|adding")
            + r"(?:\s+up"
            + _SUM_FILLERS
            + r"|"
            + _SUM_FILLERS
            + r"\s+from)"
            + rf"\s+(?P<a>{NUMBER}){_RANGE_TO}(?P<b>{NUMBER})"
        ),
        _read_range_sum,
    ),
    Pattern(
        "sum over a range: 从a加到b",
        re.compile(
            rf"(?P<a>{NUMBER})\s*(?:一直|依次)?\s*(?:累加|累计加|相加|加)\s*(?:到|至)\s*(?P<b>{NUMBER})"
        ),
        _read_range_sum,
    ),
    Pattern(
        "sum over a range: a到b的和",
        re.compile(
            rf"(?P<a>{NUMBER})\s*(?:到|至|~|-)\s*(?P<b>{NUMBER})\s*(?:之间)?\s*的?\s*"
            r"(?:所有|全部|每个)?\s*的?\s*(?:正?整数|自然数|数字?)?\s*(?:的|之)?\s*"
            r"(?:总和|和|累加|求和|相加|加起来)"
        ),
        _read_range_sum,
    ),
    Pattern(
        "sum of the first n",
        ignoring_case(
            english_words("sum|total")
            + rf"\s+of\s+the\s+first\s+(?P<n>{NUMBER})\s+(?:positive\s+|natural\s+|whole\s+)?"
            + r"(?:integers|numbers)"
            + rf"|前\s*(?P<zh>{NUMBER})\s*个\s*(?:正整数|自然数|整数|数)\s*的?\s*(?:总和|和)"
        ),
        _read_first_n_sum,
    ),
    Pattern(
        "nCr / nPr notation: C(10,3)",
        # Case-sensitive: the letters are the notation. A(n,r) is the Chinese notation for nPr.
        re.compile(
            rf"(?<![A-Za-z])(?P<kind>[CPA])\s*\(\s*(?P<n>{NUMBER})\s*,\s*(?P<r>{NUMBER})\s*\)"
        ),
        _read_choose_notation,
    ),
    Pattern(
        "nCr / nPr notation: 10C3",
        re.compile(r"(?<![A-Za-z0-9.])(?P<n>[0-9]+)\s*(?P<kind>[CP])\s*(?P<r>[0-9]+)(?![0-9.])"),
        _read_choose_notation,
    ),
    Pattern(
        "n choose r",
        ignoring_case(rf"(?P<n>{NUMBER})\s*(?:{english_words('choose')}|选|取)\s*(?P<r>{NUMBER})"),
        _read_n_choose_r,
    ),
    Pattern("permutations in words", _PERMUTATION_WORDS, _read_arrangements),
    Pattern("combinations in words", _COMBINATION_WORDS, _read_arrangements),
    Pattern(
        "is it prime",
        ignoring_case(english_words("prime|primality") + "|质数|素数"),
        _read_is_prime,
    ),
    Pattern(
        "hypotenuse",
        ignoring_case(english_words("hypotenuse") + "|斜边"),
        _formula(None, 2, lambda n: f"sqrt({n[0]}**2+{n[1]}**2)", "hypotenuse, sqrt(a**2+b**2)"),
    ),
    Pattern("circle", ignoring_case(english_words("circles?") + "|圆"), _read_circle),
    Pattern(
        "triangle area",
        ignoring_case(english_words("triangle") + "|三角形"),
        _formula(_AREA, 2, lambda n: f"{n[0]}*{n[1]}/2", "area of a triangle, base*height/2"),
    ),
    Pattern(
        "rectangle area",
        ignoring_case(english_words("rectangle|rectangular") + "|长方形|矩形"),
        _formula(_AREA, 2, lambda n: f"{n[0]}*{n[1]}", "area of a rectangle, length*width"),
    ),
)
