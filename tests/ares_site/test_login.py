"""Logging in and out of the console: its own pages, never the admin's "Logged out"."""

from __future__ import annotations

import re
from typing import Any

from django.test import Client

PASSWORD = "pw-for-tests-1"


def staff(django_user_model: Any, username: str = "operator", **fields: Any) -> Any:
    return django_user_model.objects.create_user(
        username, password=PASSWORD, is_staff=fields.pop("is_staff", True), **fields
    )


def test_the_console_logs_out_to_its_own_login_page_with_a_message(
    client: Client, django_user_model: Any
) -> None:
    client.force_login(staff(django_user_model))
    page = client.get("/").content.decode()
    assert re.search(r'<form method="post" action="/logout/"[^>]*>.*Log out operator', page)

    response = client.post("/logout/", follow=True)

    assert response.redirect_chain == [("/login/", 302)]
    page = response.content.decode()
    assert '<p class="notice" role="status" id="login-message">operator is logged out.</p>' in page
    assert "<title>Log in · ARES Console</title>" in page and "Logged out" not in page
    assert client.get("/").status_code == 302  # the session is gone


def test_logging_out_takes_a_post(client: Client, django_user_model: Any) -> None:
    client.force_login(staff(django_user_model))
    assert client.get("/logout/").status_code == 405
    assert client.get("/").status_code == 200  # still logged in


def test_the_console_login_page_logs_staff_in_and_goes_on(
    client: Client, django_user_model: Any
) -> None:
    staff(django_user_model)
    response = client.post("/login/", {"username": "operator", "password": PASSWORD})
    assert response.status_code == 302 and response["Location"] == "/"

    client.post("/logout/")
    response = client.post(
        "/login/", {"username": "operator", "password": PASSWORD, "next": "/traces/"}
    )
    assert response["Location"] == "/traces/"


def test_the_console_login_page_turns_away_who_is_not_staff(
    client: Client, django_user_model: Any
) -> None:
    staff(django_user_model, "visitor", is_staff=False)
    response = client.post("/login/", {"username": "visitor", "password": PASSWORD})
    assert response.status_code == 200
    assert "staff account" in response.content.decode()
    assert client.get("/").status_code == 302
