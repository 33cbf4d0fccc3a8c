"""Write the saved tool settings, MCP servers and agents as an ares.toml file."""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandParser

from planner_app.agent_config_file import export_config


class Command(BaseCommand):
    help = "Print (or write to PATH) the tool settings, MCP servers and agents as ares.toml."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", type=Path, nargs="?", help="default: standard output")

    def handle(self, *args: object, path: Path | None, **options: object) -> None:
        text = export_config()
        if path is None:
            self.stdout.write(text, ending="")
            return
        path.write_text(text, encoding="utf-8")
        self.stderr.write(f"wrote {path}")
