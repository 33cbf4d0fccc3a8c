"""Periodic work on the default setup: the real beat, no broker, beside a live server.

The scheduler is the process `make run` starts (`celery -A ares_site beat`), with short
intervals set by its environment; the web server is pytest-django's live server, sharing
the test database with it.
"""

from __future__ import annotations

import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import ROOT, make_span, subprocess_env
from tests.traces_app.test_unavailable_db import free_port
from traces_app.models import Invocation, JobLease, Score, ScoreDefinition, Trace

pytestmark = pytest.mark.django_db(transaction=True)

SHORT_INTERVALS = {
    "ARES_ROLLUP_BEAT_S": "1",
    "ARES_SETTLE_SCORES_EVERY_S": "1",
    "ARES_RESCAN_SPIRALS_EVERY_S": "1",
    "ARES_PURGE_EVERY_S": "1",
}


@contextmanager
def beat_process(log_path: Path, **env: str) -> Iterator[subprocess.Popen]:
    """Run the scheduler `make run` starts, on the test database, until the block ends."""
    with log_path.open("w") as log:
        beat = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "ares_site", "beat", "--loglevel=INFO"],
            cwd=ROOT, env=subprocess_env(**SHORT_INTERVALS, **env), stdout=log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            yield beat
        finally:
            stop(beat)


def worker_process(log_path: Path, env: dict[str, str], *options: str) -> subprocess.Popen:
    """Start a Celery worker of the site (one process, solo pool) logging to log_path."""
    command = [sys.executable, "-m", "celery", "-A", "ares_site", "worker", "--pool=solo",
               "--without-gossip", "--without-mingle", "--without-heartbeat", "--loglevel=INFO",
               *options]  # fmt: skip
    with log_path.open("w") as log:
        return subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)


def stop(process: subprocess.Popen) -> None:
    """Stop a process as a supervisor would: SIGTERM, then SIGKILL if it is still there."""
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        print(f"process {process.pid} outlived SIGTERM by 30 s: killed")
        process.kill()
        process.wait(timeout=30)


def wait_for(condition: Callable[[], bool], log_path: Path, seconds: float = 60) -> None:
    """Wait until condition() holds; fail with the scheduler's log if it never does."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(
                f"not done in {seconds} s; the scheduler said:\n{log_path.read_text()[-3000:]}"
            )
        time.sleep(0.2)


@pytest.fixture
def scores_api(live_server: Any, make_key: Callable[..., str]) -> Iterator[httpx.Client]:
    """An HTTP client holding a key that may report spans and send scores."""
    ScoreDefinition.objects.get_or_create(name="result_correct", defaults={"data_type": "boolean"})
    headers = {"Authorization": f"Bearer {make_key('report', 'score', 'read')}"}
    with httpx.Client(base_url=f"{live_server.url}/api/v1", headers=headers, timeout=30) as client:
        yield client


def test_it_joins_a_score_sent_before_its_span_with_no_request_doing_it(
    scores_api: httpx.Client, tmp_path: Path
) -> None:
    span = make_span()
    sent = {"name": "result_correct", "value": True, "trace_id": span["trace_id"],
            "span_id": span["span_id"]}  # fmt: skip
    [item] = scores_api.post("/scores", json={"scores": [sent]}).json()["items"]
    assert item["pending"] is True
    assert scores_api.post("/invocations", json={"invocations": [span]}).status_code == 200

    log = tmp_path / "beat.log"
    with beat_process(log):
        wait_for(lambda: not Score.objects.get(pk=item["id"]).pending, log)

    [shown] = scores_api.get("/scores", params={"trace_id": span["trace_id"]}).json()
    assert shown["pending"] is False


def _spans_of_trace(started: datetime, count: int = 2) -> list[dict[str, Any]]:
    trace_id = secrets.token_hex(16)
    return [
        make_span(trace_id=trace_id, started_at=(started + timedelta(seconds=i)).isoformat())
        for i in range(count)
    ]


def test_it_purges_spans_and_traces_past_the_retention(
    scores_api: httpx.Client, tmp_path: Path
) -> None:
    old = _spans_of_trace(datetime.now(UTC) - timedelta(days=3))
    recent = _spans_of_trace(datetime.now(UTC) - timedelta(hours=1))
    response = scores_api.post("/invocations", json={"invocations": old + recent})
    assert response.json()["accepted"] == 4

    log = tmp_path / "beat.log"
    with beat_process(log, ARES_RETENTION_DAYS="2"):
        wait_for(lambda: not Trace.objects.filter(pk=old[0]["trace_id"]).exists(), log)

    assert not Invocation.objects.filter(trace_id=old[0]["trace_id"]).exists()
    assert Invocation.objects.filter(trace_id=recent[0]["trace_id"]).count() == 2
    assert scores_api.get(f"/traces/{old[0]['trace_id']}").status_code == 404
    assert scores_api.get(f"/traces/{recent[0]['trace_id']}").status_code == 200


RAN = re.compile(r"periodic job (\S+) ran for the period from (\S+):")
SENT = re.compile(r"Sending due task (\S+) ")


def test_two_beats_run_each_job_once_per_period(tmp_path: Path) -> None:
    logs = [tmp_path / "beat-1.log", tmp_path / "beat-2.log"]

    def runs() -> list[tuple[str, str]]:
        return [hit for log in logs for hit in RAN.findall(log.read_text())]

    with beat_process(logs[0]), beat_process(logs[1]):
        wait_for(lambda: sum(job == "settle-pending-scores" for job, _ in runs()) >= 8, logs[0])

    ran = runs()
    assert len(ran) == len(set(ran)), "a job ran twice in one period"
    assert {job for job, _ in ran} >= {"settle-pending-scores", "recount-marked-rollups"}
    sent = [SENT.findall(log.read_text()) for log in logs]
    assert all(sent), "both beats asked for the jobs"
    assert sum(map(len, sent)) > len(ran)  # the periods one beat had taken were refused


RACER = """
import sys
from traces_app.models import JobLease
taken = [job for job in sys.argv[1:] if JobLease.objects.take(job, 3600, "racer")]
print(" ".join(taken))
"""


def test_of_two_processes_taking_the_same_leases_exactly_one_gets_each() -> None:
    jobs = [f"race-{n}" for n in range(200)]
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", "import django; django.setup()\n" + RACER, *jobs],
            cwd=ROOT,
            env=subprocess_env(DJANGO_SETTINGS_MODULE="ares_site.settings"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for _ in range(2)
    ]
    taken = []
    for racer in racers:
        out, err = racer.communicate(timeout=120)
        assert racer.returncode == 0, err
        taken.append(set(out.split()))
    assert not taken[0] & taken[1]
    assert taken[0] | taken[1] == set(jobs)


HOLDER_KILLED = """
import os, time
from traces_app.models import JobLease
assert JobLease.objects.take("killed-holder", 2, "doomed")
print("taken", flush=True)
time.sleep(600)
"""


def test_a_lease_whose_holder_was_killed_is_taken_again_after_its_expiry() -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", "import django; django.setup()\n" + HOLDER_KILLED],
        cwd=ROOT, env=subprocess_env(DJANGO_SETTINGS_MODULE="ares_site.settings"),
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert holder.stdout.readline().strip() == "taken"
    holder.kill()  # kill -9: it never releases the lease
    holder.wait(timeout=30)
    lease = JobLease.objects.get(job="killed-holder")
    assert lease.holder == "doomed"

    taken = None
    while taken is None:  # refused until the dead holder's lease expires, then taken
        if JobLease.objects.take("killed-holder", 2, "heir") is None:
            assert JobLease.objects.get(job="killed-holder").holder == "doomed"
            time.sleep(0.2)
        else:
            taken = JobLease.objects.get(job="killed-holder")
    assert taken.holder == "heir"
    assert taken.taken_at >= lease.expires_at


@pytest.mark.redis
def test_with_a_broker_the_beat_sends_the_jobs_to_a_worker(
    scores_api: httpx.Client, tmp_path: Path
) -> None:
    broker = os.environ.get("CELERY_TEST_BROKER_URL")
    if not broker:
        pytest.skip("set CELERY_TEST_BROKER_URL=redis://... to run against a real broker")
    span = make_span()
    sent = {"name": "result_correct", "value": True, "trace_id": span["trace_id"],
            "span_id": span["span_id"]}  # fmt: skip
    [item] = scores_api.post("/scores", json={"scores": [sent]}).json()["items"]
    assert scores_api.post("/invocations", json={"invocations": [span]}).status_code == 200

    beat_log, worker_log = tmp_path / "beat.log", tmp_path / "worker.log"
    worker = worker_process(worker_log, subprocess_env(CELERY_BROKER_URL=broker, **SHORT_INTERVALS))
    try:
        with beat_process(beat_log, CELERY_BROKER_URL=broker):
            wait_for(lambda: not Score.objects.get(pk=item["id"]).pending, worker_log)
    finally:
        stop(worker)

    assert RAN.search(worker_log.read_text())  # the worker ran the jobs,
    assert not RAN.search(beat_log.read_text())  # the beat only sent them


def _beats_of_session(session: int) -> list[int]:
    """Return the live beat processes started in a session (by `make run`)."""
    return [pid for pid, cmdline in _session_processes(session) if "ares_site beat" in cmdline]


def _session_processes(session: int) -> list[tuple[int, str]]:
    """Return the live processes of a session: pid and command line."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            stat = (proc / "stat").read_text().rsplit(")", 1)[1].split()
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError):
            continue
        if int(stat[3]) == session and stat[0] != "Z":
            found.append((int(proc.name), cmdline.strip()))
    return found


def _ctrl_c_as_in_a_terminal() -> None:
    """Let Ctrl-C stop make and what it starts, as in a terminal.

    A shell starts background jobs with SIGINT ignored, and an ignored signal stays
    ignored across exec: under a CI script that runs the test suite in the background,
    runserver would never see the Ctrl-C this test sends.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@contextmanager
def make_run(port: int, log_path: Path, var_dir: Path) -> Iterator[subprocess.Popen]:
    """Run `make run` (its install step taken as done) on the test database, in its own session."""
    env = subprocess_env(**SHORT_INTERVALS, ARES_VAR_DIR=str(var_dir))
    with log_path.open("w") as log:
        make = subprocess.Popen(
            ["make", "-o", ".venv/.installed", "run", f"PORT={port}"],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=_ctrl_c_as_in_a_terminal,
        )  # fmt: skip
        try:
            yield make
        finally:
            if make.poll() is None:
                os.killpg(make.pid, signal.SIGKILL)
                make.wait(timeout=30)


def test_make_run_starts_the_beat_and_ctrl_c_stops_it(
    make_key: Callable[..., str], tmp_path: Path
) -> None:
    ScoreDefinition.objects.get_or_create(name="result_correct", defaults={"data_type": "boolean"})
    port, log = free_port(), tmp_path / "make-run.log"
    headers = {"Authorization": f"Bearer {make_key('report', 'score')}"}
    site = httpx.Client(base_url=f"http://127.0.0.1:{port}/api/v1", headers=headers, timeout=30)
    span = make_span()
    sent = {"name": "result_correct", "value": True, "trace_id": span["trace_id"],
            "span_id": span["span_id"]}  # fmt: skip
    with make_run(port, log, tmp_path) as make, site:
        wait_for(lambda: _serves(site), log, seconds=180)
        assert _beats_of_session(make.pid)
        [item] = site.post("/scores", json={"scores": [sent]}).json()["items"]
        assert item["pending"] is True
        assert site.post("/invocations", json={"invocations": [span]}).status_code == 200
        wait_for(lambda: not Score.objects.get(pk=item["id"]).pending, log)

        os.killpg(make.pid, signal.SIGINT)  # what Ctrl-C in its terminal sends
        try:  # a loaded CI machine (two test runs side by side) can take a while
            make.wait(timeout=180)
        except subprocess.TimeoutExpired:
            pytest.fail(
                f"make run still running 180 s after Ctrl-C: {_session_processes(make.pid)}; "
                f"its log ends:\n{log.read_text()[-3000:]}"
            )
        assert not _beats_of_session(make.pid)


def test_the_beat_stops_when_the_server_of_make_run_stops(tmp_path: Path) -> None:
    with socket.socket() as taken:  # runserver cannot bind: it stops at once
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        log = tmp_path / "make-run.log"
        with make_run(taken.getsockname()[1], log, tmp_path) as make:
            make.wait(timeout=180)
            assert "already in use" in log.read_text()
            wait_for(lambda: not _beats_of_session(make.pid), log, seconds=30)


def _serves(client: httpx.Client) -> bool:
    try:
        return client.get(client.base_url.join("/healthz")).status_code == 200
    except httpx.TransportError:
        return False
