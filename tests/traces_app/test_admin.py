"""The traces admin: its filters name every choice."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import make_span
from traces_app.schemas import InvocationIn
from traces_app.services import record_invocations

pytestmark = pytest.mark.django_db


def test_it_names_the_empty_error_kind_in_the_filter(admin_client: Any) -> None:
    spans = [make_span(), make_span(status="error", error_kind="timeout")]
    record_invocations([InvocationIn.model_validate(span) for span in spans])
    page = admin_client.get("/admin/traces_app/invocation/").content.decode()
    assert '<a href="?error_kind=">(no error)</a>' in page
    assert '<a href="?error_kind=timeout">timeout</a>' in page
    assert '<a href="?error_kind="></a>' not in page
