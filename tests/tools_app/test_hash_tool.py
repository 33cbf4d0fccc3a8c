"""The hash built-in: digests, Base64 both ways, binary output as hex, clear decode errors."""

from __future__ import annotations

import base64

import pytest

from tests.tools_app.tool_calls import call
from tools_app.builtins.hash_tool import SPEC
from tools_app.specs import ErrorKind, ToolFailure
from tools_app.validation import ArgumentsError


@pytest.mark.parametrize(
    ("operation", "text", "digest"),
    [
        ("sha256", "hello", "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"),
        ("md5", "hello", "5d41402abc4b2a76b9719d911017c592"),
        ("sha1", "hello", "aaf4c61ddcc5e8a2dabede0f3b482cd9aea9434d"),
        ("sha256", "", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
        (
            "sha512",
            "hello",
            "9b71d224bd62f3785d96d46ad3ea3d73319bfbc2890caadae2dff72519673ca7"
            "2323c3d99ba5c11d7c7acc6e14b8c5da0c4663475c2e5c3adef46f73bcdec043",
        ),
        ("md5", "héllo", "be50e8478cf24ff3595bc7307fb91b50"),
    ],
)
def test_it_returns_hex_digests_of_utf8_bytes(operation: str, text: str, digest: str) -> None:
    result = call(SPEC, operation=operation, text=text)
    assert result["result"] == digest
    assert result["encoding"] == "hex"
    assert result["byte_length"] == len(digest) // 2


@pytest.mark.parametrize(
    ("text", "url_safe", "encoded"),
    [
        ("hello", False, "aGVsbG8="),
        ("", False, ""),
        ("héllo wörld", False, "aMOpbGxvIHfDtnJsZA=="),
        ("??>>", False, "Pz8+Pg=="),
        ("??>>", True, "Pz8-Pg=="),
    ],
)
def test_it_encodes_base64(text: str, url_safe: bool, encoded: str) -> None:
    result = call(SPEC, operation="base64_encode", text=text, url_safe=url_safe)
    assert result == {
        "operation": "base64_encode",
        "result": encoded,
        "encoding": "base64",
        "byte_length": len(text.encode()),
    }


@pytest.mark.parametrize(
    ("encoded", "decoded"),
    [
        ("aGVsbG8=", "hello"),
        ("aGVsbG8", "hello"),  # Missing padding, as in JWT segments.
        ("aMOpbGxv\nIHfDtnJs\r\nZA==", "héllo wörld"),  # MIME line breaks.
        ("Pz8-Pg", "??>>"),  # URL-safe alphabet.
        ("Pz8+Pg==", "??>>"),
        ("", ""),
    ],
)
def test_it_decodes_base64_to_text(encoded: str, decoded: str) -> None:
    result = call(SPEC, operation="base64_decode", text=encoded)
    assert result["result"] == decoded
    assert result["encoding"] == "utf-8"


def test_it_returns_bytes_that_are_not_utf8_as_hex() -> None:
    data = bytes([0x89, 0x50, 0x4E, 0x47, 0xFF, 0x00])
    result = call(SPEC, operation="base64_decode", text=base64.b64encode(data).decode())
    assert result == {
        "operation": "base64_decode",
        "result": "89504e47ff00",
        "encoding": "hex",
        "byte_length": 6,
    }


@pytest.mark.parametrize(
    ("encoded", "reason"),
    [
        ("aGVs*bG8=", "character '*' at position 4"),
        ("aGVsbG8=aGVs", "'=' padding at position 7 is followed by more data"),
        ("aGVsb", "5 characters (without padding) cannot be whole bytes"),
    ],
)
def test_it_refuses_bad_base64_saying_why(encoded: str, reason: str) -> None:
    with pytest.raises(ToolFailure) as failure:
        call(SPEC, operation="base64_decode", text=encoded)
    assert failure.value.kind == ErrorKind.INVALID_ARGUMENTS
    assert reason in str(failure.value)


@pytest.mark.parametrize(
    "arguments",
    [
        {"operation": "sha384", "text": "x"},
        {"operation": "md5"},
        {"operation": "md5", "text": "x", "salt": "y"},
    ],
)
def test_its_schema_rejects_malformed_arguments(arguments: dict) -> None:
    with pytest.raises(ArgumentsError):
        call(SPEC, **arguments)
