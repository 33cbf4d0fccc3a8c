"""With the database down, the API answers 503 with Retry-After, as JSON, never a 500.

The server is the production one (gunicorn) in its own process, pointed at a database
that cannot be reached: nothing in the test process shares its settings or connections.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
GUNICORN = Path(sys.executable).with_name("gunicorn")
RAW_KEY = "ares_" + "k" * 43  # never checked: the key table is out of reach too


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_until_serving(client: httpx.Client, server: subprocess.Popen) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"gunicorn exited with {server.returncode}")
        try:
            client.get("/healthz")
            return
        except httpx.TransportError:
            time.sleep(0.2)
    raise RuntimeError("gunicorn did not start serving within 60 s")


@pytest.fixture(
    scope="module",
    params=[
        pytest.param("postgres://x:y@127.0.0.1:1/none", id="PostgreSQL on a closed port"),
        pytest.param("sqlite:////nonexistent-dir/ares.sqlite3", id="SQLite file out of reach"),
    ],
)
def down(request, tmp_path_factory) -> Iterator[httpx.Client]:
    """A client for a gunicorn server whose database cannot be reached."""
    env = {
        **os.environ,
        "DATABASE_URL": request.param,
        "SECRET_KEY": "tests-only",
        "DEBUG": "0",
        "ARES_VAR_DIR": str(tmp_path_factory.mktemp("var")),
    }
    with gunicorn_client(env, tmp_path_factory.mktemp("log") / "gunicorn.log") as client:
        yield client


@contextmanager
def gunicorn_client(
    env: dict[str, str], log_path: Path, workers: int = 1, config: Path | None = None
) -> Iterator[httpx.Client]:
    """Start gunicorn with `env`; yield a client once it serves.

    Without `config`, `workers` sync workers; with it, what that config file says.
    """
    port = free_port()
    server_args = ["--config", str(config)] if config else [
        "--workers", str(workers), "--worker-class", "sync"
    ]  # fmt: skip
    with log_path.open("w") as log:
        server = subprocess.Popen(
            [str(GUNICORN), "ares_site.wsgi", "--bind", f"127.0.0.1:{port}", *server_args],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
                wait_until_serving(client, server)
                yield client
        finally:
            server.terminate()
            server.wait(timeout=30)


def assert_unavailable(response: httpx.Response) -> None:
    assert response.status_code == 503
    assert response.headers["Content-Type"].startswith("application/json")
    assert response.headers["Retry-After"] == "5"
    assert response.json() == {"detail": "database unavailable; nothing was stored, retry later"}


def test_it_answers_503_to_a_report(down, span):
    response = down.post(
        "/api/v1/invocations",
        json={"invocations": [span()]},
        headers={"Authorization": f"Bearer {RAW_KEY}"},
    )

    assert_unavailable(response)


@pytest.mark.parametrize("path", ["/api/v1/traces", "/api/v1/invocations", "/api/v1/tools/stats"])
def test_it_answers_503_to_a_read(down, path):
    response = down.get(path, headers={"Authorization": f"Bearer {RAW_KEY}"})

    assert_unavailable(response)


def test_it_answers_503_to_a_session_it_cannot_look_up(down):
    response = httpx.get(down.base_url.join("/api/v1/traces"), cookies={"sessionid": "x" * 32})

    assert_unavailable(response)


def test_it_answers_503_before_reading_a_bad_body(down):
    response = down.post(
        "/api/v1/invocations",
        content=b"{not json",
        headers={"Authorization": f"Bearer {RAW_KEY}", "Content-Type": "application/json"},
    )

    assert_unavailable(response)


def test_it_still_asks_for_credentials_without_the_database(down, span):
    response = down.post("/api/v1/invocations", json={"invocations": [span()]})

    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"] == 'Bearer realm="ares"'
