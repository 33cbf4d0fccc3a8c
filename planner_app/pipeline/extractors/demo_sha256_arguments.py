"""Read the demo MCP server's sha256 tool's argument: a request for SHA-256 of a text. No Django."""

from __future__ import annotations

from planner_app.pipeline.extractors.hash_arguments import extract_hash
from planner_app.pipeline.extractors.request_text import Extraction, found_arguments, needs_llm


def extract_sha256_text(request: str) -> Extraction:
    """Return {text} for a tool that does SHA-256 only, when the request asks for SHA-256."""
    hashing = extract_hash(request)
    if hashing.needs_llm:
        return hashing
    operation = hashing.arguments["operation"]
    if operation != "sha256":
        return needs_llm(f"the request asks for {operation}; this tool does sha256 only")
    return found_arguments({"text": hashing.arguments["text"]}, hashing.reason)
