"""CI's PostgreSQL pass leaves out the tests that reach no database (tests/conftest.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Two tests on a database that is down (no database fixture) and one on a locked SQLite
# (transactional_db, through its server fixture).
MIXED = "tests/traces_app/test_otlp_unavailable.py"
# A gunicorn on the run's database, without a database fixture: marked each_database.
MARKED = "tests/ares_site/test_ingest_slots.py"


DOWN = f"{MIXED}::test_it_answers_503_with_retry_after_when_the_database_is_down"
LOCKED = f"{MIXED}::test_it_answers_429_with_retry_after_when_the_database_is_locked"


def test_it_leaves_out_only_the_tests_without_a_database() -> None:
    env = {**os.environ, "ARES_TESTS_DATABASE_ONLY": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         MIXED, MARKED],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    kept = {line for line in done.stdout.splitlines() if "::" in line}
    summary = done.stdout.splitlines()[-1]
    # Of the 13 tests, the two on a database that is down go, and only they.
    assert summary.startswith(f"{len(kept)}/{len(kept) + 2} tests collected (2 deselected)")
    assert not any(test.startswith(DOWN) for test in kept)
    assert LOCKED in kept
    assert sum(test.startswith(MARKED) for test in kept) == len(kept) - 1
