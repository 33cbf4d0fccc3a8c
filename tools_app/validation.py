"""Argument validation against a tool's JSON Schema (Draft 2020-12), before any tool code runs.

Coercion policy, narrow on purpose (only where no information can be lost or guessed):
- a string holding an integer of up to 18 digits ("12", "-3") where an integer or a number
  is expected;
- a string holding a finite decimal number ("2.5", "1e3") where a number is expected (it
  becomes the float JSON would have given; longer integers are refused, as a float would
  round them);
- a float with no fractional part (12.0) where an integer is expected;
- the strings "true" / "false" where a boolean is expected.
Every coercion is reported, so the record shows what the model actually sent.
Everything else is an error naming the field, what was expected and what came.
"""

from __future__ import annotations

import copy
import json
import math
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError, ValidationError
from jsonschema.validators import extend
from referencing.exceptions import Unresolvable

from tools_app.specs import Problem

MAX_ARGUMENTS_BYTES = 1_000_000
MAX_DEPTH = 64  # deeper arguments are refused before they can exhaust the stack
# ASCII digits only: Python's int() and float() would also read "١٢" as 12, JSON would not.
_INTEGER_TEXT = re.compile(r"^[+-]?[0-9]{1,18}\Z")
_NUMBER_TEXT = re.compile(r"^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?\Z")
_JSON_TYPES = {
    type(None): "null",
    bool: "boolean",
    int: "number",
    float: "number",
    str: "string",
    list: "array",
    dict: "object",
}


class ArgumentsError(ValueError):
    """Arguments that cannot be used: each problem says where, what was expected, what came."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("; ".join(str(problem) for problem in problems))


@dataclass
class ValidArguments:
    arguments: dict[str, Any]
    coercions: list[str] = field(default_factory=list)


def parse_arguments(raw: Any) -> dict[str, Any]:
    """Return arguments as a dict: JSON text is decoded, None means none; else ArgumentsError."""
    if raw is None or raw == "":
        return {}
    if isinstance(raw, bytes | bytearray):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ArgumentsError(
                [Problem("", f"arguments are not UTF-8 text (bad byte at offset {exc.start})")]
            ) from None
    if isinstance(raw, str):
        if len(raw) > MAX_ARGUMENTS_BYTES:
            raise ArgumentsError([Problem("", f"arguments exceed {MAX_ARGUMENTS_BYTES} bytes")])
        try:
            raw = json.loads(raw, parse_constant=_refuse_constant, parse_float=_finite_float)
        except json.JSONDecodeError as exc:
            raise ArgumentsError(
                [
                    Problem(
                        "",
                        # "Unterminated string starting at" already ends with "at".
                        f"arguments are not valid JSON: {exc.msg.removesuffix(' at')} at "
                        f"line {exc.lineno} column {exc.colno} (character {exc.pos})",
                    )
                ]
            ) from None
        except (ValueError, RecursionError) as exc:
            raise ArgumentsError([Problem("", f"arguments are not valid JSON: {exc}")]) from None
    if not isinstance(raw, dict):
        raise ArgumentsError(
            [Problem("", f"arguments must be a JSON object, got {json_type(raw)}")]
        )
    too_deep = _too_deep(raw)
    if too_deep is not None:
        raise ArgumentsError([Problem(too_deep, f"nested deeper than {MAX_DEPTH} levels")])
    return raw


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not allowed")


def _finite_float(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(f"number {text} is out of range")
    return number


def _too_deep(arguments: dict[str, Any]) -> str | None:
    """Return the first field nested deeper than MAX_DEPTH (or cyclic), else None."""
    for name, value in arguments.items():
        stack = [(value, 1)]
        while stack:
            item, depth = stack.pop()
            if depth > MAX_DEPTH:
                return str(name)
            if isinstance(item, dict):
                stack.extend((child, depth + 1) for child in item.values())
            elif isinstance(item, list | tuple):
                stack.extend((child, depth + 1) for child in item)
    return None


# JSON Schema counts 3.0 as an integer; tool code should get the int 3, so a whole float
# fails "integer" here and is then coerced (and the coercion recorded).
_StrictIntegerValidator = extend(
    Draft202012Validator,
    type_checker=Draft202012Validator.TYPE_CHECKER.redefine(
        "integer", lambda _checker, value: isinstance(value, int) and not isinstance(value, bool)
    ),
)


@lru_cache(maxsize=1024)
def _validator(schema_json: str) -> Draft202012Validator:
    schema = json.loads(schema_json)
    Draft202012Validator.check_schema(schema)
    return _StrictIntegerValidator(schema)


def validator_for(schema: dict[str, Any]) -> Draft202012Validator:
    """Return a (cached) validator for a tool's parameters schema; SchemaError if it is invalid."""
    return _validator(json.dumps(schema, sort_keys=True))


def validate_arguments(schema: dict[str, Any], raw: Any) -> ValidArguments:
    """Return the arguments parsed, checked and safely coerced, or raise ArgumentsError."""
    arguments = parse_arguments(raw)
    try:
        validator = validator_for(schema)
    except SchemaError as exc:
        problem = Problem("", f"the tool's own schema is invalid: {exc.message}")
        raise ArgumentsError([problem]) from None
    coercions: list[str] = []
    for _ in range(3):  # a coercion can uncover an error deeper down; three passes suffice
        try:
            errors = list(validator.iter_errors(arguments))
        except Unresolvable as exc:
            problem = Problem("", f"the tool's own schema is invalid: cannot resolve {exc.ref!r}")
            raise ArgumentsError([problem]) from None
        if not errors:
            return ValidArguments(arguments, coercions)
        fixed = False
        for error in errors:
            if error.validator != "type":
                continue
            ok, value = _coerce(error.instance, error.validator_value)
            if ok:
                if not fixed and not coercions:
                    arguments = copy.deepcopy(arguments)
                _set_at(arguments, list(error.absolute_path), value)
                coercions.append(
                    f"{_path(error)}: {json_type(error.instance)} {_show(error.instance)} "
                    f"-> {'integer' if type(value) is int else json_type(value)} {_show(value)}"
                )
                fixed = True
        if not fixed:
            break
    problems = dict.fromkeys(problem for error in errors for problem in _problems(error))
    raise ArgumentsError(sorted(problems, key=lambda p: p.path))


def _coerce(value: Any, expected: str | list[str]) -> tuple[bool, Any]:
    """Return (True, value converted) when the conversion to `expected` is lossless."""
    wanted = [expected] if isinstance(expected, str) else list(expected)
    if isinstance(value, str):
        text = value.strip()
        if ("integer" in wanted or "number" in wanted) and _INTEGER_TEXT.match(text):
            return True, int(text)
        if "number" in wanted and _NUMBER_TEXT.match(text) and not text.lstrip("+-").isdigit():
            number = float(text)
            if math.isfinite(number):
                return True, number
        if "boolean" in wanted and text in ("true", "false"):
            return True, text == "true"
    whole = isinstance(value, float) and value.is_integer() and abs(value) < 2**53
    if whole and "integer" in wanted:
        return True, int(value)
    return False, value


def _set_at(document: Any, path: list[Any], value: Any) -> None:
    for key in path[:-1]:
        document = document[key]
    document[path[-1]] = value


def json_type(value: Any) -> str:
    """Return the JSON type name of a Python value (null, boolean, integer, ...)."""
    return _JSON_TYPES.get(type(value), type(value).__name__)


def _show(value: Any, limit: int = 60) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _path(error: ValidationError) -> str:
    parts = [f"[{part}]" if isinstance(part, int) else f".{part}" for part in error.absolute_path]
    return "".join(parts).lstrip(".")


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _problems(error: ValidationError) -> list[Problem]:
    """Return the problems in one error: one per unknown field, else the one it names."""
    if error.validator != "additionalProperties" or not isinstance(error.instance, dict):
        return [_problem(error)]
    allowed = sorted(error.schema.get("properties", {}))
    patterns = list(error.schema.get("patternProperties", {}))
    extra = [
        name
        for name in error.instance
        if name not in allowed and not any(re.search(p, name) for p in patterns)
    ]
    hint = f"; allowed: {', '.join(allowed)}" if allowed else ""
    path = _path(error)
    return [Problem(_join(path, name), f"unknown field{hint}") for name in extra] or [
        _problem(error)
    ]


def _problem(error: ValidationError) -> Problem:
    """Return one error phrased as 'field: expected X, got Y'."""
    path, value, rule, limit = _path(error), error.instance, error.validator, error.validator_value
    got = f"got {json_type(value)} {_show(value)}" if value is not None else "got null"
    if rule == "type":
        expected = limit if isinstance(limit, str) else " or ".join(limit)
        return Problem(path, f"expected {expected}, {got}")
    if rule == "required":
        # jsonschema reports each missing name separately, as "'name' is a required property".
        missing = [name for name in limit if name not in value]
        named = [name for name in missing if error.message.startswith(f"{name!r} ")]
        missing = named or missing
        return Problem(_join(path, missing[0]) if missing else path, "required but missing")
    if rule == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        extra = sorted(set(value) - set(allowed))
        hint = f"; allowed: {', '.join(allowed)}" if allowed else ""
        return Problem(_join(path, extra[0]) if extra else path, f"unknown field{hint}")
    if rule == "enum":
        options = ", ".join(_show(option) for option in limit)
        return Problem(path, f"expected one of {options}, {got}")
    if rule in ("minLength", "maxLength"):
        bound = "at least" if rule == "minLength" else "at most"
        return Problem(path, f"expected {bound} {limit} characters, got {len(value)}")
    if rule in ("minItems", "maxItems"):
        bound = "at least" if rule == "minItems" else "at most"
        return Problem(path, f"expected {bound} {limit} items, got {len(value)}")
    bounds = {"minimum": ">=", "maximum": "<=", "exclusiveMinimum": ">", "exclusiveMaximum": "<"}
    if rule in bounds:
        return Problem(path, f"expected a number {bounds[rule]} {limit}, {got}")
    if rule == "pattern":
        return Problem(path, f"expected text matching {limit!r}, {got}")
    message = error.message if len(error.message) <= 200 else error.message[:199] + "…"
    return Problem(path, message)
