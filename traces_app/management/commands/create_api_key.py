"""Create an API key and print it once: only its hash is stored."""

from django.core.management.base import BaseCommand, CommandError, CommandParser

from traces_app.models import SCOPES, ApiKey


class Command(BaseCommand):
    help = "Create an API key for agents and print it once. Scopes: " + ", ".join(SCOPES)

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--name", required=True, help="Who or what uses the key")
        parser.add_argument(
            "--scopes", default="report,read", help="Comma-separated scopes (default report,read)"
        )

    def handle(self, *args: object, name: str, scopes: str, **options: object) -> None:
        wanted = [scope.strip() for scope in scopes.split(",") if scope.strip()]
        if not wanted:
            raise CommandError("--scopes is empty; known scopes: " + ", ".join(SCOPES))
        try:
            key, raw_key = ApiKey.objects.issue(name, wanted)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        self.stderr.write(f"Created key {key.prefix}… for {name!r} with scopes {key.scopes}.")
        self.stderr.write("Copy it now; it is stored hashed and will not be shown again:")
        self.stdout.write(raw_key)
