"""Parameter extraction: the issue's examples exactly, the labelled data set, and refusals.

Accuracy on tests/data/planner_requests.jsonl (421 lines, 172 Chinese; run
test_it_reads_at_least_95_percent_of_calculator_hash_and_string_requests with -s for the
table): calculator 280/285 (98.2%; English 168/172 including the 19 BFCL items, all read;
Chinese 112/113), hash_tool 35/35, string_utils 38/38, datetime 19/19, json_tools 11/11;
353/358 (98.6%) over calculator, hash_tool and string_utils, 383/388 over every item with
a tool. The five misses are KNOWN_MISSES; each is a refusal (needs_llm), not a wrong value.
The set was written alongside the extractor, so these figures are optimistic: a held-out
batch of 57 requests, written afterwards and scored once before any fix, read 55 (96.5%),
and its one wrong value (100减去25再除以5 read as 100-25/5) was then fixed. None of the
33 requests that no built-in tool serves gets a calculator expression.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from planner_app.pipeline.extraction import MAX_REQUEST_LENGTH, Extraction, extract_arguments
from planner_app.pipeline.extractors.request_numbers import chinese_numeral_value
from tools_app.builtins import (
    calculator,
    datetime_tool,
    hash_tool,
    json_tools,
    string_utils,
    web_search,
)
from tools_app.validation import validate_arguments

DATA = Path(__file__).resolve().parents[1] / "data"
DATA_SET = DATA / "planner_requests.jsonl"
BFCL = Path(__file__).resolve().parents[3] / "shared" / "bench-data" / "bfcl"
SCHEMAS: dict[str, dict[str, Any]] = {
    "calculator": calculator.PARAMETERS,
    "hash_tool": hash_tool.PARAMETERS,
    "string_utils": string_utils.PARAMETERS,
    "datetime": datetime_tool.PARAMETERS,
    "json_tools": json_tools.PARAMETERS,
}
ACCURACY_TOOLS = ("calculator", "hash_tool", "string_utils")

# Items the extractor does not read, each with why. It answers needs_llm for all of them:
# none is a wrong expression.
KNOWN_MISSES: dict[str, str] = {
    "what is two plus two": "numbers written as English words are not read",
    "how much is a dozen times 12": "'a dozen' is a number word",
    "I have 3 apples and buy 5 more, how many do I have?": "a word problem: no operation named",
    "小明有3个苹果，又买了5个，一共有几个？": "a word problem: no operation named",
    "what is the sum of the squares from 1 to 10": (
        "a sum of squares (odd, even, primes...) over a range is refused on purpose, not "
        "mistaken for the plain range sum"
    ),
}


def _items() -> list[dict[str, Any]]:
    return [json.loads(line) for line in DATA_SET.read_text(encoding="utf-8").splitlines()]


ITEMS = _items()


def _problem(item: dict[str, Any], extraction: Extraction) -> str | None:
    """Return what is wrong with the extraction of a labelled item, or None if it is right."""
    if item["arguments"] is None:  # unreadable by design: the planner must not guess
        if extraction.needs_llm and extraction.arguments == {}:
            return None
        return f"expected needs_llm, got {extraction.arguments}"
    if extraction.needs_llm:
        return f"needs_llm: {extraction.reason}"
    validate_arguments(SCHEMAS[item["tool"]], extraction.arguments)
    if item["tool"] != "calculator":
        same = extraction.arguments == item["arguments"]
        return None if same else f"got {extraction.arguments}, expected {item['arguments']}"
    value = calculator.evaluate(extraction.arguments["expression"])
    if math.isclose(value, item["value"], rel_tol=1e-9, abs_tol=1e-12):
        return None
    return f"{extraction.arguments['expression']} = {value}, expected {item['value']}"


def _labelled(tools: tuple[str, ...]) -> list[Any]:
    """Return the data set's items for these tools, known misses marked as strict xfails."""
    params = []
    for index, item in enumerate(ITEMS):
        if item["tool"] not in tools:
            continue
        marks = []
        if item["request"] in KNOWN_MISSES:
            marks = [pytest.mark.xfail(strict=True, reason=KNOWN_MISSES[item["request"]])]
        params.append(pytest.param(item, marks=marks, id=f"{index}-{item['request'][:40]}"))
    return params


# ---------------------------------------------------------------------------------------
# The issue's examples


@pytest.mark.parametrize(
    ("tool", "request_text", "arguments"),
    [
        ("calculator", "sum from 1 to 1,000,000", {"expression": "1000000*(1000000+1)/2"}),
        ("calculator", "2 to the power of 10", {"expression": "2**10"}),
        ("calculator", "2的10次方", {"expression": "2**10"}),
        ("calculator", "sqrt(16)", {"expression": "sqrt(16)"}),
        ("calculator", "根号16", {"expression": "sqrt(16)"}),
        ("calculator", "3的平方", {"expression": "3**2"}),
        ("calculator", "3的立方", {"expression": "3**3"}),
        ("calculator", "gcd of 12 and 18", {"expression": "gcd(12,18)"}),
        ("calculator", "mean of 1,2,3,4,5", {"expression": "mean(1,2,3,4,5)"}),
        ("calculator", "10 factorial", {"expression": "factorial(10)"}),
        ("calculator", "从1加到100", {"expression": "100*(100+1)/2"}),
        ("hash_tool", "sha256 of hello", {"operation": "sha256", "text": "hello"}),
        ("string_utils", "uppercase hello world", {"operation": "upper", "text": "hello world"}),
    ],
)
def test_it_reads_the_issue_examples_exactly(
    tool: str, request_text: str, arguments: dict[str, Any]
) -> None:
    extraction = extract_arguments(tool, request_text)
    assert extraction.arguments == arguments
    assert not extraction.needs_llm
    validate_arguments(SCHEMAS[tool], extraction.arguments)


@pytest.mark.parametrize(
    ("request_text", "value"),
    [
        ("sum from 5 to 10", 45),
        ("permutations of 5 choose 2", 20),
        ("C(10,3)", 120),
        ("10选3的组合数", 120),
        ("median of 3, 1, 4, 1, 5", 3),
        ("variance of 1..5", 2),
        ("standard deviation of 2, 4, 4, 4, 5, 5, 7, 9", 2),
        ("lcm of 4 and 6", 12),
        ("is 17 prime", 1),
        ("17是质数吗", 1),
        ("is 91 a prime number?", 0),
        ("(3+4)*5", 35),
        ("what is 12*7?", 84),
        ("12乘以7等于多少", 84),
        ("3加5等于多少", 8),
        ("计算 2+3*4", 14),
        ("算 10/4", 2.5),
        ("运算 7*8", 56),
    ],
)
def test_it_builds_expressions_with_the_right_value(request_text: str, value: float) -> None:
    extraction = extract_arguments("calculator", request_text)
    assert calculator.evaluate(extraction.arguments["expression"]) == value


def test_it_explains_what_it_recognised() -> None:
    extraction = extract_arguments("calculator", "sum from 1 to 1,000,000")
    assert extraction.reason == "sum of the integers 1..1000000 -> n(n+1)/2 form"


def test_it_names_the_rewrites_it_applied() -> None:
    extraction = extract_arguments("calculator", "2的10次方加1")
    assert extraction.arguments == {"expression": "2**10+1"}
    assert extraction.reason == "read 次方, 加 -> 2**10+1"


# ---------------------------------------------------------------------------------------
# Numbers


@pytest.mark.parametrize(
    ("request_text", "expression"),
    [
        ("what is 1,000,000*2", "1000000*2"),
        ("mean of 1,2,3", "mean(1,2,3)"),
        ("mean of 1,000, 2,000 and 3,000", "mean(1000,2000,3000)"),
        ("mean of 1,000,5", "mean(1,000,5)"),  # not every comma has three digits: a list
        ("mean of 100,200,300", "mean(100,200,300)"),  # one number can't be the whole list
        ("gcd(120,180)", "gcd(120,180)"),  # inside a call of several arguments: arguments
        ("sqrt(1,000,000)", "sqrt(1000000)"),  # sqrt takes one argument: a separator
        ("1,234.5 + 1", "1234.5+1"),
    ],
)
def test_it_reads_commas_by_the_digit_group_rule(request_text: str, expression: str) -> None:
    assert extract_arguments("calculator", request_text).arguments == {"expression": expression}


@pytest.mark.parametrize(
    ("request_text", "expression", "numbers_read"),
    [
        ("sum of 3, 4 and 5", "sum(3,4,5)", ""),
        ("sum of 3,400, 4 and 5", "sum(3400,4,5)", ""),
        ("sum of -3, 4.5 and 5", "sum(-3,4.5,5)", ""),
        ("sum of 1,250.5, 2 and 3", "sum(1250.5,2,3)", ""),
        ("what is 3,400 minus 5", "3400-5", ""),
        ("what is 1,250.5 plus 2", "1250.5+2", ""),
        ("what is -1,250.5 times 2", "-1250.5*2", ""),
        ("what is 2+3, please", "2+3", ""),
        ("what is max(3, 4) + 1", "max(3,4)+1", ""),
        # Without an operation there is nothing to compute: the reason names each number.
        ("tally 3, 4 and 5", None, "('3', '4', '5')"),
        ("tally 3,4,5", None, "('3', '4', '5')"),
        ("tally -3, 4.5 and 5", None, "('-3', '4.5', '5')"),
        ("tally 3,400 and 5", None, "('3400', '5')"),
        ("tally 1,250.5, 2 and 3", None, "('1250.5', '2', '3')"),
        ("tally 1, 2, 3, 4, 5 and 6", None, "('1', '2', '3', '4' and 2 more)"),
    ],
)
def test_it_reads_a_list_as_its_numbers_and_3_400_as_one(
    request_text: str, expression: str | None, numbers_read: str
) -> None:
    extraction = extract_arguments("calculator", request_text)
    if expression is None:
        assert extraction.needs_llm
        assert f"numbers in several places {numbers_read}" in extraction.reason
    else:
        assert extraction.arguments == {"expression": expression}


@pytest.mark.parametrize(
    ("request_text", "expression"),
    [
        ("二的十次方", "2**10"),
        ("从一加到一百", "100*(100+1)/2"),
        ("一百减去三十七", "100-37"),
        ("算一下3加5", "3+5"),  # 一下 is a word, not the number one
        ("200的百分之十五", "200*15/100"),  # 百 of 百分之 is not a hundred
        ("100的一半", "100/2"),
        ("底为6高为10的三角形面积", "6*10/2"),  # 三 of 三角形 is not three
        ("1.5万乘以2", "15000*2"),
    ],
)
def test_it_reads_chinese_numerals_only_as_numbers(request_text: str, expression: str) -> None:
    assert extract_arguments("calculator", request_text).arguments == {"expression": expression}


@pytest.mark.parametrize(
    ("numeral", "value"),
    [("十", 10), ("十二", 12), ("二十", 20), ("一百零五", 105), ("两千", 2000)]
    + [("一万二千", 12000), ("一〇二四", 1024), ("三亿", 300_000_000)],
)
def test_chinese_numeral_value_reads_units_and_digit_strings(numeral: str, value: int) -> None:
    assert chinese_numeral_value(numeral) == value


@pytest.mark.parametrize(
    ("request_text", "expression"),
    [
        ("100减去25再除以5", "(100-25)/5"),
        ("3 plus 4 then times 2", "(3+4)*2"),
        ("2的10次方加1再乘2", "(2**10+1)*2"),
    ],
)
def test_it_computes_what_comes_before_then_first(request_text: str, expression: str) -> None:
    assert extract_arguments("calculator", request_text).arguments == {"expression": expression}


# ---------------------------------------------------------------------------------------
# Text arguments


@pytest.mark.parametrize(
    ("tool", "request_text", "text"),
    [
        ("hash_tool", "sha256 of 'hello world' for me", "hello world"),
        ("hash_tool", "把「你 好」转成base64", "你 好"),
        ("hash_tool", "md5 of “upper case”", "upper case"),
        ("string_utils", "reverse the string “stressed desserts”", "stressed desserts"),
        ("string_utils", "uppercase 'the length of it'", "the length of it"),
        ("string_utils", "trim '  two spaces  '", "  two spaces  "),
    ],
)
def test_quoted_text_wins_over_heuristics(tool: str, request_text: str, text: str) -> None:
    assert extract_arguments(tool, request_text).arguments["text"] == text


def test_it_reads_replace_split_join_and_substring_fields() -> None:
    assert extract_arguments("string_utils", "replace 'a' with 'b' in 'banana'").arguments == {
        "operation": "replace",
        "text": "banana",
        "old": "a",
        "new": "b",
    }
    assert extract_arguments("string_utils", "split 'a;b' by semicolon").arguments == {
        "operation": "split",
        "text": "a;b",
        "separator": ";",
    }
    assert extract_arguments("string_utils", "join 'x', 'y' with '+'").arguments == {
        "operation": "join",
        "items": ["x", "y"],
        "separator": "+",
    }
    assert extract_arguments("string_utils", "last 3 characters of 'abcdef'").arguments == {
        "operation": "substring",
        "text": "abcdef",
        "start": -3,
    }


def test_it_reads_the_time_now_in_a_city() -> None:
    for request_text in ("time in Tokyo", "现在东京时间"):
        extraction = extract_arguments("datetime", request_text)
        assert extraction.arguments == {"operation": "now", "timezone": "Asia/Tokyo"}


def test_it_reads_a_json_document_and_its_options() -> None:
    extraction = extract_arguments("json_tools", 'pretty print {"b": 1, "a": [2]} indent 4')
    assert extraction.arguments == {
        "operation": "pretty_print",
        "text": '{"b": 1, "a": [2]}',
        "indent": 4,
    }


# ---------------------------------------------------------------------------------------
# web_search: the query, without the command words


@pytest.mark.parametrize(
    ("request_text", "query"),
    [
        ("search the web for the latest django release", "the latest django release"),
        ("Search for python asyncio tutorials on the web", "python asyncio tutorials"),
        ("please search online for 'pydantic v2 migration'", "pydantic v2 migration"),
        ("do a web search for ARES console", "ARES console"),
        ("look up the population of France", "the population of France"),
        ("lookup the release date of Python 3.13", "the release date of Python 3.13"),
        ("google django 5.1 release notes", "django 5.1 release notes"),
        ("find information about the Rust borrow checker", "the Rust borrow checker"),
        ("can you find me some news on the olympics?", "the olympics"),
        ("查找最新的Python版本", "最新的Python版本"),
        ("搜索 Django 教程", "Django 教程"),
        ("查一下明天北京的天气", "明天北京的天气"),
        ("帮我在网上搜索一下量子计算的相关信息", "量子计算"),
        ("在百度上查一下长城有多长", "长城有多长"),
        ("请搜一下“ARES Console”", "ARES Console"),
    ],
)
def test_it_reads_the_query_of_a_search(request_text: str, query: str) -> None:
    extraction = extract_arguments("web_search", request_text)
    assert extraction.arguments == {"query": query}, extraction.reason
    validate_arguments(web_search.PARAMETERS, extraction.arguments)


# Refusals: empty arguments and a stated reason, never a guess


@pytest.mark.parametrize(
    ("tool", "request_text", "why"),
    [
        ("calculator", "what is the answer?", "no number found in the request"),
        ("calculator", "what's 42", "only the number 42"),
        ("calculator", "2 apples and 3 pears", "numbers in several places ('2', '3')"),
        ("calculator", "derivative of x^2 at 3", "more than evaluating one expression"),
        ("calculator", "prime factors of 450", "prime factorisation"),
        ("calculator", "sum of the odd numbers from 1 to 99", "'sum' is left outside any"),
        ("calculator", "1到99的奇数和", "numbers in several places ('1', '99')"),
        ("calculator", "sample variance of 1, 2, 3", "'variance' is left outside"),
        ("calculator", "is there a prime between 20 and 22", "primes beyond one number"),
        ("calculator", "sqrt(16)+2再乘3", "'再' is left outside any expression"),
        ("hash_tool", "hash hello", "no hash algorithm named"),
        ("hash_tool", "md5 and sha1 of hello", "several operations named"),
        ("hash_tool", "sha256", "no text to apply it to"),
        ("string_utils", "uppercase and reverse hello", "several string operations"),
        ("string_utils", "do something with hello", "no string operation named"),
        ("datetime", "what time is it in Springfield", "no time zone known for 'Springfield'"),
        ("datetime", "what time will it be in Tokyo in 3 hours", "more than the time now"),
        ("json_tools", "validate this json", "no JSON document"),
        ("json_tools", '{"a": 1}', "no operation named"),
        ("web_search", "latest news", "no search command"),
        ("web_search", "find the gcd of 12 and 18", "no search command"),
        ("web_search", "search", "no search command"),
        ("web_search", "searching is fun", "no search command"),
        ("web_search", "google's revenue in 2023", "no search command"),
        ("web_search", "查询天气", "no search command"),
        ("web_search", 'look up /a in {"a": 1}', "a JSON document"),
        ("http_request", "fetch https://example.org", "no extractor for tool http_request"),
    ],
)
def test_it_refuses_what_it_cannot_read(tool: str, request_text: str, why: str) -> None:
    extraction = extract_arguments(tool, request_text)
    assert extraction.needs_llm
    assert extraction.arguments == {}
    assert why in extraction.reason
    assert extraction.reason.endswith("needs the LLM")


def test_it_refuses_requests_over_the_length_limit() -> None:
    request_text = "1+" * (MAX_REQUEST_LENGTH // 2) + "1"
    extraction = extract_arguments("calculator", request_text)
    assert extraction.needs_llm
    assert f"at most {MAX_REQUEST_LENGTH}" in extraction.reason


def test_extractions_are_frozen() -> None:
    extraction = extract_arguments("calculator", "1+1")
    with pytest.raises(dataclasses.FrozenInstanceError):
        extraction.needs_llm = True  # type: ignore[misc]


# ---------------------------------------------------------------------------------------
# The labelled data set


@pytest.mark.parametrize("item", _labelled(tuple(SCHEMAS)))
def test_it_reads_each_labelled_request(item: dict[str, Any]) -> None:
    extraction = extract_arguments(item["tool"], item["request"])
    assert _problem(item, extraction) is None


@pytest.mark.parametrize(
    "item", [pytest.param(item, id=item["request"][:40]) for item in ITEMS if not item["tool"]]
)
def test_it_never_computes_for_requests_no_tool_serves(item: dict[str, Any]) -> None:
    extraction = extract_arguments("calculator", item["request"])
    assert extraction.needs_llm
    assert extraction.arguments == {}


def test_it_reads_at_least_95_percent_of_calculator_hash_and_string_requests() -> None:
    counts: Counter[tuple[str, str, bool]] = Counter()
    misses = set()
    for item in ITEMS:
        if item["tool"] not in SCHEMAS:
            continue
        right = _problem(item, extract_arguments(item["tool"], item["request"])) is None
        counts[item["tool"], item["lang"], right] += 1
        if not right:
            misses.add(item["request"])
    print("\ntool          lang  right/total")
    for tool, lang in sorted({(tool, lang) for tool, lang, _ in counts}):
        right, wrong = counts[tool, lang, True], counts[tool, lang, False]
        print(f"{tool:13} {lang:4}  {right}/{right + wrong} ({right / (right + wrong):.1%})")
    scored = [(right, n) for (tool, _, right), n in counts.items() if tool in ACCURACY_TOOLS]
    accuracy = sum(n for right, n in scored if right) / sum(n for _, n in scored)
    print(f"calculator, hash_tool, string_utils: {accuracy:.1%}")
    assert accuracy >= 0.95
    assert misses == set(KNOWN_MISSES)


def test_the_data_set_is_large_bilingual_and_well_formed() -> None:
    assert len(ITEMS) >= 300
    assert sum(item["lang"] == "zh" for item in ITEMS) >= 100
    assert any(item["tool"] is None for item in ITEMS)
    for item in ITEMS:
        assert item["lang"] in ("en", "zh")
        assert item["tool"] in (*SCHEMAS, None)
        if item["tool"] == "calculator" and item["arguments"] is not None:
            # The label's own expression has the labelled value: the label is consistent.
            value = calculator.evaluate(item["arguments"]["expression"])
            assert math.isclose(value, item["value"], rel_tol=1e-9, abs_tol=1e-12)
    requests = [item["request"] for item in ITEMS]
    assert len(requests) == len(set(requests))


@pytest.mark.skipif(not BFCL.exists(), reason=f"BFCL data not at {BFCL}")
def test_the_bfcl_lines_are_what_the_script_builds() -> None:
    spec = importlib.util.spec_from_file_location("build_bfcl_math", DATA / "build_bfcl_math.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    built = script.convert(BFCL)
    assert [item for item in ITEMS if item.get("source", "").startswith("bfcl:")] == built
    assert len(built) >= 15
