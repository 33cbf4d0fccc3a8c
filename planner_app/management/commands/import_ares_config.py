"""Load tool settings, MCP servers and agents from an ares.toml file.

It lives in planner_app, the top layer, because agents are the planner's: tools_app's
importer saves the tool sections and this command adds the agents.
"""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser

from planner_app.agent_config_file import import_config


class Command(BaseCommand):
    help = "Save the [tools.*], [mcp_servers.*] and [[agents]] entries of an ares.toml file."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", type=Path)

    def handle(self, *args: object, path: Path, **options: object) -> None:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise CommandError(f"cannot read {path}: {exc}") from None
        report = import_config(text)
        for place in report.saved:
            self.stdout.write(f"saved {place}")
        for problem in report.problems:
            self.stderr.write(f"refused {problem}")
        if report.problems:
            raise CommandError(f"{len(report.problems)} entr(y/ies) refused; the rest were saved")
