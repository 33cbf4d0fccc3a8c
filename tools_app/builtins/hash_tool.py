"""The hash built-in tool: hex digests of text, and Base64 encoding and decoding. No Django here.

Text is always taken as its UTF-8 bytes. Decoding Base64 yields bytes, which come back as
text when they are valid UTF-8 and as lowercase hex otherwise; `encoding` in the result
says which, so binary data (an image, a key) is never mangled into replacement characters.
Decoding accepts the standard and the URL-safe alphabet, ignores whitespace (MIME line
breaks) and tolerates missing '=' padding (JWT segments leave it out).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from typing import Any

from tools_app.specs import ErrorKind, ToolFailure, ToolSpec

MAX_TEXT_LENGTH = 1_000_000
DIGESTS = ("md5", "sha1", "sha256", "sha512")
OPERATIONS = (*DIGESTS, "base64_encode", "base64_decode")

_WHITESPACE = re.compile(r"\s+")
_NOT_BASE64 = re.compile(r"[^A-Za-z0-9+/=_-]")

DESCRIPTION = (
    "Hash text or convert it to and from Base64. md5, sha1, sha256 and sha512 return the "
    "hex digest of the text's UTF-8 bytes. base64_encode returns standard Base64 (or "
    "URL-safe with url_safe=true). base64_decode accepts either alphabet, whitespace and "
    "missing padding; it returns the decoded text when it is UTF-8, otherwise the bytes as "
    "hex, with `encoding` saying which."
)

PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "operation": {
            "type": "string",
            "enum": list(OPERATIONS),
            "description": "What to do with `text`.",
        },
        "text": {
            "type": "string",
            "maxLength": MAX_TEXT_LENGTH,
            "description": "The input: any text to hash or encode, or Base64 to decode.",
        },
        "url_safe": {
            "type": "boolean",
            "default": False,
            "description": "base64_encode only: use the URL-safe alphabet (- and _ for + and /).",
        },
    },
    "required": ["operation", "text"],
    "additionalProperties": False,
}

RETURNS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "operation": {"type": "string"},
        "result": {"type": "string", "description": "The digest, the Base64, or the decoded data."},
        "encoding": {
            "type": "string",
            "enum": ["hex", "base64", "utf-8"],
            "description": "How `result` represents bytes.",
        },
        "byte_length": {
            "type": "integer",
            "description": "Bytes of the digest, of the text encoded, or of the decoded data.",
        },
    },
    "required": ["operation", "result", "encoding", "byte_length"],
}


def run_hash(operation: str, text: str, url_safe: bool = False) -> dict[str, Any]:
    """Hash, encode or decode the text as the operation says."""
    if operation in DIGESTS:
        digest = hashlib.new(operation, text.encode())
        return _result(operation, digest.hexdigest(), "hex", digest.digest_size)
    if operation == "base64_encode":
        data = text.encode()
        encoded = base64.urlsafe_b64encode(data) if url_safe else base64.b64encode(data)
        return _result(operation, encoded.decode("ascii"), "base64", len(data))
    data = decode_base64(text)
    try:
        return _result(operation, data.decode("utf-8"), "utf-8", len(data))
    except UnicodeDecodeError:
        return _result(operation, data.hex(), "hex", len(data))


def decode_base64(text: str) -> bytes:
    """Return the bytes of standard or URL-safe Base64, or fail saying what is wrong with it."""
    compact = _WHITESPACE.sub("", text)
    bad = _NOT_BASE64.search(compact)
    if bad:
        raise ToolFailure(
            f"not Base64: character {bad.group()!r} at position {bad.start()} (after removing "
            "whitespace) is outside the Base64 alphabet A-Z a-z 0-9 + / (or - _) and =",
            ErrorKind.INVALID_ARGUMENTS,
        )
    unpadded = compact.rstrip("=")
    if "=" in unpadded:
        position = unpadded.index("=")
        raise ToolFailure(
            f"not Base64: '=' padding at position {position} is followed by more data; "
            "padding may only end the text",
            ErrorKind.INVALID_ARGUMENTS,
        )
    if len(unpadded) % 4 == 1:
        raise ToolFailure(
            f"not Base64: {len(unpadded)} characters (without padding) cannot be whole bytes; "
            "the text is probably truncated or has a character too many",
            ErrorKind.INVALID_ARGUMENTS,
        )
    standard = unpadded.replace("-", "+").replace("_", "/")
    try:
        return base64.b64decode(standard + "=" * (-len(standard) % 4), validate=True)
    except binascii.Error as error:  # Unreachable after the checks above; kept for safety.
        raise ToolFailure(f"not Base64: {error}", ErrorKind.INVALID_ARGUMENTS) from error


def _result(operation: str, result: str, encoding: str, byte_length: int) -> dict[str, Any]:
    return {
        "operation": operation,
        "result": result,
        "encoding": encoding,
        "byte_length": byte_length,
    }


SPEC = ToolSpec(
    name="hash_tool",
    description=DESCRIPTION,
    parameters=PARAMETERS,
    function=run_hash,
    returns=RETURNS,
    timeout_s=5.0,
    capabilities=("Hashing", "Base64"),
)
