"""Planner fixtures: the shipped rules, no rule set cached from another test, a fake LLM."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Any

import pytest
from django.apps import apps

from planner_app import rulesets
from planner_app.models import IntentRule, RuleSetVersion
from tests.planner_app.fake_llm import FakeLlm


@pytest.fixture(autouse=True)
def fresh_ruleset_cache() -> Iterator[None]:
    """Forget the cached rule set: each test's database has its own versions."""
    rulesets._cache.update(ruleset=None, stamp=None, checked_at=0.0)
    yield
    rulesets._cache.update(ruleset=None, stamp=None, checked_at=0.0)


@pytest.fixture
def default_rules(db: None) -> None:
    """Make sure the shipped rules exist (a transactional test before may have flushed them)."""
    if not IntentRule.objects.exists():
        migration = importlib.import_module("planner_app.migrations.0002_default_rules")
        rulesets._pending.suppressed = True
        try:
            migration.add_defaults(apps, None)
        finally:
            rulesets._pending.suppressed = False
        # A flush re-ran post_migrate on empty tables; make the shipped rules version 1.
        RuleSetVersion.objects.all().delete()
        rulesets.record_version("initial rule set")


@pytest.fixture
def fake_llm() -> Iterator[FakeLlm]:
    """A scripted OpenAI-compatible server on 127.0.0.1 (see fake_llm.py)."""
    llm = FakeLlm().start()
    yield llm
    llm.stop()


@pytest.fixture
def llm_settings(settings: Any, fake_llm: FakeLlm) -> None:
    """Point the site's default LLM endpoint at the fake server, without streaming."""
    settings.ARES_LLM_BASE_URL = fake_llm.base_url
    settings.ARES_LLM_MODEL = "fake-model"
    settings.ARES_LLM_STREAM = False
