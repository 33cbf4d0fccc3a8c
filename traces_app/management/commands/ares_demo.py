"""Fill the database with realistic demo traces."""

from django.core.management.base import BaseCommand, CommandParser

from traces_app.demo import demo_spans
from traces_app.schemas import InvocationIn
from traces_app.services import record_invocations


class Command(BaseCommand):
    help = "Record realistic demo traces (LLM calls, tool calls, failures, spirals)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--invocations", type=int, default=2000, help="Spans to record")
        parser.add_argument(
            "--seed", type=int, default=0, help="Random seed (same seed, same data)"
        )
        parser.add_argument("--batch", type=int, default=1000, help="Spans per transaction")

    def handle(
        self, *args: object, invocations: int, seed: int, batch: int, **opts: object
    ) -> None:
        spans = [InvocationIn.model_validate(span) for span in demo_spans(invocations, seed=seed)]
        stored = 0
        for start in range(0, len(spans), batch):
            stored += sum(record_invocations(spans[start : start + batch]))
        self.stdout.write(f"Recorded {stored} new spans ({len(spans) - stored} already there).")
