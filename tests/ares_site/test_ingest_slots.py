"""Ingest takes turns (ares_site/ingest_slots.py) and reads pass it, on the production server.

The slots are file locks: the tests hold one themselves and watch /proc/locks for the
waiter (a blocked flock on the slot's file), so nothing depends on how long anything takes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from ares_site.ingest_slots import READ_QUIET_S, IngestSlots
from tests.conftest import subprocess_env
from tests.traces_app.test_unavailable_db import ROOT, gunicorn_client
from traces_app.models import Invocation

# The production-server tests run gunicorn on the run's database.
pytestmark = pytest.mark.each_database

CONFIG = ROOT / "ares_site" / "gunicorn.conf.py"


def wait_for_waiter(path: Path, timeout: float = 60) -> None:
    """Return once some process or thread is blocked on the flock of `path`."""
    inode = f":{path.stat().st_ino} "
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        locks = Path("/proc/locks").read_text().splitlines()
        if any("->" in line and "FLOCK" in line and inode in line for line in locks):
            return
        time.sleep(0.02)
    raise AssertionError(f"nothing waited for {path} within {timeout:.0f} s")


def enter_in_thread(slots: IngestSlots) -> tuple[threading.Thread, threading.Event]:
    """Start a thread that takes a slot, sets the event and lets go."""
    entered = threading.Event()

    def enter() -> None:
        with slots.held():
            entered.set()

    thread = threading.Thread(target=enter, daemon=True)
    thread.start()
    return thread, entered


def test_it_makes_a_second_holder_wait_until_the_first_lets_go(tmp_path):
    slots = IngestSlots(tmp_path, 1)

    with slots.held():
        thread, entered = enter_in_thread(slots)
        wait_for_waiter(slots.paths[0])
        assert not entered.is_set()

    thread.join(timeout=30)
    assert entered.is_set()


def quiet(slots: IngestSlots) -> IngestSlots:
    """Date the last read back past READ_QUIET_S, as if nobody had read for a while."""
    long_ago = time.time() - 10 * READ_QUIET_S
    os.utime(slots.reads_path, (long_ago, long_ago))
    return slots


def test_it_lets_two_in_at_once_with_two_slots_while_nobody_reads(tmp_path):
    slots = quiet(IngestSlots(tmp_path, 2))

    with slots.held():
        thread, entered = enter_in_thread(slots)
        thread.join(timeout=30)
        assert entered.is_set()


def test_it_keeps_the_last_slot_for_a_read_in_flight(tmp_path):
    slots = quiet(IngestSlots(tmp_path, 2))

    with slots.reading(), slots.held():
        thread, entered = enter_in_thread(slots)
        wait_for_waiter(slots.paths[0])
        assert not entered.is_set()

    thread.join(timeout=30)
    assert entered.is_set()


def test_it_keeps_the_last_slot_for_readers_just_after_a_read(tmp_path):
    slots = quiet(IngestSlots(tmp_path, 2))
    with slots.reading():
        pass

    assert not slots.reads_are_quiet()
    assert quiet(slots).reads_are_quiet()


def test_it_never_keeps_the_only_slot_from_ingest(tmp_path):
    slots = IngestSlots(tmp_path, 1)

    with slots.reading():
        thread, entered = enter_in_thread(slots)
        thread.join(timeout=30)
        assert entered.is_set()


def test_it_frees_the_slot_of_a_holder_killed_with_sigkill(tmp_path):
    slots = IngestSlots(tmp_path, 1)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_SLOT, str(slots.paths[0])], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline() == "held\n"
        thread, entered = enter_in_thread(slots)
        wait_for_waiter(slots.paths[0])
        assert not entered.is_set()
        os.kill(holder.pid, signal.SIGKILL)
        thread.join(timeout=30)
        assert entered.is_set()
    finally:
        holder.kill()
        holder.wait()


HOLD_SLOT = """
import fcntl, os, sys, time
descriptor = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.flock(descriptor, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(600)
"""


@contextmanager
def production_server(var_dir: Path, slots: int = 1) -> Iterator[httpx.Client]:
    """Run gunicorn with ares_site/gunicorn.conf.py, one worker and `slots` ingest slots."""
    env = subprocess_env(
        ARES_VAR_DIR=str(var_dir), GUNICORN_WORKERS="1", ARES_INGEST_CONCURRENCY=str(slots)
    )
    with gunicorn_client(env, var_dir / "gunicorn.log", config=CONFIG) as client:
        yield client


def post_in_thread(client: httpx.Client, body: dict) -> tuple[threading.Thread, list]:
    """POST a span batch from a thread; its response lands in the list."""
    answers: list[httpx.Response] = []
    thread = threading.Thread(
        target=lambda: answers.append(client.post("/api/v1/invocations", json=body)), daemon=True
    )
    thread.start()
    return thread, answers


@pytest.mark.django_db(transaction=True)
def test_a_read_goes_through_while_an_ingest_request_waits_for_its_turn(tmp_path, make_key, span):
    body = {"invocations": [span(), span()]}
    headers = {"Authorization": f"Bearer {make_key('report', 'read')}"}
    slots = IngestSlots(tmp_path / "ingest-slots", 1)  # the server's own slot files
    with production_server(tmp_path) as client:
        client.headers.update(headers)
        with slots.held():
            ingest, answers = post_in_thread(client, body)
            wait_for_waiter(slots.paths[0])  # the server's ingest request waits for the slot

            traces = client.get("/api/v1/traces")
            spans = client.get("/api/v1/invocations")  # a GET on an ingest path: a read
            assert (traces.status_code, spans.status_code) == (200, 200)
            assert spans.json()["items"] == []
            assert not answers and Invocation.objects.count() == 0

        ingest.join(timeout=60)
        again = client.post("/api/v1/invocations", json=body)

    assert answers[0].status_code == 200
    assert [item["status"] for item in answers[0].json()["items"]] == ["accepted", "accepted"]
    assert [item["status"] for item in again.json()["items"]] == ["duplicate", "duplicate"]
    assert Invocation.objects.count() == 2


@pytest.mark.django_db(transaction=True)
def test_ingest_takes_the_readers_slot_only_while_nobody_reads(tmp_path, make_key, span):
    headers = {"Authorization": f"Bearer {make_key('report', 'read')}"}
    slots = IngestSlots(tmp_path / "ingest-slots", 2)
    with production_server(tmp_path, slots=2) as client:
        client.headers.update(headers)
        with slots.held(), slots.reading():  # slot 0 taken, and a read in flight
            waiting, answers = post_in_thread(client, {"invocations": [span()]})
            wait_for_waiter(slots.paths[0])
            assert not answers
        waiting.join(timeout=60)
        with quiet(slots).held():  # slot 0 taken again, nobody reading now
            alone = client.post("/api/v1/invocations", json={"invocations": [span()]})

    assert answers[0].json()["accepted"] == 1
    assert alone.json()["accepted"] == 1
    assert Invocation.objects.count() == 2


@pytest.mark.parametrize("value", ["-1", "two"])
def test_it_refuses_a_bad_concurrency_setting(tmp_path, value):
    env = {**subprocess_env(ARES_VAR_DIR=str(tmp_path)), "ARES_INGEST_CONCURRENCY": value}
    done = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True
    )

    assert done.returncode != 0
    assert "ARES_INGEST_CONCURRENCY" in done.stderr
