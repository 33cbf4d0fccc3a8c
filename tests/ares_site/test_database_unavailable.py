"""With the database unreachable, every staff page answers 503, Retry-After and a plain page.

The servers are the production one (gunicorn) in their own process: one whose database
was never reachable, and one whose database goes away after a staff member logged in.
"""

from __future__ import annotations

import contextlib
import re
import socket
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.conf import settings
from django.contrib.auth import get_user_model

from tests.conftest import subprocess_env
from tests.traces_app import test_unavailable_db
from tests.traces_app.test_unavailable_db import gunicorn_client

down = test_unavailable_db.down  # the fixture: gunicorn with a database out of reach

PAGES = [
    "/",
    "/traces/",
    f"/traces/{'a' * 32}/",
    "/spirals/",
    "/spirals/1/",
    "/tools/",
    "/tools/calculator/",
    "/evidence/",
    "/evidence/Arithmetic/",
    "/planner/try",
    "/planner/backtest",
    "/planner/versions/1/",
    "/sandbox/",
    "/admin/",
    "/admin/traces_app/invocation/",
    "/admin/login/",
]
PASSWORD = "pw-for-tests-1"


def unavailable(response: httpx.Response) -> tuple[int, str | None, str, bool]:
    """Return what a 503 page shows: status, Retry-After, content type, the sentence."""
    return (
        response.status_code,
        response.headers.get("Retry-After"),
        response.headers["Content-Type"].split(";")[0],
        "cannot reach its database" in response.text,
    )


UNAVAILABLE = (503, "5", "text/html", True)


def get_with_session(client: httpx.Client, path: str) -> httpx.Response:
    """GET `path` with a session cookie the server has to look up."""
    return httpx.get(client.base_url.join(path), cookies={"sessionid": "x" * 32})


@pytest.mark.parametrize("path", PAGES)
def test_it_answers_503_with_a_plain_page_to_a_visitor(down, path):
    response = down.get(path, follow_redirects=False)

    assert unavailable(response) == UNAVAILABLE
    assert "<link" not in response.text and "<script" not in response.text  # self-contained


def test_it_answers_503_to_a_login_attempt(down):
    response = down.post("/admin/login/", data={"username": "a", "password": "b"})

    assert unavailable(response) == UNAVAILABLE


def test_it_answers_503_to_a_session_it_cannot_look_up(down):
    response = get_with_session(down, "/traces/")

    assert unavailable(response) == UNAVAILABLE


def test_it_keeps_the_apis_json_answer(down):
    response = get_with_session(down, "/api/v1/traces")

    assert response.status_code == 503
    assert response.json() == {"detail": "database unavailable; nothing was stored, retry later"}


class TcpProxy:
    """Forward a loopback port to the database server until closed; then refuse it."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            upstream = socket.create_connection(self.target)
            self.sockets += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass

    def close(self) -> None:
        """Cut every open connection and stop listening: the database is gone."""
        for sock in [self.listener, *self.sockets]:
            with contextlib.suppress(OSError):  # already closed by the other side
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


@pytest.fixture
def server_losing_its_database(
    transactional_db: None, tmp_path: Path
) -> Iterator[tuple[httpx.Client, Any]]:
    """Yield a client logged in as staff to gunicorn, and a function that takes its database away.

    PostgreSQL: the server reaches the test database through a proxy, closed to take it
    away. SQLite: the server opens (per request) a copy of the test database whose
    directory is renamed to take it away.
    """
    get_user_model().objects.create_user("operator", password=PASSWORD, is_staff=True)
    database = settings.DATABASES["default"]
    if database["ENGINE"].endswith("sqlite3"):
        folder = tmp_path / "db"
        folder.mkdir()
        with sqlite3.connect(database["NAME"]) as source, sqlite3.connect(folder / "a.db") as copy:
            source.backup(copy)
        env = subprocess_env(DATABASE_URL=f"sqlite:///{folder / 'a.db'}", DATABASE_CONN_MAX_AGE="0")

        def take_away() -> None:
            folder.rename(tmp_path / "gone")

        proxy = None
    else:
        proxy = TcpProxy((database["HOST"], int(database["PORT"])))
        url = f"postgres://{database['USER']}:{database['PASSWORD']}@127.0.0.1:{proxy.port}/"
        env = subprocess_env(DATABASE_URL=url + database["NAME"], DATABASE_CONNECT_TIMEOUT="2")
        take_away = proxy.close
    try:
        with gunicorn_client(env, tmp_path / "gunicorn.log") as client:
            form = client.get("/admin/login/").text
            token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form).group(1)
            data = {"username": "operator", "password": PASSWORD, "csrfmiddlewaretoken": token}
            client.post("/admin/login/", data=data)
            yield client, take_away
    finally:
        if proxy is not None:
            proxy.close()


def test_it_answers_503_to_staff_once_the_database_goes_away(server_losing_its_database):
    client, take_away = server_losing_its_database
    assert client.get("/traces/").status_code == 200  # logged in, database up

    take_away()
    answers = {path: unavailable(client.get(path, follow_redirects=False)) for path in PAGES}

    assert answers == dict.fromkeys(PAGES, UNAVAILABLE)


@pytest.fixture
def server_without_tables(tmp_path: Path) -> Iterator[httpx.Client]:
    """A gunicorn server on an SQLite file it can open but that holds no table."""
    env = subprocess_env(DATABASE_URL=f"sqlite:///{tmp_path / 'empty.sqlite3'}")
    with gunicorn_client(env, tmp_path / "gunicorn.log") as client:
        yield client


def test_it_answers_503_when_the_session_lookup_fails_in_the_page(server_without_tables):
    # The connection opens, so the error comes from the session the page's login check
    # reads ("no such table"), which Django's session and auth middleware defer to the view.
    response = get_with_session(server_without_tables, "/traces/")

    assert unavailable(response) == UNAVAILABLE
