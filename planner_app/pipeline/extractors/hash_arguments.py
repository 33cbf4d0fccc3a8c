"""Read hash_tool's arguments (operation and text) from a request. No Django."""

from __future__ import annotations

import re

from planner_app.pipeline.extractors.request_text import (
    Extraction,
    english_words,
    first_text,
    found_arguments,
    ignoring_case,
    needs_llm,
    without_quotes,
)

_BASE64 = r"base\s*-?\s*64"
HASH_OPERATIONS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "base64_decode",
        ignoring_case(
            rf"{_BASE64}.{{0,40}}?(?:decod|解码|还原)|(?:decod|解码|还原).{{0,40}}?{_BASE64}"
            rf"|from\s+{_BASE64}"
        ),
    ),
    ("base64_encode", ignoring_case(_BASE64)),
    ("sha512", ignoring_case(r"(?<![A-Za-z0-9])sha[-_ ]?512(?![0-9])")),
    ("sha256", ignoring_case(r"(?<![A-Za-z0-9])sha[-_ ]?256(?![0-9])")),
    ("sha1", ignoring_case(r"(?<![A-Za-z0-9])sha[-_ ]?1(?![0-9])")),
    ("md5", ignoring_case(r"(?<![A-Za-z0-9])md[-_ ]?5(?![0-9])")),
)
_HASH_KEY = rf"(?:{_BASE64}|sha[-_ ]?(?:512|256|1)|md[-_ ]?5)"
_HASH_WORDS = ignoring_case(
    english_words(r"hash|hashes|digest|checksum|encrypt") + "|哈希|散列|摘要|加密"
)
_HASH_TEXT: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "text after 把/将/对",
        ignoring_case(
            r"(?:把|将|对)\s*(?P<text>.+?)\s*(?:转成|转换成|转换为|转为|转化为|变成|编码成|编码为"
            r"|解码成|解码为|编码|解码|进行|做|用|从|求|计算|生成|取|加密|哈希)"
        ),
    ),
    (
        "text before 的",
        ignoring_case(
            r"^\s*(?:请|帮我|帮忙)?\s*(?:计算|求|生成|获取|算出?|得到|给出|输出|给我)?\s*(?:一下)?"
            rf"\s*(?:字符串|文本|单词)?\s*(?P<text>.+?)\s*的\s*{_HASH_KEY}"
        ),
    ),
    (
        "text after 'of'",
        ignoring_case(
            _HASH_KEY
            + r"(?:\s+(?:hash|digest|checksum|sum|value|encoding|encoded|encode|decoding|decoded"
            r"|decode|string|code|version|representation))*\s+(?:of|for|on)\s+(?:the\s+)?"
            r"(?:(?:string|text|word|phrase|message|input|data|value)\s+)?[:：]?\s*(?P<text>.+?)\s*$"
        ),
    ),
    (
        "text between the verb and the algorithm",
        ignoring_case(
            r"^\s*(?:please\s+)?(?:(?:can|could|would)\s+you\s+)?(?:please\s+)?"
            r"(?:encode|decode|hash|convert|turn|compute|calculate|get|give\s+me|generate|make)"
            r"\s+(?:the\s+)?(?:(?:string|text|word|phrase|message)\s+)?(?P<text>.+?)\s+"
            rf"(?:to|into|in|with|using|as|from|by)\s+(?:the\s+)?(?:an?\s+)?{_HASH_KEY}"
        ),
    ),
    (
        "text after the algorithm",
        ignoring_case(
            _HASH_KEY + r"(?:[\s-]*(?:hash|digest|checksum|encode|encoding|decode|decoding"
            r"|编码|解码|加密|哈希|值|摘要|一下))*\s*[:：]?\s*(?:the\s+)?(?:(?:string|text|word)\s+)?"
            r"(?P<text>.+?)\s*$"
        ),
    ),
)

# "base64 this for me": the text is somewhere else (a file, an earlier message), not here.
_REFERENT = ignoring_case(
    r"^(?:this|that|it|these|those|them|这个|那个|它)(?:\s+(?:for\s+me|please|now))?[.!?]?$"
)


def extract_hash(request: str) -> Extraction:
    """Return hash_tool's operation and text."""
    keywords = without_quotes(request)
    operations = [name for name, regex in HASH_OPERATIONS if regex.search(keywords)]
    if "base64_decode" in operations:
        operations.remove("base64_encode")
    if not operations:
        if _HASH_WORDS.search(keywords):
            return needs_llm("no hash algorithm named (md5, sha1, sha256 or sha512)")
        return needs_llm("no hash or Base64 operation named")
    if len(operations) > 1:
        return needs_llm(f"several operations named ({', '.join(operations)})")
    found = first_text(request, _HASH_TEXT)
    if found is None or not found[0]:
        return needs_llm(f"{operations[0]} named but no text to apply it to")
    text, how = found
    if how != "quoted text" and _REFERENT.match(text):
        return needs_llm(f"{operations[0]} named, but {text!r} points to text the request lacks")
    return found_arguments(
        {"operation": operations[0], "text": text}, f"{operations[0]} of the {how}"
    )
