"""What the docs' examples take the site to have: its shipped data, and a scripted LLM."""

from __future__ import annotations

import importlib

import pytest
from django.apps import apps

from tests.planner_app.conftest import default_rules, fake_llm, fresh_ruleset_cache
from traces_app.models import ScoreDefinition

__all__ = ["default_rules", "fake_llm", "fresh_ruleset_cache", "shipped_data"]


@pytest.fixture
def shipped_data(default_rules: None) -> None:
    """Make sure the shipped rules and score definitions exist (a flush removes them)."""
    if not ScoreDefinition.objects.exists():
        migration = importlib.import_module("traces_app.migrations.0012_scores")
        migration.add_definitions(apps, None)
