"""Argument validation: clear errors for malformed calls, lossless coercions, BFCL golds pass."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import pytest

from tools_app.validation import MAX_DEPTH, ArgumentsError, parse_arguments, validate_arguments

CALCULATOR = {
    "type": "object",
    "properties": {
        "expression": {
            "type": "string",
            "minLength": 1,
            "maxLength": 1000,
            "description": "The expression to evaluate, e.g. '2 * (3 + 4)'.",
        }
    },
    "required": ["expression"],
    "additionalProperties": False,
}

ORDER = {
    "type": "object",
    "properties": {
        "quantity": {"type": "integer", "minimum": 1, "maximum": 100},
        "price": {"type": "number", "exclusiveMinimum": 0},
        "express": {"type": "boolean"},
        "currency": {"type": "string", "enum": ["EUR", "USD", "GBP"]},
        "note": {"type": ["string", "null"], "maxLength": 200},
        "code": {"type": "string", "minLength": 3, "maxLength": 8, "pattern": "^[A-Z0-9]+$"},
        "address": {
            "type": "object",
            "properties": {
                "street": {"type": "string"},
                "zip": {"type": "string", "minLength": 4},
                "floor": {"type": "integer", "minimum": 0},
            },
            "required": ["street", "zip"],
            "additionalProperties": False,
        },
        "items": {
            "type": "array",
            "minItems": 1,
            "maxItems": 10,
            "items": {
                "type": "object",
                "properties": {
                    "sku": {"type": "string"},
                    "count": {"type": "integer", "minimum": 1},
                    "gift": {"type": "boolean"},
                },
                "required": ["sku", "count"],
                "additionalProperties": False,
            },
        },
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["quantity", "currency", "items"],
    "additionalProperties": False,
}

VALID_ORDER = {"quantity": 2, "currency": "EUR", "items": [{"sku": "A1", "count": 1}]}

# A handful of functions copied from BFCL v4 simple_python, in BFCL's own dialect.
BFCL_FUNCTIONS = {
    "calculate_triangle_area": {  # simple_python_0
        "type": "dict",
        "properties": {
            "base": {"type": "integer", "description": "The base of the triangle."},
            "height": {"type": "integer", "description": "The height of the triangle."},
            "unit": {"type": "string", "description": "The unit of measure."},
        },
        "required": ["base", "height"],
    },
    "calculate_genotype_frequency": {  # simple_python_64
        "type": "dict",
        "properties": {
            "allele_frequency": {"type": "float", "description": "Dominant allele frequency."},
            "genotype": {"type": "string", "enum": ["AA", "Aa", "aa"]},
        },
        "required": ["allele_frequency", "genotype"],
    },
    "calculate_distance": {  # simple_python_83
        "type": "dict",
        "properties": {
            "coord1": {"type": "tuple", "items": {"type": "float"}},
            "coord2": {"type": "tuple", "items": {"type": "float"}},
            "unit": {"type": "string"},
        },
        "required": ["coord1", "coord2", "unit"],
    },
    "array_sort": {  # simple_python_87
        "type": "dict",
        "properties": {
            "list": {"type": "array", "items": {"type": "float"}},
            "order": {"type": "string", "enum": ["ascending", "descending"]},
        },
        "required": ["list", "order"],
    },
    "random_forest.train": {  # simple_python_109
        "type": "dict",
        "properties": {
            "n_estimators": {"type": "integer"},
            "max_depth": {"type": "integer"},
            "data": {"type": "any", "description": "The training data for the model."},
        },
        "required": ["n_estimators", "max_depth", "data"],
    },
    "paint_requirement.calculate": {  # simple_python_260
        "type": "dict",
        "properties": {
            "area": {
                "type": "dict",
                "properties": {"width": {"type": "integer"}, "height": {"type": "integer"}},
            },
            "paint_coverage": {"type": "integer", "default": 350},
            "exclusion": {
                "type": "dict",
                "properties": {"type": {"type": "string"}, "area": {"type": "integer"}},
            },
        },
        "required": ["area", "paint_coverage"],
    },
}

BFCL_TYPES = {"dict": "object", "float": "number", "tuple": "array", "any": None}


def to_json_schema(bfcl: dict[str, Any]) -> dict[str, Any]:
    """Return a BFCL parameter schema as JSON Schema: dict -> object, float -> number, ..."""
    schema = {key: value for key, value in bfcl.items() if key != "type"}
    if "type" in bfcl:
        kind = BFCL_TYPES.get(bfcl["type"], bfcl["type"])
        if kind is not None:  # BFCL's "any" means no type constraint at all
            schema["type"] = kind
    if "properties" in bfcl:
        schema["properties"] = {k: to_json_schema(v) for k, v in bfcl["properties"].items()}
    if "items" in bfcl:
        schema["items"] = to_json_schema(bfcl["items"])
    return schema


TRIANGLE = to_json_schema(BFCL_FUNCTIONS["calculate_triangle_area"])
GENOTYPE = to_json_schema(BFCL_FUNCTIONS["calculate_genotype_frequency"])
DISTANCE = to_json_schema(BFCL_FUNCTIONS["calculate_distance"])
SORT = to_json_schema(BFCL_FUNCTIONS["array_sort"])
FOREST = to_json_schema(BFCL_FUNCTIONS["random_forest.train"])
PAINT = to_json_schema(BFCL_FUNCTIONS["paint_requirement.calculate"])


def order(**changes: Any) -> dict[str, Any]:
    """Return a valid order with some fields replaced."""
    return {**copy.deepcopy(VALID_ORDER), **changes}


def order_without(*names: str) -> dict[str, Any]:
    return {key: value for key, value in VALID_ORDER.items() if key not in names}


def nested_list(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value


def cyclic() -> dict[str, Any]:
    loop: dict[str, Any] = {}
    loop["again"] = loop
    return {"expression": loop}


HUGE = "1" * 1_100_000
ITEM = {"sku": "A1", "count": 1}

MALFORMED = [
    # Wrong types at the top level.
    pytest.param(
        CALCULATOR, {"expression": 123}, "expression: expected string, got number 123", id="int"
    ),
    pytest.param(
        CALCULATOR, {"expression": 1.5}, "expression: expected string, got number 1.5", id="float"
    ),
    pytest.param(
        CALCULATOR,
        {"expression": True},
        "expression: expected string, got boolean true",
        id="bool for string",
    ),
    pytest.param(
        CALCULATOR,
        {"expression": ["1+1"]},
        'expression: expected string, got array ["1+1"]',
        id="array for string",
    ),
    pytest.param(
        CALCULATOR,
        {"expression": {"op": "+"}},
        'expression: expected string, got object {"op": "+"}',
        id="object for string",
    ),
    pytest.param(
        ORDER, order(quantity="two"), 'quantity: expected integer, got string "two"', id="word"
    ),
    pytest.param(
        ORDER,
        order(quantity=True),
        "quantity: expected integer, got boolean true",
        id="true for integer",
    ),
    pytest.param(
        ORDER,
        order(quantity=False),
        "quantity: expected integer, got boolean false",
        id="false for integer",
    ),
    pytest.param(
        ORDER, order(quantity=2.5), "quantity: expected integer, got number 2.5", id="fraction"
    ),
    pytest.param(
        ORDER,
        order(price="cheap"),
        'price: expected number, got string "cheap"',
        id="string for number",
    ),
    pytest.param(
        ORDER, order(price=True), "price: expected number, got boolean true", id="bool for number"
    ),
    pytest.param(
        ORDER, order(express=1), "express: expected boolean, got number 1", id="int for boolean"
    ),
    pytest.param(
        ORDER,
        order(express="yes"),
        'express: expected boolean, got string "yes"',
        id="yes for boolean",
    ),
    pytest.param(
        ORDER,
        order(note=5),
        "note: expected string or null, got number 5",
        id="int for string-or-null",
    ),
    pytest.param(
        ORDER,
        order(items=ITEM),
        'items: expected array, got object {"sku": "A1", "count": 1}',
        id="object for array",
    ),
    pytest.param(
        ORDER,
        order(items="A1"),
        'items: expected array, got string "A1"',
        id="string for array",
    ),
    pytest.param(
        ORDER,
        order(address="Main St 1"),
        'address: expected object, got string "Main St 1"',
        id="string for object",
    ),
    pytest.param(
        ORDER,
        order(address=["Main St", "1000"]),
        'address: expected object, got array ["Main St", "1000"]',
        id="array for object",
    ),
    pytest.param(
        TRIANGLE,
        {"base": "ten", "height": 5},
        'base: expected integer, got string "ten"',
        id="bfcl",
    ),
    pytest.param(
        DISTANCE,
        {"coord1": "40.7,-74.0", "coord2": [51.5, -0.1], "unit": "miles"},
        'coord1: expected array, got string "40.7,-74.0"',
        id="bfcl tuple as string",
    ),
    # Null, for required and for optional fields.
    pytest.param(
        CALCULATOR, {"expression": None}, "expression: expected string, got null", id="null req"
    ),
    pytest.param(ORDER, order(items=None), "items: expected array, got null", id="null array"),
    pytest.param(
        ORDER, order(currency=None), "currency: expected string, got null", id="null enum"
    ),
    pytest.param(ORDER, order(price=None), "price: expected number, got null", id="null optional"),
    pytest.param(
        ORDER, order(express=None), "express: expected boolean, got null", id="null optional bool"
    ),
    pytest.param(
        ORDER,
        order(address={"street": None, "zip": "1000"}),
        "address.street: expected string, got null",
        id="null nested",
    ),
    # Missing required fields.
    pytest.param(CALCULATOR, {}, "expression: required but missing", id="empty object"),
    pytest.param(CALCULATOR, None, "expression: required but missing", id="no arguments"),
    pytest.param(CALCULATOR, "", "expression: required but missing", id="empty text"),
    pytest.param(CALCULATOR, "{}", "expression: required but missing", id="empty object text"),
    pytest.param(
        ORDER,
        order_without("quantity", "items"),
        ("items: required but missing", "quantity: required but missing"),
        id="two missing",
    ),
    pytest.param(
        ORDER,
        order(address={"street": "Main St"}),
        "address.zip: required but missing",
        id="missing nested",
    ),
    pytest.param(
        ORDER,
        order(items=[ITEM, {"sku": "B2"}]),
        "items[1].count: required but missing",
        id="missing in array item",
    ),
    pytest.param(GENOTYPE, {"genotype": "AA"}, "allele_frequency: required but missing", id="bfcl"),
    # Unknown fields, top level and nested.
    pytest.param(
        CALCULATOR,
        {"expression": "1+1", "precision": 2},
        "precision: unknown field; allowed: expression",
        id="unknown field",
    ),
    pytest.param(
        CALCULATOR,
        {"expresion": "1+1"},
        ("expresion: unknown field", "expression: required but missing"),
        id="misspelled field",
    ),
    pytest.param(
        ORDER,
        order(colour="red", size="L"),
        ("colour: unknown field", "size: unknown field"),
        id="two unknown fields",
    ),
    pytest.param(
        ORDER,
        order(address={"street": "Main St", "zip": "1000", "city": "Bern"}),
        "address.city: unknown field; allowed: floor, street, zip",
        id="unknown nested",
    ),
    pytest.param(
        ORDER,
        order(items=[{"sku": "A1", "count": 1, "colour": "red"}]),
        "items[0].colour: unknown field; allowed: count, gift, sku",
        id="unknown in array item",
    ),
    pytest.param(
        {
            "type": "object",
            "properties": {"name": {"type": "string"}},
            "patternProperties": {"^a-": {"type": "string"}},
            "additionalProperties": False,
        },
        {"name": "x", "a-trace": "1", "zone": "eu"},
        "zone: unknown field; allowed: name",
        id="unknown beside pattern fields",
    ),
    # Nested errors inside arrays and objects.
    pytest.param(
        ORDER,
        order(items=[{"sku": "A1", "count": "many"}]),
        'items[0].count: expected integer, got string "many"',
        id="item field type",
    ),
    pytest.param(
        ORDER,
        order(items=[ITEM, ITEM, {"sku": "C3", "count": 1, "gift": "no"}]),
        'items[2].gift: expected boolean, got string "no"',
        id="third item field",
    ),
    pytest.param(
        ORDER,
        order(items=[{"sku": "A1", "count": 1.5}]),
        "items[0].count: expected integer, got number 1.5",
        id="item fraction",
    ),
    pytest.param(
        ORDER, order(items=["A1"]), 'items[0]: expected object, got string "A1"', id="bare item"
    ),
    pytest.param(
        ORDER, order(tags=["a", 2]), "tags[1]: expected string, got number 2", id="array item type"
    ),
    pytest.param(
        ORDER,
        order(address={"street": "Main St", "zip": "1000", "floor": False}),
        "address.floor: expected integer, got boolean false",
        id="nested bool for integer",
    ),
    pytest.param(
        SORT, {"list": [3, "two", 1], "order": "ascending"}, "list[1]: expected number", id="bfcl"
    ),
    pytest.param(
        PAINT,
        {"area": {"width": "20ft", "height": 12}, "paint_coverage": 350},
        'area.width: expected integer, got string "20ft"',
        id="bfcl nested",
    ),
    # Enum misses.
    pytest.param(
        ORDER,
        order(currency="eur"),
        'currency: expected one of "EUR", "USD", "GBP", got string "eur"',
        id="enum case",
    ),
    pytest.param(
        ORDER,
        order(currency="CHF"),
        'currency: expected one of "EUR", "USD", "GBP", got string "CHF"',
        id="enum miss",
    ),
    pytest.param(
        ORDER, order(currency=1), "currency: expected string, got number 1", id="enum wrong type"
    ),
    pytest.param(
        SORT,
        {"list": [1.0], "order": "desc"},
        'order: expected one of "ascending", "descending", got string "desc"',
        id="bfcl enum",
    ),
    # Numbers out of range.
    pytest.param(
        ORDER, order(quantity=0), "quantity: expected a number >= 1, got number 0", id="below"
    ),
    pytest.param(
        ORDER, order(quantity=-5), "quantity: expected a number >= 1, got number -5", id="negative"
    ),
    pytest.param(
        ORDER, order(quantity=101), "quantity: expected a number <= 100, got number 101", id="above"
    ),
    pytest.param(
        ORDER,
        order(quantity=10**30),
        "quantity: expected a number <= 100, got number 1000000000000000000000000000000",
        id="huge integer",
    ),
    pytest.param(
        ORDER, order(price=0), "price: expected a number > 0, got number 0", id="exclusive bound"
    ),
    pytest.param(
        ORDER, order(price=-0.01), "price: expected a number > 0, got number -0.01", id="below 0"
    ),
    pytest.param(
        ORDER,
        order(items=[{"sku": "A1", "count": 0}]),
        "items[0].count: expected a number >= 1, got number 0",
        id="nested below",
    ),
    # Strings and arrays of the wrong size or shape.
    pytest.param(
        CALCULATOR,
        {"expression": ""},
        "expression: expected at least 1 characters, got 0",
        id="empty string",
    ),
    pytest.param(
        CALCULATOR,
        {"expression": "1+" * 600},
        "expression: expected at most 1000 characters, got 1200",
        id="too long",
    ),
    pytest.param(
        ORDER, order(code="AB"), "code: expected at least 3 characters, got 2", id="too short"
    ),
    pytest.param(
        ORDER,
        order(code="ABCDEFGHI"),
        "code: expected at most 8 characters, got 9",
        id="too long code",
    ),
    pytest.param(
        ORDER,
        order(code="abc"),
        "code: expected text matching '^[A-Z0-9]+$', got string \"abc\"",
        id="pattern",
    ),
    pytest.param(ORDER, order(items=[]), "items: expected at least 1 items, got 0", id="no items"),
    pytest.param(
        ORDER, order(items=[ITEM] * 11), "items: expected at most 10 items, got 11", id="too many"
    ),
    # Huge strings, as a value and as the whole text.
    pytest.param(
        CALCULATOR,
        {"expression": HUGE},
        "expression: expected at most 1000 characters, got 1100000",
        id="1 MB value",
    ),
    pytest.param(
        CALCULATOR,
        {"expression": 1, "padding": HUGE},
        ("expression: expected string, got number 1", "padding: unknown field"),
        id="1 MB unknown field",
    ),
    pytest.param(
        CALCULATOR,
        json.dumps({"expression": HUGE}),
        "arguments exceed 1000000 bytes",
        id="1 MB text",
    ),
    pytest.param(
        CALCULATOR,
        json.dumps({"expression": HUGE}).encode(),
        "arguments exceed 1000000 bytes",
        id="1 MB bytes",
    ),
    # Invalid JSON text: the message says where it broke.
    pytest.param(
        CALCULATOR,
        '{"expression": "1+1"',
        "not valid JSON: Expecting ',' delimiter at line 1 column 21 (character 20)",
        id="truncated",
    ),
    pytest.param(
        CALCULATOR,
        '{"expression": "1+',
        "not valid JSON: Unterminated string starting at line 1 column 16 (character 15)",
        id="truncated string",
    ),
    pytest.param(
        CALCULATOR,
        '{"expression": "1+1",}',
        "not valid JSON: Expecting property name enclosed in double quotes at line 1 column 22",
        id="trailing comma",
    ),
    pytest.param(
        CALCULATOR,
        "{'expression': '1+1'}",
        "not valid JSON: Expecting property name enclosed in double quotes at line 1 column 2",
        id="single quotes",
    ),
    pytest.param(
        CALCULATOR,
        '{\n  "expression": "1+1"\n  "extra": 1\n}',
        "not valid JSON: Expecting ',' delimiter at line 3 column 3",
        id="missing comma on line 3",
    ),
    pytest.param(
        CALCULATOR,
        '{"expression": "1+1"} trailing',
        "not valid JSON: Extra data at line 1 column 23",
        id="trailing text",
    ),
    pytest.param(
        CALCULATOR,
        "sqrt(2)",
        "not valid JSON: Expecting value at line 1 column 1",
        id="bare expression",
    ),
    pytest.param(
        CALCULATOR, "   ", "not valid JSON: Expecting value at line 1 column 4", id="blank text"
    ),
    pytest.param(ORDER, '{"price": NaN}', "not valid JSON: NaN is not allowed", id="NaN"),
    pytest.param(
        ORDER, '{"price": Infinity}', "not valid JSON: Infinity is not allowed", id="Infinity"
    ),
    pytest.param(
        ORDER, '{"price": -Infinity}', "not valid JSON: -Infinity is not allowed", id="-Infinity"
    ),
    pytest.param(
        ORDER, '{"price": 1e400}', "not valid JSON: number 1e400 is out of range", id="1e400"
    ),
    # JSON, but not an object.
    pytest.param(
        CALCULATOR, '["1+1"]', "arguments must be a JSON object, got array", id="list text"
    ),
    pytest.param(CALCULATOR, "42", "arguments must be a JSON object, got number", id="number"),
    pytest.param(
        CALCULATOR, '"1+1"', "arguments must be a JSON object, got string", id="string text"
    ),
    pytest.param(CALCULATOR, "null", "arguments must be a JSON object, got null", id="null text"),
    pytest.param(CALCULATOR, "true", "arguments must be a JSON object, got boolean", id="true"),
    pytest.param(
        CALCULATOR,
        json.dumps(json.dumps({"expression": "1+1"})),
        "arguments must be a JSON object, got string",
        id="double-encoded",
    ),
    pytest.param(CALCULATOR, ["1+1"], "arguments must be a JSON object, got array", id="list"),
    pytest.param(CALCULATOR, 42, "arguments must be a JSON object, got number", id="int value"),
    # Wrong encodings.
    pytest.param(
        CALCULATOR,
        b"\xff\xfe{}",
        "arguments are not UTF-8 text (bad byte at offset 0)",
        id="not UTF-8",
    ),
    pytest.param(
        CALCULATOR,
        '{"expression": "café"}'.encode("latin-1"),
        "arguments are not UTF-8 text (bad byte at offset 19)",
        id="latin-1",
    ),
    pytest.param(
        CALCULATOR,
        '{"expression": "1"}'.encode("utf-16"),
        "arguments are not UTF-8 text (bad byte at offset 0)",
        id="UTF-16",
    ),
    pytest.param(
        CALCULATOR,
        bytearray(b'{"expression": "\xc3"}'),
        "arguments are not UTF-8 text (bad byte at offset 16)",
        id="cut UTF-8 sequence",
    ),
    # Deep nesting: refused with the field named, never a RecursionError.
    pytest.param(
        CALCULATOR,
        '{"expression": ' + "[" * 100 + "]" * 100 + "}",
        f"expression: nested deeper than {MAX_DEPTH} levels",
        id="deep text",
    ),
    pytest.param(
        CALCULATOR,
        '{"expression": ' + "[" * 100_000 + "]" * 100_000 + "}",
        "not valid JSON: maximum recursion depth exceeded",
        id="very deep text",
    ),
    pytest.param(
        CALCULATOR,
        {"expression": nested_list(10_000)},
        f"expression: nested deeper than {MAX_DEPTH} levels",
        id="deep value",
    ),
    pytest.param(
        FOREST,
        {"n_estimators": 10, "max_depth": 3, "data": nested_list(500)},
        f"data: nested deeper than {MAX_DEPTH} levels",
        id="bfcl any deep",
    ),
    pytest.param(
        CALCULATOR, cyclic(), f"expression: nested deeper than {MAX_DEPTH} levels", id="cycle"
    ),
]


@pytest.mark.parametrize(("schema", "raw", "expected"), MALFORMED)
def test_it_refuses_a_malformed_call_naming_the_field(
    schema: dict[str, Any], raw: Any, expected: str | tuple[str, ...]
) -> None:
    with pytest.raises(ArgumentsError) as caught:
        validate_arguments(schema, raw)
    message = str(caught.value)
    for part in (expected,) if isinstance(expected, str) else expected:
        assert part in message
    assert message == "; ".join(str(problem) for problem in caught.value.problems)


def test_the_malformed_corpus_is_large_enough() -> None:
    assert len(MALFORMED) >= 60


def test_it_keeps_problem_messages_short_for_huge_values() -> None:
    with pytest.raises(ArgumentsError) as caught:
        validate_arguments(CALCULATOR, {"expression": [HUGE]})
    assert len(str(caught.value)) < 200


def test_it_lists_every_problem_with_its_own_path() -> None:
    raw = order(quantity="two", currency="CHF", items=[{"sku": 7, "count": 0}], colour="red")
    with pytest.raises(ArgumentsError) as caught:
        validate_arguments(ORDER, raw)
    paths = [problem.path for problem in caught.value.problems]
    assert paths == ["colour", "currency", "items[0].count", "items[0].sku", "quantity"]


COERCIONS = [
    pytest.param(
        ORDER,
        order(quantity="12"),
        ["quantity"],
        12,
        'quantity: string "12" -> integer 12',
        id="integer text",
    ),
    pytest.param(
        ORDER,
        order(quantity="+7"),
        ["quantity"],
        7,
        'quantity: string "+7" -> integer 7',
        id="signed integer text",
    ),
    pytest.param(
        ORDER,
        order(quantity=12.0),
        ["quantity"],
        12,
        "quantity: number 12.0 -> integer 12",
        id="whole float",
    ),
    pytest.param(
        ORDER,
        order(price="2.5"),
        ["price"],
        2.5,
        'price: string "2.5" -> number 2.5',
        id="decimal text",
    ),
    pytest.param(
        ORDER,
        order(price="1e3"),
        ["price"],
        1000.0,
        'price: string "1e3" -> number 1000.0',
        id="exponent text",
    ),
    pytest.param(
        ORDER,
        order(price=".5"),
        ["price"],
        0.5,
        'price: string ".5" -> number 0.5',
        id="leading point",
    ),
    pytest.param(
        ORDER,
        order(price="12"),
        ["price"],
        12,
        'price: string "12" -> integer 12',
        id="integer text for number",
    ),
    pytest.param(
        ORDER,
        order(express="true"),
        ["express"],
        True,
        'express: string "true" -> boolean true',
        id="true text",
    ),
    pytest.param(
        ORDER,
        order(express="false"),
        ["express"],
        False,
        'express: string "false" -> boolean false',
        id="false text",
    ),
    pytest.param(
        ORDER,
        order(address={"street": "Main St", "zip": "1000", "floor": "3"}),
        ["address", "floor"],
        3,
        'address.floor: string "3" -> integer 3',
        id="nested object",
    ),
    pytest.param(
        ORDER,
        order(items=[{"sku": "A1", "count": 1}, {"sku": "B2", "count": 4.0}]),
        ["items", 1, "count"],
        4,
        "items[1].count: number 4.0 -> integer 4",
        id="array item",
    ),
    pytest.param(
        ORDER,
        order(items=[{"sku": "A1", "count": 1, "gift": "true"}]),
        ["items", 0, "gift"],
        True,
        'items[0].gift: string "true" -> boolean true',
        id="array item boolean",
    ),
    pytest.param(
        ORDER,
        json.dumps(order(quantity="3")),
        ["quantity"],
        3,
        'quantity: string "3" -> integer 3',
        id="inside JSON text",
    ),
    pytest.param(
        {"type": "object", "properties": {"limit": {"type": ["integer", "null"]}}},
        {"limit": "5"},
        ["limit"],
        5,
        'limit: string "5" -> integer 5',
        id="integer or null",
    ),
    pytest.param(
        TRIANGLE,
        {"base": "10", "height": 5.0},
        ["base"],
        10,
        'base: string "10" -> integer 10',
        id="bfcl",
    ),
    pytest.param(
        SORT,
        {"list": ["3.5", 1], "order": "ascending"},
        ["list", 0],
        3.5,
        'list[0]: string "3.5" -> number 3.5',
        id="bfcl array item",
    ),
]


def value_at(document: Any, path: list[Any]) -> Any:
    for key in path:
        document = document[key]
    return document


@pytest.mark.parametrize(("schema", "raw", "path", "expected", "coercion"), COERCIONS)
def test_it_applies_and_records_a_lossless_coercion(
    schema: dict[str, Any], raw: Any, path: list[Any], expected: Any, coercion: str
) -> None:
    valid = validate_arguments(schema, raw)
    value = value_at(valid.arguments, path)
    assert value == expected
    assert type(value) is type(expected)
    assert coercion in valid.coercions


def test_it_records_each_coercion_in_one_call() -> None:
    raw = order(quantity="2", items=[{"sku": "A1", "count": 1.0}], express="false")
    valid = validate_arguments(ORDER, raw)
    assert valid.arguments == order(quantity=2, items=[{"sku": "A1", "count": 1}], express=False)
    assert sorted(valid.coercions) == [
        'express: string "false" -> boolean false',
        "items[0].count: number 1.0 -> integer 1",
        'quantity: string "2" -> integer 2',
    ]


def test_it_leaves_the_callers_arguments_alone_when_coercing() -> None:
    raw = order(items=[{"sku": "A1", "count": "3"}])
    before = copy.deepcopy(raw)
    validate_arguments(ORDER, raw)
    assert raw == before


def test_it_still_checks_bounds_after_a_coercion() -> None:
    with pytest.raises(ArgumentsError, match=r"quantity: expected a number <= 100, got number 500"):
        validate_arguments(ORDER, order(quantity="500"))


NEAR_COERCIONS = [
    pytest.param("quantity", "12.5", 'quantity: expected integer, got string "12.5"', id="12.5"),
    pytest.param("quantity", "12.0", 'quantity: expected integer, got string "12.0"', id="12.0"),
    pytest.param("quantity", "1e1", 'quantity: expected integer, got string "1e1"', id="exp int"),
    pytest.param("quantity", 1.5, "quantity: expected integer, got number 1.5", id="1.5"),
    pytest.param("quantity", "0x10", 'quantity: expected integer, got string "0x10"', id="hex"),
    pytest.param("quantity", "1_0", 'quantity: expected integer, got string "1_0"', id="1_0"),
    pytest.param("quantity", " ", 'quantity: expected integer, got string " "', id="blank"),
    pytest.param("quantity", "", 'quantity: expected integer, got string ""', id="empty"),
    pytest.param("quantity", "٣", 'quantity: expected integer, got string "٣"', id="arabic 3"),
    pytest.param("quantity", "2 items", "quantity: expected integer", id="number and words"),
    pytest.param("quantity", 1e20, "quantity: expected integer, got number 1e+20", id="1e20"),
    pytest.param("price", "1e400", 'price: expected number, got string "1e400"', id="1e400"),
    pytest.param("price", "NaN", 'price: expected number, got string "NaN"', id="NaN string"),
    pytest.param("price", "inf", 'price: expected number, got string "inf"', id="inf string"),
    pytest.param("price", "0x10", 'price: expected number, got string "0x10"', id="hex number"),
    pytest.param("price", " ", 'price: expected number, got string " "', id="blank number"),
    pytest.param("price", "1,5", 'price: expected number, got string "1,5"', id="decimal comma"),
    pytest.param(
        "price",
        "12345678901234567890123",
        'price: expected number, got string "12345678901234567890123"',
        id="integer a float would round",
    ),
    pytest.param("express", "yes", 'express: expected boolean, got string "yes"', id="yes"),
    pytest.param("express", "True", 'express: expected boolean, got string "True"', id="True"),
    pytest.param("express", "1", 'express: expected boolean, got string "1"', id="1 text"),
    pytest.param("express", 0, "express: expected boolean, got number 0", id="0"),
    pytest.param("code", 12345, "code: expected string, got number 12345", id="int to string"),
]


@pytest.mark.parametrize(("field", "value", "expected"), NEAR_COERCIONS)
def test_it_refuses_a_near_coercion(field: str, value: Any, expected: str) -> None:
    with pytest.raises(ArgumentsError) as caught:
        validate_arguments(ORDER, order(**{field: value}))
    assert expected in str(caught.value)


VALID = [
    pytest.param(CALCULATOR, {"expression": "2 * (3 + 4)"}, id="calculator"),
    pytest.param(CALCULATOR, {"expression": "é" * 1000}, id="longest unicode"),
    pytest.param(ORDER, VALID_ORDER, id="minimal order"),
    pytest.param(
        ORDER,
        {
            "quantity": 100,
            "price": 0.1 + 0.2,
            "express": False,
            "currency": "GBP",
            "note": None,
            "code": "X9Z",
            "address": {"street": "Main St", "zip": "1000", "floor": 0},
            "items": [{"sku": "A1", "count": 1, "gift": True}] * 10,
            "tags": [],
        },
        id="every field at its bounds",
    ),
    pytest.param(TRIANGLE, {"base": 10, "height": 5, "unit": "cm"}, id="bfcl"),
    pytest.param(SORT, {"list": [3, 1.5, -2], "order": "descending"}, id="bfcl ints as numbers"),
    pytest.param(FOREST, {"n_estimators": 10, "max_depth": 3, "data": {"x": [1]}}, id="bfcl any"),
]


@pytest.mark.parametrize(("schema", "raw"), VALID)
def test_it_passes_a_valid_call_unchanged(schema: dict[str, Any], raw: dict[str, Any]) -> None:
    before = copy.deepcopy(raw)
    valid = validate_arguments(schema, raw)
    assert valid.arguments == before
    assert valid.coercions == []


@pytest.mark.parametrize(("schema", "raw"), VALID)
def test_it_passes_a_valid_call_sent_as_json_text(
    schema: dict[str, Any], raw: dict[str, Any]
) -> None:
    for text in (json.dumps(raw), json.dumps(raw, ensure_ascii=False).encode()):
        valid = validate_arguments(schema, text)
        assert valid.arguments == raw
        assert valid.coercions == []


def test_it_reads_no_arguments_as_an_empty_object() -> None:
    assert parse_arguments(None) == {}
    assert parse_arguments("") == {}
    assert validate_arguments({"type": "object", "properties": {}}, None).arguments == {}


BROKEN_SCHEMAS = [
    pytest.param(
        {"type": "object", "properties": {"a": {"type": "bogus"}}}, "is not valid", id="bad type"
    ),
    pytest.param(
        {"type": "object", "properties": {"a": {"type": "string", "pattern": "("}}},
        "'(' is not a 'regex'",
        id="bad regex",
    ),
    pytest.param({"type": "object", "required": "a"}, "'a' is not of type 'array'", id="required"),
    pytest.param(
        {"type": "object", "properties": {"a": {"minimum": "zero"}}},
        "'zero' is not of type 'number'",
        id="bad bound",
    ),
    pytest.param(
        {"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}},
        "cannot resolve '/$defs/missing'",
        id="dangling $ref",
    ),
]


@pytest.mark.parametrize(("schema", "expected"), BROKEN_SCHEMAS)
def test_it_reports_a_tools_broken_schema_as_arguments_error(
    schema: dict[str, Any], expected: str
) -> None:
    with pytest.raises(ArgumentsError) as caught:
        validate_arguments(schema, {"a": 1})
    assert "the tool's own schema is invalid" in str(caught.value)
    assert expected in str(caught.value)


# The BFCL v4 gold answers: every one must pass its function's converted schema.

# shared/ lies beside the checkout, on a developer's machine and in CI alike.
_SHARED_BFCL = Path(__file__).resolve().parents[3] / "shared" / "bench-data" / "bfcl"
BFCL_DIR = Path(os.environ.get("ARES_BFCL_DIR", str(_SHARED_BFCL)))
BFCL_QUESTIONS = BFCL_DIR / "BFCL_v4_simple_python.json"
BFCL_ANSWERS = BFCL_DIR / "possible_answer" / "BFCL_v4_simple_python.json"

# BFCL quirks, excluded by id: the gold answer omits a field its own schema requires.
BFCL_QUIRKS = {
    # Gold lists "" (may be omitted) first for fuel_efficiency, a required parameter.
    "simple_python_200": "fuel_efficiency: required but missing",
}


def first_acceptable(gold: dict[str, list[Any]]) -> dict[str, Any]:
    """Return a call built from each parameter's first acceptable value ("" means omitted).

    BFCL nests the same shape inside object values: a dict's fields are again lists of
    acceptable values, also inside arrays of dicts.
    """

    def pick(value: Any) -> Any:
        if isinstance(value, dict):
            return first_acceptable(value)
        if isinstance(value, list):
            return [pick(item) for item in value]
        return value

    return {name: pick(options[0]) for name, options in gold.items() if options[0] != ""}


def bfcl_cases() -> list[Any]:
    if not BFCL_ANSWERS.exists():
        return [pytest.param(None, None, None, marks=pytest.mark.skip(reason="no BFCL data"))]
    functions = {}
    with BFCL_QUESTIONS.open() as lines:
        for line in lines:
            question = json.loads(line)
            functions[question["id"]] = question["function"][0]
    cases = []
    with BFCL_ANSWERS.open() as lines:
        for line in lines:
            answer = json.loads(line)
            [(name, gold)] = answer["ground_truth"][0].items()
            function = functions[answer["id"]]
            assert function["name"] == name
            schema = to_json_schema(function["parameters"])
            cases.append(
                pytest.param(answer["id"], schema, first_acceptable(gold), id=answer["id"])
            )
    return cases


BFCL_CASES = bfcl_cases()


def test_it_loads_every_bfcl_simple_python_gold_answer() -> None:
    if not BFCL_ANSWERS.exists():
        pytest.skip("no BFCL data")
    assert len(BFCL_CASES) == 400


@pytest.mark.parametrize(("case_id", "schema", "arguments"), BFCL_CASES)
def test_it_accepts_the_bfcl_gold_answer(
    case_id: str, schema: dict[str, Any], arguments: dict[str, Any]
) -> None:
    if case_id in BFCL_QUIRKS:
        with pytest.raises(ArgumentsError, match=BFCL_QUIRKS[case_id]):
            validate_arguments(schema, arguments)
        return
    valid = validate_arguments(schema, arguments)
    assert valid.arguments == arguments
