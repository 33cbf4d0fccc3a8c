"""Operator settings for tools, kept in the database and editable in the admin."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils import timezone


class ToolSettingQuerySet(models.QuerySet):
    def version(self) -> tuple[int, str]:
        """Return a cheap fingerprint of all settings: it changes whenever one does."""
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
    updated_at = models.DateTimeField(default=timezone.now)

    objects = ToolSettingQuerySet.as_manager()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def save(self, *args: object, **kwargs: object) -> None:
        self.updated_at = timezone.now()
        super().save(*args, **kwargs)

    def clean(self) -> None:
        from tools_app.runtime import base_specs

        known = base_specs()
        if self.name not in known:
            raise ValidationError(
                {"name": f"no tool named {self.name!r}; known: {', '.join(sorted(known))}"}
            )
