"""Calculator arguments, stage 2: phrases rewritten into calculator syntax where they stand.

"2 to the power of 10" -> 2**10, "根号16" -> sqrt(16), "mean of 1,2,3" -> mean(1,2,3), so
that phrases compose ("2的10次方加1" -> 2**10+1); 再 and "then" close what comes before
them ("100减去25再除以5" -> (100-25)/5).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from planner_app.pipeline.extractors.request_numbers import (
    GROUPED_NUMBER,
    NUMBER,
    as_operand,
    plain_number,
)
from planner_app.pipeline.extractors.request_text import english_words, ignoring_case
from tools_app.builtins.calculator import FUNCTIONS


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
_ITEM = rf"{NUMBER}(?:\s*(?:\.\.|{english_words('to|through')}|到|至|~)\s*{NUMBER})?"
_LIST_SEPARATOR = rf"(?:\s*(?:,|、|;|{english_words('and')}|和|与|及|以及)\s*|\s+)"
LIST = rf"{_ITEM}(?:{_LIST_SEPARATOR}{_ITEM})*"
# Where a list starts, not at its second item: a pattern that ends after the list (1,2,3的平均数)
# would otherwise retry from every item of a long list, which is quadratic.
_LIST_START = (
    r"(?<![0-9.])(?<![0-9.][,、;\s和与及到至~])(?<![0-9.][,、;]\s)(?<![0-9.]\sand\s)"
    r"(?<![0-9.]\sto\s)"
)
_ITEM_PARTS = ignoring_case(
    rf"(?P<a>{NUMBER})(?:\s*(?:\.\.|to|through|到|至|~)\s*(?P<b>{NUMBER}))?"
)
# Between a list function's name and its numbers: words, or a parenthesised name "(GCD)".
_FILLER = r"(?:[^0-9()+*/^=]|\([A-Za-z\s]*\))"
_LIST_QUALIFIER = ignoring_case(
    english_words(
        r"squares?|squared|cubes?|roots?|logs?|logarithms?|reciprocals?|odd|even|primes?|"
        r"digits?|absolute|between"
    )
    + "|平方|立方|根|对数|倒数|奇数|偶数|质数|素数|绝对值|之间"
)
_SAMPLE = ignoring_case(english_words("sample") + "|样本")


def _list_function(name: str) -> str:
    return next(function for function, words in _LIST_FUNCTION_NAMES if words.match(name.strip()))


def _list_items(text: str) -> list[str]:
    """Return the items of a list as calculator arguments: numbers and ranges a..b."""
    items = [
        f"{plain_number(m['a'])}..{plain_number(m['b'])}" if m["b"] else plain_number(m["a"])
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
        return "(" + "*".join(as_operand(item) for item in items) + ")"
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
    return plain_number(match[0])


_OPERATOR_WORD = (
    r"(?:加上|加|减去|减|乘以|乘上|乘|除以|\*\*|[-+*/^%]|"
    + english_words(r"plus|minus|times|multiplied\s+by|divided\s+by|over")
    + ")"
)
_THEN = english_words(r"(?:and\s+)?then")
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


_PERCENT = english_words(r"percent|per\s+cent")
_TRIG = {"正弦": "sin", "余弦": "cos", "正切": "tan"}

REWRITES: tuple[Rewrite, ...] = (
    Rewrite(
        "list function",
        (),
        ignoring_case(
            rf"(?<![A-Za-z])(?P<fn>{_EN_LIST_WORDS})(?![A-Za-z])(?P<filler>{_FILLER}{{0,40}}?)"
            rf"(?P<list>{LIST})"
        ),
        _list_call,
    ),
    Rewrite(
        "list function",
        _ZH_LIST_KEYWORDS,
        ignoring_case(
            rf"{_LIST_START}(?P<list>{LIST})\s*(?:这[几些]?个数|这组数|这些数)?\s*(?:中|里|之中|当中)?"
            r"\s*的?\s*"
            rf"(?P<fn>{_ZH_LIST_WORDS})"
        ),
        _list_call,
    ),
    Rewrite(
        "list function",
        _ZH_LIST_KEYWORDS,
        ignoring_case(
            rf"(?P<fn>{_ZH_LEADING_LIST_WORDS})\s*(?:是|为|[:：])?(?P<filler>[^0-9\-]{{0,8}}?)"
            rf"(?P<list>{LIST})"
        ),
        _list_call,
    ),
    Rewrite("thousands separators", (",",), GROUPED_NUMBER, _separators_removed),
    Rewrite("负 as minus", ("负",), re.compile(r"负\s*(?=[0-9])"), "-"),
    Rewrite("implicit times pi", ("pi",), re.compile(r"(?<=[0-9)])\s*(?=pi(?![A-Za-z]))"), "*"),
    Rewrite(
        "square root",
        ("sqrt", "root"),
        ignoring_case(english_words(r"(?:the\s+)?(?:square\s+root|sqrt)") + rf"(?:\s+of)?\s+{_A}"),
        r"sqrt(\g<a>)",
    ),
    Rewrite(
        "cube root",
        ("root",),
        ignoring_case(english_words(r"(?:the\s+)?cube\s+root") + rf"(?:\s+of)?\s+{_A}"),
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
        ignoring_case(
            english_words("factorial") + rf"\s+(?:of\s+)?(?:the\s+)?(?:number\s+|integer\s+)?{_A}"
        ),
        r"factorial(\g<a>)",
    ),
    Rewrite(
        "n factorial",
        ("factorial",),
        ignoring_case(rf"{_A}\s*{english_words('factorial')}"),
        r"factorial(\g<a>)",
    ),
    Rewrite("n!", ("!",), re.compile(rf"{_A}\s*!(?!=)"), r"factorial(\g<a>)"),
    Rewrite("阶乘", ("阶乘",), re.compile(rf"{_A}\s*的?\s*阶乘"), r"factorial(\g<a>)"),
    Rewrite(
        "power of a raised to b",
        ("power",),
        ignoring_case(
            english_words(r"(?:the\s+)?power\s+of")
            + rf"\s+{_A}\s+raised\s+to\s+(?:the\s+)?(?:power\s+(?:of\s+)?)?{_B}"
        ),
        r"\g<a>**\g<b>",
    ),
    Rewrite(
        "raised to",
        ("raised",),
        ignoring_case(
            rf"{_A}\s+raised\s+to\s+(?:the\s+)?(?:power\s+(?:of\s+)?)?{_B}"
            r"(?:\s*(?:st|nd|rd|th)(?![A-Za-z]))?(?:\s+power)?"
        ),
        r"\g<a>**\g<b>",
    ),
    Rewrite(
        "to the power of",
        ("power",),
        ignoring_case(rf"{_A}\s+to\s+the\s+power\s+(?:of\s+)?{_B}"),
        r"\g<a>**\g<b>",
    ),
    Rewrite(
        "to the nth power",
        ("to the",),
        ignoring_case(
            rf"{_A}\s+to\s+the\s+{_B}\s*(?:(?:st|nd|rd|th)(?![A-Za-z])(?:\s+power)?|\s+power)"
        ),
        r"\g<a>**\g<b>",
    ),
    Rewrite(
        "squared", ("squared",), ignoring_case(rf"{_A}\s+{english_words('squared')}"), r"\g<a>**2"
    ),
    Rewrite("cubed", ("cubed",), ignoring_case(rf"{_A}\s+{english_words('cubed')}"), r"\g<a>**3"),
    Rewrite(
        "square of",
        ("square",),
        ignoring_case(english_words(r"(?:the\s+)?square\s+of") + rf"\s+{_A}"),
        r"\g<a>**2",
    ),
    Rewrite(
        "cube of",
        ("cube",),
        ignoring_case(english_words(r"(?:the\s+)?cube\s+of") + rf"\s+{_A}"),
        r"\g<a>**3",
    ),
    Rewrite("次方", ("次",), re.compile(rf"{_A}\s*的\s*{_B}\s*次(?:方|幂)?"), r"\g<a>**\g<b>"),
    Rewrite("平方", ("平方",), re.compile(rf"{_A}\s*的?\s*平方(?!根)"), r"\g<a>**2"),
    Rewrite("立方", ("立方",), re.compile(rf"{_A}\s*的?\s*立方(?!根)"), r"\g<a>**3"),
    Rewrite(
        "percent of",
        ("%", "per"),
        ignoring_case(rf"(?P<a>{NUMBER})\s*(?:%|{_PERCENT})\s+of\s+{_B}"),
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
        ignoring_case(rf"(?P<a>{NUMBER})\s*{_PERCENT}"),
        r"\g<a>/100",
    ),
    Rewrite(
        "remainder",
        ("remainder",),
        ignoring_case(
            english_words(r"(?:the\s+)?remainder\s+(?:of|when)")
            + rf"\s+{_A}\s+(?:is\s+)?divided\s+by\s+{_B}"
        ),
        r"\g<a>%\g<b>",
    ),
    Rewrite(
        "mod",
        ("mod",),
        ignoring_case(rf"{_A}\s*{english_words('mod|modulo|modulus')}\s*{_B}"),
        r"\g<a>%\g<b>",
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
        ignoring_case(
            english_words(r"log(?:arithm)?") + rf"\s*(?:base|_)\s*(?P<b>{NUMBER})\s*(?:of\s+)?{_A}"
        ),
        r"log(\g<a>,\g<b>)",
    ),
    Rewrite(
        "log of a base b",
        ("log",),
        ignoring_case(
            english_words(r"(?:the\s+)?log(?:arithm)?")
            + rf"\s+of\s+{_A}\s+(?:to\s+|in\s+|with\s+)?(?:the\s+)?base\s+(?P<b>{NUMBER})"
        ),
        r"log(\g<a>,\g<b>)",
    ),
    Rewrite(
        "natural log",
        ("log", "ln"),
        ignoring_case(
            english_words(r"(?:the\s+)?(?:natural\s+log(?:arithm)?|ln)") + rf"\s+(?:of\s+)?{_A}"
        ),
        r"ln(\g<a>)",
    ),
    Rewrite(
        "log (base 10)",
        ("log",),
        ignoring_case(
            english_words(r"(?:the\s+)?(?:common\s+)?log(?:arithm)?") + rf"\s+(?:of\s+)?{_A}"
        ),
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
        ignoring_case(
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
        ignoring_case(
            r"(?<![A-Za-z])(?P<f>sin|cos|tan)(?:e|ine|gent)?(?![A-Za-z])\s+(?:of\s+)?" + _A
        ),
        r"\g<f>(\g<a>)",
    ),
    Rewrite(
        "absolute value",
        ("absolute",),
        ignoring_case(english_words(r"(?:the\s+)?absolute\s+value\s+of") + rf"\s+{_A}"),
        r"abs(\g<a>)",
    ),
    Rewrite("绝对值", ("绝对值",), re.compile(rf"{_A}\s*的\s*绝对值"), r"abs(\g<a>)"),
    Rewrite(
        "add a and b",
        ("add",),
        ignoring_case(english_words("add") + rf"\s+{_A}\s+(?:and|to|plus)\s+{_B}"),
        r"(\g<a>+\g<b>)",
    ),
    Rewrite(
        "subtract a from b",
        ("subtract",),
        ignoring_case(english_words("subtract") + rf"\s+{_A}\s+from\s+{_B}"),
        r"(\g<b>-\g<a>)",
    ),
    Rewrite(
        "multiply a by b",
        ("multiply",),
        ignoring_case(english_words("multiply") + rf"\s+{_A}\s+(?:by|and|with|times)\s+{_B}"),
        r"(\g<a>*\g<b>)",
    ),
    Rewrite(
        "divide a by b",
        ("divide",),
        ignoring_case(english_words("divide") + rf"\s+{_A}\s+by\s+{_B}"),
        r"(\g<a>/\g<b>)",
    ),
    Rewrite(
        "difference",
        ("difference",),
        ignoring_case(
            english_words(r"(?:the\s+)?difference\s+(?:between|of)") + rf"\s+{_A}\s+and\s+{_B}"
        ),
        r"(\g<a>-\g<b>)",
    ),
    Rewrite(
        "quotient",
        ("quotient",),
        ignoring_case(
            english_words(r"(?:the\s+)?quotient\s+of")
            + rf"\s+{_A}\s+(?:and|by|divided\s+by)\s+{_B}"
        ),
        r"(\g<a>/\g<b>)",
    ),
    Rewrite(
        "half of", ("half",), ignoring_case(english_words(r"half\s+of") + rf"\s+{_A}"), r"(\g<a>/2)"
    ),
    Rewrite(
        "double",
        ("double", "twice"),
        ignoring_case(english_words(r"double|twice") + rf"\s+{_A}"),
        r"(2*\g<a>)",
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
        ignoring_case(
            rf"(?P<before>{_OPERATION_CHAIN})\s*,?\s*(?:再|然后再?|之后再?|{_THEN})"
            rf"\s*(?={_OPERATOR_WORD})"
        ),
        r"(\g<before>)",
    ),
    Rewrite(
        "plus", ("plus", "added"), ignoring_case(_between(english_words(r"plus|added\s+to"))), "+"
    ),
    Rewrite("minus", ("minus", "less"), ignoring_case(_between(english_words(r"minus|less"))), "-"),
    Rewrite(
        "times",
        ("times", "multiplied", "x"),
        ignoring_case(_between(english_words(r"times|multiplied\s+by|x"))),
        "*",
    ),
    Rewrite(
        "divided by",
        ("divided", "over"),
        ignoring_case(_between(english_words(r"divided\s+by|over"))),
        "/",
    ),
    Rewrite("加", ("加",), re.compile(_between("加上|加")), "+"),
    Rewrite("减", ("减",), re.compile(_between("减去|减")), "-"),
    Rewrite("乘", ("乘",), re.compile(_between("乘以|乘上|乘")), "*"),
    Rewrite("除以", ("除以",), re.compile(_between("除以")), "/"),
)


def calculator_syntax(text: str) -> tuple[str, list[str]]:
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
