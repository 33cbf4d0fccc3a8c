"""The process's tool registry and engine: built-in tools, operator settings, recording.

This is where the Django-free core meets the database. Operator settings are re-read
when they change (checked at most every ARES_TOOL_SETTINGS_CHECK_S seconds), so an
admin edit reaches every web and Celery process without a restart and without a query
per call.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from typing import Any

from django.conf import settings
from django.db import close_old_connections
from pydantic import ValidationError

from tools_app.builtins import (
    calculator,
    datetime_tool,
    hash_tool,
    http_request,
    json_tools,
    string_utils,
    web_search,
)
from tools_app.engine import ToolEngine
from tools_app.models import ToolSetting
from tools_app.registry import ToolRegistry
from tools_app.specs import ToolSpec
from traces_app.schemas import InvocationIn
from traces_app.services import record_invocations

logger = logging.getLogger(__name__)

_lock = threading.Lock()
_engine: ToolEngine | None = None
_settings_version: tuple[int, str] | None = None
_settings_checked_at = 0.0


def builtin_specs() -> list[ToolSpec]:
    """Return the contracts of the built-in tools, configured from settings."""
    return [
        calculator.SPEC,
        hash_tool.SPEC,
        string_utils.SPEC,
        datetime_tool.SPEC,
        json_tools.SPEC,
        http_request.make_spec(
            settings.ARES_HTTP_ALLOWED_HOSTS, settings.ARES_HTTP_ALLOWED_NETWORKS
        ),
        web_search.make_spec(settings.ARES_SEARXNG_URL or None),
    ]


def base_specs() -> dict[str, ToolSpec]:
    """Return every known tool as registered, before operator settings, by name."""
    return {spec.name: spec for spec in builtin_specs()}


def get_engine() -> ToolEngine:
    """Return this process's engine, with operator settings no older than a few seconds."""
    global _engine
    with _lock:
        if _engine is None:
            _engine = ToolEngine(
                ToolRegistry(builtin_specs()),
                recorder=record_spans,
                default_timeout_s=settings.ARES_TOOL_TIMEOUT_S,
                max_parallel=settings.ARES_TOOL_MAX_PARALLEL,
                backoff_base_s=settings.ARES_TOOL_BACKOFF_S,
            )
    refresh_tool_settings()
    return _engine


def refresh_tool_settings(force: bool = False) -> None:
    """Apply the admin's tool settings to the registry if they changed since last look."""
    global _settings_version, _settings_checked_at
    now = time.monotonic()
    if not force and now - _settings_checked_at < settings.ARES_TOOL_SETTINGS_CHECK_S:
        return
    _settings_checked_at = now
    version = ToolSetting.objects.version()
    if version == _settings_version or _engine is None:
        return
    overrides = {row.name: row for row in ToolSetting.objects.all()}
    registry = _engine.registry
    for name, base in base_specs().items():
        row = overrides.get(name)
        if row is not None:
            base = dataclasses.replace(
                base,
                enabled=row.enabled,
                timeout_s=row.timeout_s or base.timeout_s,
                description=row.description or base.description,
            )
        registry.replace(base)
    _settings_version = version


def record_spans(spans: list[dict[str, Any]]) -> None:
    """Store the engine's spans through traces_app's recorder (runs on a recording thread)."""
    close_old_connections()  # this thread lives long: drop a connection the server closed
    items = []
    for span in spans:
        try:
            items.append(InvocationIn.model_validate(span))
        except ValidationError as exc:
            logger.error("dropping a tool span that fails validation: %s", exc)
    if items:
        record_invocations(items)
