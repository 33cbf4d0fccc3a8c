"""ingest/redaction.py: secrets redacted, sizes bounded with a marker, text made storable."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from traces_app.ingest import redaction
from traces_app.ingest.redaction import (
    REDACTED,
    bound_json,
    bound_text,
    cut_utf8,
    is_secret_key,
    redact,
    redact_text,
    safe_payload,
    storable_text,
)
from traces_app.models import Invocation, Trace

JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
OPENAI_KEY = "sk-proj-" + "a1B2c3D4" * 4


@pytest.mark.parametrize(
    "key",
    [
        "password",
        "PASSWORD",
        "db_password",
        "passwd",
        "pwd",
        "api_key",
        "apiKey",
        "X-Api-Key",
        "access_key",
        "private-key",
        "token",
        "access_token",
        "refresh_token",
        "secret",
        "client_secret",
        "Authorization",
        "cookie",
        "Set-Cookie",
        "credentials",
        "session_id",
    ],
)
def test_it_treats_keys_named_like_secrets_as_secret(key):
    assert is_secret_key(key)


@pytest.mark.parametrize(
    "key",
    [
        "input_tokens",
        "output_tokens",
        "max_tokens",
        "prompt_tokens",
        "completion_tokens",
        "total_tokens",
        "token_count",
        "tokens_used",
        "token_limit",
        "query",
        "author",
        "passage",
        "keyword",
    ],
)
def test_it_leaves_token_counts_and_ordinary_keys_alone(key):
    assert not is_secret_key(key)


def test_it_redacts_secret_keys_at_any_depth():
    payload = {
        "query": "weather in Paris",
        "auth": {"api_key": "abc123", "nested": [{"password": "hunter2", "user": "bob"}]},
        "max_tokens": 256,
    }

    assert redact(payload) == {
        "query": "weather in Paris",
        "auth": {"api_key": REDACTED, "nested": [{"password": REDACTED, "user": "bob"}]},
        "max_tokens": 256,
    }


def test_it_redacts_a_secret_key_whatever_its_value():
    payload = {"token": {"value": "x", "expires": 3600}, "secret": ["a", "b"], "pwd": 1234}

    assert redact(payload) == {"token": REDACTED, "secret": REDACTED, "pwd": REDACTED}


def test_it_redacts_inside_arguments_sent_as_a_json_string():
    openai_arguments = json.dumps({"city": "Oslo", "api_key": "k-123", "units": "metric"})

    assert safe_payload(openai_arguments, 16384) == {
        "city": "Oslo",
        "api_key": REDACTED,
        "units": "metric",
    }


def test_it_leaves_a_string_that_only_looks_like_json_as_text():
    assert safe_payload("{not json at all", 16384) == "{not json at all"


@pytest.mark.parametrize(
    ("text", "redacted"),
    [
        pytest.param(
            "Authorization: Bearer 9f8e7d6c5b4a3f2e",
            "Authorization: Bearer [REDACTED]",
            id="bearer token",
        ),
        pytest.param(
            "Authorization: Basic dXNlcjpodW50ZXIy", "Authorization: Basic [REDACTED]", id="basic"
        ),
        pytest.param(f"key is {OPENAI_KEY}.", "key is [REDACTED].", id="OpenAI sk- key"),
        pytest.param(f"jwt={JWT}", "jwt=[REDACTED]", id="JWT"),
        pytest.param(
            "postgres://ares:s3cr3t@db:5432/ares",
            "postgres://ares:[REDACTED]@db:5432/ares",
            id="URL password",
        ),
        pytest.param(
            "redis://:s3cr3t@cache:6379/0", "redis://:[REDACTED]@cache:6379/0", id="URL no user"
        ),
        pytest.param("token ghp_" + "A1b2C3d4E5" * 3, "token [REDACTED]", id="GitHub token"),
        pytest.param("AKIAIOSFODNN7EXAMPLE leaked", "[REDACTED] leaked", id="AWS key id"),
        pytest.param("ares_" + "Zx9" * 10, "[REDACTED]", id="our own API key"),
        pytest.param(
            "login failed: password=hunter2 for bob",
            "login failed: password=[REDACTED] for bob",
            id="key=value in a message",
        ),
        pytest.param(
            "GET /v1?api_key=abc123&q=cats",
            "GET /v1?api_key=[REDACTED]&q=cats",
            id="query string",
        ),
        pytest.param(
            '{"user": "bob", "password": "correct horse',
            '{"user": "bob", "password": "[REDACTED]',
            id="JSON cut short",
        ),
        pytest.param(
            '{\\"client_secret\\": \\"two words\\"}',
            '{\\"client_secret\\": \\"[REDACTED]\\"}',
            id="JSON inside JSON",
        ),
    ],
)
def test_it_redacts_secret_looking_values_in_text(text, redacted):
    assert redact_text(text) == redacted


@pytest.mark.parametrize(
    "text",
    [
        "Explain basic calculus to me",
        "a basic question about Python",
        "the bearer instrument is payable",
        "sk-short",
        "max_tokens=512, temperature=0.2",
        "input_tokens: 1200",
        "https://example.com/path?q=1",
        "ratio 3:2 and x=5",
    ],
)
def test_it_leaves_ordinary_text_alone(text):
    assert redact_text(text) == text


def test_it_redacts_secret_looking_values_in_nested_text():
    payload = {"headers": ["Bearer 9f8e7d6c5b4a3f2e"], "note": f"use {OPENAI_KEY}"}

    assert redact(payload) == {"headers": ["Bearer [REDACTED]"], "note": "use [REDACTED]"}


def test_it_keeps_text_under_the_limit_whole():
    assert bound_text("short", 16) == "short"


def test_it_cuts_long_text_with_a_marker_saying_how_much():
    assert bound_text("a" * 100, 10) == "a" * 10 + "…[truncated 90 of 100 bytes]"


@pytest.mark.parametrize(
    ("text", "max_bytes", "kept"),
    [
        pytest.param("é" * 10, 5, "éé", id="2-byte characters"),
        pytest.param("€" * 10, 7, "€€", id="3-byte characters"),
        pytest.param("🎉" * 4, 7, "🎉", id="4-byte characters"),
        pytest.param("ab🎉", 3, "ab", id="cut inside the last character"),
    ],
)
def test_it_cuts_utf8_only_between_characters(text, max_bytes, kept):
    assert cut_utf8(text, max_bytes) == kept


def test_it_counts_the_bytes_really_cut_in_the_marker():
    text = "é" * 10  # 20 bytes; 5 allowed keeps two characters, 4 bytes

    assert bound_text(text, 5) == "éé…[truncated 16 of 20 bytes]"


def test_it_replaces_an_oversized_object_with_a_truncation_record():
    value = {"rows": list(range(5000))}
    size = len(json.dumps(value, separators=(",", ":")))

    bounded = bound_json(value, 1024)

    assert bounded["__truncated__"] is True
    assert bounded["original_bytes"] == size
    assert bounded["preview"].startswith('{"rows":[0,1,2,3')
    assert bounded["preview"].endswith("…")
    assert len(bounded["preview"].encode()) <= 1024


def test_it_keeps_an_object_under_the_limit_as_it_is():
    value = {"rows": [1, 2, 3]}

    assert bound_json(value, 1024) is value


@pytest.mark.parametrize("value", [None, True, 3, 2.5])
def test_it_keeps_scalars_as_they_are(value):
    assert bound_json(value, 256) == value


@pytest.mark.parametrize(
    ("text", "stored"),
    [
        pytest.param("a\x00b", "a\ufffdb", id="NUL"),
        pytest.param("x\ud800y", "x\ufffdy", id="lone high surrogate"),
        pytest.param("\udfff", "\ufffd", id="lone low surrogate"),
        pytest.param("fine 🎉", "fine 🎉", id="valid text"),
    ],
)
def test_it_makes_text_storable(text, stored):
    assert storable_text(text) == stored


def test_it_redacts_before_it_truncates():
    bounded = safe_payload({"api_key": "k-123", "notes": "x" * 20000}, 1024)

    assert bounded["preview"].startswith('{"api_key":"[REDACTED]","notes":"xxx')


def test_it_stores_spans_redacted_through_the_api(report, span):
    sent = span(
        arguments=json.dumps({"city": "Oslo", "api_key": "k-123"}),
        result={"headers": {"Authorization": "Bearer 9f8e7d6c5b4a3f2e"}, "body": OPENAI_KEY},
        status="error",
        error_kind="permission_denied",
        error_message="upstream refused postgres://app:pa55word@db/x with password=hunter2",
        request_text=f"Use my key {OPENAI_KEY} to list files",
    )

    assert report(sent).status_code == 200

    row = Invocation.objects.get()
    assert row.arguments == {"city": "Oslo", "api_key": REDACTED}
    assert row.result == {"headers": {"Authorization": REDACTED}, "body": REDACTED}
    assert row.error_message == (
        "upstream refused postgres://app:[REDACTED]@db/x with password=[REDACTED]"
    )
    assert Trace.objects.get().request_text == "Use my key [REDACTED] to list files"


# What a faster redaction could miss: secrets far into long text, where the quick
# check of short text does not run, at its very ends, and several in one text.
PROSE = "The protocol lets agents call tools and read their results back. " * 5


@pytest.mark.parametrize(
    ("text", "redacted"),
    [
        pytest.param(
            "x" * 190 + f" {OPENAI_KEY} " + "y" * 20,
            "x" * 190 + " [REDACTED] " + "y" * 20,
            id="straddling 200 characters",
        ),
        pytest.param(
            "x" * 195 + " password=hunter2 and more",
            "x" * 195 + " password=[REDACTED] and more",
            id="key=value straddling 200 characters",
        ),
        pytest.param(f"{OPENAI_KEY} {PROSE}", f"[REDACTED] {PROSE}", id="at the start"),
        pytest.param(f"{PROSE}{OPENAI_KEY}", f"{PROSE}[REDACTED]", id="at the end"),
        pytest.param(f"{PROSE}token={JWT}", f"{PROSE}token=[REDACTED]", id="key=value at the end"),
        pytest.param(
            f"{PROSE}Authorization: Bearer 9f8e7d6c5b4a3f2e {PROSE}",
            f"{PROSE}Authorization: Bearer [REDACTED] {PROSE}",
            id="Bearer in long text",
        ),
        pytest.param(
            f"{PROSE}BASIC dXNlcjpodW50ZXIy",
            f"{PROSE}BASIC [REDACTED]",
            id="Basic in long text",
        ),
        pytest.param(
            f"a basic question {PROSE}",
            f"a basic question {PROSE}",
            id="basic prose in long text",
        ),
        pytest.param(
            f"{PROSE} see https://bob:pa55word@git.example.org/repo for it",
            f"{PROSE} see https://bob:[REDACTED]@git.example.org/repo for it",
            id="URL with credentials in long text",
        ),
        pytest.param(
            f"ghp_{'A1b2C3d4E5' * 3} {PROSE} AKIAIOSFODNN7EXAMPLE, "
            f"xoxb-1234567890-abc {PROSE} {JWT} ares_{'Zx9' * 10} client_secret: 's3 cr3t'",
            f"[REDACTED] {PROSE} [REDACTED], [REDACTED] {PROSE} [REDACTED] [REDACTED] "
            "client_secret: '[REDACTED]'",
            id="several secrets in one text",
        ),
        pytest.param(
            f"{PROSE}max_tokens=512, session_id=abc123, SessionId=x, monkey=1",
            f"{PROSE}max_tokens=512, session_id=[REDACTED], SessionId=[REDACTED], monkey=1",
            id="keys in long text: token counts and ordinary keys stay",
        ),
        pytest.param(
            f'{PROSE}{{\\"password\\": \\"token=abc\\", \\"api-key\\":\\"k\\"}}',
            f'{PROSE}{{\\"password\\": \\"[REDACTED]\\", \\"api-key\\":\\"[REDACTED]\\"}}',
            id="JSON inside JSON in long text, a key inside a redacted value",
        ),
        pytest.param(
            f"K{PROSE}password=hunter2 \u212aey=x api_\u212aey=y",
            f"K{PROSE}password=[REDACTED] \u212aey=x api_\u212aey=y",
            id="Kelvin sign: a letter that is no key character",
        ),
        pytest.param(
            f"İ{PROSE}password=hunter2 BEARER 9f8e7d6c5b4a3f2e",
            f"İ{PROSE}password=[REDACTED] BEARER [REDACTED]",
            id="a letter that lowers to two",
        ),
        pytest.param(
            f"straße {PROSE}Basıc dXNlcjpodW50ZXIy",
            f"straße {PROSE}Basıc [REDACTED]",
            id="a letter that folds to two, and the dotless i",
        ),
    ],
)
def test_it_redacts_secrets_anywhere_in_long_text(text, redacted):
    assert redact_text(text) == redacted


def test_it_redacts_long_text_and_secret_keys_at_depth_in_json():
    payload = json.dumps(
        {
            "results": [
                {"snippet": f"{PROSE}Bearer 9f8e7d6c5b4a3f2e"},
                [{"url": f"https://u:pw123456@h/{PROSE}"}],
            ],
            "deep": {"a": [{"b": {"X-Api-Key": "k", "note": f"{PROSE}{OPENAI_KEY}"}}]},
        }
    )

    assert safe_payload(payload, 16384) == {
        "results": [
            {"snippet": f"{PROSE}Bearer [REDACTED]"},
            [{"url": f"https://u:[REDACTED]@h/{PROSE}"}],
        ],
        "deep": {"a": [{"b": {"X-Api-Key": REDACTED, "note": f"{PROSE}[REDACTED]"}}]},
    }


def scanned_everywhere(text: str) -> str:
    """Return text redacted by every pattern run over the whole text: what redact_text equals."""
    text = storable_text(text)
    text = redaction._AUTH_CREDENTIAL.sub(redaction._redact_credential, text)
    for pattern, replacement, *_ in redaction._SECRET_VALUES:
        text = pattern.sub(replacement, text)
    return redaction._redact_key_values(text, redaction._KEY_VALUE.finditer(text))


FRAGMENTS = [
    *("password", "PassWord", "api_key", "x-api-key", "tokens", "token", "max_tokens"),
    *("session_id", "cookie", "Authorization", "credential", "secret", "pwd", "keyword"),
    *("Bearer ", "bearer\t", "Basic ", "basıc ", "bas", "dXNlcjpodW50ZXIy", "9f8e7d6c5b4a3f2e"),
    *("=", ":", ": ", '"', "'", '\\"', " ", "\n", ",", "&", "/", "@", ".", "-", "_", "[", "]"),
    *("sk-", "a1B2c3D4", "ghp_", "gh", "A1b2C3d4E5", "AKIA", "IOSFODNN7EXAMPLE", "xoxb-"),
    *("eyJ", "abcdefgh.", "://", "user", "host", "ares_", "Zx9Zx9Zx9Zx9", "[REDACTED]"),
    *("ı", "İ", "\u212a", "ſ", "ß", "é", "\x00", PROSE, "x" * 150),
]


@settings(max_examples=3000, deadline=None)
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=40).map("".join))
def test_it_redacts_exactly_what_every_pattern_over_the_whole_text_would(text):
    assert redact_text(text) == scanned_everywhere(text)


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(st.sampled_from(["a", "é", "🎉", '"', "\\", "\n", "\x01", "\x00", "\ud800"])),
    lambda children: (
        st.lists(children) | st.dictionaries(st.sampled_from(["k", "ä", "\x00"]), children)
    ),
    max_leaves=30,
)


@settings(max_examples=500, deadline=None)
@given(JSON_VALUES, st.integers(min_value=1, max_value=300))
def test_it_bounds_a_payload_as_its_encoded_size_says(value, max_bytes):
    redacted = redact(value)

    assert safe_payload(value, max_bytes) == bound_json(redacted, max_bytes)


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(["\x01" * 40], id="escaped control characters"),
        pytest.param({"ünïcödé": "🎉" * 40}, id="4-byte characters"),
        pytest.param([-(2**300), 2**300], id="big integers"),
        pytest.param([-1.2345678901234567e-308], id="the longest float"),
    ],
)
def test_it_truncates_a_payload_one_byte_over_the_limit(value):
    size = len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())

    assert safe_payload(value, size) == value
    assert safe_payload(value, size - 1)["original_bytes"] == size
