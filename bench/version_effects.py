"""Benchmark what a rule-set version did: its page and the guard's verdict on demo traffic.

Migrates a database (a temporary SQLite file unless --database-url names one, which is
reused when it holds N spans), fills it with `manage.py ares_demo --invocations N` (the
last 24 hours), makes
a rule-set version dated 12 hours ago (a word added to sum-en), then renders the
version's page `--repeat` times through Django's test client (the whole request) and
times the guard's verdict on it (N = 50 planned requests each side). Prints the requests
each side counted, and median / p95 in ms.

    .venv/bin/python bench/version_effects.py --invocations 200000
    .venv/bin/python bench/version_effects.py --database-url postgres://ares:ares@127.0.0.1:5432/x
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from figures import percentile  # noqa: E402  (bench/ is the script's folder)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--invocations", type=int, default=100_000, help="demo spans")
    parser.add_argument("--repeat", type=int, default=10, help="renders of the page")
    parser.add_argument("--database-url", default="", help="default: a temporary SQLite file")
    return parser.parse_args()


def setup(database_url: str) -> None:
    folder = Path(tempfile.mkdtemp(prefix="ares-bench-versions-"))
    os.environ["DATABASE_URL"] = database_url or f"sqlite:///{folder / 'bench.sqlite3'}"
    os.environ.setdefault("SECRET_KEY", secrets.token_urlsafe(32))
    os.environ.setdefault("ARES_VAR_DIR", str(folder))
    os.environ["ALLOWED_HOSTS"] = "testserver"
    os.environ["DJANGO_SETTINGS_MODULE"] = "ares_site.settings"
    os.environ.pop("CELERY_BROKER_URL", None)
    import django

    django.setup()


def timed(function: object, repeat: int) -> list[float]:
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        function()  # type: ignore[operator]
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def main() -> int:
    args = parse_args()
    setup(args.database_url)
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.test import Client
    from django.utils import timezone

    from planner_app import ruleset_versions
    from planner_app.models import IntentRule, RuleSetVersion
    from planner_app.rules_guard import judge
    from planner_app.version_effects import REQUESTS_READ, effect_of
    from traces_app.models import Invocation

    call_command("migrate", verbosity=0)
    if Invocation.objects.count() < args.invocations:  # a database of an earlier run: reused
        started = time.perf_counter()
        call_command("ares_demo", invocations=args.invocations, seed=1, stdout=sys.stderr)
        print(f"generated {args.invocations:,} spans in {time.perf_counter() - started:.0f} s",
              file=sys.stderr)  # fmt: skip
    ruleset_versions.current_ruleset()  # v1, if the demo made none
    RuleSetVersion.objects.update(created_at=timezone.now() - timedelta(days=2))
    with ruleset_versions.editing():
        rule = IntentRule.objects.get(name="sum-en")
        rule.keywords = [*rule.keywords, "tally"]
        rule.save()
    version = RuleSetVersion.objects.order_by("-number").first()
    RuleSetVersion.objects.filter(pk=version.pk).update(
        created_at=timezone.now() - timedelta(hours=12)
    )
    version.refresh_from_db()
    effect = effect_of(version)
    before, after = effect.totals
    print(f"requests counted: before {before.requests:,} (planned {before.planned:,}), "
          f"after {after.requests:,} (planned {after.planned:,}); read at most "
          f"{REQUESTS_READ:,} a side: before cut {effect.before.more}, after cut "
          f"{effect.after.more}")  # fmt: skip
    user, _ = get_user_model().objects.get_or_create(
        username="bench", defaults={"is_staff": True, "is_superuser": True}
    )
    client = Client()
    client.force_login(user)
    path = f"/planner/versions/{version.number}/"
    assert client.get(path).status_code == 200  # warm-up
    page = timed(lambda: client.get(path), args.repeat)
    guard = timed(lambda: judge(version, 50, 0.10), args.repeat)
    print(f"database: {os.environ['DATABASE_URL'].split(':', 1)[0]}, {args.invocations:,} spans")
    for label, samples in (("version page", page), ("guard verdict (N=50)", guard)):
        print(f"{label}: median {statistics.median(samples):.1f} ms, "
              f"p95 {percentile(samples, 0.95):.1f} ms")  # fmt: skip
    print(f"guard: {judge(version, 50, 0.10).decision}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
