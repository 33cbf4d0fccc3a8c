"""The http_request built-in against a real server on 127.0.0.1: SSRF guard, limits, redirects."""

from __future__ import annotations

import base64
import ipaddress
import json
import ssl
from collections.abc import Iterator
from typing import Any

import pytest
import trustme

from tests.tools_app.local_http import LocalServer, RouteHandler, reply
from tests.tools_app.tool_calls import call
from tools_app.builtins.http_request import SPEC, make_spec, why_not_public
from tools_app.specs import ErrorKind, SideEffect, ToolFailure, ToolSpec
from tools_app.validation import ArgumentsError

LOOPBACK = make_spec(allowed_hosts=["127.0.0.1"], timeout_s=5)


def hello(handler: RouteHandler) -> None:
    reply(handler, 200, b"hello", {"Content-Type": "text/plain; charset=utf-8"})


def echo(handler: RouteHandler) -> None:
    """Answer with what the request carried, as JSON."""
    seen = handler.server.seen[-1]
    document = {"method": seen.method, "headers": seen.headers, "body": seen.body.decode()}
    reply(handler, 200, json.dumps(document).encode(), {"Content-Type": "application/json"})


def endless(handler: RouteHandler) -> None:
    """Stream a body with no length until the client hangs up (or 100 MB)."""
    handler.send_response(200)
    handler.send_header("Content-Type", "text/plain")
    handler.end_headers()
    for _ in range(100_000):
        if handler.release.is_set():
            return
        handler.wfile.write(b"x" * 1024)


def stall(handler: RouteHandler) -> None:
    handler.release.wait(30)


def redirect(location: str, status: int = 302) -> Any:
    return lambda handler: reply(handler, status, b"", {"Location": location})


def binary(handler: RouteHandler) -> None:
    reply(handler, 200, bytes(range(256)), {"Content-Type": "image/png"})


def exact(handler: RouteHandler) -> None:
    reply(handler, 200, b"y" * 1000, {"Content-Type": "text/plain"})


def failing(handler: RouteHandler) -> None:
    reply(handler, 503, b"try later", {"Content-Type": "text/plain", "Retry-After": "5"})


ROUTES = {
    "/hello": hello,
    "/echo": echo,
    "/endless": endless,
    "/stall": stall,
    "/binary": binary,
    "/exact": exact,
    "/failing": failing,
    "/to-hello": redirect("/hello"),
    "/to-echo-303": redirect("/echo", 303),
    "/to-echo-307": redirect("/echo", 307),
    "/to-metadata": redirect("http://169.254.169.254/latest/meta-data/"),
    "/to-file": redirect("file:///etc/passwd"),
    "/loop": redirect("/loop"),
}


@pytest.fixture
def server() -> Iterator[LocalServer]:
    with LocalServer(dict(ROUTES)) as running:
        yield running


def failure_of(spec: ToolSpec, **arguments: Any) -> ToolFailure:
    with pytest.raises(ToolFailure) as failure:
        call(spec, **arguments)
    return failure.value


# The address guard -------------------------------------------------------------------


def test_it_refuses_loopback_by_default(server: LocalServer) -> None:
    failure = failure_of(SPEC, url=server.url("/hello"))
    assert failure.kind == ErrorKind.PERMISSION_DENIED
    assert str(failure) == (
        f"refused {server.url('/hello')}: 127.0.0.1 is not a public address (loopback); only "
        "public addresses may be requested unless the operator allows the host"
    )
    assert server.seen == []


def test_it_refuses_a_name_that_resolves_to_loopback(server: LocalServer) -> None:
    failure = failure_of(SPEC, url=server.url("/hello", host="localhost"))
    assert failure.kind == ErrorKind.PERMISSION_DENIED
    assert "127.0.0.1 is not a public address (loopback) (localhost resolves to it)" in str(failure)
    assert server.seen == []


@pytest.mark.parametrize(
    ("host", "reason"),
    [
        ("[::1]", "::1 is not a public address (loopback)"),
        ("[::ffff:127.0.0.1]", "::ffff:127.0.0.1 is not a public address (loopback)"),
        ("0.0.0.0", "0.0.0.0 is not a public address (unspecified)"),
        ("[::]", ":: is not a public address (unspecified)"),
        ("169.254.169.254", "169.254.169.254 is not a public address (link-local)"),
        ("10.1.2.3", "10.1.2.3 is not a public address (private)"),
        ("172.16.0.1", "172.16.0.1 is not a public address (private)"),
        ("192.168.1.1", "192.168.1.1 is not a public address (private)"),
        ("100.64.0.1", "100.64.0.1 is not a public address (not globally routable)"),
        ("224.0.0.1", "224.0.0.1 is not a public address (multicast)"),
        ("240.0.0.1", "240.0.0.1 is not a public address (reserved)"),
        ("[fe80::1]", "fe80::1 is not a public address (link-local)"),
        ("[fc00::1]", "fc00::1 is not a public address (private)"),
        ("[64:ff9b::a00:1]", "(private (IPv4 10.0.0.1 inside IPv6))"),
        ("2130706433", "127.0.0.1 is not a public address (loopback)"),  # 127.0.0.1 as a number
        ("127.1", "127.0.0.1 is not a public address (loopback)"),
    ],
)
def test_it_refuses_non_public_addresses_before_connecting(host: str, reason: str) -> None:
    failure = failure_of(SPEC, url=f"http://{host}:9/")
    assert failure.kind == ErrorKind.PERMISSION_DENIED
    assert reason in str(failure)


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("8.8.8.8", None),
        ("2606:4700:4700::1111", None),
        ("::ffff:8.8.8.8", None),
        ("::ffff:10.0.0.1", "private"),
        ("2002:7f00:1::", "loopback (IPv4 127.0.0.1 inside IPv6)"),  # 6to4
        ("64:ff9b::7f00:1", "loopback (IPv4 127.0.0.1 inside IPv6)"),  # NAT64
        ("64:ff9b::808:808", None),
        ("ff02::1", "multicast"),
    ],
)
def test_it_tells_public_addresses_from_others(address: str, reason: str | None) -> None:
    assert why_not_public(ipaddress.ip_address(address)) == reason


@pytest.mark.parametrize(
    "allowance",
    [
        {"allowed_hosts": ["127.0.0.1"]},
        {"allowed_networks": ["127.0.0.0/8"]},
        {"allowed_networks": [ipaddress.ip_network("127.0.0.1/32")]},
    ],
)
def test_it_reaches_loopback_when_the_operator_allows_it(
    server: LocalServer, allowance: dict[str, Any]
) -> None:
    result = call(make_spec(**allowance), url=server.url("/hello"))
    assert (result["status"], result["body"]) == (200, "hello")
    assert result["url"] == server.url("/hello")


def test_it_keeps_the_host_name_in_the_host_header(server: LocalServer) -> None:
    spec = make_spec(allowed_hosts=["LOCALHOST."])
    result = call(spec, url=server.url("/echo", host="localhost"))
    assert result["status"] == 200
    assert server.seen[0].headers["host"] == f"localhost:{server.port}"


def test_it_reaches_ipv6_loopback_when_allowed() -> None:
    with LocalServer({"/hello": hello}, host="::1") as server:
        result = call(make_spec(allowed_networks=["::1/128"]), url=server.url("/hello"))
    assert (result["status"], result["body"]) == (200, "hello")


@pytest.mark.parametrize(
    "url",
    ["file:///etc/passwd", "ftp://example.com/file", "gopher://example.com/", "example.com/page"],
)
def test_it_refuses_schemes_other_than_http(url: str) -> None:
    failure = failure_of(SPEC, url=url)
    assert failure.kind == ErrorKind.INVALID_ARGUMENTS
    assert "only http and https URLs can be requested" in str(failure)


# Redirects ---------------------------------------------------------------------------


def test_it_follows_redirects(server: LocalServer) -> None:
    result = call(LOOPBACK, url=server.url("/to-hello"))
    assert (result["status"], result["body"]) == (200, "hello")
    assert result["url"] == server.url("/hello")
    assert result["redirects"] == [server.url("/hello")]


def test_it_refuses_a_redirect_to_a_private_address(server: LocalServer) -> None:
    failure = failure_of(LOOPBACK, url=server.url("/to-metadata"))
    assert failure.kind == ErrorKind.PERMISSION_DENIED
    assert str(failure).startswith(
        "refused redirect to http://169.254.169.254/latest/meta-data/: 169.254.169.254 is not "
        "a public address (link-local)"
    )


def test_it_checks_a_redirect_by_its_own_host(server: LocalServer) -> None:
    server.server.routes["/to-localhost"] = redirect(server.url("/hello", host="localhost"))
    failure = failure_of(LOOPBACK, url=server.url("/to-localhost"))
    assert failure.kind == ErrorKind.PERMISSION_DENIED
    assert "(localhost resolves to it)" in str(failure)
    assert [seen.path for seen in server.seen] == ["/to-localhost"]


def test_it_refuses_a_redirect_to_a_file_url(server: LocalServer) -> None:
    failure = failure_of(LOOPBACK, url=server.url("/to-file"))
    assert "only http and https URLs can be requested" in str(failure)


def test_it_stops_after_five_redirects(server: LocalServer) -> None:
    failure = failure_of(LOOPBACK, url=server.url("/loop"))
    assert str(failure) == "stopped after 5 redirects; the last one pointed to /loop"
    assert len(server.seen) == 6


def test_it_returns_a_redirect_when_told_not_to_follow(server: LocalServer) -> None:
    result = call(LOOPBACK, url=server.url("/to-hello"), follow_redirects=False)
    assert (result["status"], result["headers"]["location"]) == (302, "/hello")
    assert result["redirects"] == []


@pytest.mark.parametrize(
    ("path", "method", "body"),
    [("/to-echo-303", "GET", ""), ("/to-echo-307", "POST", '{"n": 1}')],
)
def test_it_changes_the_method_only_where_http_says(
    server: LocalServer, path: str, method: str, body: str
) -> None:
    result = call(LOOPBACK, url=server.url(path), method="POST", json={"n": 1})
    assert json.loads(result["body"])["method"] == method
    assert json.loads(result["body"])["body"] == body


def test_it_drops_credentials_on_a_redirect_to_another_host(server: LocalServer) -> None:
    server.server.routes["/to-localhost"] = redirect(server.url("/echo", host="localhost"))
    spec = make_spec(allowed_hosts=["127.0.0.1", "localhost"])
    headers = {"Authorization": "Bearer secret", "X-Trace": "1"}
    call(spec, url=server.url("/to-localhost"), headers=headers)
    first, second = server.seen
    assert first.headers["authorization"] == "Bearer secret"
    assert "authorization" not in second.headers
    assert second.headers["x-trace"] == "1"


# Requests and responses --------------------------------------------------------------


def test_it_sends_a_json_body(server: LocalServer) -> None:
    result = call(LOOPBACK, url=server.url("/echo"), method="PUT", json={"name": "Ada"})
    echoed = json.loads(result["body"])
    assert echoed["method"] == "PUT"
    assert json.loads(echoed["body"]) == {"name": "Ada"}
    assert echoed["headers"]["content-type"] == "application/json"


def test_it_sends_a_text_body_and_headers(server: LocalServer) -> None:
    headers = {"Content-Type": "text/csv", "X-Api-Key": "k1"}
    result = call(
        LOOPBACK, url=server.url("/echo"), method="PATCH", body="a,b\n1,2", headers=headers
    )
    echoed = json.loads(result["body"])
    assert (echoed["body"], echoed["headers"]["content-type"]) == ("a,b\n1,2", "text/csv")
    assert echoed["headers"]["x-api-key"] == "k1"


def test_it_returns_error_statuses_as_results(server: LocalServer) -> None:
    result = call(LOOPBACK, url=server.url("/failing"), method="DELETE")
    assert (result["status"], result["reason"], result["body"]) == (
        503,
        "Service Unavailable",
        "try later",
    )
    assert result["headers"]["retry-after"] == "5"


def test_it_returns_no_body_for_head(server: LocalServer) -> None:
    result = call(LOOPBACK, url=server.url("/hello"), method="HEAD")
    assert (result["status"], result["body"], result["body_bytes"]) == (200, "", 0)
    assert server.seen[0].method == "HEAD"


def test_it_returns_binary_bodies_as_base64(server: LocalServer) -> None:
    result = call(LOOPBACK, url=server.url("/binary"))
    assert result["body"] is None
    assert base64.b64decode(result["body_base64"]) == bytes(range(256))


def test_it_stops_reading_at_the_size_limit(server: LocalServer) -> None:
    spec = make_spec(allowed_hosts=["127.0.0.1"], max_response_bytes=1000, timeout_s=10)
    result = call(spec, url=server.url("/endless"))
    assert result["truncated"] is True
    assert result["body"] == "x" * 1000
    assert result["body_bytes"] == 1000


def test_it_does_not_call_a_body_of_exactly_the_limit_truncated(server: LocalServer) -> None:
    spec = make_spec(allowed_hosts=["127.0.0.1"], max_response_bytes=1000)
    result = call(spec, url=server.url("/exact"))
    assert (result["truncated"], result["body_bytes"]) == (False, 1000)


def test_it_times_out_on_a_server_that_does_not_answer(server: LocalServer) -> None:
    spec = make_spec(allowed_hosts=["127.0.0.1"], timeout_s=0.5)
    failure = failure_of(spec, url=server.url("/stall"))
    assert failure.kind == ErrorKind.TIMEOUT
    assert str(failure) == f"GET {server.url('/stall')} got no complete response within 0.5 seconds"


def test_it_reports_a_refused_connection_as_unavailable() -> None:
    with LocalServer({}) as stopped:
        port = stopped.port
    failure = failure_of(LOOPBACK, url=f"http://127.0.0.1:{port}/hello")  # Nothing listens.
    assert failure.kind == ErrorKind.UNAVAILABLE
    assert f"could not connect to 127.0.0.1 port {port}" in str(failure)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"json": {"a": 1}, "body": "a"}, "give `json` or `body`, not both"),
        ({"headers": {"Host": "evil.example"}}, "do not set the host header(s)"),
        ({"headers": {"Content-Length": "5"}}, "do not set the content-length header(s)"),
        ({"headers": {"X-A": "1\r\nX-Injected: 1"}}, "header 'X-A' must be printable ASCII"),
        ({"headers": {"X-A": "café"}}, "header 'X-A' must be printable ASCII on one line"),
        ({"headers": {"Bad Name": "1"}}, "'Bad Name' is not a valid header name"),
    ],
)
def test_it_refuses_contradictory_requests(
    server: LocalServer, arguments: dict[str, Any], message: str
) -> None:
    failure = failure_of(LOOPBACK, url=server.url("/echo"), method="POST", **arguments)
    assert failure.kind == ErrorKind.INVALID_ARGUMENTS
    assert message in str(failure)
    assert server.seen == []


# HTTPS -------------------------------------------------------------------------------


@pytest.fixture
def certificate_authority() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def tls_server(certificate_authority: trustme.CA) -> Iterator[LocalServer]:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    certificate_authority.issue_cert("localhost").configure_cert(context)
    with LocalServer({"/hello": hello}, tls=context) as running:
        yield running


def test_it_verifies_tls_against_the_host_name(
    tls_server: LocalServer, certificate_authority: trustme.CA
) -> None:
    client_context = ssl.create_default_context()
    certificate_authority.configure_trust(client_context)
    spec = make_spec(allowed_hosts=["localhost"], verify=client_context)
    result = call(spec, url=tls_server.url("/hello", host="localhost"))
    assert (result["status"], result["body"]) == (200, "hello")


def test_it_refuses_a_certificate_it_does_not_trust(tls_server: LocalServer) -> None:
    spec = make_spec(allowed_hosts=["localhost"])
    failure = failure_of(spec, url=tls_server.url("/hello", host="localhost"))
    assert failure.kind == ErrorKind.TOOL_ERROR
    assert str(failure).startswith("the TLS certificate of localhost is not trusted")
    assert tls_server.seen == []


# The contract ------------------------------------------------------------------------


def test_its_spec_is_conservative() -> None:
    assert (SPEC.name, SPEC.side_effect, SPEC.idempotent) == (
        "http_request",
        SideEffect.WRITE,
        False,
    )
    assert SPEC.retryable is False
    assert SPEC.capabilities == ("HTTPRequest",)


@pytest.mark.parametrize(
    "arguments",
    [
        {"url": "https://example.com", "method": "CONNECT"},
        {"method": "GET"},
        {"url": "https://example.com", "headers": {"X-Count": 1}},
        {"url": "https://example.com", "timeout": 5},
    ],
)
def test_its_schema_rejects_malformed_arguments(arguments: dict[str, Any]) -> None:
    with pytest.raises(ArgumentsError):
        call(SPEC, **arguments)


def test_it_refuses_a_malformed_allowed_network() -> None:
    with pytest.raises(ValueError, match="does not appear to be an IPv4 or IPv6 network"):
        make_spec(allowed_networks=["10.0.0.0/33"])
