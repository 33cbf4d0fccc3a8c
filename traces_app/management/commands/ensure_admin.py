"""Create the development admin login if missing and print it."""

import secrets

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser


class Command(BaseCommand):
    help = "Create a superuser for local use (if missing) and print its login."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--username", default="admin")

    def handle(self, *args: object, username: str, **options: object) -> None:
        # The password is kept beside the development database (var/, not in git) so
        # that every `make run` can print the login again, until someone changes it.
        saved = settings.VAR_DIR / f"{username}-password.txt"
        user_model = get_user_model()
        user = user_model.objects.filter(username=username).first()
        if user is None:
            password = secrets.token_urlsafe(12)
            user_model.objects.create_superuser(username, "", password)
            saved.write_text(password)
            saved.chmod(0o600)
        elif saved.exists() and user.check_password(saved.read_text()):
            password = saved.read_text()
        else:
            self.stdout.write(f"Admin login: {username} (password changed since set-up)")
            return
        self.stdout.write(f"Admin login: {username} / {password}")
