"""Fill the database with realistic demo traces, a million spans in minutes.

It lives in planner_app, the highest app it needs: besides the traces (traces_app), it
registers the demo's competing tools (planner_app.demo_tools: an MCP server of tools_app and the
planner's capability mappings), so that the evidence pages have candidates to compare.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from datetime import timedelta

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser, OutputWrapper
from django.utils import timezone

from planner_app.demo_tools import DEMO_SERVER, list_server_tools, register_demo_tools
from tools_app.specs import ToolFailure
from traces_app.demo_spans import demo_trace_stream
from traces_app.ingest.recording import record_invocations
from traces_app.rollups.recount import recount_all_marked_rollups
from traces_app.schemas import InvocationFromDict
from traces_app.spirals.scanning import rescan_spirals

# The previous period (--previous-period): a fifth less traffic, from another seed, so that
# the overview's and tools' changes against it are real figures, neither zeros nor copies.
PREVIOUS_SHARE = 0.8
PREVIOUS_SEED_OFFSET = 1_000_003


class Command(BaseCommand):
    help = (
        "Record realistic demo traces (LLM and tool calls, failures, spirals, planner "
        "fallbacks, MCP and workflow calls) over the last --days, then refresh the rollups. "
        "Registers the project's demo MCP server, whose add and sha256 tools compete with "
        "the calculator (Summation, Arithmetic) and hash_tool (Hashing); --no-demo-server "
        "to skip."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--invocations", type=int, default=2000, help="Spans to record")
        parser.add_argument(
            "--days", type=float, default=1.0, help="Spread them over this many days before now"
        )
        parser.add_argument(
            "--seed", type=int, default=0, help="Random seed (same seed, same data)"
        )
        parser.add_argument("--batch", type=int, default=1000, help="Spans per transaction")
        parser.add_argument(
            "--previous-period",
            action="store_true",
            help="Also record the --days before the window (a fifth fewer spans, other "
            "traffic), so the pages' changes against the previous period mean something",
        )
        parser.add_argument(
            "--no-demo-server",
            action="store_false",
            dest="demo_server",
            help=f"Record the traces only: do not register MCP server {DEMO_SERVER!r} "
            "(tools_app/mcp_demo_server.py) nor map its tools to capabilities",
        )

    def handle(
        self,
        *args: object,
        invocations: int,
        days: float,
        seed: int,
        batch: int,
        demo_server: bool,
        previous_period: bool = False,
        **opts: object,
    ) -> None:
        if invocations < 0 or batch < 1:
            raise CommandError("--invocations must be 0 or more and --batch 1 or more")
        covered = 2 * days if previous_period else days
        if not 0 < covered <= settings.ARES_RETENTION_DAYS:
            # Older spans would be purged and their hours never rolled up.
            raise CommandError(
                f"--days{' (twice, with --previous-period)' if previous_period else ''} must "
                f"be over 0 and at most ARES_RETENTION_DAYS ({settings.ARES_RETENTION_DAYS})"
            )
        if demo_server:
            self.register_demo_server()
        started = time.monotonic()
        now = timezone.now()
        streams = [(invocations, demo_trace_stream(invocations, seed=seed, now=now, days=days))]
        if previous_period:
            before = round(invocations * PREVIOUS_SHARE)
            window_start = now - timedelta(days=days)
            traffic = demo_trace_stream(
                before, seed=seed + PREVIOUS_SEED_OFFSET, now=window_start, days=days
            )
            streams.append((before, traffic))
        total = sum(count for count, _ in streams)
        progress = ProgressBar(total, self.stderr)
        stored = sum(record_stream(traffic, batch, progress) for _, traffic in streams)
        progress.finish()
        # Once for the whole run, as soon as it is stored (ingest leaves its marks to the
        # beat): recounting every few seconds recounted the same hours again and cost a
        # fifth of a 1M run.
        recount_all_marked_rollups(max_rounds=None)
        # What the beat's rescan does every minute: loops quiet for a while have given up.
        # Nothing to re-detect (this process saw every call), hence no window.
        rescan_spirals(since=timezone.now())
        seconds = time.monotonic() - started
        self.stdout.write(
            f"Recorded {stored} new spans ({total - stored} already there) "
            f"in {seconds:.1f} s ({total / max(seconds, 1e-9):,.0f} spans/s)."
        )

    def register_demo_server(self) -> None:
        """Register the demo MCP server and its mappings, then check that its tools list."""
        found = register_demo_tools()
        if found.created:
            self.stdout.write(
                f"Registered MCP server {DEMO_SERVER!r} (tools_app/mcp_demo_server.py)"
            )
        elif found.updated:
            self.stdout.write(f"Updated MCP server {DEMO_SERVER!r} to run as this demo runs it")
        elif found.foreign:
            self.stderr.write(
                f"An MCP server named {DEMO_SERVER!r} runs something else: left as it is; "
                "the demo's mappings name its tools"
            )
        else:
            self.stdout.write(f"MCP server {DEMO_SERVER!r} is registered already")
        for mapping in found.mapped:
            self.stdout.write(f"Mapped {mapping}")
        for name in found.missing:
            self.stderr.write(f"No capability {name!r} (deleted?): its demo mapping is left out")
        if found.foreign:
            return  # not ours to check
        try:
            tools = list_server_tools(found.server)
        except (ToolFailure, ValueError) as exc:
            self.stderr.write(
                f"MCP server {DEMO_SERVER!r} does not answer ({exc}): the planner will show its "
                "mapped tools as not registered until it does"
            )
        else:
            self.stdout.write(f"MCP server {DEMO_SERVER!r} answers with tools {', '.join(tools)}")


def record_stream(traces: Iterable[list[dict]], batch: int, progress: ProgressBar) -> int:
    """Record the traces in batches of about `batch` spans; return how many spans were new."""
    stored = 0
    for spans in batches(traces, batch):
        items = [InvocationFromDict.model_validate(span) for span in spans]
        stored += sum(outcome is True for outcome in record_invocations(items))
        progress.advance(len(spans))
    return stored


def batches(traces: Iterable[list[dict]], size: int) -> Iterator[list[dict]]:
    """Return whole traces grouped into lists of at least `size` spans (the last may be fewer).

    A trace never straddles two batches, so each batch finds its spirals in full.
    """
    batch: list[dict] = []
    for trace in traces:
        batch.extend(trace)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


class ProgressBar:
    """A one-line text progress bar with rate and time left, redrawn at most 5 times a second.

    Not a terminal (a log, a test): a line at each tenth instead of redrawing.
    """

    WIDTH = 30

    def __init__(self, total: int, stream: OutputWrapper) -> None:
        self.total, self.stream = total, stream
        self.done = 0
        self.started = self.drawn_at = time.monotonic()
        self.interactive = stream.isatty()
        self.tenths_shown = 0

    def advance(self, count: int) -> None:
        self.done += count
        now = time.monotonic()
        if self.interactive:
            if now - self.drawn_at >= 0.2:
                self.drawn_at = now
                self.stream.write(f"\r{self.line(now)}", ending="")
                self.stream.flush()
        elif self.total and self.done * 10 // self.total > self.tenths_shown:
            self.tenths_shown = self.done * 10 // self.total
            self.stream.write(self.line(now))

    def finish(self) -> None:
        if self.interactive:
            self.stream.write(f"\r{self.line(time.monotonic())}")
            self.stream.flush()

    def line(self, now: float) -> str:
        share = self.done / self.total if self.total else 1.0
        filled = int(share * self.WIDTH)
        elapsed = now - self.started
        rate = self.done / elapsed if elapsed > 0 else 0.0
        left = (self.total - self.done) / rate if rate else 0.0
        bar = "#" * filled + "." * (self.WIDTH - filled)
        return (
            f"[{bar}] {share:4.0%} {self.done:,}/{self.total:,} spans, "
            f"{rate:,.0f}/s, {left:.0f} s left"
        )
