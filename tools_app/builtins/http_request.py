"""The http_request built-in tool: one HTTP request to a public address, bounded. No Django.

Server-side request forgery is the danger: a model asked to "fetch this URL" must not reach
the cloud metadata service, the database or anything else on our network. So every hop
(the first request and each redirect, followed here by hand) resolves the host, refuses
loopback, private, link-local, multicast, reserved and unspecified addresses (IPv4 and
IPv6, with IPv4 inside IPv6 unwrapped), and then connects to the very address it checked:
the URL's host is replaced by that address, with the Host header and TLS server name (SNI,
and certificate checking) kept on the real name, so a second DNS answer cannot differ from
the first (DNS rebinding). An operator can allow named hosts (which may then resolve
anywhere) and networks through `make_spec`. Proxy settings from the environment are
ignored, since a proxy would do its own resolving.

Responses are read as a stream and cut at `max_response_bytes` (reported as truncated).
Each wait (connect, read) is bounded by the time left when the hop started, and the whole
exchange by the deadline, checked between chunks. Status 4xx and 5xx are results, not
errors: the request worked and the model should read what the server said.
"""

from __future__ import annotations

import base64
import codecs
import ipaddress
import json
import re
import socket
import ssl
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import httpx

from tools_app.specs import ErrorKind, SideEffect, ToolFailure, ToolSpec

DEFAULT_TIMEOUT_S = 15.0
DEFAULT_MAX_RESPONSE_BYTES = 200_000
DEFAULT_MAX_REDIRECTS = 5
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD")
USER_AGENT = "ARES-Console http_request tool"

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

_REDIRECTS = frozenset({301, 302, 303, 307, 308})
# Set from the URL and the body; a model setting them could split or misroute the request.
_RESERVED_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection"})
# Credentials meant for one site, not for wherever it redirects.
_CREDENTIAL_HEADERS = frozenset({"authorization", "cookie", "proxy-authorization"})
# NAT64 prefixes (RFC 6052, RFC 8215): the last 32 bits are an IPv4 address.
_NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))
_BLOCKED_KINDS = ("unspecified", "loopback", "link_local", "multicast", "reserved", "private")
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # An RFC 9110 token.
_HEADER_VALUE = re.compile(r"^[\t\x20-\x7e]*$")
_TEXT_TYPE = re.compile(
    r"^(text/|application/([\w.-]+\+)?(json|xml|javascript|ecmascript|x-www-form-urlencoded"
    r"|yaml|x-yaml|csv|graphql)\b|image/svg\+xml)",
    re.IGNORECASE,
)

PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "url": {
            "type": "string",
            "maxLength": 8000,
            "description": "Absolute http:// or https:// URL, query string included.",
        },
        "method": {"type": "string", "enum": list(METHODS), "default": "GET"},
        "headers": {
            "type": "object",
            "additionalProperties": {"type": "string"},
            "maxProperties": 50,
            "description": "Request headers, e.g. {'Accept': 'application/json'}. Host and "
            "Content-Length are set for you.",
        },
        "json": {
            "description": "A JSON body (any JSON value); sets Content-Type: application/json.",
        },
        "body": {
            "type": "string",
            "maxLength": 1_000_000,
            "description": "A text body, sent as UTF-8 (Content-Type text/plain unless you set "
            "one). Give `json` or `body`, not both.",
        },
        "follow_redirects": {
            "type": "boolean",
            "default": True,
            "description": "Follow 3xx redirects (each one checked like the first URL).",
        },
    },
    "required": ["url"],
    "additionalProperties": False,
}

RETURNS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "url": {"type": "string", "description": "The URL that answered, after redirects."},
        "status": {"type": "integer"},
        "reason": {"type": "string"},
        "headers": {"type": "object", "additionalProperties": {"type": "string"}},
        "body": {"type": ["string", "null"], "description": "The body as text, if textual."},
        "body_base64": {"type": "string", "description": "The body as Base64, if binary."},
        "body_bytes": {"type": "integer", "description": "Bytes of body read."},
        "truncated": {"type": "boolean", "description": "The body was cut at the size limit."},
        "redirects": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["url", "status", "headers", "body", "body_bytes", "truncated", "redirects"],
}


@dataclass(frozen=True)
class AddressPolicy:
    """Where requests may go: public addresses, plus the hosts and networks an operator allows."""

    allowed_hosts: frozenset[str] = frozenset()
    allowed_networks: tuple[IPNetwork, ...] = ()

    @classmethod
    def build(
        cls, allowed_hosts: Iterable[str] = (), allowed_networks: Iterable[str | IPNetwork] = ()
    ) -> AddressPolicy:
        """Return a policy from settings-style values; a malformed network raises ValueError."""
        hosts = frozenset(_normal_host(host) for host in allowed_hosts)
        networks = tuple(ipaddress.ip_network(net, strict=False) for net in allowed_networks)
        return cls(hosts, networks)

    def allows_host(self, host: str) -> bool:
        return _normal_host(host) in self.allowed_hosts

    def refusal(self, address: IPAddress) -> str | None:
        """Return why the address may not be reached, or None when it may."""
        address = _unmapped(address)
        if any(address in network for network in self.allowed_networks):
            return None
        return why_not_public(address)


def why_not_public(address: IPAddress) -> str | None:
    """Return what kind of non-public address this is ('loopback', ...), or None if public."""
    address = _unmapped(address)
    if isinstance(address, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(address)
        reason = why_not_public(embedded) if embedded else None
        if reason:
            return f"{reason} (IPv4 {embedded} inside IPv6)"
        if any(address in prefix for prefix in _NAT64):
            return None  # A NAT64 address is as public as its IPv4 (Python calls it reserved).
    for kind in _BLOCKED_KINDS:
        if getattr(address, f"is_{kind}"):
            return kind.replace("_", "-")
    return None if address.is_global else "not globally routable"


def _unmapped(address: IPAddress) -> IPAddress:
    """Return ::ffff:a.b.c.d as the IPv4 address it is; any other address unchanged."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        return address.ipv4_mapped
    return address


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """Return the IPv4 address a 6to4, Teredo or NAT64 address leads to, if it is one."""
    if address.sixtofour:
        return address.sixtofour
    if address.teredo:
        return address.teredo[1]
    if any(address in prefix for prefix in _NAT64):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def _normal_host(host: str) -> str:
    return host.strip().lower().rstrip(".").removeprefix("[").removesuffix("]")


@dataclass(frozen=True)
class HttpRequester:
    """Send one request within the policy, time and size limits; the tool's function."""

    policy: AddressPolicy
    timeout_s: float = DEFAULT_TIMEOUT_S
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    max_redirects: int = DEFAULT_MAX_REDIRECTS
    verify: ssl.SSLContext | bool = True

    def __call__(
        self,
        url: str,
        method: str = "GET",
        headers: dict[str, str] | None = None,
        json: Any = None,  # Shadows the module in here: it is the name the model sees.
        body: str | None = None,
        follow_redirects: bool = True,
    ) -> dict[str, Any]:
        """Send the request, following redirects, and return the response, body bounded."""
        current = parse_url(url)
        request_headers = _request_headers(headers or {})
        content = _content(json, body, request_headers)
        deadline = time.monotonic() + self.timeout_s
        redirects: list[str] = []
        with httpx.Client(verify=self.verify, trust_env=False, follow_redirects=False) as client:
            while True:
                addresses = self._addresses(current, redirected=bool(redirects))
                response = self._send(
                    client, method, current, request_headers, content, addresses, deadline
                )
                try:
                    location = response.headers.get("location")
                    if not (follow_redirects and response.status_code in _REDIRECTS and location):
                        return self._result(response, current, redirects, deadline)
                finally:
                    response.close()
                if len(redirects) == self.max_redirects:
                    raise ToolFailure(
                        f"stopped after {self.max_redirects} redirects; the last one pointed to "
                        f"{location}",
                        ErrorKind.TOOL_ERROR,
                    )
                target = _redirect_target(current, location)
                method, content = _redirected_request(
                    response.status_code,
                    method,
                    content,
                    request_headers,
                    cross_origin=_origin(target) != _origin(current),
                )
                redirects.append(str(target))
                current = target

    def _addresses(self, url: httpx.URL, redirected: bool) -> list[str]:
        """Return the addresses to try for the URL's host, all permitted, or refuse."""
        host = _host(url)
        addresses = resolve(host, url.port or _default_port(url))
        if self.policy.allows_host(host):
            return addresses
        for address in addresses:
            reason = self.policy.refusal(ipaddress.ip_address(address.split("%")[0]))
            if reason:
                hop = f"redirect to {url}" if redirected else str(url)
                resolved = "" if host == address else f" ({host} resolves to it)"
                raise ToolFailure(
                    f"refused {hop}: {address} is not a public address ({reason}){resolved}; "
                    "only public addresses may be requested unless the operator allows the host",
                    ErrorKind.PERMISSION_DENIED,
                )
        return addresses

    def _send(
        self,
        client: httpx.Client,
        method: str,
        url: httpx.URL,
        headers: dict[str, str],
        content: bytes | None,
        addresses: list[str],
        deadline: float,
    ) -> httpx.Response:
        """Send to the first address that accepts a connection; return the streamed response."""
        failure: httpx.ConnectError | None = None
        for address in addresses:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                request = client.build_request(
                    method,
                    url.copy_with(host=address),
                    headers={**headers, "host": url.netloc.decode("ascii")},
                    content=content,
                    timeout=httpx.Timeout(remaining),
                    # Keeps SNI and the certificate check on the name, not the address.
                    extensions={} if _is_ip(_host(url)) else {"sni_hostname": _host(url)},
                )
                return client.send(request, stream=True)
            except httpx.ConnectError as error:
                if "CERTIFICATE_VERIFY_FAILED" in str(error):
                    raise ToolFailure(
                        f"the TLS certificate of {_host(url)} is not trusted: {error}",
                        ErrorKind.TOOL_ERROR,
                    ) from None
                failure = error  # Maybe only this address is down: try the next one.
            except httpx.TimeoutException:
                raise self._timeout(method, url) from None
            except (httpx.LocalProtocolError, UnicodeEncodeError) as error:
                raise ToolFailure(
                    f"cannot send this request: {error}", ErrorKind.INVALID_ARGUMENTS
                ) from None
            except httpx.HTTPError as error:
                raise ToolFailure(f"{method} {url} failed: {error}", ErrorKind.TOOL_ERROR) from None
        if failure is None:
            raise self._timeout(method, url)
        raise ToolFailure(
            f"could not connect to {_host(url)} port {url.port or _default_port(url)}: {failure}",
            ErrorKind.UNAVAILABLE,
        )

    def _result(
        self, response: httpx.Response, url: httpx.URL, redirects: list[str], deadline: float
    ) -> dict[str, Any]:
        """Return the response as data, its body read up to the size limit."""
        data, truncated = self._read(response, url, deadline)
        result: dict[str, Any] = {
            "url": str(url),
            "status": response.status_code,
            "reason": response.reason_phrase,
            "headers": dict(response.headers),
            "body": None,
            "body_bytes": len(data),
            "truncated": truncated,
            "redirects": redirects,
        }
        text = _as_text(data, response, final=not truncated)
        if text is not None:
            result["body"] = text
        elif data:
            result["body_base64"] = base64.b64encode(data).decode("ascii")
        return result

    def _read(
        self, response: httpx.Response, url: httpx.URL, deadline: float
    ) -> tuple[bytes, bool]:
        """Return up to max_response_bytes of the body and whether there was more."""
        chunks: list[bytes] = []
        size = 0
        try:
            for chunk in response.iter_bytes():
                if size + len(chunk) > self.max_response_bytes:
                    chunks.append(chunk[: self.max_response_bytes - size])
                    return b"".join(chunks), True
                chunks.append(chunk)
                size += len(chunk)
                if time.monotonic() > deadline:
                    raise self._timeout(response.request.method, url)
        except httpx.TimeoutException:
            raise self._timeout(response.request.method, url) from None
        except httpx.HTTPError as error:
            raise ToolFailure(
                f"the response from {url} broke off: {error}", ErrorKind.UNAVAILABLE
            ) from None
        return b"".join(chunks), False

    def _timeout(self, method: str, url: httpx.URL) -> ToolFailure:
        return ToolFailure(
            f"{method} {url} got no complete response within {self.timeout_s:g} seconds",
            ErrorKind.TIMEOUT,
        )


def parse_url(text: str) -> httpx.URL:
    """Return the URL if it is an absolute http(s) URL with a host, else fail saying why."""
    try:
        url = httpx.URL(text.strip())
    except httpx.InvalidURL as error:
        raise ToolFailure(f"invalid URL {text!r}: {error}", ErrorKind.INVALID_ARGUMENTS) from None
    _check_scheme(url, text)
    return url


def _check_scheme(url: httpx.URL, text: str) -> None:
    if url.scheme not in ("http", "https"):
        got = f"'{url.scheme}'" if url.scheme else "none"
        raise ToolFailure(
            f"only http and https URLs can be requested; {text!r} has scheme {got}. "
            "Write a full URL such as 'https://example.com/page'",
            ErrorKind.INVALID_ARGUMENTS,
        )
    if not url.host:
        raise ToolFailure(f"URL {text!r} has no host", ErrorKind.INVALID_ARGUMENTS)


def resolve(host: str, port: int) -> list[str]:
    """Return the host's addresses (an IP literal is its own), or fail if it cannot resolve."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as error:
        if error.errno == socket.EAI_AGAIN:
            raise ToolFailure(
                f"temporary failure looking up host {host!r}: {error.strerror}",
                ErrorKind.UNAVAILABLE,
            ) from None
        raise ToolFailure(
            f"cannot resolve host {host!r} ({error.strerror}); check the spelling of the URL",
            ErrorKind.INVALID_ARGUMENTS,
        ) from None
    except UnicodeError:
        raise ToolFailure(f"invalid host name {host!r}", ErrorKind.INVALID_ARGUMENTS) from None
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def _redirect_target(current: httpx.URL, location: str) -> httpx.URL:
    try:
        target = current.join(location)
    except httpx.InvalidURL as error:
        raise ToolFailure(
            f"the server redirected to an invalid URL {location!r}: {error}", ErrorKind.TOOL_ERROR
        ) from None
    _check_scheme(target, location)
    return target


def _redirected_request(
    status: int,
    method: str,
    content: bytes | None,
    headers: dict[str, str],
    cross_origin: bool,
) -> tuple[str, bytes | None]:
    """Return the method and body for the next hop, dropping headers that must not follow.

    As browsers and httpx do: 303 turns into GET, and so does POST after 301 or 302;
    307 and 308 repeat the request as it was. Credentials stay with their origin.
    """
    if cross_origin:
        for name in _CREDENTIAL_HEADERS:
            headers.pop(name, None)
    if status == 303 and method != "HEAD" or status in (301, 302) and method == "POST":
        headers.pop("content-type", None)
        return "GET", None
    return method, content


def _request_headers(headers: dict[str, str]) -> dict[str, str]:
    """Return the headers lower-cased, with a user agent; malformed or reserved ones fail."""
    for name, value in headers.items():
        if not _HEADER_NAME.match(name):
            raise ToolFailure(
                f"{name!r} is not a valid header name (letters, digits and -, no spaces)",
                ErrorKind.INVALID_ARGUMENTS,
            )
        if not _HEADER_VALUE.match(value):
            raise ToolFailure(
                f"the value of header {name!r} must be printable ASCII on one line",
                ErrorKind.INVALID_ARGUMENTS,
            )
    lowered = {name.lower(): value for name, value in headers.items()}
    reserved = sorted(_RESERVED_HEADERS & lowered.keys())
    if reserved:
        raise ToolFailure(
            f"do not set the {', '.join(reserved)} header(s): they come from the URL and body",
            ErrorKind.INVALID_ARGUMENTS,
        )
    return {"user-agent": USER_AGENT, **lowered}


def _content(json_body: Any, text_body: str | None, headers: dict[str, str]) -> bytes | None:
    """Return the body bytes, setting a Content-Type unless one was given."""
    if json_body is not None and text_body is not None:
        raise ToolFailure("give `json` or `body`, not both", ErrorKind.INVALID_ARGUMENTS)
    if json_body is not None:
        headers.setdefault("content-type", "application/json")
        return json.dumps(json_body, ensure_ascii=False).encode()
    if text_body is not None:
        headers.setdefault("content-type", "text/plain; charset=utf-8")
        return text_body.encode()
    return None


def _as_text(data: bytes, response: httpx.Response, final: bool) -> str | None:
    """Return the body as text if it is textual (declared, or undeclared but UTF-8), else None."""
    content_type = response.headers.get("content-type", "")
    if content_type and not _TEXT_TYPE.match(content_type):
        return None
    encoding = response.charset_encoding or "utf-8"
    try:
        decoder = codecs.getincrementaldecoder(encoding)(
            errors="strict" if not content_type else "replace"
        )
    except LookupError:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    try:
        # Not final when truncated: a character cut in half at the limit is dropped, not mangled.
        return decoder.decode(data, final=final)
    except UnicodeDecodeError:
        return None


def _origin(url: httpx.URL) -> tuple[str, str, int]:
    return url.scheme, _host(url), url.port or _default_port(url)


def _host(url: httpx.URL) -> str:
    """Return the URL's host as sent on the wire: IDNA (punycode) names, bare IPv6."""
    return url.raw_host.decode("ascii")


def _default_port(url: httpx.URL) -> int:
    return 443 if url.scheme == "https" else 80


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def make_spec(
    allowed_hosts: Iterable[str] = (),
    allowed_networks: Iterable[str | IPNetwork] = (),
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    max_redirects: int = DEFAULT_MAX_REDIRECTS,
    verify: ssl.SSLContext | bool = True,
) -> ToolSpec:
    """Return the http_request tool allowing these hosts and networks beyond public addresses."""
    requester = HttpRequester(
        AddressPolicy.build(allowed_hosts, allowed_networks),
        timeout_s=timeout_s,
        max_response_bytes=max_response_bytes,
        max_redirects=max_redirects,
        verify=verify,
    )
    return ToolSpec(
        name="http_request",
        description=(
            "Send one HTTP request (GET, POST, PUT, PATCH, DELETE or HEAD) to a public http(s) "
            "URL and return the status, headers and body: text as is, binary data as Base64. "
            f"Bodies are cut at {max_response_bytes:,} bytes (truncated=true); redirects are "
            f"followed up to {max_redirects}; the request is abandoned after {timeout_s:g} "
            "seconds. Addresses on private networks, loopback and cloud metadata are refused. "
            "4xx and 5xx statuses are returned as results. Non-GET methods can change data on "
            "the server, so this tool is treated as writing and never retried automatically."
        ),
        parameters=PARAMETERS,
        function=requester,
        returns=RETURNS,
        # One spec for every method, so it must be as careful as the most dangerous one.
        side_effect=SideEffect.WRITE,
        idempotent=False,
        deterministic=False,
        timeout_s=timeout_s + 5,  # The engine's limit is a backstop for our own deadline.
        capabilities=("HTTPRequest",),
    )


SPEC = make_spec()
