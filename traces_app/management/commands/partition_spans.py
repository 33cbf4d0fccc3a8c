"""`manage.py partition_spans`: bring the span table into daily partitions (PostgreSQL)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from traces_app.partitions import conversion
from traces_app.partitions.layout import partitions


class Command(BaseCommand):
    help = (
        "Copy the spans of a table from before migration 0018 into daily partitions, in "
        "batches (ingest goes on; stop it any time and run it again to resume), then switch."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--status", action="store_true", help="only say where it stands")
        parser.add_argument("--batch", type=int, default=20_000, help="spans per transaction")

    def handle(self, *args: Any, status: bool, batch: int, **options: Any) -> None:
        if batch < 1:
            self.stderr.write("--batch must be 1 or more")
            raise SystemExit(2)
        if not status:
            conversion.convert(batch=batch, progress=self._progress)
        self._report(conversion.status())

    def _progress(self, state: conversion.ConversionStatus) -> None:
        self.stdout.write(f"copied {state.copied:,} of {state.to_copy:,} spans ({state.percent}%)")

    def _report(self, state: conversion.ConversionStatus) -> None:
        if state.state == "done":
            days = partitions()
            self.stdout.write(
                f"spans are partitioned by day: {len(days)} partitions"
                + (f", {days[0].day} to {days[-1].day}" if days else "")
            )
        elif state.state == "copying":
            self._progress(state)
            self.stdout.write("not switched yet: run `manage.py partition_spans` to finish")
        else:
            self.stdout.write(f"conversion {state.state}")
