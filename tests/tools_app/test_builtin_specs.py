"""Every built-in tool's contract: valid schemas, strict parameters, an LLM-safe name."""

from __future__ import annotations

import pytest

from tools_app.configured_builtins import builtin_specs
from tools_app.specs import LLM_NAME_PATTERN, ToolSpec
from tools_app.validation import validator_for

SPECS = builtin_specs()


@pytest.mark.parametrize("spec", SPECS, ids=[spec.name for spec in SPECS])
def test_its_schemas_are_valid_draft_2020_12(spec: ToolSpec) -> None:
    validator_for(spec.parameters)
    validator_for(spec.returns)
    assert spec.parameters["additionalProperties"] is False
    assert LLM_NAME_PATTERN.match(spec.llm_name)
    assert spec.description and spec.capabilities


def test_the_built_in_tools_are_the_ones_documented() -> None:
    names = [spec.name for spec in SPECS]
    assert names == [
        "calculator", "hash_tool", "string_utils", "datetime", "json_tools", "http_request",
        "web_search",
    ]  # fmt: skip
