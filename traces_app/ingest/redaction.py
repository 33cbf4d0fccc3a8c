"""Make recorded payloads safe to store: secrets redacted, size bounded, marker explicit."""

from __future__ import annotations

import base64
import functools
import json
import re
from collections.abc import Iterable, Iterator
from typing import Any

from traces_app.http.json_nesting import MAX_JSON_DEPTH, nesting_exceeds

REDACTED = "[REDACTED]"
TRUNCATED_KEY = "__truncated__"

# Keys whose values are secrets, matched anywhere in the key, case-insensitive.
_SECRET_WORDS = (
    r"passw(?:or)?d|passwd|pwd|secret|api[-_]?key|access[-_]?key|private[-_]?key|token"
    r"|authorization|cookie|credential|session[-_]?id"
)
_SECRET_KEY = re.compile(_SECRET_WORDS, re.IGNORECASE)
# ...except keys that only count tokens, which LLM payloads are full of.
_TOKEN_COUNT_KEY = re.compile(r"tokens$|tokens?[-_]?(count|used|limit)$", re.IGNORECASE)

# Values that are secrets wherever they appear, whatever their key; each with the two
# literals every match holds ("" for none), so that text without them is not scanned.
_SECRET_VALUES = [
    (re.compile(r"\bsk-[A-Za-z0-9_-]{16,}"), REDACTED, "sk-", ""),
    (re.compile(r"\bares_[A-Za-z0-9_-]{20,}"), REDACTED, "ares_", ""),
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}"), REDACTED, "gh", "_"),
    (re.compile(r"\bAKIA[0-9A-Z]{16}\b"), REDACTED, "AKIA", ""),
    (re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}"), REDACTED, "xox", ""),
    (
        re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),
        REDACTED,
        "eyJ",
        "",
    ),
    (re.compile(r"(://[^/\s:@]*:)[^/\s@]+@"), r"\1" + REDACTED + "@", "://", "@"),
]
# HTTP credentials: "Bearer <token>" and "Basic <base64 of user:password>".
_AUTH_CREDENTIAL = re.compile(r"(?i)\b(bearer|basic)(\s+)([A-Za-z0-9._~+/=-]{8,})")
# Where a match of _AUTH_CREDENTIAL can start, in casefolded text: (?i) also matches the
# dotless i of "basıc", which casefold keeps, so "basic" is looked for as "bas".
_AUTH_STARTS = ("bearer", "bas")
# `password=hunter2`, `"api_key": "abc"`: a key and its value inside text (error
# messages, query strings, JSON too broken to parse). The lookbehind starts a key only
# at a word's first character and the value is only looked at, not consumed, so a long
# word is scanned once and "failed: password=x" still finds the second key. Bare values
# stop at ":" and "=", so that "k=k=k=..." is read in linear time.
_KEY_VALUE = re.compile(
    r"(?<![A-Za-z0-9_.-])([A-Za-z0-9_.-]+)"  # the key
    r"(\\?[\"']?\s*[:=]\s*)"  # `=`, `: `, `": ` or `\": `
    r"(?=(\"[^\"\n]*(?:\"|(?=\n)|\Z)"  # the value: double-quoted, to the quote or line end,
    r"|'[^'\n]*(?:'|(?=\n)|\Z)"  # single-quoted,
    r"|\\\"[^\"\\\n]*(?:\\\"|(?=\n)|\Z)"  # quoted inside JSON text,
    r"|[^\s\"'\\,;&}\]:=]+))"  # or bare
)
_KEY_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")
# What every secret key holds, lowercased: one of _SECRET_WORDS' words, or its stem.
# A key is ASCII (_KEY_VALUE's key), so lower() finds it even where (?i) would match a
# non-ASCII letter (the Kelvin sign K, the long s ſ): those are never inside a key.
_SECRET_KEY_STEMS = (
    "passw",
    "pwd",
    "secret",
    "key",
    "token",
    "authorization",
    "cookie",
    "credential",
    "session",
)
# One search tells most text holds none of them, faster than a find() per stem.
_ANY_SECRET_KEY_STEM = re.compile("|".join(_SECRET_KEY_STEMS))
_AUTH_SCHEMES = {"bearer", "basic", "token"}
# Built once: json.dumps with options makes a new encoder per call.
_COMPACT_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=str)


@functools.lru_cache(maxsize=4096)  # payloads repeat their tools' few key names
def is_secret_key(key: str) -> bool:
    """Return whether a mapping key names a secret (password, api_key, token...)."""
    return bool(_SECRET_KEY.search(key)) and not _TOKEN_COUNT_KEY.search(key)


def storable_text(text: str) -> str:
    """Return text that every database can store: NUL and lone surrogates become U+FFFD.

    PostgreSQL refuses both in text and jsonb, and JSON bodies can carry them.
    """
    if "\x00" in text:
        text = text.replace("\x00", "\ufffd")
    if text.isascii():  # no surrogate then, and isascii() reads a flag: no scan
        return text
    try:
        text.encode()
    except UnicodeEncodeError:
        text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def redact_text(text: str) -> str:
    """Return text with secret-looking values (bearer tokens, API keys, JWTs) replaced.

    Each pass first looks for what all its matches hold (`in` and find() scan text ten
    times faster than a pattern does), then runs its pattern only where one can match:
    most text, however long, is never scanned by a regular expression.
    """
    text = storable_text(text)
    text = _redact_credentials(text)
    for pattern, replacement, literal, also in _SECRET_VALUES:
        if literal in text and also in text:
            text = pattern.sub(replacement, text)
    if ":" in text or "=" in text:
        text = _redact_key_values(text)
    return text


def _redact_credentials(text: str) -> str:
    """Return text with "Bearer <token>" and "Basic <user:password>" credentials replaced.

    What _AUTH_CREDENTIAL.sub(_redact_credential, text) returns, but the pattern is only
    tried where a match can start: where casefolded text reads "bearer" or "bas".
    """
    folded = text.casefold()
    if "bearer" not in folded and "bas" not in folded:  # _AUTH_STARTS
        return text
    if len(folded) != len(text):  # a letter folded to several: positions differ
        return _AUTH_CREDENTIAL.sub(_redact_credential, text)
    pieces: list[str] = []
    done = 0
    for at in _occurrences(folded, _AUTH_STARTS):
        match = _AUTH_CREDENTIAL.match(text, at) if at >= done else None
        if match:
            pieces += [text[done:at], _redact_credential(match)]
            done = match.end()
    return "".join([*pieces, text[done:]]) if pieces else text


def _occurrences(text: str, needles: tuple[str, ...]) -> list[int]:
    """Return, in order, every position where one of `needles` starts in text."""
    found = set()
    for needle in needles:
        at = text.find(needle)
        while at >= 0:
            found.add(at)
            at = text.find(needle, at + 1)
    return sorted(found)


def _redact_credential(match: re.Match[str]) -> str:
    scheme, space, value = match.groups()
    if _looks_like_credential(scheme.lower(), value):
        return f"{scheme}{space}{REDACTED}"
    return match.group()


def _looks_like_credential(scheme: str, value: str) -> bool:
    """Tell a credential from prose: 'Bearer 9f8e7d6c', not 'a basic question'."""
    if scheme == "basic":
        try:
            decoded = base64.b64decode(value, validate=True).decode()
        except (ValueError, UnicodeDecodeError):
            return False
        return ":" in decoded and decoded.isprintable()
    return len(value) >= 24 or any(char.isdigit() for char in value)


def _redact_key_values(text: str, matches: Iterable[re.Match[str]] | None = None) -> str:
    """Return text with the values of secret-named keys (`password=...`) replaced.

    `matches`: the _KEY_VALUE matches to look at, in order (by default those whose key may
    be a secret's, _secret_key_matches; the tests pass a scan of the whole text).
    """
    pieces: list[str] = []
    done = 0
    for match in _secret_key_matches(text) if matches is None else matches:
        key, value = match.group(1), match.group(3)
        if match.start(3) < done or not is_secret_key(key):
            continue
        opening = value[: len(value) - len(value.lstrip("\\\"'"))]
        closing = opening if len(value) > len(opening) and value.endswith(opening) else ""
        inner = value[len(opening) : len(value) - len(closing)]
        if not inner or inner.startswith("[") or inner.lower() in _AUTH_SCHEMES:
            continue  # empty, already redacted, or "Authorization: Bearer [REDACTED]"
        pieces += [text[done : match.start(3)], opening, REDACTED, closing]
        done = match.end(3)
    return "".join([*pieces, text[done:]]) if pieces else text


def _secret_key_matches(text: str) -> Iterator[re.Match[str]]:
    """Yield, in order, the _KEY_VALUE matches whose key may be a secret's.

    Every other match is of a key is_secret_key refuses: _KEY_VALUE's matches are the
    keys (whole words of key characters) followed by a separator and a value, each on
    its own, so trying it at the start of each word holding a secret key's stem finds
    the same matches of secret keys as a scan of the whole text, for a fraction of it.
    """
    lowered = text.lower()
    if len(lowered) != len(text):  # a letter lowered to several: positions differ
        if _SECRET_KEY.search(text):
            yield from _KEY_VALUE.finditer(text)
        return
    if not _ANY_SECRET_KEY_STEM.search(lowered):
        return
    last = -1
    for at in _occurrences(lowered, _SECRET_KEY_STEMS):
        while at and text[at - 1] in _KEY_CHARS:
            at -= 1
        if at != last:
            last = at
            match = _KEY_VALUE.match(text, at)
            if match:
                yield match


def redact(value: Any) -> Any:
    """Return a copy of a JSON value with secret keys' values and secret-looking text redacted."""
    return _redact_measuring(value)[0]


# What no value's compact JSON exceeds: a character is at most 6 bytes (\u0000), a
# float's repr 24 characters; anything else (a tuple, a date) is not known before encoding.
_MAX_BYTES_PER_CHAR = 6
_FLOAT_MAX_CHARS = 24
_UNKNOWN_SIZE = 1 << 62


def _redact_measuring(value: Any) -> tuple[Any, int]:
    """Return redact(value) and at least the length of its compact JSON in UTF-8.

    The bound lets bound_json keep most payloads without encoding them to measure
    them: they are encoded once, when stored.
    """
    if isinstance(value, str):
        text = redact_text(value)
        return text, _MAX_BYTES_PER_CHAR * len(text) + 2
    if isinstance(value, dict):
        copy, size = {}, 2
        for key, item in value.items():
            name = str(key)
            item, item_size = (REDACTED, 12) if is_secret_key(name) else _redact_measuring(item)
            name = storable_text(name)
            copy[name] = item
            size += _MAX_BYTES_PER_CHAR * len(name) + 4 + item_size
        return copy, size
    if isinstance(value, list):
        items, size = [], 2
        for item in value:
            item, item_size = _redact_measuring(item)
            items.append(item)
            size += item_size + 1
        return items, size
    if value is None or isinstance(value, bool):
        return value, 5
    if isinstance(value, int):
        return value, value.bit_length() // 3 + 3  # its digits and sign
    if isinstance(value, float):
        return value, _FLOAT_MAX_CHARS
    return value, _UNKNOWN_SIZE


def cut_utf8(text: str, max_bytes: int) -> str:
    """Return the longest prefix of text that fits in max_bytes of UTF-8."""
    encoded = text.encode()
    if len(encoded) <= max_bytes:
        return text
    return encoded[:max_bytes].decode(errors="ignore")


def bound_text(text: str, max_bytes: int) -> str:
    """Return text cut to max_bytes of UTF-8, ending with a marker saying how much was cut."""
    size = len(text.encode())
    if size <= max_bytes:
        return text
    kept = cut_utf8(text, max_bytes)
    return kept + f"…[truncated {size - len(kept.encode())} of {size} bytes]"


def bound_json(value: Any, max_bytes: int, size_bound: int | None = None) -> Any:
    """Return the value, or when its JSON exceeds max_bytes an explicit truncation record.

    Text is cut with a marker at its end. JSON cut mid-way is not JSON, so an oversized
    object or array becomes
    `{"__truncated__": true, "original_bytes": N, "preview": "<first bytes>…"}`.
    A value whose JSON is known to be at most `size_bound` bytes, within max_bytes, is
    kept without being encoded.
    """
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, str):
        return bound_text(value, max_bytes)
    if size_bound is not None and size_bound <= max_bytes:
        return value
    text = _COMPACT_JSON.encode(value)
    size = len(text.encode())
    if size <= max_bytes:
        return value
    return {
        TRUNCATED_KEY: True,
        "original_bytes": size,
        "preview": cut_utf8(text, max(max_bytes - 200, 64)) + "…",
    }


def parse_json_text(value: Any) -> Any:
    """Return a JSON object or array encoded in a string decoded; anything else unchanged.

    OpenAI sends tool arguments as a JSON string; decoding it lets secret keys inside
    be redacted and the arguments be shown as an object.
    """
    if isinstance(value, str) and value.lstrip()[:1] in ("{", "["):
        try:
            decoded = json.loads(value)
        except (ValueError, RecursionError):
            return value
        # Nesting beyond what request bodies may hold stays text: redaction and storing
        # walk payloads recursively.
        return value if nesting_exceeds(decoded, MAX_JSON_DEPTH) else decoded
    return value


def safe_payload(value: Any, max_bytes: int) -> Any:
    """Return a payload ready to store: JSON text decoded, secrets redacted, size bounded."""
    redacted, size_bound = _redact_measuring(parse_json_text(value))
    return bound_json(redacted, max_bytes, size_bound)
