"""Converting a populated span table into daily partitions while ingest goes on (PostgreSQL).

A real database migrated as before 0018 (one span table, as an existing site has it;
with 0019 and 0020, which do not need 0018, for today's code to write) is filled by
`manage.py ares_demo`. Then, while another process keeps ingesting (new spans over
several days, and spans sent again with another start time), migration 0018 starts the
conversion and `manage.py partition_spans` copies: it is killed with SIGKILL mid-copy,
then two copiers resume it at once, and one of them switches. Afterwards every span is
stored once, none sent is missing, and each trace's totals agree with its spans.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from django.db import connection

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif("connection.vendor != 'postgresql'", reason="PostgreSQL's layout"),
]

# Ingest from another process: rounds of 12 new spans over the last three days, each round
# also sending a span of an earlier round again with another start time (a duplicate).
INGEST = """
import json, os, random, secrets, sys, time
from datetime import UTC, datetime, timedelta
import django
django.setup()
from traces_app.ingest.recording import record_invocations
from traces_app.schemas import InvocationIn

stop, out = sys.argv[1], sys.argv[2]
now = datetime.now(UTC)
sent = []
with open(out, "w") as log:
    while not os.path.exists(stop):
        trace_id = secrets.token_hex(16)
        spans = [
            {"trace_id": trace_id, "span_id": secrets.token_hex(8), "kind": "tool",
             "tool_name": "calculator", "status": "ok", "latency_ms": 2.0,
             "started_at": (now - timedelta(hours=random.uniform(0, 70))).isoformat()}
            for _ in range(12)
        ]
        if sent:
            again = dict(random.choice(sent))
            again["started_at"] = (now - timedelta(hours=random.uniform(0, 70))).isoformat()
            spans.append(again)
        outcomes = record_invocations([InvocationIn.model_validate(s) for s in spans])
        for span, outcome in zip(spans, outcomes):
            log.write(json.dumps([span["trace_id"], span["span_id"], outcome is True]) + "\\n")
        log.flush()
        sent.extend(spans[:12])
        time.sleep(0.02)
"""


# In one process (each start of Django costs seconds): every app migrated but traces_app,
# planner_app first (its post-migrate hook reads its tables), traces_app to 0020 without
# 0018, then demo traffic over three days.
SET_UP_AS_BEFORE_0018 = """
from django.core.management import call_command
from django.db.migrations.loader import MigrationLoader
migrated = MigrationLoader(None, ignore_no_migrations=True).migrated_apps - {"traces_app"}
for label in sorted(migrated, key=lambda label: (label != "planner_app", label)):
    call_command("migrate", label, verbosity=0)
call_command("migrate", "traces_app", "0020", verbosity=0)
call_command("ares_demo", "--invocations", "800", "--days", "3", verbosity=0)
"""


@pytest.fixture
def old_site_database() -> Iterator[dict[str, str]]:
    """Yield the environment of a scratch database migrated as before 0018 and filled."""
    settings = connection.settings_dict
    name = f"ares_conversion_{secrets.token_hex(4)}"
    admin = {
        "host": settings["HOST"], "port": settings["PORT"] or 5432,
        "user": settings["USER"], "password": settings["PASSWORD"],
    }  # fmt: skip
    with psycopg.connect(dbname="postgres", autocommit=True, **admin) as server:
        server.execute(f"CREATE DATABASE {name}")
    env = {
        **os.environ,
        "DATABASE_URL": (
            f"postgres://{admin['user']}:{admin['password']}@{admin['host']}:{admin['port']}/{name}"
        ),
        "DJANGO_SETTINGS_MODULE": "ares_site.settings",
        "ARES_PARTITION_IN_MIGRATION_UP_TO": "100",
    }
    try:
        manage(env, "shell", "-c", SET_UP_AS_BEFORE_0018)
        yield env
    finally:
        with psycopg.connect(dbname="postgres", autocommit=True, **admin) as server:
            server.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def manage(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True,
        text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def query(env: dict[str, str], sql: str) -> list[tuple]:
    with psycopg.connect(env["DATABASE_URL"]) as database:
        return database.execute(sql).fetchall()


def test_a_populated_table_is_converted_while_ingest_goes_on_and_a_killed_copy_resumes(
    old_site_database: dict[str, str], tmp_path: Path
):
    env = old_site_database
    assert query(env, "SELECT relkind FROM pg_class WHERE relname = 'traces_app_invocation'") == [
        ("r",)
    ]
    (before,) = query(env, "SELECT count(*) FROM traces_app_invocation")[0]
    assert before > 100
    stop, sent_log = tmp_path / "stop", tmp_path / "sent.jsonl"
    ingest = subprocess.Popen(
        [sys.executable, "-c", INGEST, str(stop), str(sent_log)], cwd=ROOT, env=env
    )
    try:
        assert "copied into daily partitions in batches" in manage(env, "migrate", "traces_app")
        copier = subprocess.Popen(
            [sys.executable, "manage.py", "partition_spans", "--batch", "40"],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        first = copier.stdout.readline()
        assert first.startswith("copied "), first
        copier.send_signal(signal.SIGKILL)
        copier.wait(timeout=30)
        assert "not switched yet" in manage(env, "partition_spans", "--status")
        time.sleep(1)  # ingest goes on between the two runs
        # Resumed by two copiers at once (the periodic job and an operator's command):
        # they take turns on the batches, and one of them switches.
        both = [
            subprocess.Popen(
                [sys.executable, "manage.py", "partition_spans", "--batch", "100"],
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )  # fmt: skip
            for _ in range(2)
        ]
        for copier in both:
            out, err = copier.communicate(timeout=600)
            assert copier.returncode == 0, err[-3000:]
            assert "spans are partitioned by day" in out
        time.sleep(1)  # and after the switch
    finally:
        stop.touch()
        ingest.wait(timeout=60)
    assert ingest.returncode == 0

    rows = [json.loads(line) for line in sent_log.read_text().splitlines() if line]
    accepted = {(trace_id, span_id) for trace_id, span_id, new in rows if new}
    assert len(accepted) == sum(1 for *_, new in rows if new)  # no key accepted twice
    assert any(not new for *_, new in rows)  # duplicates were sent, and refused
    assert query(env, "SELECT relkind FROM pg_class WHERE relname = 'traces_app_invocation'") == [
        ("p",)
    ]
    (total, distinct) = query(
        env, "SELECT count(*), count(DISTINCT (trace_id, span_id)) FROM traces_app_invocation"
    )[0]
    assert total == distinct == before + len(accepted)
    stored = set(query(env, "SELECT trace_id, span_id FROM traces_app_invocation"))
    assert accepted <= stored
    mismatched = query(
        env,
        "SELECT t.trace_id FROM traces_app_trace t LEFT JOIN (SELECT trace_id, count(*) AS n "
        "FROM traces_app_invocation GROUP BY trace_id) s USING (trace_id) "
        "WHERE t.span_count <> coalesce(s.n, 0)",
    )
    assert mismatched == []
    leftovers = query(
        env,
        "SELECT relname FROM pg_class WHERE relname IN ('traces_app_invocation_parted', "
        "'traces_app_span_conversion') OR relname LIKE 'traces_app_invocation_parted_p%'",
    )
    assert leftovers == []
    # New spans still go in, after the switch, through the renamed sequence.
    manage(env, "ares_demo", "--invocations", "20", "--days", "1")
