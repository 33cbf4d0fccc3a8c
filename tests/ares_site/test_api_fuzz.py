"""Schemathesis fuzzes every operation of the live API: no 5xx, no answer the schema denies.

The schema is the one the server publishes (/api/v1/openapi.json). Every check runs (no
server error, status code, content type, headers and body conforming to the schema,
invalid data rejected, valid data accepted, auth not ignored, unsupported methods
refused ...) on examples generated from the schema, valid and invalid, with a fixed
seed so a CI failure replays. It runs on whichever database the test run uses, so on
SQLite and on PostgreSQL in CI's two passes. Every operation is fuzzed; nothing leaves
127.0.0.1 (see `local_only`).
"""

from __future__ import annotations

import contextlib
import socket
from collections import Counter, defaultdict
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest
import schemathesis
from django.conf import settings
from hypothesis import HealthCheck, assume, given
from hypothesis import settings as hypothesis_settings
from schemathesis import GenerationMode
from schemathesis.core.parameters import ParameterLocation

from ares_site.api import api
from planner_app.models import Agent
from tools_app import site_engine
from tools_app.models import ToolSetting
from traces_app.models import SCOPES

# Examples per operation and mode: 50 keeps the whole run to a minute or two on 2 cores.
MAX_EXAMPLES = 50
REQUESTS: Counter[str] = Counter()
FINDINGS: dict[str, list[str]] = defaultdict(list)


@pytest.fixture
def local_only(settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep every tool the fuzzer can reach on this machine.

    http_request may reach any public address (it refuses only private ones), so it is
    switched off as an operator would: a call answers "disabled". web_search without
    ARES_SEARXNG_URL only says it is not configured. No agent exists, so /chat answers
    404 (and without ARES_LLM_BASE_URL no LLM could be called anyway). A webhook channel
    the fuzzer creates could name a public host: no name but loopback's resolves, so its
    URL is refused (422) and nothing is ever sent out, not even a DNS query.
    """
    real_getaddrinfo = socket.getaddrinfo

    def loopback_only(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host not in ("127.0.0.1", "localhost", "::1"):
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", loopback_only)
    settings.ARES_SEARXNG_URL = ""
    settings.ARES_LLM_BASE_URL = ""
    ToolSetting.objects.create(name="http_request", enabled=False)
    site_engine.get_engine()
    site_engine.refresh_tool_settings(force=True)
    registry = site_engine.get_engine().registry
    assert not registry.get("http_request").enabled
    assert registry.get("web_search").function.__name__ == "not_configured"
    assert not Agent.objects.exists()


@pytest.fixture
def api_schema(live_server: Any, local_only: None) -> Any:
    """The OpenAPI schema the live server publishes, with every check switched on."""
    schema = schemathesis.openapi.from_url(f"{live_server.url}/api/v1/openapi.json")
    schema.config.checks.update(included_check_names=["all"])
    # Schema-valid requests may still get a 422 for rules JSON Schema cannot state: since
    # before until, a cursor this API issued, a chat ending with the user's text, span
    # and trace ids that are not all zeros (W3C), no NUL byte in text. The 422 is
    # documented on every operation; any other refusal of valid data is still a finding.
    acceptance = schema.config.checks.positive_data_acceptance
    acceptance.expected_statuses = [*acceptance.expected_statuses, "422"]
    # A body over the size limit is refused with 413 before anything looks at it.
    rejection = schema.config.checks.negative_data_rejection
    rejection.expected_statuses = [*rejection.expected_statuses, "413"]
    return schema


@pytest.fixture(scope="module", autouse=True)
def report_requests(request: pytest.FixtureRequest) -> Iterator[None]:
    """Print the requests sent per operation and what was found, in the test output."""
    yield
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    database = settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1]
    lines = [f"\nAPI fuzzing on {database}: {sum(REQUESTS.values())} requests"]
    lines += [f"  {count:5d}  {label}" for label, count in sorted(REQUESTS.items())]
    for label, findings in sorted(FINDINGS.items()):
        lines += [f"  FOUND  {label}: {finding}" for finding in findings]
    lines += [] if FINDINGS else ["  no findings"]
    with capture.global_and_fixture_disabled():
        print("\n".join(lines))


def _wire_text(value: Any) -> list[str]:
    """Return a query value as the URL carries it: text, one per repeated key."""
    values = value if isinstance(value, list) else [value]
    return [str(v).lower() if isinstance(v, bool) else str(v) for v in values if v is not None]


def _read_as(text: str) -> list[Any]:
    """Return what a query text may stand for: itself, and a number or boolean it spells."""
    readings: list[Any] = [text]
    if text in ("true", "false"):
        readings.append(text == "true")
    for number in (int, float):
        with contextlib.suppress(ValueError):
            readings.append(number(text))
    return readings


def is_valid_on_the_wire(case: Any) -> bool:
    """Whether a negative case is valid as sent: only its query was made invalid, as typed
    values (an array, a boolean) that the URL carries as text a string parameter takes.

    The Authorization header the fuzzer makes invalid is replaced by a valid key, so it
    never makes a case negative; anything else negative (a body, a path) does. A case
    negative in its header alone is left to the server (it has been answered so far).
    """
    negative = {loc for loc, info in case.meta.components.items() if info.mode.is_negative}
    if ParameterLocation.QUERY not in negative:
        return False
    if not negative <= {ParameterLocation.QUERY, ParameterLocation.HEADER}:
        return False
    declared = case.operation.definition.raw.get("parameters", [])
    parameters = [p for p in declared if p["in"] == "query"]
    schemas = {p["name"]: p["schema"] for p in parameters}
    for name, value in (case.query or {}).items():
        texts = _wire_text(value)
        if name not in schemas or len(texts) != 1:
            return False
        validator = jsonschema.Draft202012Validator(schemas[name])
        if not any(validator.is_valid(value) for value in _read_as(texts[0])):
            return False
    return all(p["name"] in (case.query or {}) for p in parameters if p.get("required"))


# Every operation, as the in-process API lists it (the test compares it with what the
# live server publishes).
OPERATIONS = [
    f"{method.upper()} {path}"
    for path, methods in api.get_openapi_schema()["paths"].items()
    for method in methods
]


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=str)
@pytest.mark.parametrize("label", OPERATIONS)
def test_it_holds_to_its_schema(api_schema, live_server, make_key, label, mode):
    assert sorted(OPERATIONS) == sorted(op.ok().label for op in api_schema.get_all_operations())
    method, path = label.split(" ", 1)
    operation = api_schema[path][method]
    headers = {"Authorization": f"Bearer {make_key(*SCOPES)}"}

    @given(case=operation.as_strategy(generation_mode=mode))
    @hypothesis_settings(
        max_examples=MAX_EXAMPLES,
        derandomize=True,  # the same examples on every run
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    def fuzz(case: Any) -> None:
        # A query made invalid only as typed values ([false]) can be valid text (agent=false).
        assume(not (mode is GenerationMode.NEGATIVE and is_valid_on_the_wire(case)))
        REQUESTS[f"{label} ({mode})"] += 1
        try:
            case.call_and_validate(base_url=live_server.url, headers=headers)
        except BaseException as exc:  # a FailureGroup is a BaseExceptionGroup
            failures = getattr(exc, "exceptions", [exc])
            FINDINGS[label] += [getattr(f, "title", repr(f))[:200] for f in failures]
            raise

    fuzz()
