"""A password hasher for the tests: Django's PBKDF2, in its own format, at one iteration."""

from __future__ import annotations

from django.contrib.auth.hashers import PBKDF2PasswordHasher


class QuickPBKDF2PasswordHasher(PBKDF2PasswordHasher):
    """Django's default hasher (algorithm pbkdf2_sha256, same hash format) at one iteration.

    A hash carries its iteration count, so any process of the site (gunicorn in the
    process tests) still checks these passwords with the production settings; only the
    second or so each test user's password costs to set and to check goes.
    """

    iterations = 1
