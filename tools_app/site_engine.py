"""The process's tool registry and engine: built-in tools, operator settings, recording.

This is where the Django-free core meets the database. Operator settings are re-read
when they change (checked at most every ARES_TOOL_SETTINGS_CHECK_S seconds), so an
admin edit reaches every web and Celery process without a restart and without a query
per call.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
import time
from typing import Any

from django.conf import settings
from django.db import close_old_connections, connections
from django.utils import timezone
from pydantic import ValidationError

from tools_app.configured_builtins import builtin_specs
from tools_app.engine import ToolEngine
from tools_app.models import McpServer, ToolSetting
from tools_app.registry import ToolRegistry
from tools_app.specs import ToolSpec
from traces_app.ingest.recording import record_invocations
from traces_app.schemas import InvocationFromDict

logger = logging.getLogger(__name__)

_lock = threading.Lock()
_engine: ToolEngine | None = None
_refresh_lock = threading.Lock()
_settings_version: tuple[tuple[int, str], tuple[int, str]] | None = None
_mcp_specs: dict[str, list[ToolSpec]] = {}
_settings_checked_at = 0.0


def base_specs() -> dict[str, ToolSpec]:
    """Return every known tool (built-in and from MCP servers) before operator settings."""
    specs = builtin_specs()
    for server_specs in _mcp_specs.values():
        specs.extend(server_specs)
    return {spec.name: spec for spec in specs}


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


def shutdown() -> None:
    """Close MCP sessions and stop the engine (tests, and processes that exit cleanly)."""
    global _engine, _settings_version
    with _lock:
        engine, _engine, _settings_version = _engine, None, None
    if engine is None:
        return
    if _mcp_specs or McpServer.objects.exists():
        from tools_app.mcp import hub

        engine.run_coroutine(hub.close_all())
    _mcp_specs.clear()
    engine.run_in_recording_threads(connections.close_all)
    engine.close()


def refresh_tool_settings(force: bool = False) -> None:
    """Bring the registry up to date with the admin's tool settings and MCP servers.

    Looks at most every ARES_TOOL_SETTINGS_CHECK_S seconds, and does work only when a
    row changed. One thread refreshes at a time; the others go on with the current tools.
    """
    global _settings_version, _settings_checked_at
    now = time.monotonic()
    if not force and now - _settings_checked_at < settings.ARES_TOOL_SETTINGS_CHECK_S:
        return
    if _engine is None or not _refresh_lock.acquire(blocking=force):
        return
    try:
        _settings_checked_at = now
        version = (ToolSetting.objects.version(), McpServer.objects.version())
        if version == _settings_version:
            return
        if _settings_version is None or version[1] != _settings_version[1]:
            sync_mcp_servers()
        _apply_settings(_engine.registry)
        _settings_version = version
    finally:
        _refresh_lock.release()


def resync_now() -> dict[str, str]:
    """Sync every MCP server and re-apply settings now (the admin's button); return errors."""
    engine = get_engine()
    with _refresh_lock:
        errors = sync_mcp_servers()
        _apply_settings(engine.registry)
    return errors


def _apply_settings(registry: ToolRegistry) -> None:
    """Register every known tool with the operator's overrides; drop tools that are gone."""
    overrides = {row.name: row for row in ToolSetting.objects.all()}
    known = base_specs()
    for name, base in known.items():
        row = overrides.get(name)
        if row is not None:
            base = dataclasses.replace(
                base,
                enabled=row.enabled,
                timeout_s=row.timeout_s or base.timeout_s,
                description=row.description or base.description,
            )
        registry.replace(base)
    for spec in registry.list(enabled_only=False):
        if spec.name not in known:
            registry.unregister(spec.name)


def sync_mcp_servers() -> dict[str, str]:
    """Connect to every enabled MCP server and list its tools; return errors by server name.

    A server that cannot be reached keeps no tools until the next sync, and its error is
    saved on its row for the admin to show.
    """
    from tools_app.mcp import hub  # the MCP SDK is big: load it only where servers exist

    engine = _engine or get_engine()
    servers = list(McpServer.objects.all())
    if not servers and not _mcp_specs:
        return {}
    configs = []
    errors: dict[str, str] = {}
    for server in servers:
        try:
            configs.append((server, server.config()))
        except ValueError as exc:
            errors[server.name] = str(exc)

    async def sync_all() -> list[Any]:
        return await asyncio.gather(
            *(hub.sync(config) for _, config in configs), return_exceptions=True
        )

    outcomes = engine.run_coroutine(sync_all()) if configs else []
    _mcp_specs.clear()
    for (server, _), outcome in zip(configs, outcomes, strict=True):
        if isinstance(outcome, BaseException):
            errors[server.name] = f"{type(outcome).__name__}: {outcome}"
            continue
        _mcp_specs[server.name] = outcome
        McpServer.objects.filter(pk=server.pk).update(
            last_synced_at=timezone.now(),
            last_error="",
            tool_names=[spec.name for spec in outcome],
        )  # update(), not save(): a sync is not an edit, other processes need not resync
    for server in servers:
        if server.name in errors:
            McpServer.objects.filter(pk=server.pk).update(last_error=errors[server.name])
            logger.warning("MCP server %s: %s", server.name, errors[server.name])
    stale = set(hub.names()) - {server.name for server in servers}
    for name in stale:
        engine.run_coroutine(hub.close(name))
    return errors


def record_spans(spans: list[dict[str, Any]]) -> None:
    """Store the engine's spans through traces_app's recorder (runs on a recording thread)."""
    close_old_connections()  # this thread lives long: drop a connection the server closed
    items = []
    for span in spans:
        try:
            items.append(InvocationFromDict.model_validate(span))
        except ValidationError as exc:
            logger.error("dropping a tool span that fails validation: %s", exc)
    if items:
        record_invocations(items)
