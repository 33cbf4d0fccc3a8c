"""The extractors' shared number reading: numbers with separators, Chinese numerals, symbols.

A comma is a thousands separator only when every comma in the run is followed by
exactly three digits: "1,000,000" is one number, "1,2,3" and "1,000,5" are lists. The rule
cannot tell what "100,200,300" is: it reads as one number, except where a list function
(mean, gcd, ...) would get it as its only argument, and inside the parentheses of a function
that takes several arguments, where commas separate arguments as in the calculator's own
syntax. Write "100, 200, 300" (with spaces) to mean a list everywhere. Outside a function's
parentheses, a comma left after that separates numbers: "3, 4 and 5" are three numbers,
never "3,4" and 5. Chinese numerals
(三, 十二, 一百) are read where they touch a maths word (三的平方, 从一加到一百), not
elsewhere, so 一下 or 一个 stay words. English number words ("two") are not read.
"""

from __future__ import annotations

import re
import unicodedata
from decimal import Decimal

# One lookbehind per width: Python allows only fixed-width lookbehinds. After "1..", "5" is
# a number (the end of a range); after "3.", "14" is not (it is part of 3.14).
NUMBER = (
    r"(?:(?<![0-9)])-)?(?<![0-9])(?<![0-9]\.)"
    r"(?:[0-9]{1,3}(?:,[0-9]{3})+(?![0-9]|,[0-9])|[0-9]+)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?"
)
NUMBER_TOKEN = re.compile(rf"(?<![A-Za-z_]){NUMBER}")
INTEGER = re.compile(r"-?[0-9]+\Z")
GROUPED_NUMBER = re.compile(r"(?<![0-9.])[0-9]{1,3}(?:,[0-9]{3})+(?![0-9]|,[0-9])")
HAS_DIGIT = re.compile("[0-9]")


def plain_number(number: str) -> str:
    """Return a number as the calculator writes it: no thousands separators."""
    return number.replace(",", "")


def numbers_in(text: str) -> list[str]:
    """Return every number in the text, separators removed, in order."""
    return [plain_number(match[0]) for match in NUMBER_TOKEN.finditer(text)]


def as_operand(number: str) -> str:
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


def normalise(request: str) -> str:
    """Return the request with full-width forms, maths symbols and numerals made plain."""
    text = request.strip()
    if text.isascii():
        return text
    text = unicodedata.normalize("NFKC", text.translate(_SYMBOLS))
    text = _ARABIC_WITH_ZH_UNIT.sub(_scaled_by_zh_unit, text)  # 1.5万 first: 万 is a numeral too
    return _ZH_NUMERAL.sub(lambda match: str(chinese_numeral_value(match[0])), text)
