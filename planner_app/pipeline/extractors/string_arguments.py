"""Read string_utils' arguments: the operation, the text, and what replace, split, join take."""

from __future__ import annotations

import re
from collections.abc import Callable

from planner_app.pipeline.extractors.request_numbers import chinese_numeral_value
from planner_app.pipeline.extractors.request_text import (
    QUOTED,
    QUOTED_TEXT,
    Extraction,
    clean_text,
    english_words,
    first_text,
    found_arguments,
    ignoring_case,
    needs_llm,
    quoted_texts,
    unquote,
    without_quotes,
)

STRING_OPERATIONS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "title",
        ignoring_case(
            english_words(
                r"title[\s-]?case|capitali[sz]e\s+(?:each|every|all\s+the|the\s+first\s+letter"
                r"\s+of\s+(?:each|every))\s+words?"
            )
            + "|首字母大写|标题格式|每个单词首字母"
        ),
    ),
    (
        "upper",
        ignoring_case(
            english_words(r"upper[\s-]?case|uppercase|upper|all\s+caps|capital\s+letters") + "|大写"
        ),
    ),
    ("lower", ignoring_case(english_words(r"lower[\s-]?case|lowercase|lower") + "|小写")),
    (
        "trim",
        ignoring_case(
            english_words(r"trim|strip")
            + "|首尾空格|两端空格|前后空格|两边空格|去空格|去掉空格|去除空格"
        ),
    ),
    (
        "length",
        ignoring_case(
            english_words(
                r"length|how\s+many\s+(?:characters|chars|letters)|count\s+(?:the\s+)?"
                r"(?:characters|chars|letters)|number\s+of\s+(?:characters|chars|letters)|how\s+long"
            )
            + "|长度|多少个字符|几个字符|字符数|多长"
        ),
    ),
    (
        "reverse",
        ignoring_case(
            english_words(r"revers\w*|backwards?") + "|反转|倒序|逆序|颠倒|倒过来|反过来|倒着"
        ),
    ),
    ("replace", ignoring_case(english_words("replace") + "|替换")),
    ("split", ignoring_case(english_words("split") + "|拆分|分割|切分")),
    ("join", ignoring_case(english_words("join") + "|拼接|连接")),
    (
        "substring",
        ignoring_case(
            english_words(r"(?:first|last)\s+[0-9]+\s+(?:characters|chars|letters)|substring")
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
        ignoring_case(rf"(?:把|将)\s*(?P<text>.+?)\s*(?:全部|都)?\s*{_ZH_STRING_VERB}"),
    ),
    (
        "text before 的",
        ignoring_case(
            r"^\s*(?:请|帮我)?\s*(?:计算|求|统计|算|获取)?\s*(?:一下)?\s*(?:字符串|文本|单词)?"
            r"\s*(?P<text>.+?)\s*的\s*(?:长度|字符数|大写|小写|反转|倒序)"
        ),
    ),
    (
        "text after the operation",
        ignoring_case(
            r"(?:反转|倒序|逆序|颠倒|转大写|转小写|转成大写|转成小写|大写|小写|长度|去掉首尾空格"
            r"|去除首尾空格|去空格)\s*(?:一下)?\s*(?:字符串|文本)?\s*[:：]?\s*(?P<text>.+)$"
        ),
    ),
    (
        "text before the operation",
        ignoring_case(
            r"^\s*(?:字符串|文本)?\s*(?P<text>.+?)\s*(?:(?:转成?|转换成?|变成|改成)\s*(?:大写|小写)"
            r"|(?:反转|倒过来|颠倒|倒序|逆序|反过来)\s*$)"
        ),
    ),
    (
        "text between the verb and the case",
        ignoring_case(
            r"^\s*(?:please\s+)?(?:(?:can|could|would)\s+you\s+)?(?:please\s+)?"
            r"(?:convert|turn|change|make|transform|put|write|render)\s+(?:the\s+)?"
            r"(?:(?:string|text|word|phrase|sentence)\s+)?(?P<text>.+?)\s+(?:(?:to|into|in)\s+)?"
            r"(?:all\s+)?(?:upper|lower|title|uppercase|lowercase)"
        ),
    ),
    (
        "text after the operation",
        ignoring_case(
            english_words(_STRING_KEY)
            + r"(?:\s+(?:case|of|for|in|is|are|does|do|has|have|there|on|to|letters|characters))*"
            r"(?:\s+(?:the|this)\s+(?:string|text|word|phrase|sentence))?\s*[:：]?\s+(?P<text>.+?)"
            r"(?:\s+(?:have|has|contain|contains|backwards?))?\s*$"
        ),
    ),
)
_QUOTE_OR_WORD = rf"(?:{QUOTED}|\S+)"
_REPLACE_PATTERNS: tuple[re.Pattern[str], ...] = (
    ignoring_case(
        rf"replace\s+(?:all\s+)?(?:the\s+)?(?:occurrences\s+of\s+)?(?P<old>{_QUOTE_OR_WORD})\s+"
        rf"(?:with|by)\s+(?P<new>{_QUOTE_OR_WORD})\s+in\s+(?:the\s+)?(?:(?:string|text)\s+)?"
        rf"(?P<text>.+?)\s*$"
    ),
    ignoring_case(
        rf"in\s+(?:the\s+)?(?:(?:string|text)\s+)?(?P<text>{QUOTED}|.+?)\s*,?\s*replace\s+"
        rf"(?:all\s+)?(?P<old>{_QUOTE_OR_WORD})\s+(?:with|by)\s+(?P<new>{_QUOTE_OR_WORD})\s*$"
    ),
    ignoring_case(
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
    ignoring_case(
        r"split\s+(?:up\s+)?(?:the\s+)?(?:(?:string|text)\s+)?(?P<text>.+?)\s+"
        r"(?:by|on|at|with|using)\s+(?:the\s+|a\s+|each\s+|every\s+)?(?P<sep>.+?)\s*$"
    ),
    ignoring_case(
        r"split\s+(?:up\s+)?(?:the\s+)?(?:(?:string|text)\s+)?(?P<text>.+?)\s+into\s+"
        r"(?P<into>words|tokens|characters|chars|letters)\s*$"
    ),
    ignoring_case(
        r"(?:用|按|按照|以)\s*(?P<sep>.+?)\s*(?:来)?(?:分割|拆分|切分|分隔)\s*(?:字符串|文本)?"
        r"\s*[:：]?\s*(?P<text>.+)$"
    ),
    ignoring_case(
        r"(?:把|将)\s*(?P<text>.+?)\s*(?:用|按|按照|以)\s*(?P<sep>.+?)\s*(?:来)?(?:分割|拆分|切分|分隔)"
    ),
)
_JOIN_PATTERN = ignoring_case(
    rf"join\s+(?:the\s+)?(?:(?:words|strings|items)\s+)?(?P<items>.+?)\s+(?:with|using|by)\s+"
    rf"(?:an?\s+)?(?P<sep>{QUOTED}|\S+)\s*$"
)
_SUBSTRING_PATTERNS: tuple[re.Pattern[str], ...] = (
    ignoring_case(
        r"(?P<side>first|last)\s+(?P<n>[0-9]+)\s+(?:characters|chars|letters)\s+(?:of|in|from)\s+"
        r"(?:the\s+)?(?:(?:string|text|word)\s+)?(?P<text>.+?)\s*$"
    ),
    ignoring_case(
        r"^\s*(?:请|帮我)?\s*(?:取|截取|获取|提取|求|取出)?\s*(?:一下)?\s*(?:字符串|文本)?\s*"
        r"(?P<text>.+?)\s*的\s*(?P<side>前|后|最后)\s*(?P<n>[0-9]+|[一二两三四五六七八九十]+)\s*个?"
        r"\s*(?:字符|字母|字)"
    ),
)


def _separator(raw: str) -> str | None:
    """Return the separator a request names ("comma", "逗号", "'-'"), or None if unclear."""
    text = clean_text(raw)
    if QUOTED_TEXT.fullmatch(text):
        return unquote(text)
    named = _SEPARATOR_NAMES.get(text.lower().removesuffix("符号").removesuffix("符"))
    if named is not None:
        return named
    return text if len(text) == 1 and not text.isalnum() else None


def _read_replace(request: str) -> Extraction:
    for pattern in _REPLACE_PATTERNS:
        match = pattern.search(request)
        if match:
            old, new = unquote(clean_text(match["old"])), unquote(clean_text(match["new"]))
            text = unquote(clean_text(match["text"]))
            if old and text:
                arguments = {"operation": "replace", "text": text, "old": old, "new": new}
                return found_arguments(arguments, f"replace {old!r} with {new!r}")
    return needs_llm("replace named but not which text, what to find and what to put")


def _read_split(request: str) -> Extraction:
    for pattern in _SPLIT_PATTERNS:
        match = pattern.search(request)
        if not match:
            continue
        text = unquote(clean_text(match["text"]))
        if "into" in match.groupdict():
            into = match["into"].lower()
            arguments = {"operation": "split", "text": text}
            if into in ("characters", "chars", "letters"):
                arguments["separator"] = ""
            return found_arguments(arguments, f"split into {into}")
        separator = _separator(match["sep"])
        if separator is None:
            return needs_llm(f"split named but the separator {match['sep']!r} is unclear")
        arguments = {"operation": "split", "text": text, "separator": separator}
        return found_arguments(arguments, f"split at {separator!r}")
    return needs_llm("split named but not the text or where to cut it")


def _read_join(request: str) -> Extraction:
    match = _JOIN_PATTERN.search(request)
    if not match:
        return needs_llm("join named but not the items or the separator")
    items = quoted_texts(match["items"]) or [
        item for item in re.split(r"\s*,\s*|\s+and\s+|\s+", match["items"].strip()) if item
    ]
    separator = _separator(match["sep"])
    if not items or separator is None:
        return needs_llm("join named but the items or the separator are unclear")
    arguments = {"operation": "join", "items": items, "separator": separator}
    return found_arguments(arguments, f"join {len(items)} items with {separator!r}")


def _read_substring(request: str) -> Extraction:
    for pattern in _SUBSTRING_PATTERNS:
        match = pattern.search(request)
        if match:
            n = match["n"]
            count = int(n) if n.isdigit() else chinese_numeral_value(n)
            quoted = quoted_texts(request)
            text = quoted[0] if quoted else clean_text(match["text"])
            first = match["side"].lower() in ("first", "前")
            bounds = {"start": 0, "end": count} if first else {"start": -count}
            arguments = {"operation": "substring", "text": text, **bounds}
            return found_arguments(arguments, f"{'first' if first else 'last'} {count} characters")
    return needs_llm("substring named but not which characters")


_STRING_READERS: dict[str, Callable[[str], Extraction]] = {
    "replace": _read_replace,
    "split": _read_split,
    "join": _read_join,
    "substring": _read_substring,
}


def extract_string(request: str) -> Extraction:
    """Return string_utils' operation and its fields."""
    keywords = without_quotes(request)
    operations = [name for name, regex in STRING_OPERATIONS if regex.search(keywords)]
    if "title" in operations and "upper" in operations:
        operations.remove("upper")  # 首字母大写 contains 大写
    if not operations:
        return needs_llm("no string operation named")
    if len(operations) > 1:
        return needs_llm(f"several string operations named ({', '.join(operations)})")
    operation = operations[0]
    if operation in _STRING_READERS:
        return _STRING_READERS[operation](request)
    found = first_text(request, _STRING_TEXT)
    if found is None:
        return needs_llm(f"{operation} named but no text to apply it to")
    text, how = found
    return found_arguments({"operation": operation, "text": text}, f"{operation} of the {how}")
