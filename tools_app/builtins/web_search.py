"""The web_search built-in tool: web results from the operator's SearXNG instance. No Django.

SearXNG's JSON API (GET {base}/search?q=...&format=json) answers with `results`, each with
a title, url and content (the snippet). The instance is set by the operator
(ARES_SEARXNG_URL) and often lives on the private network on purpose, so it is requested
directly, not through http_request's address guard. With none configured the tool is
disabled and says how to configure it: it never makes results up, and a provider that
fails is an error, not an empty list.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

from tools_app.specs import ErrorKind, ToolFailure, ToolSpec

SEARXNG_SETTING = "ARES_SEARXNG_URL"
DEFAULT_TIMEOUT_S = 10.0
MAX_RESULTS = 20

DESCRIPTION = (
    "Search the web and return up to `max_results` results, each a title, URL and short "
    "snippet, best first. Use it for facts that may be recent or that you do not know; "
    "snippets are short, so read a page itself for details."
)

PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {
            "type": "string",
            "minLength": 1,
            "maxLength": 500,
            "description": "What to search for, as you would type it into a search engine.",
        },
        "max_results": {
            "type": "integer",
            "minimum": 1,
            "maximum": MAX_RESULTS,
            "default": 5,
            "description": "How many results to return at most.",
        },
    },
    "required": ["query"],
    "additionalProperties": False,
}

RETURNS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string"},
        "results": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "title": {"type": "string"},
                    "url": {"type": "string"},
                    "snippet": {"type": "string"},
                },
                "required": ["title", "url", "snippet"],
            },
        },
        "count": {"type": "integer"},
    },
    "required": ["query", "results", "count"],
}


@dataclass(frozen=True)
class SearxngSearch:
    """Search one SearXNG instance; the tool's function when one is configured."""

    base_url: str
    timeout_s: float = DEFAULT_TIMEOUT_S

    def __call__(self, query: str, max_results: int = 5) -> dict[str, Any]:
        """Return the instance's first results for the query, or fail saying what went wrong."""
        payload = self._fetch(query)
        raw = payload.get("results") if isinstance(payload, dict) else None
        if not isinstance(raw, list):
            raise self._unavailable("answered JSON without a `results` list; is it SearXNG?")
        results = [_result(item) for item in raw if isinstance(item, dict) and item.get("url")]
        if not results and payload.get("unresponsive_engines"):
            failed = ", ".join(_engine_failure(entry) for entry in payload["unresponsive_engines"])
            raise self._unavailable(f"found nothing because its engines failed: {failed}")
        results = results[:max_results]
        return {"query": query, "results": results, "count": len(results)}

    def _fetch(self, query: str) -> Any:
        """Return the decoded JSON of a search, or fail on any transport or HTTP problem."""
        try:
            response = httpx.get(
                f"{self.base_url}/search",
                params={"q": query, "format": "json"},
                headers={"Accept": "application/json"},
                timeout=self.timeout_s,
                follow_redirects=True,
            )
        except httpx.TimeoutException:
            raise self._unavailable(f"did not answer within {self.timeout_s:g} seconds") from None
        except httpx.HTTPError as error:
            raise self._unavailable(f"could not be reached: {error}") from None
        if response.status_code == 429:
            raise ToolFailure(
                f"the search provider (SearXNG at {self.base_url}) is limiting requests (HTTP "
                "429); wait before searching again",
                ErrorKind.RATE_LIMITED,
            )
        if response.status_code == 403:
            raise self._unavailable(
                "refused the JSON API (HTTP 403): the operator must add 'json' to search.formats "
                "in its settings.yml"
            )
        if response.status_code != 200:
            raise self._unavailable(f"answered HTTP {response.status_code}")
        try:
            return response.json()
        except ValueError:
            kind = response.headers.get("content-type", "no content type")
            raise self._unavailable(
                f"did not return JSON ({kind}); check that {SEARXNG_SETTING} points at a "
                "SearXNG instance with the json format enabled"
            ) from None

    def _unavailable(self, problem: str) -> ToolFailure:
        return ToolFailure(
            f"the search provider (SearXNG at {self.base_url}) {problem}", ErrorKind.UNAVAILABLE
        )


def not_configured(query: str, max_results: int = 5) -> dict[str, Any]:
    """Fail: no search provider is configured."""
    raise ToolFailure(
        f"web search is not configured: set {SEARXNG_SETTING} to the base URL of a SearXNG "
        "instance with the json format enabled (e.g. http://searxng:8080)",
        ErrorKind.DISABLED,
    )


def _result(item: dict[str, Any]) -> dict[str, str]:
    return {
        "title": str(item.get("title") or "").strip(),
        "url": str(item["url"]),
        "snippet": str(item.get("content") or "").strip(),
    }


def _engine_failure(entry: Any) -> str:
    """Return one of SearXNG's unresponsive_engines entries, [name, reason], as text."""
    if isinstance(entry, list | tuple) and len(entry) == 2:
        return f"{entry[0]} ({entry[1]})"
    return str(entry)


def make_spec(searxng_url: str | None, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> ToolSpec:
    """Return the web_search tool for this SearXNG base URL; disabled when there is none."""
    if searxng_url:
        url = httpx.URL(searxng_url)
        if url.scheme not in ("http", "https") or not url.host:
            raise ValueError(f"{SEARXNG_SETTING} must be an http(s) URL, got {searxng_url!r}")
    function = SearxngSearch(searxng_url.rstrip("/"), timeout_s) if searxng_url else not_configured
    return ToolSpec(
        name="web_search",
        description=DESCRIPTION,
        parameters=PARAMETERS,
        function=function,
        returns=RETURNS,
        deterministic=False,
        timeout_s=timeout_s + 5,  # The engine's limit is a backstop for the provider's.
        capabilities=("WebSearch",),
        # Not offered to models until an operator configures a provider.
        enabled=bool(searxng_url),
    )


SPEC = make_spec(None)
