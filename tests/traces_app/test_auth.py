"""API keys and sessions on the REST API: 401/403 as JSON, scopes, hashing, the command."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from traces_app.models import ApiKey, Invocation

ENDPOINTS = [
    pytest.param("post", "/invocations", id="report"),
    pytest.param("get", "/traces", id="list traces"),
    pytest.param("get", "/invocations", id="list invocations"),
    pytest.param("get", "/tools/stats", id="tool stats"),
    pytest.param("get", "/traces/" + "a" * 32, id="one trace"),
]


def call(client, method, path, headers=None, spans=()):
    if method == "post":
        return client.post("/invocations", json={"invocations": list(spans)}, headers=headers)
    return client.get(path, headers=headers)


def assert_unauthorized(response, words):
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"] == 'Bearer realm="ares"'
    assert words in response.json()["detail"]


@pytest.mark.parametrize(("method", "path"), ENDPOINTS)
def test_it_asks_for_a_key_when_none_is_sent(anonymous_api, span, method, path):
    response = call(anonymous_api, method, path, spans=[span()])

    assert_unauthorized(response, "send 'Authorization: Bearer ares_...'")
    assert not Invocation.objects.exists()


@pytest.mark.parametrize(
    "header",
    [
        pytest.param("Basic dXNlcjpwYXNz", id="basic scheme"),
        pytest.param("Token ares_abc", id="token scheme"),
        pytest.param("ares_abc", id="no scheme"),
        pytest.param("Bearer", id="scheme without key"),
    ],
)
def test_it_refuses_a_header_in_the_wrong_form(anonymous_api, span, header):
    response = call(anonymous_api, "post", "/invocations", {"Authorization": header}, [span()])

    assert_unauthorized(response, "Bearer")
    assert not Invocation.objects.exists()


@pytest.mark.parametrize(("method", "path"), ENDPOINTS)
def test_it_refuses_an_unknown_key(anonymous_api, span, method, path):
    headers = {"Authorization": "Bearer ares_" + "x" * 43}

    response = call(anonymous_api, method, path, headers, [span()])

    assert_unauthorized(response, "API key is invalid, expired or revoked")


def test_it_refuses_a_revoked_key(anonymous_api, make_key, span):
    raw_key = make_key("report")
    ApiKey.objects.get().revoke()

    response = call(
        anonymous_api, "post", "/invocations", {"Authorization": f"Bearer {raw_key}"}, [span()]
    )

    assert_unauthorized(response, "API key is invalid, expired or revoked")
    assert not Invocation.objects.exists()


def test_it_refuses_an_expired_key(anonymous_api, make_key, span):
    raw_key = make_key("report")
    ApiKey.objects.update(expires_at=timezone.now() - timedelta(seconds=1))

    response = call(
        anonymous_api, "post", "/invocations", {"Authorization": f"Bearer {raw_key}"}, [span()]
    )

    assert_unauthorized(response, "API key is invalid, expired or revoked")


def test_it_accepts_a_key_until_it_expires(anonymous_api, make_key, span):
    raw_key = make_key("report")
    ApiKey.objects.update(expires_at=timezone.now() + timedelta(hours=1))

    response = call(
        anonymous_api, "post", "/invocations", {"Authorization": f"Bearer {raw_key}"}, [span()]
    )

    assert response.status_code == 200


@pytest.mark.parametrize(
    ("scopes", "method", "path", "missing"),
    [
        pytest.param(("read",), "post", "/invocations", "report", id="read key reports"),
        pytest.param(("report",), "get", "/traces", "read", id="report key lists traces"),
        pytest.param(("report",), "get", "/invocations", "read", id="report key lists spans"),
        pytest.param(("report",), "get", "/tools/stats", "read", id="report key reads stats"),
        pytest.param(("plan", "execute"), "post", "/invocations", "report", id="other scopes"),
    ],
)
def test_it_forbids_a_key_without_the_scope(
    anonymous_api, make_key, span, scopes, method, path, missing
):
    headers = {"Authorization": f"Bearer {make_key(*scopes)}"}

    response = call(anonymous_api, method, path, headers, [span()])

    assert response.status_code == 403
    assert response.json() == {"detail": f"API key lacks the '{missing}' scope"}
    assert not Invocation.objects.exists()


@pytest.mark.parametrize(
    ("scope", "method", "path"),
    [
        pytest.param("report", "post", "/invocations", id="report key reports"),
        pytest.param("read", "get", "/traces", id="read key lists traces"),
        pytest.param("read", "get", "/tools/stats", id="read key reads stats"),
    ],
)
def test_it_lets_a_key_with_the_scope_through(anonymous_api, make_key, span, scope, method, path):
    headers = {"Authorization": f"Bearer {make_key(scope)}"}

    response = call(anonymous_api, method, path, headers, [span()])

    assert response.status_code == 200


def test_it_stores_keys_hashed(make_key):
    raw_key = make_key("report", "read")

    stored = ApiKey.objects.values().get()
    assert raw_key not in [str(value) for value in stored.values()]
    assert stored["prefix"] == raw_key[:12]
    assert len(stored["key_hash"]) == 64


def test_it_records_when_a_key_was_last_used(anonymous_api, make_key):
    raw_key = make_key("read")

    anonymous_api.get("/traces", headers={"Authorization": f"Bearer {raw_key}"})

    assert ApiKey.objects.get().last_used_at is not None


def test_it_lets_a_staff_session_read(session_client, report, span):
    report(span())
    staff = session_client(is_staff=True)

    response = staff.get("/api/v1/invocations")

    assert response.status_code == 200
    assert len(response.json()["items"]) == 1


def test_it_turns_away_a_session_without_staff_status(session_client):
    user = session_client(is_staff=False)

    response = user.get("/api/v1/traces")

    assert response.status_code == 401


def test_it_does_not_let_a_staff_session_report(session_client, span):
    staff = session_client(is_staff=True)

    response = staff.post("/api/v1/invocations", json={"invocations": [span()]})

    assert response.status_code == 401
    assert not Invocation.objects.exists()


def test_the_command_prints_a_key_that_works(anonymous_api, span):
    out, err = io.StringIO(), io.StringIO()

    call_command(
        "create_api_key", "--name", "ci agent", "--scopes", "report", stdout=out, stderr=err
    )

    raw_key = out.getvalue().strip()
    assert raw_key.startswith("ares_")
    assert "will not be shown again" in err.getvalue()
    response = call(
        anonymous_api, "post", "/invocations", {"Authorization": f"Bearer {raw_key}"}, [span()]
    )
    assert response.status_code == 200
    assert ApiKey.objects.get().scopes == ["report"]


def test_the_command_prints_the_key_only_once(transactional_db):
    out, err = io.StringIO(), io.StringIO()

    call_command("create_api_key", "--name", "ci agent", stdout=out, stderr=err)

    raw_key = out.getvalue().strip()
    assert err.getvalue().count(raw_key) == 0
    assert out.getvalue().count(raw_key) == 1
    assert ApiKey.objects.get().key_hash != raw_key


@pytest.mark.parametrize(
    ("scopes", "words"),
    [
        pytest.param("report,admin", "unknown scope(s) admin", id="unknown scope"),
        pytest.param(",", "--scopes is empty", id="no scopes"),
    ],
)
def test_the_command_refuses_bad_scopes(transactional_db, scopes, words):
    with pytest.raises(CommandError, match=words.replace("(", r"\(").replace(")", r"\)")):
        call_command(
            "create_api_key",
            "--name",
            "x",
            "--scopes",
            scopes,
            stdout=io.StringIO(),
            stderr=io.StringIO(),
        )

    assert not ApiKey.objects.exists()
