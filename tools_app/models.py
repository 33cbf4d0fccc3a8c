"""Operator settings for tools and MCP servers, kept in the database, edited in the admin."""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models

from tools_app.configured_builtins import builtin_specs
from traces_app.ingest.redaction import is_secret_key

if TYPE_CHECKING:
    from tools_app.mcp import McpServerConfig


class VersionedQuerySet(models.QuerySet):
    """Rows with an `updated_at` that save() sets, so a process can tell when any changed."""

    def version(self) -> tuple[int, str]:
        """Return a cheap fingerprint of all rows: it changes whenever one is saved or deleted."""
        latest = self.aggregate(count=models.Count("pk"), latest=models.Max("updated_at"))
        return latest["count"], str(latest["latest"])


class ToolSetting(models.Model):
    """An operator's override of one tool: switch it off, change its timeout or description."""

    name = models.CharField(max_length=200, unique=True, help_text="The tool's registered name")
    enabled = models.BooleanField(default=True)
    timeout_s = models.FloatField(
        null=True,
        blank=True,
        validators=[MinValueValidator(0.1), MaxValueValidator(3600)],
        help_text="Seconds before a call times out; empty: the tool's own or the default (30 s)",
    )
    description = models.TextField(
        blank=True, help_text="Shown to LLMs instead of the tool's own description"
    )
    updated_at = models.DateTimeField(auto_now=True)

    objects = VersionedQuerySet.as_manager()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        problem = unknown_tool_problem(self.name)
        if problem:
            raise ValidationError({"name": problem})


_ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class McpServer(models.Model):
    """An external MCP server whose tools join the registry as mcp.<server>.<tool>."""

    class Transport(models.TextChoices):
        STDIO = "stdio", "stdio (a command ARES starts)"
        HTTP = "http", "Streamable HTTP"
        SSE = "sse", "SSE (legacy HTTP)"

    name = models.CharField(
        max_length=40,
        unique=True,
        validators=[RegexValidator(r"^[a-zA-Z0-9_-]{1,40}$", "letters, digits, _ and - only")],
        help_text="Tools are named mcp.<name>.<tool>",
    )
    transport = models.CharField(max_length=8, choices=Transport.choices, default=Transport.STDIO)
    command = models.CharField(max_length=500, blank=True, help_text="stdio: the program to run")
    args = models.JSONField(default=list, blank=True, help_text='stdio: e.g. ["-m", "server"]')
    env = models.JSONField(
        default=dict,
        blank=True,
        help_text="stdio: extra environment. Put secrets in ARES's own environment and "
        'reference them as "${NAME}"; they are never stored here.',
    )
    url = models.URLField(max_length=500, blank=True, help_text="http / sse: the endpoint")
    timeout_s = models.FloatField(
        default=30, validators=[MinValueValidator(0.1), MaxValueValidator(3600)]
    )
    enabled = models.BooleanField(default=True)
    last_synced_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    tool_names = models.JSONField(default=list, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = VersionedQuerySet.as_manager()

    class Meta:
        ordering = ["name"]
        verbose_name = "MCP server"

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        env = self.env if isinstance(self.env, dict) else {}
        for key, value in env.items():
            if (
                isinstance(value, str)
                and is_secret_key(key)
                and not _ENV_REFERENCE.fullmatch(value)
            ):
                raise ValidationError(
                    {
                        "env": f'{key} looks like a secret: reference it as "${{{key}}}" and set '
                        "it in ARES's environment instead of storing it here"
                    }
                )
        try:
            self.config(resolve_env=False)
        except ValueError as exc:
            raise ValidationError(str(exc)) from None

    def config(self, *, resolve_env: bool = True) -> McpServerConfig:
        """Return the client configuration, ${NAME} references filled from the environment."""
        from tools_app.mcp import McpServerConfig  # the MCP SDK is big: load it when used

        env = self.env
        if resolve_env and isinstance(env, dict):
            env = {
                key: _ENV_REFERENCE.sub(lambda m: os.environ.get(m.group(1), ""), value)
                if isinstance(value, str)
                else value
                for key, value in env.items()
            }
        return McpServerConfig(
            name=self.name,
            transport=self.transport,
            command=self.command,
            args=self.args,
            env=env,
            url=self.url,
            timeout_s=self.timeout_s,
            enabled=self.enabled,
        )


def unknown_tool_problem(name: str) -> str | None:
    """Return why `name` names no tool, or None when it does (settings, mappings use this).

    A tool of a configured MCP server counts even before any process has listed it.
    """
    server = name.split(".")[1] if name.startswith("mcp.") and name.count(".") >= 2 else None
    if server and McpServer.objects.filter(name=server).exists():
        return None
    known = sorted(spec.name for spec in builtin_specs())
    if name in known:
        return None
    return (
        f"no tool named {name!r}; known: {', '.join(known)}, "
        "and mcp.<server>.<tool> for a configured MCP server"
    )
