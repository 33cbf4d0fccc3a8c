"""Print how the site's router routes a request: each offered tool, its score and why."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from planner_app.discovery.backends import BackendUnavailable
from planner_app.discovery.site_router import get_router

MAX_LIMIT = 20  # as POST /api/v1/planner/route


def routing_lines(explanation: dict[str, Any]) -> list[str]:
    """Return a routing's explanation as text: one line per tool, then why it is there."""
    lines = [f"mode {explanation['mode']}" + (" (cached)" if explanation["cached"] else "")]
    if history := explanation.get("history"):
        lines.append(f"history: {history['outcomes']} outcomes of {history['tools']} tools")
    for server in explanation["servers"]:
        lines.append(f"server {server['server']} {server['score']:.3f}")
    for rank, tool in enumerate(explanation["tools"], 1):
        placed = f", placed by {tool['placed_by']}" if "placed_by" in tool else ""
        lines.append(f"{rank}. {tool['tool']} ({tool['server']}) {tool['score']:.3f}{placed}")
        if tool.get("why"):
            lines.append(f"   {tool['why']}")
    if not explanation["tools"]:
        lines.append("no tool fits the request (the gate answered nothing)")
    return lines


class Command(BaseCommand):
    help = (
        "Route a request as active discovery would (the site's router, its settings and "
        "history) and print each tool offered with its score and what put it there."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("request", help="The tool asked for, in words")
        parser.add_argument("--server", default="", help="The server asked for, if any")
        parser.add_argument(
            "--limit", type=int, default=None, help="Tools to offer (default ARES_ROUTER_TOP_TOOLS)"
        )
        parser.add_argument(
            "--json", action="store_true", dest="as_json", help="Print the explanation as JSON"
        )

    def handle(
        self,
        *args: object,
        request: str,
        server: str,
        limit: int | None,
        as_json: bool,
        **opts: object,
    ) -> None:
        if not request.strip():
            raise CommandError("give the request some words")
        if limit is not None and not 1 <= limit <= MAX_LIMIT:
            raise CommandError(f"--limit must be from 1 to {MAX_LIMIT}")
        try:
            explanation = get_router().search(request, server, limit=limit).explain()
        except BackendUnavailable as exc:
            raise CommandError(f"the router cannot run: {exc}") from None
        if as_json:
            self.stdout.write(json.dumps(explanation, indent=2, ensure_ascii=False))
        else:
            self.stdout.write("\n".join(routing_lines(explanation)))
