"""Rule-set versions: snapshot on every change, roll back, and reload live in every process.

Each change to a rule, capability, mapping, profile or the weights saves a numbered
snapshot and touches a stamp file beside the database. A process checks the stamp's
modification time on every planner call (a stat, not a query) and reloads the newest
snapshot when it moved; processes on other machines see changes within
ARES_PLANNER_RELOAD_CHECK_S through a cheap periodic query.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.conf import settings
from django.db import transaction

from planner_app import models
from planner_app.pipeline.ruleset import (
    Capability,
    CapabilityMapping,
    IntentRule,
    RuleSet,
    ScoreRule,
    ScoringWeights,
    ToolProfile,
)

_lock = threading.Lock()
_pending = threading.local()
_cache: dict[str, Any] = {"ruleset": None, "stamp": None, "checked_at": 0.0}
WEIGHT_FIELDS = [f.name for f in ScoringWeights.__dataclass_fields__.values()]


def stamp_path() -> str:
    return str(settings.VAR_DIR / "planner-ruleset.stamp")


def take_snapshot() -> dict[str, Any]:
    """Return every planner row as plain JSON data."""
    capabilities = models.Capability.objects.prefetch_related("subsumes", "depends_on")
    rules = models.IntentRule.objects.prefetch_related("capabilities")
    weights = models.ScoringWeights.objects.first() or models.ScoringWeights()
    return {
        "capabilities": [
            {"name": c.name, "description": c.description, "input_type": c.input_type,
             "output_type": c.output_type, "subsumes": sorted(s.name for s in c.subsumes.all()),
             "depends_on": sorted(d.name for d in c.depends_on.all())}
            for c in capabilities
        ],
        "rules": [
            {"name": r.name, "keywords": r.keywords, "patterns": r.patterns,
             "language": r.language, "goal": r.goal, "priority": r.priority,
             "enabled": r.enabled, "capabilities": sorted(c.name for c in r.capabilities.all())}
            for r in rules
        ],
        "mappings": [
            {"capability": m.capability.name, "tool": m.tool, "weight": m.weight}
            for m in models.CapabilityMapping.objects.select_related("capability")
        ],
        "profiles": [
            {"tool": p.tool, "cost": p.cost, "latency_ms": p.latency_ms,
             "deterministic": p.deterministic, "composable": p.composable,
             "side_effects": p.side_effects}
            for p in models.ToolProfile.objects.all()
        ],
        "weights": {name: getattr(weights, name) for name in WEIGHT_FIELDS},
        "score_rules": [
            {"score_name": s.score_name, "operator": s.operator, "threshold": s.threshold,
             "weight": s.weight, "enabled": s.enabled, "note": s.note}
            for s in models.ScoreRule.objects.all()
        ],
    }  # fmt: skip


def ruleset_from_snapshot(snapshot: dict[str, Any], version: int) -> RuleSet:
    """Return the frozen RuleSet the pipeline runs on."""
    return RuleSet(
        version=version,
        rules=tuple(
            IntentRule(
                name=r["name"], capabilities=tuple(r["capabilities"]),
                keywords=tuple(r["keywords"]), patterns=tuple(r["patterns"]), goal=r["goal"],
                language=r["language"], priority=r["priority"], enabled=r["enabled"],
            )
            for r in snapshot["rules"]
        ),
        capabilities={
            c["name"]: Capability(c["name"], c["description"], c["input_type"],
                                  c["output_type"], tuple(c["subsumes"]), tuple(c["depends_on"]))
            for c in snapshot["capabilities"]
        },
        mappings=tuple(CapabilityMapping(**m) for m in snapshot["mappings"]),
        profiles={p["tool"]: ToolProfile(**p) for p in snapshot["profiles"]},
        weights=ScoringWeights(**snapshot["weights"]),
        # Snapshots made before score rules existed have none.
        score_rules=tuple(
            ScoreRule(s["score_name"], s["operator"], s["threshold"], s["weight"], s["enabled"])
            for s in snapshot.get("score_rules", [])
        ),
    )  # fmt: skip


def record_version(change: str, user: Any = None) -> models.RuleSetVersion:
    """Save a numbered snapshot of the rules as they are now, and tell other processes."""
    with transaction.atomic():
        latest = models.RuleSetVersion.objects.select_for_update().order_by("-number").first()
        version = models.RuleSetVersion.objects.create(
            number=(latest.number if latest else 0) + 1,
            created_by=user if getattr(user, "pk", None) else None,
            change=change[:300],
            snapshot=take_snapshot(),
        )
    _touch_stamp()
    return version


@contextmanager
def acting_user(user: Any) -> Iterator[None]:
    """Attribute the versions made inside the block to `user` (the admin's request)."""
    _pending.user = user
    try:
        yield
    finally:
        _pending.user = None


def schedule_version(change: str, user: Any = None) -> None:
    """Record one version when the current transaction commits, however many rows changed."""
    if getattr(_pending, "suppressed", False):
        return
    user = user or getattr(_pending, "user", None)
    connection = transaction.get_connection()
    waiting = getattr(_pending, "commit", None)
    if waiting is not None and any(entry[1] is waiting for entry in connection.run_on_commit):
        _pending.changes.append(change)  # this transaction already has a version coming
        return
    # No version waiting for this transaction (none yet, or it was rolled back): start one.
    _pending.changes = [change]

    def commit() -> None:
        pending, _pending.changes, _pending.commit = _pending.changes, [], None
        if pending:
            record_version("; ".join(dict.fromkeys(pending)), user)

    _pending.commit = commit
    transaction.on_commit(commit)  # outside a transaction, this runs at once


def _touch_stamp() -> None:
    path = stamp_path()
    with open(path, "a"):
        pass
    os.utime(path)


def _stamp() -> int | None:
    try:
        return os.stat(stamp_path()).st_mtime_ns
    except FileNotFoundError:
        return None


def current_ruleset() -> RuleSet:
    """Return the newest rule set, reloading only when a change was made since last time."""
    now = time.monotonic()
    stamp = _stamp()
    cached = _cache["ruleset"]
    periodic = now - _cache["checked_at"] >= settings.ARES_PLANNER_RELOAD_CHECK_S
    if cached is not None and stamp == _cache["stamp"] and not periodic:
        return cached
    with _lock:
        latest = models.RuleSetVersion.objects.order_by("-number").first()
        if latest is None:
            latest = record_version("initial rule set")
            stamp = _stamp()
        if cached is None or cached.version != latest.number:
            cached = ruleset_from_snapshot(latest.snapshot, latest.number)
        _cache.update(ruleset=cached, stamp=stamp, checked_at=now)
    return cached


def rollback(number: int, user: Any = None) -> models.RuleSetVersion:
    """Restore the rows of version `number` and record that as a new version."""
    snapshot = models.RuleSetVersion.objects.get(number=number).snapshot
    _pending.suppressed = True  # the restore is one version, not one per row
    try:
        return _restore(snapshot, number, user)
    finally:
        _pending.suppressed = False


def _restore(snapshot: dict[str, Any], number: int, user: Any) -> models.RuleSetVersion:
    with transaction.atomic():
        models.CapabilityMapping.objects.all().delete()
        models.IntentRule.objects.all().delete()
        models.Capability.objects.all().delete()
        models.ToolProfile.objects.all().delete()
        models.ScoreRule.objects.all().delete()
        by_name = {}
        for c in snapshot["capabilities"]:
            by_name[c["name"]] = models.Capability.objects.create(
                name=c["name"], description=c["description"], input_type=c["input_type"],
                output_type=c["output_type"],
            )  # fmt: skip
        for c in snapshot["capabilities"]:
            by_name[c["name"]].subsumes.set([by_name[n] for n in c["subsumes"]])
            by_name[c["name"]].depends_on.set([by_name[n] for n in c["depends_on"]])
        for r in snapshot["rules"]:
            fields = {k: v for k, v in r.items() if k != "capabilities"}
            rule = models.IntentRule.objects.create(**fields)
            rule.capabilities.set([by_name[n] for n in r["capabilities"]])
        for m in snapshot["mappings"]:
            models.CapabilityMapping.objects.create(
                capability=by_name[m["capability"]], tool=m["tool"], weight=m["weight"]
            )
        for p in snapshot["profiles"]:
            models.ToolProfile.objects.create(**p)
        for s in snapshot.get("score_rules", []):
            models.ScoreRule.objects.create(**s)
        weights = models.ScoringWeights.objects.first() or models.ScoringWeights()
        for name, value in snapshot["weights"].items():
            setattr(weights, name, value)
        weights.save()
        return record_version(f"rolled back to v{number}", user)


# Each section of a snapshot: its label in a diff, and what names one of its rows.
_SECTIONS = (
    ("capabilities", "capability", lambda row: row["name"]),
    ("rules", "rule", lambda row: row["name"]),
    ("mappings", "mapping", lambda row: f"{row['capability']} -> {row['tool']}"),
    ("profiles", "profile", lambda row: row["tool"]),
    ("score_rules", "score rule",
     lambda row: f"{row['score_name']} {row['operator']} {row['threshold']}"),
)  # fmt: skip


def diff(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Return what changed between two snapshots, one line per added, removed or changed row.

    A changed row names each changed field with its old and new value ("priority 80 → 1");
    a list field names the items added and removed ("keywords +sum −add").
    """
    lines = []
    for section, label, key in _SECTIONS:
        before = {key(row): row for row in old.get(section, [])}
        after = {key(row): row for row in new.get(section, [])}
        for name in sorted(set(before) | set(after)):
            if name not in before:
                lines.append(f"+ {label} {name}")
            elif name not in after:
                lines.append(f"- {label} {name}")
            elif before[name] != after[name]:
                changes = _field_changes(before[name], after[name])
                lines.append(f"~ {label} {name}: {'; '.join(changes)}")
    changed = _field_changes(old["weights"], new["weights"])
    if changed:
        lines.append(f"~ weights: {'; '.join(changed)}")
    return lines


def _field_changes(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """Return each changed field as 'field old → new', or 'field +added −removed' for lists."""
    changes = []
    for name, value in after.items():
        old = before.get(name)
        if old == value:
            continue
        if isinstance(old, list) and isinstance(value, list):
            added = [f"+{item}" for item in value if item not in old]
            removed = [f"−{item}" for item in old if item not in value]
            changes.append(" ".join([name, *added, *removed]) if added or removed else
                           f"{name} reordered")  # fmt: skip
        else:
            changes.append(f"{name} {_shown(old)} → {_shown(value)}")
    return changes


def _shown(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False) if isinstance(value, str) else str(value)
