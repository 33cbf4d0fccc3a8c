"""Add BFCL simple_python's maths items that the calculator serves to planner_requests.jsonl.

BFCL (ShishirPatil/gorilla, Apache-2.0) asks a model to call a Python function such as
math.factorial(number=5). The items whose function is plain arithmetic on numbers written
in the question map onto our calculator; this script picks them by function name, takes the
gold arguments from possible_answer (joined on id), computes the expected value from those
arguments with Python's math module, and writes one labelled line per item with
"source": "bfcl:<id>". Re-running it replaces the BFCL lines and keeps every other line.

    python tests/data/build_bfcl_math.py [path/to/bench-data/bfcl]
"""

from __future__ import annotations

import json
import math
import re
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
DEFAULT_BFCL = REPO.parent / "shared" / "bench-data" / "bfcl"
DATA_SET = Path(__file__).with_name("planner_requests.jsonl")
QUESTIONS = "BFCL_v4_simple_python.json"
ANSWERS = Path("possible_answer") / QUESTIONS

Converter = Callable[[dict[str, Any]], tuple[str, float] | None]


def _number(value: Any) -> str:
    """Return a gold number as the calculator writes it: 12.0 -> "12"."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _factorial(args: dict[str, Any]) -> tuple[str, float]:
    n = int(args["number"])
    return f"factorial({n})", math.factorial(n)


def _gcd(args: dict[str, Any]) -> tuple[str, float]:
    a, b = (int(value) for value in args.values())
    return f"gcd({a},{b})", math.gcd(a, b)


def _power(args: dict[str, Any]) -> tuple[str, float] | None:
    if args.get("mod") not in (None, 1):
        return None  # pow with a modulus has no calculator form
    base, exponent = args["base"], args["exponent"]
    return f"{_number(base)}**{_number(exponent)}", base**exponent


def _hypotenuse(args: dict[str, Any]) -> tuple[str, float] | None:
    if args.get("z") not in (None, 0):
        return None
    x, y = args["x"], args["y"]
    return f"sqrt({_number(x)}**2+{_number(y)}**2)", math.hypot(x, y)


def _average(args: dict[str, Any]) -> tuple[str, float]:
    numbers = args["numbers"]
    return f"mean({','.join(_number(n) for n in numbers)})", statistics.mean(numbers)


def _circle_area(args: dict[str, Any]) -> tuple[str, float]:
    radius = args["radius"]
    return f"pi*{_number(radius)}**2", math.pi * radius**2


def _circumference(args: dict[str, Any]) -> tuple[str, float]:
    radius = args["radius"]
    return f"2*pi*{_number(radius)}", 2 * math.pi * radius


def _triangle_area(args: dict[str, Any]) -> tuple[str, float]:
    base, height = args["base"], args["height"]
    return f"{_number(base)}*{_number(height)}/2", base * height / 2


# BFCL function name -> how its gold arguments become a calculator expression and a value.
CONVERTERS: dict[str, Converter] = {
    "math.factorial": _factorial,
    "math.gcd": _gcd,
    "math.hcf": _gcd,
    "number_theory.gcd": _gcd,
    "math.power": _power,
    "math.hypot": _hypotenuse,
    "calculate_average": _average,
    "geometry.area_circle": _circle_area,
    "geometry.calculate_area_circle": _circle_area,
    "calculate_circumference": _circumference,
    "geometry.circumference": _circumference,
    "calculate_triangle_area": _triangle_area,
    "calc_area_triangle": _triangle_area,
    "geometry.area_triangle": _triangle_area,
    "calculate_area": _triangle_area,
}


def _gold_arguments(ground_truth: list[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """Return the gold call's function and, per argument, its first accepted value.

    BFCL lists the accepted values of each argument; "" means "may be left out".
    """
    ((function, options),) = ground_truth[0].items()
    arguments = {name: values[0] for name, values in options.items() if values[0] != ""}
    return function, arguments


def _read_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def _numbers_literal_in(question: str, arguments: dict[str, Any]) -> bool:
    """Return whether every gold number is written in the question ("5m" counts as 5)."""
    written = set(re.findall(r"[0-9]+(?:\.[0-9]+)?", question))
    values = [
        v for value in arguments.values() for v in (value if isinstance(value, list) else [value])
    ]
    return all(_number(value) in written for value in values if isinstance(value, int | float))


def convert(bfcl: Path) -> list[dict[str, Any]]:
    """Return the data-set lines for the BFCL items that map onto the calculator."""
    questions = {item["id"]: item for item in _read_lines(bfcl / QUESTIONS)}
    lines = []
    for answer in _read_lines(bfcl / ANSWERS):
        function, arguments = _gold_arguments(answer["ground_truth"])
        converter = CONVERTERS.get(function)
        converted = converter(arguments) if converter else None
        if converted is None:
            continue
        expression, value = converted
        question = questions[answer["id"]]["question"][0][0]["content"]
        if not _numbers_literal_in(question, arguments):
            continue  # the numbers must be in the question, not only in the gold answer
        lines.append(
            {
                "request": question,
                "lang": "en",
                "tool": "calculator",
                "arguments": {"expression": expression},
                "value": value,
                "source": f"bfcl:{answer['id']}",
            }
        )
    return lines


def main() -> None:
    bfcl = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_BFCL
    own = [line for line in _read_lines(DATA_SET) if not line.get("source", "").startswith("bfcl:")]
    added = convert(bfcl)
    text = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in own + added)
    DATA_SET.write_text(text, encoding="utf-8")
    print(f"{DATA_SET.name}: {len(own)} own lines, {len(added)} from BFCL simple_python")


if __name__ == "__main__":
    main()
