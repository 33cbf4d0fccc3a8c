"""Two staff saving the same planner rule at the same moment: what each is told, what is kept.

Starts gunicorn (2 sync workers, 127.0.0.1) on a throwaway PostgreSQL database, logs two
staff users in, and for N rounds has both open the 'sum-en' rule's admin form and post it
at once, each adding its own keyword. Then R rounds of a rollback posted at the same moment
as an edit. Prints, for the code in --root (default: this checkout):

- answers: saved (302 to the rules list), refused (the form again, saying who changed
  the rule), 500s, other;
- lost edits: saves that no rule-set version holds exactly;
- wrong-user credits: saves whose version is credited to the other editor;
- versions written, and whether their numbers are unique and consecutive;
- rounds after which the planner's rules (the newest version's snapshot) differ from
  the admin's rows;
- rollback rounds: 500s, and edits sent to a rule id the rollback no longer has.

    .venv/bin/python bench/rule_edits.py --rounds 30 --rollback-rounds 6
    .venv/bin/python bench/rule_edits.py --root /tmp/old-main   # the same on older code

Nothing is timed: the figures are counts.
"""

from __future__ import annotations

import argparse
import os
import re
import secrets
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from figures import postgres_database  # noqa: E402  (bench/ is the script's own folder)

ROOT = Path(__file__).resolve().parents[1]
RULE = "sum-en"
BASE_KEYWORDS = ["sum", "add", "plus", "total"]
PASSWORD = "bench-password-not-secret"
EDITORS = ("alice", "bob")
EDIT_MARK = re.compile(r"r\d+(alice|bob)")  # the keyword each editor adds: r12alice
STALE_MARK = "since you opened this form"  # what the refusal says (see planner_app/admin.py)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30, help="edit rounds (1-500)")
    parser.add_argument("--rollback-rounds", type=int, default=6, help="rollback rounds (0-100)")
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout to serve")
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("BENCH_POSTGRES_URL", "postgres://ares:ares@127.0.0.1:55432/x"),
        help="the PostgreSQL server (its database part is ignored)",
    )
    parser.add_argument("--database-name", default="ares_bench_rule_edits")
    args = parser.parse_args()
    if not 1 <= args.rounds <= 500 or not 0 <= args.rollback_rounds <= 100:
        parser.error("--rounds must be 1-500 and --rollback-rounds 0-100")
    return args


@dataclass
class Figures:
    answers: Counter = field(default_factory=Counter)
    saves: list[tuple[str, list[str]]] = field(default_factory=list)  # (editor, keywords)
    planner_differs: int = 0
    rollback_answers: Counter = field(default_factory=Counter)
    rollback_vanished_rule: int = 0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def manage(root: Path, env: dict[str, str], *args: str) -> str:
    command = [sys.executable, "manage.py", *args]
    return subprocess.run(command, cwd=root, env=env, check=True, capture_output=True,
                          text=True).stdout  # fmt: skip


@contextmanager
def gunicorn(root: Path, env: dict[str, str], log: Path) -> Iterator[str]:
    """Serve `root` with 2 sync workers on 127.0.0.1; yield its base URL."""
    port = free_port()
    gunicorn = str(Path(sys.executable).with_name("gunicorn"))
    command = [gunicorn, "ares_site.wsgi", "--bind", f"127.0.0.1:{port}", "--workers", "2"]
    with log.open("w") as out:
        server = subprocess.Popen(command, cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if server.poll() is not None:
                raise SystemExit(f"gunicorn exited with {server.returncode}; see {log}")
            try:
                httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
                break
            except httpx.HTTPError:
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=30)


def csrf_of(page: str) -> str:
    return re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)


def log_in(base_url: str, username: str) -> httpx.Client:
    client = httpx.Client(base_url=base_url, timeout=60)
    token = csrf_of(client.get("/admin/login/").text)
    form = {"username": username, "password": PASSWORD, "csrfmiddlewaretoken": token}
    if client.post("/admin/login/", data=form).status_code != 302:
        raise SystemExit(f"{username} could not log in")
    return client


def rule_row(db: psycopg.Connection) -> tuple[int, list[str], list[int], int]:
    """Return the rule's id, keywords, capability ids and priority, as the admin's rows hold."""
    rule_id, keywords, priority = db.execute(
        "SELECT id, keywords, priority FROM planner_app_intentrule WHERE name = %s", [RULE]
    ).fetchone()
    capabilities = [row[0] for row in db.execute(
        "SELECT capability_id FROM planner_app_intentrule_capabilities WHERE intentrule_id = %s",
        [rule_id],
    )]  # fmt: skip
    return rule_id, keywords, capabilities, priority


def newest_snapshot_keywords(db: psycopg.Connection) -> list[str] | None:
    row = db.execute(
        "SELECT snapshot FROM planner_app_rulesetversion ORDER BY number DESC LIMIT 1"
    ).fetchone()
    return next((r["keywords"] for r in row[0]["rules"] if r["name"] == RULE), None)


def open_form(client: httpx.Client, rule_id: int) -> dict[str, str]:
    """GET the rule's change form; return the hidden fields a browser would send back."""
    page = client.get(f"/admin/planner_app/intentrule/{rule_id}/change/").text
    hidden = {"csrfmiddlewaretoken": csrf_of(page)}
    marker = re.search(r'name="ruleset_version" value="(\d+)"', page)
    if marker:
        hidden["ruleset_version"] = marker.group(1)
    return hidden


def post_form(
    client: httpx.Client,
    rule_id: int,
    hidden: dict[str, str],
    keywords: list[str],
    capabilities: list[int],
    priority: int,
) -> httpx.Response:
    form = {**hidden, "name": RULE, "keywords": ", ".join(keywords), "patterns": "",
            "language": "any", "capabilities": capabilities, "goal": "sum numbers",
            "priority": priority, "enabled": "on", "_save": "Save"}  # fmt: skip
    return client.post(f"/admin/planner_app/intentrule/{rule_id}/change/", data=form)


def kind_of(response: httpx.Response) -> str:
    if response.status_code == 302:
        location = response.headers.get("location", "")
        return "saved" if location.endswith("/intentrule/") else f"302 to {location}"
    if response.status_code == 200 and STALE_MARK in response.text:
        return "refused"
    return str(response.status_code)


def at_once(*calls: object) -> list[httpx.Response]:
    """Run the calls in threads released together; return their responses in order."""
    barrier = threading.Barrier(len(calls))
    results: list[httpx.Response | None] = [None] * len(calls)

    def run(index: int, call: object) -> None:
        barrier.wait()
        results[index] = call()  # type: ignore[operator]

    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return results  # type: ignore[return-value]


def edit_round(number: int, clients: dict[str, httpx.Client], db: psycopg.Connection,
               figures: Figures) -> None:  # fmt: skip
    rule_id, _, capabilities, priority = rule_row(db)
    forms = {name: open_form(client, rule_id) for name, client in clients.items()}
    wanted = {name: [*BASE_KEYWORDS, f"r{number}{name}"] for name in clients}
    calls = [
        (lambda n=name: post_form(clients[n], rule_id, forms[n], wanted[n], capabilities, priority))
        for name in clients
    ]
    for name, response in zip(clients, at_once(*calls), strict=True):
        kind = kind_of(response)
        figures.answers[kind] += 1
        if kind == "saved":
            figures.saves.append((name, wanted[name]))
    if newest_snapshot_keywords(db) != rule_row(db)[1]:
        figures.planner_differs += 1


def rollback_round(number: int, clients: dict[str, httpx.Client], db: psycopg.Connection,
                   figures: Figures) -> None:  # fmt: skip
    """Roll back to the version before the newest while the other editor saves the rule."""
    roller, editor = clients["alice"], clients["bob"]
    rule_id, _, capabilities, priority = rule_row(db)
    target = db.execute(
        "SELECT id FROM planner_app_rulesetversion ORDER BY number DESC OFFSET 1 LIMIT 1"
    ).fetchone()[0]
    hidden = open_form(editor, rule_id)
    token = csrf_of(roller.get("/admin/planner_app/rulesetversion/").text)
    action = {"action": "roll_back", "_selected_action": target, "confirmed": "yes",
              "csrfmiddlewaretoken": token, "index": "0"}  # fmt: skip
    keywords = [*BASE_KEYWORDS, f"rollback{number}"]
    rolled, edited = at_once(
        lambda: roller.post("/admin/planner_app/rulesetversion/", data=action),
        lambda: post_form(editor, rule_id, hidden, keywords, capabilities, priority),
    )
    figures.rollback_answers[f"rollback {rolled.status_code}"] += 1
    figures.rollback_answers[f"edit {kind_of(edited)}"] += 1
    # An edit form opened before a rollback must still reach its rule afterwards.
    rule_id = rule_row(db)[0]
    hidden = open_form(editor, rule_id)
    roller.post("/admin/planner_app/rulesetversion/", data=action)
    late = post_form(editor, rule_id, hidden, keywords, capabilities, priority)
    if late.status_code == 302 and not late.headers["location"].endswith("/intentrule/"):
        figures.rollback_vanished_rule += 1
    figures.rollback_answers[f"late edit {kind_of(late)}"] += 1


def report(figures: Figures, db: psycopg.Connection, versions_made: tuple[int, int],
           rounds: int) -> None:  # fmt: skip
    first_version, last_version = versions_made
    versions = db.execute(
        "SELECT v.number, u.username, v.snapshot FROM planner_app_rulesetversion v "
        "LEFT JOIN auth_user u ON u.id = v.created_by_id "
        "WHERE v.number > %s AND v.number <= %s ORDER BY v.number",
        versions_made,
    ).fetchall()
    states: set[tuple[str, ...]] = set()
    wrong = 0
    previous = None
    for _, username, snapshot in versions:
        keywords = next((r["keywords"] for r in snapshot["rules"] if r["name"] == RULE), None)
        if keywords is not None and keywords != previous:  # this version made this state
            states.add(tuple(keywords))
            maker = next((m.group(1) for k in keywords if (m := EDIT_MARK.fullmatch(k))), None)
            wrong += maker is not None and maker != username
        previous = keywords
    lost = sum(1 for _, keywords in figures.saves if tuple(keywords) not in states)
    numbers = [number for number, _, _ in versions]
    consecutive = numbers == list(range(first_version + 1, first_version + 1 + len(numbers)))
    print(f"edit rounds: {rounds} (two editors each)")
    print(f"answers: {dict(sorted(figures.answers.items()))}")
    print(f"successful saves: {len(figures.saves)}; in no version: {lost}")
    print(f"versions holding one editor's edit but credited to another user: {wrong}")
    print(f"versions written: {len(numbers)}; numbers unique and consecutive: {consecutive}")
    print(f"rounds after which the planner's rules differ from the admin's: "
          f"{figures.planner_differs}")  # fmt: skip
    if figures.rollback_answers:
        print(f"rollback rounds: {dict(sorted(figures.rollback_answers.items()))}; "
              f"edit forms whose rule id vanished: {figures.rollback_vanished_rule}")  # fmt: skip


def main() -> None:
    args = parse_args()
    with postgres_database(args.postgres_url, args.database_name) as url:
        if url is None:
            return
        with tempfile.TemporaryDirectory() as var:
            env = {**os.environ, "DATABASE_URL": url, "SECRET_KEY": secrets.token_urlsafe(32),
                   "DEBUG": "0", "ARES_VAR_DIR": var, "LOG_LEVEL": "WARNING"}  # fmt: skip
            env.pop("CELERY_BROKER_URL", None)
            manage(args.root, env, "migrate", "--noinput")
            users = "; ".join(
                f"U.objects.create_superuser('{name}', '', '{PASSWORD}')" for name in EDITORS
            )
            manage(args.root, env, "shell", "-c",
                   f"from django.contrib.auth.models import User as U; {users}")  # fmt: skip
            run(args, url, env, Path(var) / "gunicorn.log")


def run(args: argparse.Namespace, url: str, env: dict[str, str], log: Path) -> None:
    figures = Figures()
    with psycopg.connect(url.replace("postgres://", "postgresql://"), autocommit=True) as db:
        first_version = newest_version(db)
        with gunicorn(args.root, env, log) as base_url:
            clients = {name: log_in(base_url, name) for name in EDITORS}
            for number in range(args.rounds):
                edit_round(number, clients, db, figures)
            last_version = newest_version(db)
            for number in range(args.rollback_rounds):
                rollback_round(number, clients, db, figures)
        print(f"code: {args.root} ({git_head(args.root)}), PostgreSQL, gunicorn 2 sync workers")
        report(figures, db, (first_version, last_version), args.rounds)


def newest_version(db: psycopg.Connection) -> int:
    row = db.execute("SELECT COALESCE(MAX(number), 0) FROM planner_app_rulesetversion")
    return row.fetchone()[0]


def git_head(root: Path) -> str:
    result = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root,
                            capture_output=True, text=True)  # fmt: skip
    return result.stdout.strip() or "?"


if __name__ == "__main__":
    main()
