"""Rule-set versions: every change a version, rollback, diff, and live reload across processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.db import transaction

from planner_app import ruleset_versions
from planner_app.models import Capability, IntentRule, RuleSetVersion
from tests.conftest import subprocess_env

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.django_db
def test_it_ships_the_default_rules(default_rules: None) -> None:
    ruleset = ruleset_versions.current_ruleset()
    assert len(ruleset.rules) >= 21
    names = {rule.name for rule in ruleset.rules}
    assert {"sum-zh", "sum-en", "hashing", "base64", "datetime", "regex"} <= names
    assert ruleset.capabilities["Summation"].subsumes == ("Arithmetic",)
    tools_for = {m.capability: m.tool for m in ruleset.mappings}
    assert (tools_for["Summation"], tools_for["Hashing"]) == ("calculator", "hash_tool")


@pytest.mark.django_db(transaction=True)
def test_it_makes_one_version_per_saved_change(default_rules: None) -> None:
    first = ruleset_versions.current_ruleset().version
    with transaction.atomic():
        rule = IntentRule.objects.get(name="hashing")
        rule.keywords = [*rule.keywords, "digest"]
        rule.save()
        rule.capabilities.add(Capability.objects.get(name="Base64"))
    latest = RuleSetVersion.objects.order_by("-number").first()
    assert latest.number == first + 1
    assert latest.change == "changed IntentRule hashing"
    assert (
        "digest" in next(r for r in latest.snapshot["rules"] if r["name"] == "hashing")["keywords"]
    )


@pytest.mark.django_db(transaction=True)
def test_it_reloads_after_a_change_and_not_before(
    default_rules: None, django_assert_num_queries: Any
) -> None:
    before = ruleset_versions.current_ruleset()
    with django_assert_num_queries(0):
        assert ruleset_versions.current_ruleset() is before
    IntentRule.objects.filter(name="regex").update(enabled=False)  # no signal: a raw update
    IntentRule.objects.get(name="regex").save()
    after = ruleset_versions.current_ruleset()
    assert after.version == before.version + 1
    assert "regex" not in {rule.name for rule in after.ordered_rules}


@pytest.mark.django_db(transaction=True)
def test_it_rolls_back_to_an_older_version(default_rules: None) -> None:
    original = ruleset_versions.current_ruleset().version
    IntentRule.objects.get(name="regex").delete()
    assert "regex" not in {r.name for r in ruleset_versions.current_ruleset().rules}
    restored = ruleset_versions.rollback(original)
    assert restored.change == f"rolled back to v{original}"
    ruleset = ruleset_versions.current_ruleset()
    assert ruleset.version == restored.number
    assert "regex" in {r.name for r in ruleset.rules}
    assert IntentRule.objects.get(name="regex").capabilities.get().name == "Regex"


@pytest.mark.django_db(transaction=True)
def test_it_lists_what_changed_between_two_versions(default_rules: None) -> None:
    old = ruleset_versions.current_ruleset().version
    IntentRule.objects.filter(name="regex").delete()
    rule = IntentRule.objects.get(name="hashing")
    rule.priority = 1
    rule.save()
    new = RuleSetVersion.objects.order_by("-number").first()
    lines = ruleset_versions.diff(RuleSetVersion.objects.get(number=old).snapshot, new.snapshot)
    assert lines == ["~ rule hashing: priority 80 → 1", "- rule regex"]


PLANNER_PROCESS = """
import os, sys
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ares_site.settings")
import django
django.setup()
from planner_app.ruleset_versions import current_ruleset
for line in sys.stdin:
    rules = current_ruleset().ordered_rules
    print(current_ruleset().version, "hashing" in {r.name for r in rules}, flush=True)
"""


@pytest.mark.django_db(transaction=True)
def test_another_process_sees_a_change_on_its_next_call(default_rules: None) -> None:
    ruleset_versions.current_ruleset()
    env = subprocess_env(ARES_PLANNER_RELOAD_CHECK_MS="3600000")
    other = subprocess.Popen(
        [sys.executable, "-c", PLANNER_PROCESS], cwd=ROOT, env=env, text=True,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )  # fmt: skip
    try:
        other.stdin.write("plan\n")
        other.stdin.flush()
        version, has_hashing = other.stdout.readline().split()
        assert has_hashing == "True"
        IntentRule.objects.filter(name="hashing").first().delete()
        other.stdin.write("plan\n")
        other.stdin.flush()
        new_version, has_hashing = other.stdout.readline().split()
        assert int(new_version) == int(version) + 1 and has_hashing == "False"
    finally:
        other.kill()
        other.wait(timeout=10)


@pytest.mark.django_db(transaction=True)
def test_it_writes_the_version_in_the_transaction_of_the_edit(default_rules: None) -> None:
    first = ruleset_versions.latest_number()
    with pytest.raises(RuntimeError), transaction.atomic():
        rule = IntentRule.objects.get(name="hashing")
        rule.priority = 1
        rule.save()
        written = RuleSetVersion.objects.order_by("-number").first()
        assert written.number == first + 1  # before the commit, beside the edit
        assert next(r for r in written.snapshot["rules"] if r["name"] == "hashing")["priority"] == 1
        raise RuntimeError("the edit fails")
    assert ruleset_versions.latest_number() == first  # gone with the edit
    assert IntentRule.objects.get(name="hashing").priority == 80


def ids_of_every_row() -> dict[str, dict[str, int]]:
    snapshot = ruleset_versions.take_snapshot()
    return {
        section: {
            str(ruleset_versions._KEY_OF[section](row)): row["id"] for row in snapshot[section]
        }
        for section in ("capabilities", "rules", "mappings")
    }


@pytest.mark.django_db(transaction=True)
def test_it_rolls_back_in_place_keeping_every_id(default_rules: None) -> None:
    original, ids = ruleset_versions.current_ruleset().version, ids_of_every_row()
    IntentRule.objects.get(name="regex").delete()
    Capability.objects.filter(name="Arithmetic").update(name="Maths")
    Capability.objects.get(name="Maths").save()  # a rename (saved: a version)
    IntentRule.objects.create(name="brand-new", keywords=["zebra"])
    hashing = IntentRule.objects.get(name="hashing")
    hashing.priority = 1
    hashing.save()
    ruleset_versions.rollback(original)
    assert ids_of_every_row() == ids  # updated in place, regex back under its old id
    assert not IntentRule.objects.filter(name="brand-new").exists()
    newest = RuleSetVersion.objects.order_by("-number").first()
    assert newest.snapshot == ruleset_versions.take_snapshot()  # what the planner runs is the rows
    target = RuleSetVersion.objects.get(number=original).snapshot
    assert ruleset_versions.diff(target, newest.snapshot) == []


@pytest.mark.django_db(transaction=True)
def test_it_rolls_back_two_rules_that_swapped_names(default_rules: None) -> None:
    original = ruleset_versions.current_ruleset().version
    hashing, regex = IntentRule.objects.get(name="hashing"), IntentRule.objects.get(name="regex")
    with transaction.atomic():
        IntentRule.objects.filter(pk=hashing.pk).update(name="swap")
        IntentRule.objects.filter(pk=regex.pk).update(name="hashing")
        IntentRule.objects.filter(pk=hashing.pk).update(name="regex")
        ruleset_versions.record_version("swapped")
    ruleset_versions.rollback(original)
    assert IntentRule.objects.get(pk=hashing.pk).name == "hashing"
    assert IntentRule.objects.get(pk=regex.pk).name == "regex"


def test_it_sees_two_versions_written_within_one_clock_tick(settings: Any, tmp_path: Path) -> None:
    settings.VAR_DIR = tmp_path
    ruleset_versions._touch_stamp(7)
    seen = ruleset_versions._stamp()
    mtime = Path(ruleset_versions.stamp_path()).stat().st_mtime_ns
    ruleset_versions._touch_stamp(8)
    os.utime(ruleset_versions.stamp_path(), ns=(mtime, mtime))  # a coarse clock: the same mtime
    assert ruleset_versions._stamp() != seen  # so the next planner call reloads
