"""Parameter extraction: read a chosen tool's arguments from the user's request. No Django here.

The planner has picked a tool; this step reads its arguments from the request, in English or
Chinese, or says it cannot (`needs_llm`, with empty arguments and the reason). It never
returns a call with an empty or guessed argument, and `reason` always says what it read.

Each tool has a table of small named patterns tried in order. English words match on ASCII
word boundaries (so "summary" is not "sum", and a word touching Chinese text still counts);
Chinese words match as substrings. Quoted text ('...', "...", “...”, 「...」) wins over every
heuristic for a text argument. Requests longer than MAX_REQUEST_LENGTH are not read.

Calculator requests go through three stages:
1. whole-request patterns, each using every number in the request and no other (a sum over
   a range, nPr and nCr, isPrime, circle and triangle formulas), and refusals for maths the
   calculator does not do (derivatives, equations, prime factors);
2. rewrites, applied in order where the phrase stands, into calculator syntax
   ("2 to the power of 10" -> 2**10, "根号16" -> sqrt(16), "mean of 1,2,3" -> mean(1,2,3)),
   so that phrases compose ("2的10次方加1" -> 2**10+1); 再 and "then" close what comes
   before them ("100减去25再除以5" -> (100-25)/5);
3. the one arithmetic span of the rewritten text, which must parse in the calculator's
   language, with no other number and no operation word left outside it: anything left
   over means the request says more than the expression would, and the LLM must read it.

Numbers. A comma is a thousands separator only when every comma in the run is followed by
exactly three digits: "1,000,000" is one number, "1,2,3" and "1,000,5" are lists. The rule
cannot tell what "100,200,300" is: it reads as one number, except where a list function
(mean, gcd, ...) would get it as its only argument, and inside the parentheses of a function
that takes several arguments, where commas separate arguments as in the calculator's own
syntax. Write "100, 200, 300" (with spaces) to mean a list everywhere. Outside a function's
parentheses, a comma left after that separates numbers: "3, 4 and 5" are three numbers,
never "3,4" and 5. Chinese numerals
(三, 十二, 一百) are read where they touch a maths word (三的平方, 从一加到一百), not
elsewhere, so 一下 or 一个 stay words. English number words ("two") are not read.

Speed: every regex is compiled at import, and a rewrite runs only when the text holds one
of its keywords. Over tests/data/planner_requests.jsonl a call takes about 50 µs (median)
and 100 µs (p95) on one core; a 2,000-character request at worst a few milliseconds.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache
from typing import Any
from zoneinfo import ZoneInfo

from tools_app.builtins.calculator import (
    CONSTANTS,
    FUNCTIONS,
    CalculatorError,
    Call,
    Chain,
    Literal,
    Negate,
    Node,
    Range,
    parse,
)

MAX_REQUEST_LENGTH = 2_000


@dataclass(frozen=True, slots=True)
class Extraction:
    arguments: dict[str, Any]
    reason: str
    needs_llm: bool


def extract_arguments(tool: str, request: str) -> Extraction:
    """Return the arguments of `tool` read from the request, or why the LLM must read them."""
    extractor = EXTRACTORS.get(tool)
    if extractor is None:
        return _needs_llm(f"no extractor for tool {tool}")
    if len(request) > MAX_REQUEST_LENGTH:
        return _needs_llm(
            f"the request is {len(request)} characters long; the planner reads at most "
            f"{MAX_REQUEST_LENGTH}"
        )
    if not request.strip():
        return _needs_llm("the request is empty")
    return extractor(request)


def _found(arguments: dict[str, Any], reason: str) -> Extraction:
    return Extraction(arguments, reason, needs_llm=False)


def _needs_llm(reason: str) -> Extraction:
    return Extraction({}, f"{reason}; needs the LLM", needs_llm=True)


# ---------------------------------------------------------------------------------------
# Text


def _word(alternatives: str) -> str:
    """Return a regex for English words between ASCII word boundaries.

    `\\b` sees no boundary between "的" and "sha256": both are word characters to Python.
    """
    return rf"(?<![A-Za-z])(?:{alternatives})(?![A-Za-z])"


def _compile(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.IGNORECASE)


QUOTED = (
    r"(?<![A-Za-z0-9])'[^'\n]*'(?![A-Za-z0-9])|\"[^\"\n]*\"|“[^”]*”|‘[^’]*’|「[^」]*」"
    r"|『[^』]*』|`[^`\n]*`"
)
_QUOTED = re.compile(QUOTED)
_QUOTE_PAIRS = {"'": "'", '"': '"', "“": "”", "‘": "’", "「": "」", "『": "』", "`": "`"}


def _unquote(text: str) -> str:
    """Return text without one pair of surrounding quotes, if it has them."""
    if len(text) >= 2 and _QUOTE_PAIRS.get(text[0]) == text[-1]:
        return text[1:-1]
    return text


def _quoted(request: str) -> list[str]:
    """Return the quoted strings of the request, in order, without their quotes."""
    return [_unquote(match[0]) for match in _QUOTED.finditer(request)]


def _without_quotes(request: str) -> str:
    """Return the request with quoted strings blanked, so words inside them are not keywords."""
    return _QUOTED.sub(" ", request)


_TRAILING_PUNCTUATION = re.compile(r"[\s?？。!！.,，;；]+$")
_LEADING_NOISE = re.compile(r"^[\s:：,，]+")
_TRAILING_FILLER = _compile(
    r"(?:\s+(?:please|for\s+me|in\s+hex(?:adecimal)?|thanks|thank\s+you))+$|(?:是多少|是什么|等于多少)$"
)


def _clean(text: str) -> str:
    """Return unquoted text without the sentence's own punctuation and politeness around it."""
    text = _TRAILING_PUNCTUATION.sub("", _LEADING_NOISE.sub("", text))
    return _TRAILING_PUNCTUATION.sub("", _TRAILING_FILLER.sub("", text))


def _first_text(
    request: str, patterns: tuple[tuple[str, re.Pattern[str]], ...]
) -> tuple[str, str] | None:
    """Return (text, how it was found): quoted text first, then the first pattern that reads."""
    quoted = _quoted(request)
    if quoted:
        return quoted[0], "quoted text"
    for name, pattern in patterns:
        match = pattern.search(request)
        if match:
            text = _clean(match["text"])
            if text:
                return text, name
    return None


# ---------------------------------------------------------------------------------------
# Numbers

# One lookbehind per width: Python allows only fixed-width lookbehinds. After "1..", "5" is
# a number (the end of a range); after "3.", "14" is not (it is part of 3.14).
NUMBER = (
    r"(?:(?<![0-9)])-)?(?<![0-9])(?<![0-9]\.)"
    r"(?:[0-9]{1,3}(?:,[0-9]{3})+(?![0-9]|,[0-9])|[0-9]+)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?"
)
_NUMBER_TOKEN = re.compile(rf"(?<![A-Za-z_]){NUMBER}")
_INTEGER = re.compile(r"-?[0-9]+\Z")
_GROUPED = re.compile(r"(?<![0-9.])[0-9]{1,3}(?:,[0-9]{3})+(?![0-9]|,[0-9])")


def _plain(number: str) -> str:
    """Return a number as the calculator writes it: no thousands separators."""
    return number.replace(",", "")


def _numbers(text: str) -> list[str]:
    """Return every number in the text, separators removed, in order."""
    return [_plain(match[0]) for match in _NUMBER_TOKEN.finditer(text)]


def _operand(number: str) -> str:
    """Return a number ready to stand beside an operator: negatives in parentheses."""
    return f"({number})" if number.startswith("-") else number


_ZH_DIGITS = {"零": 0, "〇": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4}
_ZH_DIGITS |= {"五": 5, "六": 6, "七": 7, "八": 8, "九": 9}
_ZH_UNITS = {"十": 10, "百": 100, "千": 1000}
_ZH_SECTIONS = {"万": 10**4, "亿": 10**8}
_ZH_RUN = "[零〇一二两三四五六七八九十百千万亿]+"
# Numerals count as numbers only beside a maths word: 三的平方, 从一加到一百, 除以三; a run
# is read whole.
_ZH_NUMERAL_CHAR = "[零〇一二两三四五六七八九十百千万亿]"
# Not a number: 百分之 (percent), 一半 (half), 三角形 (triangle), 一些, 一样, 一般, 一起, ...
_ZH_WHOLE_RUN = (
    rf"(?<!{_ZH_NUMERAL_CHAR})(?![万亿]){_ZH_RUN}(?!{_ZH_NUMERAL_CHAR}|分之|[半角些样般起共直定切])"
)
_ZH_NUMERAL = re.compile(
    rf"(?<=[从加减乘除以到至选取和与、的是号之去上]){_ZH_WHOLE_RUN}"
    rf"|{_ZH_WHOLE_RUN}(?=[加减乘除的次到至选取和与、是阶开平立])"
)
_ARABIC_WITH_ZH_UNIT = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*(万|亿)")


def chinese_numeral_value(numeral: str) -> int:
    """Return the value of a Chinese numeral: 十二 -> 12, 一百零五 -> 105, 一〇二四 -> 1024."""
    if not any(char in _ZH_UNITS or char in _ZH_SECTIONS for char in numeral):
        return int("".join(str(_ZH_DIGITS[char]) for char in numeral))  # read digit by digit
    total = section = digit = 0
    for char in numeral:
        if char in _ZH_DIGITS:
            digit = _ZH_DIGITS[char]
        elif char in _ZH_UNITS:
            section += (digit or 1) * _ZH_UNITS[char]  # 十二: a bare 十 is one ten
            digit = 0
        else:
            total = (total + section + digit) * _ZH_SECTIONS[char]
            section = digit = 0
    return total + section + digit


def _scaled_by_zh_unit(match: re.Match[str]) -> str:
    value = Decimal(match[1]) * _ZH_SECTIONS[match[2]]
    return str(int(value)) if value == value.to_integral_value() else str(value)


# Symbols with a calculator spelling. Superscripts go first: NFKC would turn 3² into 32.
_SYMBOLS = str.maketrans(
    {"²": "**2", "³": "**3", "×": "*", "÷": "/", "π": "pi", "·": "*", "−": "-", "–": "-"}
)


def _normalise(request: str) -> str:
    """Return the request with full-width forms, maths symbols and numerals made plain."""
    text = request.strip()
    if text.isascii():
        return text
    text = unicodedata.normalize("NFKC", text.translate(_SYMBOLS))
    text = _ARABIC_WITH_ZH_UNIT.sub(_scaled_by_zh_unit, text)  # 1.5万 first: 万 is a numeral too
    return _ZH_NUMERAL.sub(lambda match: str(chinese_numeral_value(match[0])), text)


# ---------------------------------------------------------------------------------------
# Calculator, stage 1: whole-request patterns


@dataclass(frozen=True, slots=True)
class Pattern:
    """A named regex; `read` turns its match into an Extraction, or None to try the next."""

    name: str
    regex: re.Pattern[str]
    read: Callable[[re.Match[str], str], Extraction | None]


def _calculation(expression: str, reason: str) -> Extraction:
    """Return a calculator call, if the expression parses in the calculator's language."""
    try:
        parse(expression)
    except CalculatorError as error:
        return _needs_llm(f"read {expression!r}, which the calculator cannot parse ({error})")
    return _found({"expression": expression}, reason)


def _refusal(why: str) -> Callable[[re.Match[str], str], Extraction]:
    def read(match: re.Match[str], text: str) -> Extraction:
        return _needs_llm(f"{why} ({match[0].strip()!r})")

    return read


def _outside(match: re.Match[str], text: str) -> str:
    return f"{text[: match.start()]} {text[match.end() :]}"


def _uses_every_number(match: re.Match[str], text: str) -> bool:
    """Return whether the match holds every number of the request (else it says more)."""
    return not _numbers(_outside(match, text))


_SUM_QUALIFIER = _compile(
    _word(r"squares?|cubes?|odd|even|primes?|reciprocals?|multiples?|digits?")
    + "|平方|立方|奇数|偶数|质数|素数|倒数|倍数"
)


def _range_sum(low_text: str, high_text: str, text: str) -> Extraction:
    """Return the closed form of the sum of the integers low..high."""
    qualifier = _SUM_QUALIFIER.search(text)
    if qualifier:
        return _needs_llm(f"a sum of {qualifier[0]} over a range is not the plain range sum")
    low, high = _plain(low_text), _plain(high_text)
    if not (_INTEGER.match(low) and _INTEGER.match(high)):
        return _needs_llm(f"a sum from {low} to {high} needs whole-number bounds")
    a, b = sorted((int(low), int(high)))
    if a == 1:
        return _calculation(f"{b}*({b}+1)/2", f"sum of the integers 1..{b} -> n(n+1)/2 form")
    first, last = _operand(str(a)), _operand(str(b))
    return _calculation(
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
    if float(_plain(match["next"])) != float(_plain(match["a"])) + 1:
        return None
    return _range_sum(match["a"], match["b"], text)


def _read_first_n_sum(match: re.Match[str], text: str) -> Extraction | None:
    if not _uses_every_number(match, text):
        return None
    return _range_sum("1", match["n"] or match["zh"], text)


_PERMUTATION_WORDS = _compile(
    _word(r"permutations?|arrangements?|arrange[sd]?|arranging|nPr|orderings?")
    + "|排列|排法|排成|排队"
)
_COMBINATION_WORDS = _compile(
    _word(
        r"combinations?|binomial\s+coefficients?|nCr"
        r"|(?:ways|how\s+many)(?:\s+\w+){0,4}\s+(?:choose|select|pick)|committees?|teams?\s+of"
    )
    + "|组合|选法|取法|种选|种取"
)
_FROM_BETWEEN = _compile(_word(r"from|out\s+of|of|among"))


def _choose(n: str, r: str, permutation: bool, how: str) -> Extraction:
    function = "nPr" if permutation else "nCr"
    return _calculation(f"{function}({_plain(n)},{_plain(r)})", f"{how} -> {function}(n, r)")


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
    numbers = list(_NUMBER_TOKEN.finditer(text))
    permutation = _PERMUTATION_WORDS.search(text) is not None
    if len(numbers) == 1 and permutation and _INTEGER.match(numbers[0][0]):
        n = numbers[0][0]
        return _calculation(f"factorial({n})", f"arrangements of all {n} items -> factorial(n)")
    if len(numbers) != 2:
        return None
    n, r = numbers[0][0], numbers[1][0]
    if _FROM_BETWEEN.search(text[numbers[0].end() : numbers[1].start()]):
        n, r = r, n  # "3 out of 10": the pool is the second number.
    what = "permutations" if permutation else "combinations"
    return _choose(n, r, permutation, f"{what} of {_plain(r)} from {_plain(n)}")


_PRIME_OTHER_QUESTION = _compile(
    _word(
        r"primes|prime\s+factors?|factori[sz]\w*|below|under|less|between|list|how\s+many|"
        r"first|next|nth|largest|smallest|greater|up\s+to|all|twin|coprime|relatively"
    )
    + "|以内|以下|以上|之间|小于|大于|哪些|多少个|几个|列出|第|前|因数|因子|分解|互质"
)


def _read_is_prime(match: re.Match[str], text: str) -> Extraction | None:
    other = _PRIME_OTHER_QUESTION.search(text)
    if other:
        return _needs_llm(f"a question about primes beyond one number ({other[0]!r})")
    numbers = _numbers(text)
    if len(numbers) != 1 or not _INTEGER.match(numbers[0]):
        return None
    return _calculation(f"isPrime({numbers[0]})", "is it prime -> isPrime (1 yes, 0 no)")


_AREA = _compile(_word("area") + "|面积")
_RADIUS = _compile(_word("radius|diameter") + "|半径|直径")
_DIAMETER = _compile(_word("diameter") + "|直径")
_CIRCUMFERENCE = _compile(_word("circumference|perimeter") + "|周长")


def _formula(
    needs: re.Pattern[str] | None, count: int, build: Callable[[list[str]], str], what: str
) -> Callable[[re.Match[str], str], Extraction | None]:
    """Return a reader for a formula that uses exactly `count` numbers, all of the request's."""

    def read(match: re.Match[str], text: str) -> Extraction | None:
        numbers = _numbers(text)
        if len(numbers) != count or (needs is not None and not needs.search(text)):
            return None
        expression = build([_operand(number) for number in numbers])
        return _calculation(expression, f"{what} -> {expression}")

    return read


def _read_circle(match: re.Match[str], text: str) -> Extraction | None:
    numbers = _numbers(text)
    if len(numbers) != 1 or not _RADIUS.search(text):
        return None
    size, diameter = _operand(numbers[0]), _DIAMETER.search(text) is not None
    if _AREA.search(text):
        expression = f"pi*({size}/2)**2" if diameter else f"pi*{size}**2"
        return _calculation(expression, f"area of a circle, pi*r**2 -> {expression}")
    if _CIRCUMFERENCE.search(text):
        expression = f"pi*{size}" if diameter else f"2*pi*{size}"
        return _calculation(expression, f"circumference of a circle, 2*pi*r -> {expression}")
    return None


_SUM_FILLERS = (
    r"(?:\s+(?:of|up|all|the|every|each|from|consecutive|whole|natural|positive|"
    r"integers?|numbers?))*"
)
_RANGE_TO = r"\s*(?:to|through|thru|until|till|\.\.|-)\s*"

CALCULATOR_PATTERNS: tuple[Pattern, ...] = (
    Pattern(
        "prime factors",
        _compile(
            _word(r"prime\s+factors?|prime\s+factori[sz]ation|factori[sz]e") + "|质因数|因式分解"
        ),
        _refusal("prime factorisation is not a calculator function"),
    ),
    Pattern(
        "maths beyond one expression",
        _compile(
            _word(
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
        _compile(
            _word(r"sum|summation|total")
            + _SUM_FILLERS
            + rf"\s+(?P<a>{NUMBER}){_RANGE_TO}(?P<b>{NUMBER})"
        ),
        _read_range_sum,
    ),
    Pattern(
        "adding up a range",
        # "add 3 to 5" is 3+5: adding reads as a range only with "from" or "up".
        _compile(
            _word(r"add|adding")
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
        _compile(
            _word("sum|total")
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
        _compile(rf"(?P<n>{NUMBER})\s*(?:{_word('choose')}|选|取)\s*(?P<r>{NUMBER})"),
        _read_n_choose_r,
    ),
    Pattern("permutations in words", _PERMUTATION_WORDS, _read_arrangements),
    Pattern("combinations in words", _COMBINATION_WORDS, _read_arrangements),
    Pattern("is it prime", _compile(_word("prime|primality") + "|质数|素数"), _read_is_prime),
    Pattern(
        "hypotenuse",
        _compile(_word("hypotenuse") + "|斜边"),
        _formula(None, 2, lambda n: f"sqrt({n[0]}**2+{n[1]}**2)", "hypotenuse, sqrt(a**2+b**2)"),
    ),
    Pattern("circle", _compile(_word("circles?") + "|圆"), _read_circle),
    Pattern(
        "triangle area",
        _compile(_word("triangle") + "|三角形"),
        _formula(_AREA, 2, lambda n: f"{n[0]}*{n[1]}/2", "area of a triangle, base*height/2"),
    ),
    Pattern(
        "rectangle area",
        _compile(_word("rectangle|rectangular") + "|长方形|矩形"),
        _formula(_AREA, 2, lambda n: f"{n[0]}*{n[1]}", "area of a rectangle, length*width"),
    ),
)


# ---------------------------------------------------------------------------------------
# Calculator, stage 2: rewrites into calculator syntax


@dataclass(frozen=True, slots=True)
class Rewrite:
    """A named regex and what it becomes: a template (\\g<a>) or a function of the match.

    It runs only when the text holds one of its keywords (lowercase), or always if it has
    none: a substring test costs a fraction of a regex pass with lookbehinds at every place.
    """

    name: str
    keywords: tuple[str, ...]
    regex: re.Pattern[str]
    replacement: str | Callable[[re.Match[str]], str]


# An operand: a number, a parenthesised group, a call such as sqrt(16), or pi.
OPERAND = rf"(?:{NUMBER}|\([^()]*\)|(?<![A-Za-z])[A-Za-z]+\([^()]*\)|(?<![A-Za-z])pi(?![A-Za-z]))"
_A = rf"(?P<a>{OPERAND})"
_B = rf"(?P<b>{OPERAND})"

# Functions of a list of numbers: (function, English words, Chinese words).
LIST_FUNCTIONS: tuple[tuple[str, str, str], ...] = (
    (
        "gcd",
        r"gcd|gcf|hcf|greatest\s+common\s+(?:divisor|factor)|highest\s+common\s+factor",
        "最大公约数|最大公因数|最大公因子",
    ),
    ("lcm", r"lcm|(?:least|lowest)\s+common\s+multiple", "最小公倍数"),
    (
        "stddev",
        r"(?:population\s+)?(?:standard\s+deviation|std\.?\s*dev|stdev|stddev)",
        "标准差",
    ),
    ("variance", r"(?:population\s+)?variance", "方差"),
    ("median", r"median", "中位数"),
    ("mean", r"(?:arithmetic\s+)?mean|average|avg", "平均数|平均值|均值|平均"),
    ("max", r"max(?:imum)?|largest|biggest|greatest|highest", "最大值|最大数|最大"),
    ("min", r"min(?:imum)?|smallest|lowest|least", "最小值|最小数|最小"),
    # 的和, not 和 alone: 和 also joins the numbers ("48和180").
    ("sum", r"sum|total", "总和|之和|的和|求和|相加|加起来"),
    ("product", r"product", "乘积|之积|的积"),
)
_MIN_ITEMS = {"gcd": 2, "lcm": 2, "sum": 2, "product": 2}
_LIST_FUNCTION_NAMES = tuple(
    (function, re.compile(f"(?:{english}|{chinese})\\Z", re.IGNORECASE))
    for function, english, chinese in LIST_FUNCTIONS
)
_EN_LIST_WORDS = "|".join(english for _, english, _ in LIST_FUNCTIONS)
_ZH_LIST_WORDS = "|".join(chinese for _, _, chinese in LIST_FUNCTIONS)
_ZH_LIST_KEYWORDS = tuple(word for _, _, chinese in LIST_FUNCTIONS for word in chinese.split("|"))
# Keyword-first Chinese: "求平均数 1 2 3", "最大公约数：48和180".
_ZH_LEADING_LIST_WORDS = "|".join(
    word for _, _, chinese in LIST_FUNCTIONS for word in chinese.split("|") if word[0] != "的"
)
_ITEM = rf"{NUMBER}(?:\s*(?:\.\.|{_word('to|through')}|到|至|~)\s*{NUMBER})?"
_LIST_SEPARATOR = rf"(?:\s*(?:,|、|;|{_word('and')}|和|与|及|以及)\s*|\s+)"
LIST = rf"{_ITEM}(?:{_LIST_SEPARATOR}{_ITEM})*"
# Where a list starts, not at its second item: a pattern that ends after the list (1,2,3的平均数)
# would otherwise retry from every item of a long list, which is quadratic.
_LIST_START = (
    r"(?<![0-9.])(?<![0-9.][,、;\s和与及到至~])(?<![0-9.][,、;]\s)(?<![0-9.]\sand\s)"
    r"(?<![0-9.]\sto\s)"
)
_ITEM_PARTS = _compile(rf"(?P<a>{NUMBER})(?:\s*(?:\.\.|to|through|到|至|~)\s*(?P<b>{NUMBER}))?")
# Between a list function's name and its numbers: words, or a parenthesised name "(GCD)".
_FILLER = r"(?:[^0-9()+*/^=]|\([A-Za-z\s]*\))"
_LIST_QUALIFIER = _compile(
    _word(
        r"squares?|squared|cubes?|roots?|logs?|logarithms?|reciprocals?|odd|even|primes?|"
        r"digits?|absolute|between"
    )
    + "|平方|立方|根|对数|倒数|奇数|偶数|质数|素数|绝对值|之间"
)
_SAMPLE = _compile(_word("sample") + "|样本")


def _list_function(name: str) -> str:
    return next(function for function, words in _LIST_FUNCTION_NAMES if words.match(name.strip()))


def _list_items(text: str) -> list[str]:
    """Return the items of a list as calculator arguments: numbers and ranges a..b."""
    items = [
        f"{_plain(m['a'])}..{_plain(m['b'])}" if m["b"] else _plain(m["a"])
        for m in _ITEM_PARTS.finditer(text)
    ]
    if len(items) == 1 and "," in text and ".." not in items[0]:
        # "mean of 100,200,300": nobody asks for the mean of one number.
        items = [part.strip() for part in text.split(",")]
    return items


def _list_call(match: re.Match[str]) -> str:
    """Rewrite "mean of 1,2,3" to mean(1,2,3), or leave the text as it is."""
    function = _list_function(match["fn"])
    filler = match.groupdict().get("filler") or ""
    if _LIST_QUALIFIER.search(filler) or (
        function in ("variance", "stddev") and _SAMPLE.search(match.string)
    ):
        return match[0]  # "sum of the squares of ...", "sample variance": left for the LLM.
    items = _list_items(match["list"])
    if len(items) < _MIN_ITEMS.get(function, 1):
        return match[0]
    if function == "product":
        if any(".." in item for item in items):
            return match[0]  # The calculator has no product over a range.
        return "(" + "*".join(_operand(item) for item in items) + ")"
    return f"{function}({','.join(items)})"


def _separators_removed(match: re.Match[str]) -> str:
    """Remove thousands separators, except inside a call that takes several arguments."""
    before = match.string[: match.start()]
    depth, position = 0, len(before)
    while position > 0:  # find the innermost unclosed parenthesis before the number
        position -= 1
        if before[position] == ")":
            depth += 1
        elif before[position] == "(":
            if depth == 0:
                name = re.search(r"([A-Za-z]+)\s*$", before[:position])
                function = FUNCTIONS.get(name[1].lower()) if name else None
                if function is not None and function.max_args != 1:
                    return match[0]
                break
            depth -= 1
    return _plain(match[0])


_OPERATOR_WORD = (
    r"(?:加上|加|减去|减|乘以|乘上|乘|除以|\*\*|[-+*/^%]|"
    + _word(r"plus|minus|times|multiplied\s+by|divided\s+by|over")
    + ")"
)
_THEN = _word(r"(?:and\s+)?then")
# A run of arithmetic from its start (not from inside "sqrt(16)+2" or "2**10").
_OPERATION_CHAIN = (
    r"(?<![-+*/^%0-9.()A-Za-z加减乘除以上去])(?<![-+*/^%]\s)(?<!plus\s)(?<!minus\s)(?<!times\s)"
    rf"(?<!by\s)(?<!over\s)[0-9.()]+(?:\s*{_OPERATOR_WORD}\s*[0-9.()]+)+"
)


def _between(left: str) -> str:
    """Return a regex for an operator word standing between two operands."""
    return (
        rf"(?:(?<=[0-9)])|(?<=pi))\s*(?:{left})\s*"
        rf"(?=[-0-9(√]|pi(?![A-Za-z])|[A-Za-z]+\s*\()"
    )


_PERCENT = _word(r"percent|per\s+cent")
_TRIG = {"正弦": "sin", "余弦": "cos", "正切": "tan"}

REWRITES: tuple[Rewrite, ...] = (
    Rewrite(
        "list function",
        (),
        _compile(
            rf"(?<![A-Za-z])(?P<fn>{_EN_LIST_WORDS})(?![A-Za-z])(?P<filler>{_FILLER}{{0,40}}?)"
            rf"(?P<list>{LIST})"
        ),
        _list_call,
    ),
    Rewrite(
        "list function",
        _ZH_LIST_KEYWORDS,
        _compile(
            rf"{_LIST_START}(?P<list>{LIST})\s*(?:这[几些]?个数|这组数|这些数)?\s*(?:中|里|之中|当中)?"
            r"\s*的?\s*"
            rf"(?P<fn>{_ZH_LIST_WORDS})"
        ),
        _list_call,
    ),
    Rewrite(
        "list function",
        _ZH_LIST_KEYWORDS,
        _compile(
            rf"(?P<fn>{_ZH_LEADING_LIST_WORDS})\s*(?:是|为|[:：])?(?P<filler>[^0-9\-]{{0,8}}?)"
            rf"(?P<list>{LIST})"
        ),
        _list_call,
    ),
    Rewrite("thousands separators", (",",), _GROUPED, _separators_removed),
    Rewrite("负 as minus", ("负",), re.compile(r"负\s*(?=[0-9])"), "-"),
    Rewrite("implicit times pi", ("pi",), re.compile(r"(?<=[0-9)])\s*(?=pi(?![A-Za-z]))"), "*"),
    Rewrite(
        "square root",
        ("sqrt", "root"),
        _compile(_word(r"(?:the\s+)?(?:square\s+root|sqrt)") + rf"(?:\s+of)?\s+{_A}"),
        r"sqrt(\g<a>)",
    ),
    Rewrite(
        "cube root",
        ("root",),
        _compile(_word(r"(?:the\s+)?cube\s+root") + rf"(?:\s+of)?\s+{_A}"),
        r"\g<a>**(1/3)",
    ),
    Rewrite("平方根", ("平方根",), re.compile(rf"{_A}\s*的?\s*(?:算术)?平方根"), r"sqrt(\g<a>)"),
    Rewrite("开平方", ("开",), re.compile(rf"{_A}\s*开\s*(?:平方|根号|方)根?"), r"sqrt(\g<a>)"),
    Rewrite("立方根", ("立方根",), re.compile(rf"{_A}\s*的?\s*立方根"), r"\g<a>**(1/3)"),
    Rewrite(
        "三次根号", ("根号",), re.compile(rf"(?:三|3)\s*次\s*根号\s*下?\s*{_A}"), r"\g<a>**(1/3)"
    ),
    Rewrite("根号", ("根号",), re.compile(rf"(?:二次)?根号\s*下?\s*{_A}"), r"sqrt(\g<a>)"),
    Rewrite("√", ("√",), re.compile(rf"√\s*{_A}"), r"sqrt(\g<a>)"),
    Rewrite(
        "factorial of n",
        ("factorial",),
        _compile(_word("factorial") + rf"\s+(?:of\s+)?(?:the\s+)?(?:number\s+|integer\s+)?{_A}"),
        r"factorial(\g<a>)",
    ),
    Rewrite(
        "n factorial",
        ("factorial",),
        _compile(rf"{_A}\s*{_word('factorial')}"),
        r"factorial(\g<a>)",
    ),
    Rewrite("n!", ("!",), re.compile(rf"{_A}\s*!(?!=)"), r"factorial(\g<a>)"),
    Rewrite("阶乘", ("阶乘",), re.compile(rf"{_A}\s*的?\s*阶乘"), r"factorial(\g<a>)"),
    Rewrite(
        "power of a raised to b",
        ("power",),
        _compile(
            _word(r"(?:the\s+)?power\s+of")
            + rf"\s+{_A}\s+raised\s+to\s+(?:the\s+)?(?:power\s+(?:of\s+)?)?{_B}"
        ),
        r"\g<a>**\g<b>",
    ),
    Rewrite(
        "raised to",
        ("raised",),
        _compile(
            rf"{_A}\s+raised\s+to\s+(?:the\s+)?(?:power\s+(?:of\s+)?)?{_B}"
            r"(?:\s*(?:st|nd|rd|th)(?![A-Za-z]))?(?:\s+power)?"
        ),
        r"\g<a>**\g<b>",
    ),
    Rewrite(
        "to the power of",
        ("power",),
        _compile(rf"{_A}\s+to\s+the\s+power\s+(?:of\s+)?{_B}"),
        r"\g<a>**\g<b>",
    ),
    Rewrite(
        "to the nth power",
        ("to the",),
        _compile(
            rf"{_A}\s+to\s+the\s+{_B}\s*(?:(?:st|nd|rd|th)(?![A-Za-z])(?:\s+power)?|\s+power)"
        ),
        r"\g<a>**\g<b>",
    ),
    Rewrite("squared", ("squared",), _compile(rf"{_A}\s+{_word('squared')}"), r"\g<a>**2"),
    Rewrite("cubed", ("cubed",), _compile(rf"{_A}\s+{_word('cubed')}"), r"\g<a>**3"),
    Rewrite(
        "square of",
        ("square",),
        _compile(_word(r"(?:the\s+)?square\s+of") + rf"\s+{_A}"),
        r"\g<a>**2",
    ),
    Rewrite(
        "cube of", ("cube",), _compile(_word(r"(?:the\s+)?cube\s+of") + rf"\s+{_A}"), r"\g<a>**3"
    ),
    Rewrite("次方", ("次",), re.compile(rf"{_A}\s*的\s*{_B}\s*次(?:方|幂)?"), r"\g<a>**\g<b>"),
    Rewrite("平方", ("平方",), re.compile(rf"{_A}\s*的?\s*平方(?!根)"), r"\g<a>**2"),
    Rewrite("立方", ("立方",), re.compile(rf"{_A}\s*的?\s*立方(?!根)"), r"\g<a>**3"),
    Rewrite(
        "percent of",
        ("%", "per"),
        _compile(rf"(?P<a>{NUMBER})\s*(?:%|{_PERCENT})\s+of\s+{_B}"),
        r"\g<b>*\g<a>/100",
    ),
    Rewrite(
        "的百分之",
        ("百分之",),
        re.compile(rf"{_B}\s*的\s*百分之\s*(?P<a>{NUMBER})"),
        r"\g<b>*\g<a>/100",
    ),
    Rewrite("的n%", ("%",), re.compile(rf"{_B}\s*的\s*(?P<a>{NUMBER})\s*%"), r"\g<b>*\g<a>/100"),
    Rewrite("百分之", ("百分之",), re.compile(rf"百分之\s*(?P<a>{NUMBER})"), r"\g<a>/100"),
    Rewrite(
        "percent",
        ("per",),
        _compile(rf"(?P<a>{NUMBER})\s*{_PERCENT}"),
        r"\g<a>/100",
    ),
    Rewrite(
        "remainder",
        ("remainder",),
        _compile(
            _word(r"(?:the\s+)?remainder\s+(?:of|when)")
            + rf"\s+{_A}\s+(?:is\s+)?divided\s+by\s+{_B}"
        ),
        r"\g<a>%\g<b>",
    ),
    Rewrite(
        "mod", ("mod",), _compile(rf"{_A}\s*{_word('mod|modulo|modulus')}\s*{_B}"), r"\g<a>%\g<b>"
    ),
    Rewrite(
        "余数",
        ("余",),
        re.compile(rf"{_A}\s*除以\s*{_B}\s*(?:的|后的|之后的)?\s*余数?"),
        r"\g<a>%\g<b>",
    ),
    Rewrite("取模", ("取",), re.compile(rf"{_A}\s*对\s*{_B}\s*(?:取模|取余|求余)"), r"\g<a>%\g<b>"),
    Rewrite("模", ("模",), re.compile(rf"{_A}\s*模\s*{_B}"), r"\g<a>%\g<b>"),
    Rewrite(
        "log base b",
        ("log",),
        _compile(_word(r"log(?:arithm)?") + rf"\s*(?:base|_)\s*(?P<b>{NUMBER})\s*(?:of\s+)?{_A}"),
        r"log(\g<a>,\g<b>)",
    ),
    Rewrite(
        "log of a base b",
        ("log",),
        _compile(
            _word(r"(?:the\s+)?log(?:arithm)?")
            + rf"\s+of\s+{_A}\s+(?:to\s+|in\s+|with\s+)?(?:the\s+)?base\s+(?P<b>{NUMBER})"
        ),
        r"log(\g<a>,\g<b>)",
    ),
    Rewrite(
        "natural log",
        ("log", "ln"),
        _compile(_word(r"(?:the\s+)?(?:natural\s+log(?:arithm)?|ln)") + rf"\s+(?:of\s+)?{_A}"),
        r"ln(\g<a>)",
    ),
    Rewrite(
        "log (base 10)",
        ("log",),
        _compile(_word(r"(?:the\s+)?(?:common\s+)?log(?:arithm)?") + rf"\s+(?:of\s+)?{_A}"),
        r"log(\g<a>)",
    ),
    Rewrite(
        "以b为底的对数",
        ("为底",),
        re.compile(rf"以\s*(?P<b>{NUMBER})\s*为底\s*(?:的)?\s*{_A}\s*的\s*对数"),
        r"log(\g<a>,\g<b>)",
    ),
    Rewrite(
        "以b为底的对数",
        ("为底",),
        re.compile(rf"{_A}\s*以\s*(?P<b>{NUMBER})\s*为底\s*的?\s*对数"),
        r"log(\g<a>,\g<b>)",
    ),
    Rewrite("自然对数", ("自然对数",), re.compile(rf"{_A}\s*的\s*自然对数"), r"ln(\g<a>)"),
    Rewrite(
        "常用对数",
        ("常用对数", "lg"),
        re.compile(rf"{_A}\s*的\s*常用对数|lg\s*{_B}"),
        r"log(\g<a>\g<b>)",
    ),
    Rewrite(
        "trigonometry in degrees",
        ("sin", "cos", "tan"),
        _compile(
            r"(?<![A-Za-z])(?P<f>sin|cos|tan)(?:e|ine|gent)?(?![A-Za-z])\s*(?:of\s+)?\(?\s*"
            rf"(?P<a>{NUMBER})\s*(?:degrees?|deg|°|度)\s*\)?"
        ),
        r"\g<f>(\g<a>*pi/180)",
    ),
    Rewrite(
        "三角函数 (度)",
        ("正弦", "余弦", "正切"),
        re.compile(rf"(?P<a>{NUMBER})\s*(?:度|°)\s*角?\s*的\s*(?P<f>正弦|余弦|正切)"),
        lambda match: f"{_TRIG[match['f']]}({match['a']}*pi/180)",
    ),
    Rewrite(
        "trigonometry",
        ("sin", "cos", "tan"),
        _compile(r"(?<![A-Za-z])(?P<f>sin|cos|tan)(?:e|ine|gent)?(?![A-Za-z])\s+(?:of\s+)?" + _A),
        r"\g<f>(\g<a>)",
    ),
    Rewrite(
        "absolute value",
        ("absolute",),
        _compile(_word(r"(?:the\s+)?absolute\s+value\s+of") + rf"\s+{_A}"),
        r"abs(\g<a>)",
    ),
    Rewrite("绝对值", ("绝对值",), re.compile(rf"{_A}\s*的\s*绝对值"), r"abs(\g<a>)"),
    Rewrite(
        "add a and b",
        ("add",),
        _compile(_word("add") + rf"\s+{_A}\s+(?:and|to|plus)\s+{_B}"),
        r"(\g<a>+\g<b>)",
    ),
    Rewrite(
        "subtract a from b",
        ("subtract",),
        _compile(_word("subtract") + rf"\s+{_A}\s+from\s+{_B}"),
        r"(\g<b>-\g<a>)",
    ),
    Rewrite(
        "multiply a by b",
        ("multiply",),
        _compile(_word("multiply") + rf"\s+{_A}\s+(?:by|and|with|times)\s+{_B}"),
        r"(\g<a>*\g<b>)",
    ),
    Rewrite(
        "divide a by b",
        ("divide",),
        _compile(_word("divide") + rf"\s+{_A}\s+by\s+{_B}"),
        r"(\g<a>/\g<b>)",
    ),
    Rewrite(
        "difference",
        ("difference",),
        _compile(_word(r"(?:the\s+)?difference\s+(?:between|of)") + rf"\s+{_A}\s+and\s+{_B}"),
        r"(\g<a>-\g<b>)",
    ),
    Rewrite(
        "quotient",
        ("quotient",),
        _compile(_word(r"(?:the\s+)?quotient\s+of") + rf"\s+{_A}\s+(?:and|by|divided\s+by)\s+{_B}"),
        r"(\g<a>/\g<b>)",
    ),
    Rewrite("half of", ("half",), _compile(_word(r"half\s+of") + rf"\s+{_A}"), r"(\g<a>/2)"),
    Rewrite(
        "double", ("double", "twice"), _compile(_word(r"double|twice") + rf"\s+{_A}"), r"(2*\g<a>)"
    ),
    Rewrite("倍", ("倍",), re.compile(rf"{_A}\s*的\s*(?P<b>{NUMBER})\s*倍"), r"\g<a>*\g<b>"),
    Rewrite("一半", ("一半",), re.compile(rf"{_A}\s*的\s*一半"), r"(\g<a>/2)"),
    Rewrite("差", ("差",), re.compile(rf"{_A}\s*(?:和|与)\s*{_B}\s*的\s*差"), r"(\g<a>-\g<b>)"),
    Rewrite("商", ("商",), re.compile(rf"{_A}\s*(?:和|与)\s*{_B}\s*的\s*商"), r"(\g<a>/\g<b>)"),
    Rewrite("除 (b÷a)", ("除",), re.compile(rf"{_A}\s*除(?!以)\s*{_B}"), r"(\g<b>/\g<a>)"),
    Rewrite(
        "再/then: what came before first",
        ("再", "然后", "之后", "then"),
        # "100减去25再除以5" is (100-25)/5: 再 and "then" close the operations before them.
        _compile(
            rf"(?P<before>{_OPERATION_CHAIN})\s*,?\s*(?:再|然后再?|之后再?|{_THEN})"
            rf"\s*(?={_OPERATOR_WORD})"
        ),
        r"(\g<before>)",
    ),
    Rewrite("plus", ("plus", "added"), _compile(_between(_word(r"plus|added\s+to"))), "+"),
    Rewrite("minus", ("minus", "less"), _compile(_between(_word(r"minus|less"))), "-"),
    Rewrite(
        "times",
        ("times", "multiplied", "x"),
        _compile(_between(_word(r"times|multiplied\s+by|x"))),
        "*",
    ),
    Rewrite(
        "divided by", ("divided", "over"), _compile(_between(_word(r"divided\s+by|over"))), "/"
    ),
    Rewrite("加", ("加",), re.compile(_between("加上|加")), "+"),
    Rewrite("减", ("减",), re.compile(_between("减去|减")), "-"),
    Rewrite("乘", ("乘",), re.compile(_between("乘以|乘上|乘")), "*"),
    Rewrite("除以", ("除以",), re.compile(_between("除以")), "/"),
)


def _rewrite(text: str) -> tuple[str, list[str]]:
    """Return the text in calculator syntax where phrases allow, and the rewrites applied."""
    applied: list[str] = []
    lowered = text.lower()
    for rewrite in REWRITES:
        if rewrite.keywords and not any(keyword in lowered for keyword in rewrite.keywords):
            continue
        rewritten = rewrite.regex.sub(rewrite.replacement, text)
        if rewritten != text:
            text, lowered = rewritten, rewritten.lower()
            if rewrite.name not in applied:
                applied.append(rewrite.name)
    return text, applied


# ---------------------------------------------------------------------------------------
# Calculator, stage 3: the expression in the rewritten text

_NAMES = "|".join(sorted([function.name for function in FUNCTIONS.values()] + list(CONSTANTS)))
_SPAN = _compile(rf"(?:(?<![A-Za-z])(?:{_NAMES})(?![A-Za-z])|[0-9.+\-*/%^(),\s])+")
_HAS_DIGIT = re.compile("[0-9]")
_HAS_OPERATION = _compile(r"[0-9.)a-z]\s*[-+*/%^]|[a-z]\s*\(")
_OPERATION_WORDS = _compile(
    _word(
        r"plus|minus|times|divided|multiplied|multiply|divide|add|subtract|power|squared?|"
        r"cubed?|root|sqrt|factorial|log|logarithm|ln|sin|cos|tan|sine|cosine|tangent|mean|"
        r"average|median|variance|deviation|sum|total|product|difference|quotient|percent|"
        r"mod|modulo|remainder|gcd|lcm|prime|half|double|twice"
    )
    + "|加|减|乘|除|次方|次幂|平方|立方|根号|阶乘|对数|平均|余数|倍|方差|标准差|中位数|公约数"
    + "|公倍数|质数|素数|百分之|开方|正弦|余弦|正切|绝对值|再|然后|"
    + _word("then")
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
        if _HAS_DIGIT.search(text, start, end)
    ]


def _expression_in(text: str, applied: list[str]) -> Extraction:
    """Return the request's one arithmetic expression, or why there is none to trust."""
    where = _spans(text)
    spans = [text[start:end] for start, end in where]
    if not spans:
        return _needs_llm("no number found in the request")
    outside = text
    for start, end in reversed(where):  # from the end, so earlier positions stay valid
        outside = f"{outside[:start]} {outside[end:]}"
    leftover = _OPERATION_WORDS.search(outside)
    if leftover:
        place = f"the expression {_trimmed(spans[0])}" if len(spans) == 1 else "any expression"
        return _needs_llm(f"{leftover[0]!r} is left outside {place}")
    if len(spans) > 1:
        parts = ", ".join(repr(_trimmed(span)) for span in spans[:4])
        more = f" and {len(spans) - 4} more" if len(spans) > 4 else ""
        return _needs_llm(f"numbers in several places ({parts}{more}), not one expression")
    expression = _trimmed(spans[0])
    if not _HAS_OPERATION.search(expression):
        return _needs_llm(f"only the number {expression}, no operation on it")
    how = f"read {', '.join(applied)}" if applied else "an arithmetic expression"
    return _calculation(expression, f"{how} -> {expression}")


def extract_calculation(request: str) -> Extraction:
    """Return the calculator's expression for an English or Chinese request."""
    text = _normalise(request)
    for pattern in CALCULATOR_PATTERNS:
        match = pattern.regex.search(text)
        if match:
            found = pattern.read(match, text)
            if found is not None:
                return found
    return _expression_in(*_rewrite(text))


# ---------------------------------------------------------------------------------------
# hash_tool

_BASE64 = r"base\s*-?\s*64"
HASH_OPERATIONS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "base64_decode",
        _compile(
            rf"{_BASE64}.{{0,40}}?(?:decod|解码|还原)|(?:decod|解码|还原).{{0,40}}?{_BASE64}"
            rf"|from\s+{_BASE64}"
        ),
    ),
    ("base64_encode", _compile(_BASE64)),
    ("sha512", _compile(r"(?<![A-Za-z0-9])sha[-_ ]?512(?![0-9])")),
    ("sha256", _compile(r"(?<![A-Za-z0-9])sha[-_ ]?256(?![0-9])")),
    ("sha1", _compile(r"(?<![A-Za-z0-9])sha[-_ ]?1(?![0-9])")),
    ("md5", _compile(r"(?<![A-Za-z0-9])md[-_ ]?5(?![0-9])")),
)
_HASH_KEY = rf"(?:{_BASE64}|sha[-_ ]?(?:512|256|1)|md[-_ ]?5)"
_HASH_WORDS = _compile(_word(r"hash|hashes|digest|checksum|encrypt") + "|哈希|散列|摘要|加密")
_HASH_TEXT: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "text after 把/将/对",
        _compile(
            r"(?:把|将|对)\s*(?P<text>.+?)\s*(?:转成|转换成|转换为|转为|转化为|变成|编码成|编码为"
            r"|解码成|解码为|编码|解码|进行|做|用|从|求|计算|生成|取|加密|哈希)"
        ),
    ),
    (
        "text before 的",
        _compile(
            r"^\s*(?:请|帮我|帮忙)?\s*(?:计算|求|生成|获取|算出?|得到|给出|输出|给我)?\s*(?:一下)?"
            rf"\s*(?:字符串|文本|单词)?\s*(?P<text>.+?)\s*的\s*{_HASH_KEY}"
        ),
    ),
    (
        "text after 'of'",
        _compile(
            _HASH_KEY
            + r"(?:\s+(?:hash|digest|checksum|sum|value|encoding|encoded|encode|decoding|decoded"
            r"|decode|string|code|version|representation))*\s+(?:of|for|on)\s+(?:the\s+)?"
            r"(?:(?:string|text|word|phrase|message|input|data|value)\s+)?[:：]?\s*(?P<text>.+?)\s*$"
        ),
    ),
    (
        "text between the verb and the algorithm",
        _compile(
            r"^\s*(?:please\s+)?(?:(?:can|could|would)\s+you\s+)?(?:please\s+)?"
            r"(?:encode|decode|hash|convert|turn|compute|calculate|get|give\s+me|generate|make)"
            r"\s+(?:the\s+)?(?:(?:string|text|word|phrase|message)\s+)?(?P<text>.+?)\s+"
            rf"(?:to|into|in|with|using|as|from|by)\s+(?:the\s+)?(?:an?\s+)?{_HASH_KEY}"
        ),
    ),
    (
        "text after the algorithm",
        _compile(
            _HASH_KEY + r"(?:[\s-]*(?:hash|digest|checksum|encode|encoding|decode|decoding"
            r"|编码|解码|加密|哈希|值|摘要|一下))*\s*[:：]?\s*(?:the\s+)?(?:(?:string|text|word)\s+)?"
            r"(?P<text>.+?)\s*$"
        ),
    ),
)


def extract_hash(request: str) -> Extraction:
    """Return hash_tool's operation and text."""
    keywords = _without_quotes(request)
    operations = [name for name, regex in HASH_OPERATIONS if regex.search(keywords)]
    if "base64_decode" in operations:
        operations.remove("base64_encode")
    if not operations:
        if _HASH_WORDS.search(keywords):
            return _needs_llm("no hash algorithm named (md5, sha1, sha256 or sha512)")
        return _needs_llm("no hash or Base64 operation named")
    if len(operations) > 1:
        return _needs_llm(f"several operations named ({', '.join(operations)})")
    found = _first_text(request, _HASH_TEXT)
    if found is None or not found[0]:
        return _needs_llm(f"{operations[0]} named but no text to apply it to")
    text, how = found
    return _found({"operation": operations[0], "text": text}, f"{operations[0]} of the {how}")


# ---------------------------------------------------------------------------------------
# string_utils

STRING_OPERATIONS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "title",
        _compile(
            _word(
                r"title[\s-]?case|capitali[sz]e\s+(?:each|every|all\s+the|the\s+first\s+letter"
                r"\s+of\s+(?:each|every))\s+words?"
            )
            + "|首字母大写|标题格式|每个单词首字母"
        ),
    ),
    (
        "upper",
        _compile(_word(r"upper[\s-]?case|uppercase|upper|all\s+caps|capital\s+letters") + "|大写"),
    ),
    ("lower", _compile(_word(r"lower[\s-]?case|lowercase|lower") + "|小写")),
    (
        "trim",
        _compile(
            _word(r"trim|strip") + "|首尾空格|两端空格|前后空格|两边空格|去空格|去掉空格|去除空格"
        ),
    ),
    (
        "length",
        _compile(
            _word(
                r"length|how\s+many\s+(?:characters|chars|letters)|count\s+(?:the\s+)?"
                r"(?:characters|chars|letters)|number\s+of\s+(?:characters|chars|letters)|how\s+long"
            )
            + "|长度|多少个字符|几个字符|字符数|多长"
        ),
    ),
    (
        "reverse",
        _compile(_word(r"revers\w*|backwards?") + "|反转|倒序|逆序|颠倒|倒过来|反过来|倒着"),
    ),
    ("replace", _compile(_word("replace") + "|替换")),
    ("split", _compile(_word("split") + "|拆分|分割|切分")),
    ("join", _compile(_word("join") + "|拼接|连接")),
    (
        "substring",
        _compile(
            _word(r"(?:first|last)\s+[0-9]+\s+(?:characters|chars|letters)|substring")
            + "|(?:前|后|最后)\\s*(?:[0-9]+|[一二两三四五六七八九十]+)\\s*个?\\s*(?:字符|字母)"
        ),
    ),
)
_STRING_KEY = (
    r"(?:title[\s-]?case|upper[\s-]?case|lower[\s-]?case|uppercase|lowercase|upper|lower|"
    r"all\s+caps|trim|strip|length|reverse[ds]?|reversing|how\s+long|"
    r"how\s+many\s+(?:characters|chars|letters)|count\s+(?:the\s+)?(?:characters|chars|letters)|"
    r"number\s+of\s+(?:characters|chars|letters))"
)
_ZH_STRING_VERB = (
    r"(?:转成|转换成|转换为|转为|转化为|变成|改成|改为|反转|倒过来|颠倒|倒序|逆序|反过来"
    r"|去掉|去除|转)"
)
_STRING_TEXT: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "text after 把/将",
        _compile(rf"(?:把|将)\s*(?P<text>.+?)\s*(?:全部|都)?\s*{_ZH_STRING_VERB}"),
    ),
    (
        "text before 的",
        _compile(
            r"^\s*(?:请|帮我)?\s*(?:计算|求|统计|算|获取)?\s*(?:一下)?\s*(?:字符串|文本|单词)?"
            r"\s*(?P<text>.+?)\s*的\s*(?:长度|字符数|大写|小写|反转|倒序)"
        ),
    ),
    (
        "text after the operation",
        _compile(
            r"(?:反转|倒序|逆序|颠倒|转大写|转小写|转成大写|转成小写|大写|小写|长度|去掉首尾空格"
            r"|去除首尾空格|去空格)\s*(?:一下)?\s*(?:字符串|文本)?\s*[:：]?\s*(?P<text>.+)$"
        ),
    ),
    (
        "text before the operation",
        _compile(
            r"^\s*(?:字符串|文本)?\s*(?P<text>.+?)\s*(?:(?:转成?|转换成?|变成|改成)\s*(?:大写|小写)"
            r"|(?:反转|倒过来|颠倒|倒序|逆序|反过来)\s*$)"
        ),
    ),
    (
        "text between the verb and the case",
        _compile(
            r"^\s*(?:please\s+)?(?:(?:can|could|would)\s+you\s+)?(?:please\s+)?"
            r"(?:convert|turn|change|make|transform|put|write|render)\s+(?:the\s+)?"
            r"(?:(?:string|text|word|phrase|sentence)\s+)?(?P<text>.+?)\s+(?:(?:to|into|in)\s+)?"
            r"(?:all\s+)?(?:upper|lower|title|uppercase|lowercase)"
        ),
    ),
    (
        "text after the operation",
        _compile(
            _word(_STRING_KEY)
            + r"(?:\s+(?:case|of|for|in|is|are|does|do|has|have|there|on|to|letters|characters))*"
            r"(?:\s+(?:the|this)\s+(?:string|text|word|phrase|sentence))?\s*[:：]?\s+(?P<text>.+?)"
            r"(?:\s+(?:have|has|contain|contains|backwards?))?\s*$"
        ),
    ),
)
_QUOTE_OR_WORD = rf"(?:{QUOTED}|\S+)"
_REPLACE_PATTERNS: tuple[re.Pattern[str], ...] = (
    _compile(
        rf"replace\s+(?:all\s+)?(?:the\s+)?(?:occurrences\s+of\s+)?(?P<old>{_QUOTE_OR_WORD})\s+"
        rf"(?:with|by)\s+(?P<new>{_QUOTE_OR_WORD})\s+in\s+(?:the\s+)?(?:(?:string|text)\s+)?"
        rf"(?P<text>.+?)\s*$"
    ),
    _compile(
        rf"in\s+(?:the\s+)?(?:(?:string|text)\s+)?(?P<text>{QUOTED}|.+?)\s*,?\s*replace\s+"
        rf"(?:all\s+)?(?P<old>{_QUOTE_OR_WORD})\s+(?:with|by)\s+(?P<new>{_QUOTE_OR_WORD})\s*$"
    ),
    _compile(
        r"(?:把|将)\s*(?P<text>.+?)\s*(?:中|里|里面)的?\s*(?P<old>.+?)\s*(?:全部|都)?\s*替换(?:成|为)"
        r"\s*(?P<new>.+?)\s*$"
    ),
)
_SEPARATOR_NAMES = {
    "comma": ",",
    "commas": ",",
    "逗号": ",",
    "space": " ",
    "spaces": " ",
    "空格": " ",
    "semicolon": ";",
    "semicolons": ";",
    "分号": ";",
    "dash": "-",
    "dashes": "-",
    "hyphen": "-",
    "hyphens": "-",
    "横线": "-",
    "pipe": "|",
    "竖线": "|",
    "colon": ":",
    "冒号": ":",
    "slash": "/",
    "斜杠": "/",
    "newline": "\n",
    "newlines": "\n",
    "换行": "\n",
    "换行符": "\n",
    "dot": ".",
    "period": ".",
    "点": ".",
}
_SPLIT_PATTERNS: tuple[re.Pattern[str], ...] = (
    _compile(
        r"split\s+(?:up\s+)?(?:the\s+)?(?:(?:string|text)\s+)?(?P<text>.+?)\s+"
        r"(?:by|on|at|with|using)\s+(?:the\s+|a\s+|each\s+|every\s+)?(?P<sep>.+?)\s*$"
    ),
    _compile(
        r"split\s+(?:up\s+)?(?:the\s+)?(?:(?:string|text)\s+)?(?P<text>.+?)\s+into\s+"
        r"(?P<into>words|tokens|characters|chars|letters)\s*$"
    ),
    _compile(
        r"(?:用|按|按照|以)\s*(?P<sep>.+?)\s*(?:来)?(?:分割|拆分|切分|分隔)\s*(?:字符串|文本)?"
        r"\s*[:：]?\s*(?P<text>.+)$"
    ),
    _compile(
        r"(?:把|将)\s*(?P<text>.+?)\s*(?:用|按|按照|以)\s*(?P<sep>.+?)\s*(?:来)?(?:分割|拆分|切分|分隔)"
    ),
)
_JOIN_PATTERN = _compile(
    rf"join\s+(?:the\s+)?(?:(?:words|strings|items)\s+)?(?P<items>.+?)\s+(?:with|using|by)\s+"
    rf"(?:an?\s+)?(?P<sep>{QUOTED}|\S+)\s*$"
)
_SUBSTRING_PATTERNS: tuple[re.Pattern[str], ...] = (
    _compile(
        r"(?P<side>first|last)\s+(?P<n>[0-9]+)\s+(?:characters|chars|letters)\s+(?:of|in|from)\s+"
        r"(?:the\s+)?(?:(?:string|text|word)\s+)?(?P<text>.+?)\s*$"
    ),
    _compile(
        r"^\s*(?:请|帮我)?\s*(?:取|截取|获取|提取|求|取出)?\s*(?:一下)?\s*(?:字符串|文本)?\s*"
        r"(?P<text>.+?)\s*的\s*(?P<side>前|后|最后)\s*(?P<n>[0-9]+|[一二两三四五六七八九十]+)\s*个?"
        r"\s*(?:字符|字母|字)"
    ),
)


def _separator(raw: str) -> str | None:
    """Return the separator a request names ("comma", "逗号", "'-'"), or None if unclear."""
    text = _clean(raw)
    if _QUOTED.fullmatch(text):
        return _unquote(text)
    named = _SEPARATOR_NAMES.get(text.lower().removesuffix("符号").removesuffix("符"))
    if named is not None:
        return named
    return text if len(text) == 1 and not text.isalnum() else None


def _read_replace(request: str) -> Extraction:
    for pattern in _REPLACE_PATTERNS:
        match = pattern.search(request)
        if match:
            old, new = _unquote(_clean(match["old"])), _unquote(_clean(match["new"]))
            text = _unquote(_clean(match["text"]))
            if old and text:
                arguments = {"operation": "replace", "text": text, "old": old, "new": new}
                return _found(arguments, f"replace {old!r} with {new!r}")
    return _needs_llm("replace named but not which text, what to find and what to put")


def _read_split(request: str) -> Extraction:
    for pattern in _SPLIT_PATTERNS:
        match = pattern.search(request)
        if not match:
            continue
        text = _unquote(_clean(match["text"]))
        if "into" in match.groupdict():
            into = match["into"].lower()
            arguments = {"operation": "split", "text": text}
            if into in ("characters", "chars", "letters"):
                arguments["separator"] = ""
            return _found(arguments, f"split into {into}")
        separator = _separator(match["sep"])
        if separator is None:
            return _needs_llm(f"split named but the separator {match['sep']!r} is unclear")
        arguments = {"operation": "split", "text": text, "separator": separator}
        return _found(arguments, f"split at {separator!r}")
    return _needs_llm("split named but not the text or where to cut it")


def _read_join(request: str) -> Extraction:
    match = _JOIN_PATTERN.search(request)
    if not match:
        return _needs_llm("join named but not the items or the separator")
    items = _quoted(match["items"]) or [
        item for item in re.split(r"\s*,\s*|\s+and\s+|\s+", match["items"].strip()) if item
    ]
    separator = _separator(match["sep"])
    if not items or separator is None:
        return _needs_llm("join named but the items or the separator are unclear")
    arguments = {"operation": "join", "items": items, "separator": separator}
    return _found(arguments, f"join {len(items)} items with {separator!r}")


def _read_substring(request: str) -> Extraction:
    for pattern in _SUBSTRING_PATTERNS:
        match = pattern.search(request)
        if match:
            n = match["n"]
            count = int(n) if n.isdigit() else chinese_numeral_value(n)
            quoted = _quoted(request)
            text = quoted[0] if quoted else _clean(match["text"])
            first = match["side"].lower() in ("first", "前")
            bounds = {"start": 0, "end": count} if first else {"start": -count}
            arguments = {"operation": "substring", "text": text, **bounds}
            return _found(arguments, f"{'first' if first else 'last'} {count} characters")
    return _needs_llm("substring named but not which characters")


_STRING_READERS: dict[str, Callable[[str], Extraction]] = {
    "replace": _read_replace,
    "split": _read_split,
    "join": _read_join,
    "substring": _read_substring,
}


def extract_string(request: str) -> Extraction:
    """Return string_utils' operation and its fields."""
    keywords = _without_quotes(request)
    operations = [name for name, regex in STRING_OPERATIONS if regex.search(keywords)]
    if "title" in operations and "upper" in operations:
        operations.remove("upper")  # 首字母大写 contains 大写
    if not operations:
        return _needs_llm("no string operation named")
    if len(operations) > 1:
        return _needs_llm(f"several string operations named ({', '.join(operations)})")
    operation = operations[0]
    if operation in _STRING_READERS:
        return _STRING_READERS[operation](request)
    found = _first_text(request, _STRING_TEXT)
    if found is None:
        return _needs_llm(f"{operation} named but no text to apply it to")
    text, how = found
    return _found({"operation": operation, "text": text}, f"{operation} of the {how}")


# ---------------------------------------------------------------------------------------
# datetime: the time now in a named place

CITY_ZONES: dict[str, tuple[str, ...]] = {
    "Asia/Tokyo": ("tokyo", "japan", "osaka", "东京", "日本", "大阪"),
    "Asia/Shanghai": ("beijing", "shanghai", "china", "shenzhen", "guangzhou", "北京", "上海",
                      "中国", "深圳", "广州", "杭州", "成都"),
    "Asia/Hong_Kong": ("hong kong", "香港"),
    "Asia/Taipei": ("taipei", "台北"),
    "Asia/Singapore": ("singapore", "新加坡"),
    "Asia/Seoul": ("seoul", "korea", "首尔", "韩国"),
    "Asia/Kolkata": ("india", "delhi", "new delhi", "mumbai", "bangalore", "印度", "新德里",
                     "孟买"),
    "Asia/Dubai": ("dubai", "迪拜"),
    "Asia/Bangkok": ("bangkok", "曼谷", "泰国"),
    "Europe/London": ("london", "uk", "england", "伦敦", "英国"),
    "Europe/Paris": ("paris", "france", "巴黎", "法国"),
    "Europe/Berlin": ("berlin", "germany", "柏林", "德国"),
    "Europe/Madrid": ("madrid", "spain", "马德里", "西班牙"),
    "Europe/Rome": ("rome", "italy", "罗马", "意大利"),
    "Europe/Moscow": ("moscow", "莫斯科", "俄罗斯"),
    "America/New_York": ("new york", "nyc", "boston", "washington", "纽约", "波士顿", "华盛顿"),
    "America/Chicago": ("chicago", "芝加哥"),
    "America/Denver": ("denver", "丹佛"),
    "America/Los_Angeles": ("los angeles", "san francisco", "seattle", "洛杉矶", "旧金山",
                            "西雅图"),
    "America/Toronto": ("toronto", "多伦多"),
    "America/Vancouver": ("vancouver", "温哥华"),
    "America/Sao_Paulo": ("sao paulo", "são paulo", "圣保罗"),
    "America/Mexico_City": ("mexico city", "墨西哥城"),
    "Australia/Sydney": ("sydney", "悉尼"),
    "Australia/Melbourne": ("melbourne", "墨尔本"),
    "Pacific/Auckland": ("auckland", "new zealand", "奥克兰", "新西兰"),
    "Africa/Cairo": ("cairo", "开罗", "埃及"),
    "UTC": ("utc", "gmt", "coordinated universal time", "协调世界时", "世界标准时间"),
}  # fmt: skip
_ZONE_OF = {name: zone for zone, names in CITY_ZONES.items() for name in names}
_PLACE = _compile(
    "|".join(
        _word(re.escape(name).replace(r"\ ", r"\s+")) if name.isascii() else re.escape(name)
        for name in sorted(_ZONE_OF, key=len, reverse=True)
    )
)
_IANA_ZONE = re.compile(r"(?<![A-Za-z/])[A-Z][A-Za-z_]+(?:/[A-Z][A-Za-z_+-]+){1,2}")
_TIME_WORDS = _compile(_word(r"time|clock|now|date|today") + "|时间|几点|现在|日期|今天|几号|钟")
_NOT_NOW = _compile(
    _word(
        r"convert|difference|between|until|ago|after|later|before|tomorrow|yesterday|add|plus|"
        r"minus|days?|hours?|minutes?|weeks?|months?|years?|when|sunrise|sunset|weather"
    )
    + "|明天|昨天|之后|以后|之前|以前|相差|时差|换算|转换|倒计时|天后|小时|分钟|日出|日落|天气"
)
_UNKNOWN_PLACE_EN = _compile(_word(r"in|at|for") + r"\s+(?:the\s+)?(?P<place>[A-Z][\w'. -]+)")
_ZH_TIME_FILLER = re.compile(
    "现在|当前|目前|此刻|请问|告诉我|帮我|查一下|查询|看看|看一下|时间|几点了?|几点钟|是|的|了|吗|呢"
    "|多少|什么|时候|日期|今天|几号|钟|点|地区|当地|本地|一下|[\\s?？。,，!！]"
)


@lru_cache(maxsize=256)
def _is_zone(name: str) -> bool:
    try:
        ZoneInfo(name)
    except (ValueError, KeyError, OSError):  # ZoneInfoNotFoundError is a KeyError
        return False
    return True


def extract_datetime(request: str) -> Extraction:
    """Return datetime's arguments for "the time now" in a named place."""
    if not _TIME_WORDS.search(request):
        return _needs_llm("no question about the time now")
    other = _NOT_NOW.search(request)
    if other or _HAS_DIGIT.search(_IANA_ZONE.sub(" ", request)):
        what = repr(other[0]) if other else "a date or number"
        return _needs_llm(f"more than the time now ({what}); only 'time now in a place' is read")
    zones = {_ZONE_OF[m[0].lower().replace("  ", " ")] for m in _PLACE.finditer(request)}
    zones |= {m[0] for m in _IANA_ZONE.finditer(request) if _is_zone(m[0])}
    if len(zones) > 1:
        return _needs_llm(f"several places named ({', '.join(sorted(zones))})")
    if zones:
        zone = zones.pop()
        return _found({"operation": "now", "timezone": zone}, f"the time now in {zone}")
    unknown = _UNKNOWN_PLACE_EN.search(request)
    rest = _ZH_TIME_FILLER.sub("", request) if not request.isascii() else ""
    if unknown or rest:
        place = unknown["place"].strip() if unknown else rest
        return _needs_llm(f"no time zone known for {place!r}")
    return _found({"operation": "now"}, "the time now, no place named: the tool answers in UTC")


# ---------------------------------------------------------------------------------------
# json_tools: a JSON document in the request

_VALIDATE = _compile(
    _word(r"valid|validate|validity|check|verify|lint|correct|well[-\s]formed|parse|parses")
    + "|合法|有效|校验|验证|检查|正确"
)
_PRETTY = _compile(
    _word(r"pretty|prettify|pretty-print|beautify|indent|indented|reformat|readable")
    + "|美化|格式化|缩进|排版"
)
_FORMAT = _compile(_word(r"format|formatted"))
_MINIFY = _compile(
    _word(r"minify|minified|compact|compress|one\s+line|single\s+line") + "|压缩|一行"
)
_POINTER = re.compile(r"(?<![\w/])(/[A-Za-z0-9_~.\-]+(?:/[A-Za-z0-9_~.\-]+)*)")
_QUERY = _compile(
    _word(r"get|extract|read|value|field|query|lookup|look\s+up") + "|取出|提取|获取|读取|字段|值"
)
_INDENT = _compile(
    r"indent(?:ation)?(?:\s+(?:of|by|with|=|:))?\s*(?P<a>[0-9])|(?P<b>[0-9])\s*[- ]?spaces?"
    r"|缩进\s*(?P<c>[0-9])"
)
_SORT_KEYS = _compile(_word(r"sort(?:ed)?\s+(?:the\s+)?keys|keys\s+sorted") + "|键排序|排序键")


def _json_document(request: str) -> tuple[str, str] | None:
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
    found = _json_document(request)
    if found is None:
        return _needs_llm("no JSON document in the request")
    document, around = found
    validate, pretty = _VALIDATE.search(around), _PRETTY.search(around)
    if validate and pretty:
        return _needs_llm(f"two operations named ({validate[0]!r} and {pretty[0]!r})")
    if validate:
        return _found({"operation": "validate", "text": document}, "validate the JSON document")
    if _MINIFY.search(around):
        arguments = {"operation": "pretty_print", "text": document, "indent": 0}
        return _found(arguments, "one compact line: pretty_print with indent 0")
    if pretty or _FORMAT.search(around):
        arguments = {"operation": "pretty_print", "text": document, **_pretty_options(around)}
        return _found(arguments, "pretty-print the JSON document")
    pointer = _POINTER.search(around)
    if pointer and _QUERY.search(around):
        arguments = {"operation": "query", "text": document, "pointer": pointer[1]}
        return _found(arguments, f"read the value at {pointer[1]}")
    return _needs_llm("a JSON document but no operation named (validate, pretty-print, query)")


# ---------------------------------------------------------------------------------------
# web_search: the query of a request that says to search

# Only a request that starts with a search command is read ("search the web for X",
# "look up X", "google X", "find information about X", "搜索X", "查找X", "查一下X"): "find"
# alone is everyday English ("find the gcd of 12 and 18") and must not become a web search.
_EN_POLITE = (
    r"(?:(?:please|pls|can\s+you|could\s+you|would\s+you|will\s+you|help\s+me|i\s+want\s+to"
)
_EN_POLITE += r"|i'?d\s+like\s+to|let'?s|go\s+and|quickly)[\s,]+)*"
_EN_WHERE = r"(?:\s+(?:on\s+|in\s+)?(?:the\s+)?(?:web|internet|net|online|google|bing|duckduckgo))?"
_EN_SEARCH = _compile(
    rf"^\s*{_EN_POLITE}(?:"
    rf"(?:do\s+an?\s+)?(?:web|internet|online|google)\s+search{_EN_WHERE}"
    rf"|search(?:\s+up)?{_EN_WHERE}|look\s+up|lookup|google|bing"
    rf"|find(?:\s+(?:me|us))?(?:\s+(?:some|any|the\s+latest))?\s+(?:information|info|news|articles"
    rf"|pages|results|details|facts)"
    rf")(?:\s+(?:for|about|on|regarding|of))?[\s:：]+(?P<text>.+)$"
)
_EN_TRAILING_WHERE = _compile(
    r"\s+(?:on|in|from|using|with)\s+(?:the\s+)?(?:web|internet|net|google|bing|duckduckgo)$"
    r"|\s+online$"
)
_ZH_SEARCH = re.compile(
    r"^\s*(?:请|麻烦|帮我|帮忙|给我|替我|你|能不能|可以)*"
    r"(?:(?:在|到|去|用)?(?:网上|网络上|互联网上|谷歌上?|百度上?|google上?)|上网)?"
    r"(?:搜索一下|搜索|搜一搜|搜一下|搜|查找一下|查找|查一查|查一下|查查|百度一下|谷歌一下)"
    r"(?:一下)?(?:关于)?(?P<text>.+)$"
)
_ZH_TRAILING_NOISE = re.compile(
    r"(?:的相关信息|的相关资料|的信息|的资料|相关信息|相关资料|吧|呢)+$"
)


def extract_web_search(request: str) -> Extraction:
    """Return web_search's query: the request without its search command words."""
    for pattern, trailing in ((_EN_SEARCH, _EN_TRAILING_WHERE), (_ZH_SEARCH, _ZH_TRAILING_NOISE)):
        match = pattern.search(request)
        if match is None:
            continue
        query = _unquote(_clean(trailing.sub("", _clean(match["text"]))))
        if not query.strip():
            return _needs_llm("a search command but nothing to search for")
        if _json_document(query) is not None:
            return _needs_llm("a JSON document, not words to search for")
        return _found({"query": query.strip()}, "the text after the search command")
    return _needs_llm("no search command (search, look up, 搜索...) followed by what to search for")


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
        return _needs_llm(f"{expression} is not the sum of two whole numbers, all this tool adds")
    a, b = integers
    return _found({"a": a, "b": b}, f"{calculation.reason}: the sum of {a} and {b}")


def extract_sha256_text(request: str) -> Extraction:
    """Return {text} for a tool that does SHA-256 only, when the request asks for SHA-256."""
    hashing = extract_hash(request)
    if hashing.needs_llm:
        return hashing
    operation = hashing.arguments["operation"]
    if operation != "sha256":
        return _needs_llm(f"the request asks for {operation}; this tool does sha256 only")
    return _found({"text": hashing.arguments["text"]}, hashing.reason)


# The project's own MCP server (tools_app/mcp_demo_server.py), as `manage.py ares_demo`
# registers it (server "demo"): its add tool competes with the calculator for sums, its
# sha256 tool with hash_tool.
DEMO_ADD_TOOL = "mcp.demo.add"
DEMO_SHA256_TOOL = "mcp.demo.sha256"

EXTRACTORS: dict[str, Callable[[str], Extraction]] = {
    "calculator": extract_calculation,
    "hash_tool": extract_hash,
    "string_utils": extract_string,
    "datetime": extract_datetime,
    "json_tools": extract_json,
    "web_search": extract_web_search,
    DEMO_ADD_TOOL: extract_two_integer_sum,
    DEMO_SHA256_TOOL: extract_sha256_text,
}
