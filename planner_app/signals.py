"""Every change to the planner's rows goes into its transaction's rule-set version."""

from __future__ import annotations

from typing import Any

from django.db.models.signals import m2m_changed, post_delete, post_save

from planner_app import models
from planner_app.ruleset_versions import note_change

VERSIONED = (
    models.Capability,
    models.IntentRule,
    models.CapabilityMapping,
    models.ToolProfile,
    models.ScoringWeights,
    models.ScoreRule,
)


def _saved(sender: type, instance: Any, created: bool, **kwargs: Any) -> None:
    note_change(f"{'added' if created else 'changed'} {sender.__name__} {instance}")


def _deleted(sender: type, instance: Any, **kwargs: Any) -> None:
    note_change(f"deleted {sender.__name__} {instance}")


def _links_changed(sender: type, instance: Any, action: str, **kwargs: Any) -> None:
    if action in ("post_add", "post_remove", "post_clear"):
        note_change(f"changed {type(instance).__name__} {instance}")


def connect() -> None:
    for model in VERSIONED:
        post_save.connect(_saved, sender=model, dispatch_uid=f"version-save-{model.__name__}")
        post_delete.connect(_deleted, sender=model, dispatch_uid=f"version-del-{model.__name__}")
    for through in (
        models.Capability.subsumes.through,
        models.Capability.depends_on.through,
        models.IntentRule.capabilities.through,
    ):
        m2m_changed.connect(_links_changed, sender=through, dispatch_uid=f"version-m2m-{through}")
