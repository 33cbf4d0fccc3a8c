"""Compare the hourly rollups with the raw spans over a range, and repair what differs."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from traces_app.rollups.checking import check_rollups
from traces_app.rollups.ranges import filter_moment


class Command(BaseCommand):
    help = (
        "Recount the tool and span rollups of whole UTC hours from the raw spans and repair "
        "those that differ (run it after restoring a backup). Prints each difference. Hours "
        "whose raw spans were purged are kept as they are."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--since", help="ISO 8601 start (default: the retention window, ARES_RETENTION_DAYS)"
        )
        parser.add_argument("--until", help="ISO 8601 end (default: now)")
        parser.add_argument("--dry-run", action="store_true", help="Report, change nothing")

    def handle(
        self, *args: object, since: str | None, until: str | None, dry_run: bool, **opts: object
    ) -> None:
        end = _moment(until, "--until") if until else timezone.now()
        start = (
            _moment(since, "--since")
            if since
            else end - timedelta(days=settings.ARES_RETENTION_DAYS)
        )
        if start >= end:
            raise CommandError("--since must be before --until")
        check = check_rollups(start, end, repair=not dry_run)
        if check.kept_before is not None:
            self.stdout.write(
                f"Kept {check.kept_tool_buckets} tool buckets and {check.kept_span_groups} span "
                f"groups before {check.kept_before:%Y-%m-%d %H:00} UTC as they are: their raw "
                "spans were purged (ARES_RETENTION_DAYS)."
            )
        for line in check.differences:
            self.stdout.write(line)
        verb = "would repair" if dry_run else "repaired"
        self.stdout.write(
            f"Checked {check.tool_buckets} tool buckets, {check.tool_days} tool days and "
            f"{check.span_groups} span groups "
            f"from {check.since:%Y-%m-%d %H:00} to {check.until:%Y-%m-%d %H:%M} UTC: "
            f"{len(check.differences)} differed"
            + (f", {verb}." if check.differences else ", nothing to repair.")
        )


def _moment(raw: str, option: str) -> datetime:
    """Return an option's moment in UTC, as the read API and the pages read theirs."""
    try:
        moment = datetime.fromisoformat(raw)
    except ValueError:
        raise CommandError(f"{option}: {raw!r} is not an ISO 8601 date or time") from None
    try:
        return filter_moment(moment)
    except ValueError as exc:
        raise CommandError(f"{option}: {exc}") from None
