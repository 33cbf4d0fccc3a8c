"""Rule-set versions: snapshot on every change, roll back, and reload live in every process.

Each change to a rule, capability, mapping, profile, score rule or the weights writes a
numbered snapshot in the same transaction as the change, under one lock (`lock_rules`),
so versions are numbered in commit order without collisions and the newest snapshot is
always what the rows hold. On commit a stamp file beside the database is replaced. A
process reads the stamp on every planner call (a small file read, not a query) and
reloads the newest snapshot when it moved; processes on other machines see
changes within ARES_PLANNER_RELOAD_CHECK_S through a cheap periodic query.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC
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
from traces_app.models.job_leases import hold_transaction_lock

_lock = threading.Lock()
_pending = threading.local()  # this thread's acting user and its transaction's version
# pg_advisory_xact_lock's key for "the planner's rules are being changed" ('ARES').
RULES_LOCK_KEY = 0x41524553
_cache: dict[str, Any] = {"ruleset": None, "stamp": None, "checked_at": 0.0}
WEIGHT_FIELDS = [f.name for f in ScoringWeights.__dataclass_fields__.values()]


def stamp_path() -> str:
    return str(settings.VAR_DIR / "planner-ruleset.stamp")


def take_snapshot() -> dict[str, Any]:
    """Return every planner row as plain JSON data, each with its id (rollback keeps ids)."""
    capabilities = models.Capability.objects.prefetch_related("subsumes", "depends_on")
    rules = models.IntentRule.objects.prefetch_related("capabilities")
    weights = models.ScoringWeights.objects.first() or models.ScoringWeights()
    return {
        "capabilities": [
            {"id": c.pk, "name": c.name, "description": c.description, "input_type": c.input_type,
             "output_type": c.output_type, "subsumes": sorted(s.name for s in c.subsumes.all()),
             "depends_on": sorted(d.name for d in c.depends_on.all())}
            for c in capabilities
        ],
        "rules": [
            {"id": r.pk, "name": r.name, "keywords": r.keywords, "patterns": r.patterns,
             "language": r.language, "goal": r.goal, "priority": r.priority,
             "enabled": r.enabled, "capabilities": sorted(c.name for c in r.capabilities.all())}
            for r in rules
        ],
        "mappings": [
            {"id": m.pk, "capability": m.capability.name, "tool": m.tool, "weight": m.weight}
            for m in models.CapabilityMapping.objects.select_related("capability")
        ],
        "profiles": [
            {"id": p.pk, "tool": p.tool, "cost": p.cost, "latency_ms": p.latency_ms,
             "deterministic": p.deterministic, "composable": p.composable,
             "side_effects": p.side_effects}
            for p in models.ToolProfile.objects.all()
        ],
        "weights": {name: getattr(weights, name) for name in WEIGHT_FIELDS},
        "score_rules": [
            {"id": s.pk, "score_name": s.score_name, "operator": s.operator,
             "threshold": s.threshold, "weight": s.weight, "enabled": s.enabled, "note": s.note}
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
        mappings=tuple(
            CapabilityMapping(m["capability"], m["tool"], m["weight"]) for m in snapshot["mappings"]
        ),
        profiles={p["tool"]: ToolProfile(**_without_id(p)) for p in snapshot["profiles"]},
        weights=ScoringWeights(**snapshot["weights"]),
        # Snapshots made before score rules existed have none.
        score_rules=tuple(
            ScoreRule(s["score_name"], s["operator"], s["threshold"], s["weight"], s["enabled"])
            for s in snapshot.get("score_rules", [])
        ),
    )  # fmt: skip


def lock_rules() -> None:
    """Hold the rule-set lock until the current transaction ends; writers of rules queue here."""
    hold_transaction_lock(RULES_LOCK_KEY, models.RuleSetVersion._meta.db_table, "number")


def latest_number() -> int:
    """Return the newest version's number (0 before the first)."""
    newest = models.RuleSetVersion.objects.order_by("-number").values_list("number", flat=True)
    return newest.first() or 0


def record_version(change: str, user: Any = None) -> models.RuleSetVersion:
    """Save a numbered snapshot of the rules as they are now, in the current transaction.

    The lock makes the number one above the newest committed one and the snapshot what
    the rows hold; other processes are told once the transaction commits.
    """
    with transaction.atomic():
        lock_rules()
        version = models.RuleSetVersion.objects.create(
            number=latest_number() + 1,
            created_by=user if getattr(user, "pk", None) else None,
            change=change[:300],
            snapshot=take_snapshot(),
        )
        transaction.on_commit(lambda: _touch_stamp(version.number))
    return version


@contextmanager
def editing(user: Any = None) -> Iterator[None]:
    """Change rules inside one locked transaction: one version, credited to `user`.

    Taking the lock first, before the rows are read, makes a stale-form check made
    inside the block hold until the block commits.
    """
    previous = getattr(_pending, "user", None)
    with transaction.atomic():
        lock_rules()
        _pending.user = user
        try:
            yield
        finally:
            _pending.user = previous


def note_change(change: str) -> None:
    """Put a change into its transaction's version: the first change writes it, later ones
    update it, so one transaction (one admin save) is one version whatever rows it touched."""
    if getattr(_pending, "suppressed", False):
        return
    with transaction.atomic():  # a change made outside a transaction gets one of its own
        version = _this_transactions_version()
        if version is not None:
            version.change = "; ".join(dict.fromkeys([*version.change.split("; "), change]))[:300]
            version.snapshot = take_snapshot()
            version.save(update_fields=["change", "snapshot"])
            return
        version = record_version(change, getattr(_pending, "user", None))

        def committed() -> None:
            _pending.version = _pending.marker = None

        _pending.version, _pending.marker = version, committed
        transaction.on_commit(committed)


def _this_transactions_version() -> models.RuleSetVersion | None:
    """Return the version the current transaction wrote, if it wrote one and still holds it.

    Its on_commit marker is dropped when the (savepoint that wrote it) rolls back, and
    runs (clearing it) when the transaction commits.
    """
    version, marker = getattr(_pending, "version", None), getattr(_pending, "marker", None)
    if version is None:
        return None
    pending = transaction.get_connection().run_on_commit
    return version if any(entry[1] is marker for entry in pending) else None


def _touch_stamp(number: int) -> None:
    """Replace the stamp file with one holding the new version's number."""
    handle, temporary = tempfile.mkstemp(dir=settings.VAR_DIR, prefix=".ruleset-stamp-")
    with os.fdopen(handle, "w") as stamp:
        stamp.write(f"{number}\n")
    os.replace(temporary, stamp_path())  # whole: a reader never sees it half written


def _stamp() -> tuple[int, int, str] | None:
    """Return what identifies the stamp's last write: its inode, mtime and the number in it.

    The mtime alone moves in coarse ticks (a few ms), so two versions within one tick
    would look like one; each number is written once, so the content always moves.
    """
    try:
        with open(stamp_path()) as stamp:
            status = os.fstat(stamp.fileno())
            return status.st_ino, status.st_mtime_ns, stamp.read(32)
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
        # The number alone tells whether anything changed; the snapshot is read on a change.
        if cached is None or cached.version != latest_number():
            latest = models.RuleSetVersion.objects.order_by("-number").first()
            if latest is None:
                latest = _initial_version()
                stamp = _stamp()
            cached = ruleset_from_snapshot(latest.snapshot, latest.number)
        _cache.update(ruleset=cached, stamp=stamp, checked_at=now)
    return cached


def _initial_version() -> models.RuleSetVersion:
    """Return the newest version, making the rules as they are version 1 if there is none."""
    with transaction.atomic():
        lock_rules()  # two processes starting at once make one first version, not two
        newest = models.RuleSetVersion.objects.order_by("-number").first()
        return newest or record_version("initial rule set")


class RulesChanged(Exception):
    """The rules changed since the page that asked for a rollback was opened."""


def rollback(number: int, user: Any = None, seen: int | None = None) -> models.RuleSetVersion:
    """Restore the rows of version `number`, keeping their ids, and record that as a version.

    Rows are updated in place; only rows deleted since are created again (with their old
    id when the snapshot has it), and rows the version did not have are deleted, so an
    edit form opened before the rollback still reaches its row. With `seen` (the version
    the operator's confirmation page showed), RulesChanged if a newer one exists.
    """
    with editing(user):
        newest = models.RuleSetVersion.objects.order_by("-number").first()
        if seen is not None and newest is not None and newest.number != seen:
            raise RulesChanged(
                f"The rules changed since you opened this page: now v{newest.number} by "
                f"{_who(newest)} at {_when(newest)} ({newest.change}). Nothing was rolled "
                f"back; below is what rolling back to v{number} changes now."
            )
        snapshot = models.RuleSetVersion.objects.get(number=number).snapshot
        _pending.suppressed = True  # the restore is one version, not one per row
        try:
            restore_rows(snapshot)
        finally:
            _pending.suppressed = False
        return record_version(f"rolled back to v{number}", user)


def apply_change(
    change: Callable[[dict[str, Any]], dict[str, Any]],
    note: str,
    user: Any = None,
    seen: int | None = None,
) -> models.RuleSetVersion:
    """Make the rows what `change` makes of the current snapshot, and record that as a version.

    The snapshot is taken under the lock, so the change applies to the rules as they are
    and nothing can come between; the rows are restored the way a rollback restores them
    (in place, keeping ids), so the version rolls back like any edit. With `seen` (the
    version the operator's page showed), RulesChanged if a newer one exists; an exception
    from `change` leaves everything as it was.
    """
    with editing(user):
        newest = models.RuleSetVersion.objects.order_by("-number").first()
        if seen is not None and newest is not None and newest.number != seen:
            raise RulesChanged(
                f"The rules changed since you opened this page: now v{newest.number} by "
                f"{_who(newest)} at {_when(newest)} ({newest.change}). Nothing was changed; "
                "reload the page to see the change against the rules as they are."
            )
        target = change(take_snapshot())
        _pending.suppressed = True  # the change is one version, not one per row
        try:
            restore_rows(target)
        finally:
            _pending.suppressed = False
        return record_version(note, user)


# What a snapshot row's fields are on its model (a mapping's capability is by name).
_FIELDS = {
    "capabilities": ("name", "description", "input_type", "output_type"),
    "rules": ("name", "keywords", "patterns", "language", "goal", "priority", "enabled"),
    "mappings": ("tool", "weight"),
    "profiles": ("tool", "cost", "latency_ms", "deterministic", "composable", "side_effects"),
    "score_rules": ("score_name", "operator", "threshold", "weight", "enabled", "note"),
}
_MODELS = {
    "capabilities": models.Capability,
    "rules": models.IntentRule,
    "mappings": models.CapabilityMapping,
    "profiles": models.ToolProfile,
    "score_rules": models.ScoreRule,
}
# The field a restore renames out of the way first, so that two rows swapping names
# never hold the same one at once (a mapping is unique by capability and tool).
_UNIQUE = {"capabilities": "name", "rules": "name", "mappings": "tool", "profiles": "tool"}


def restore_rows(snapshot: dict[str, Any]) -> None:
    """Make the rows what `snapshot` holds, updating each row in place (see rollback)."""
    current = take_snapshot()
    capabilities = _restore_table("capabilities", snapshot, current)
    by_name = {row["name"]: pk for pk, row in capabilities.items()}
    for pk, row in capabilities.items():
        capability = models.Capability(pk=pk)
        capability.subsumes.set([by_name[name] for name in row["subsumes"]])
        capability.depends_on.set([by_name[name] for name in row["depends_on"]])
    for pk, row in _restore_table("rules", snapshot, current).items():
        models.IntentRule(pk=pk).capabilities.set([by_name[n] for n in row["capabilities"]])
    _restore_table("mappings", snapshot, current, capability_of=by_name)
    _restore_table("profiles", snapshot, current)
    _restore_table("score_rules", snapshot, current)
    weights = models.ScoringWeights.objects.first() or models.ScoringWeights()
    for name, value in snapshot["weights"].items():
        setattr(weights, name, value)
    weights.save()


def _restore_table(
    section: str,
    snapshot: dict[str, Any],
    current: dict[str, Any],
    capability_of: dict[str, int] | None = None,
) -> dict[int, dict[str, Any]]:
    """Restore one section's rows; return the target rows by the id each now has.

    A target row is the current row of its id, or else of its natural key (snapshots
    made before ids were kept have none); current rows left unmatched are deleted, and
    target rows left unmatched are created, with their old id when it is free.
    """
    model, key = _MODELS[section], _KEY_OF[section]
    now = current.get(section, [])
    ids, keys = {row["id"]: row for row in now}, {key(row): row for row in now}
    placed: dict[int, dict[str, Any]] = {}
    new_rows = []
    for row in snapshot.get(section, []):
        match = ids.get(row.get("id")) or keys.get(key(row))
        if match is None or match["id"] in placed:
            new_rows.append(row)
        else:
            placed[match["id"]] = row
    model.objects.exclude(pk__in=list(placed)).delete()
    unique = _UNIQUE.get(section)
    if unique:  # out of the way first: two rows may be swapping names
        for pk, row in placed.items():
            if ids[pk][unique] != row[unique]:
                model.objects.filter(pk=pk).update(**{unique: f"~restoring {pk}"})

    def values(row: dict[str, Any]) -> dict[str, Any]:
        fields = {name: row.get(name, "") for name in _FIELDS[section]}
        if capability_of is not None:
            fields["capability_id"] = capability_of[row["capability"]]
        return fields

    for pk, row in placed.items():
        if _without_id(ids[pk]) != _without_id(row):
            model(pk=pk, **values(row)).save()
    for row in new_rows:
        free = row.get("id") is not None and row["id"] not in placed
        created = model.objects.create(**({"pk": row["id"]} if free else {}), **values(row))
        placed[created.pk] = row
    return placed


def _without_id(row: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in row.items() if name != "id"}


def changed_since(instance: Any, opened: int) -> str:
    """Return how `instance` changed since version `opened` (who, when, which version, what),
    or "" when it did not: a form opened then would save over those changes.

    Call it under the lock (inside `editing`), so nothing can change before the save.
    """
    section = (
        "weights" if isinstance(instance, models.ScoringWeights) else _SECTION_OF[type(instance)]
    )
    versions = models.RuleSetVersion.objects.filter(number__gte=opened).order_by("number")
    base = versions.first()
    if base is None or base.number != opened:
        if base is None and not models.RuleSetVersion.objects.exists():
            return ""  # no version yet: nothing can have changed since
        return (
            f"This form was opened at rule-set version v{opened}, which is not a recorded "
            "version: reload the page and make your change again."
        )
    newest = versions.last()
    now = _entry(newest.snapshot, section, instance.pk, None)
    natural = _KEY_OF[section](now) if now and section != "weights" else None
    seen = _entry(base.snapshot, section, instance.pk, natural)
    if newest.number == opened or _same(seen, now):
        return ""
    changes = []
    for version in versions.exclude(number=opened).iterator():
        entry = _entry(version.snapshot, section, instance.pk, natural)
        if not _same(entry, seen):
            what = _what_changed(seen, entry)
            changes.append(f"v{version.number} by {_who(version)} at {_when(version)} ({what})")
        seen = entry
    shown = "; ".join(changes[-3:]) + (f" (and {len(changes) - 3} earlier)" if len(changes) > 3
                                        else "")  # fmt: skip
    subject = "The scoring weights" if section == "weights" else f"{_LABEL_OF[section]} {instance}"
    return f"{subject[0].upper()}{subject[1:]} changed since you opened this form: {shown}."


def _entry(snapshot: dict[str, Any], section: str, pk: int | None, natural: Any) -> Any:
    """Return a row of a snapshot: by id, or by natural key in a snapshot without ids."""
    if section == "weights":
        return snapshot["weights"]
    rows = snapshot.get(section, [])
    by_id = next((row for row in rows if row.get("id") == pk), None)
    if by_id is not None or natural is None:
        return by_id
    return next((r for r in rows if "id" not in r and _KEY_OF[section](r) == natural), None)


def _what_changed(before: dict[str, Any] | None, after: dict[str, Any] | None) -> str:
    if after is None:
        return "deleted"
    if before is None:
        return "added"
    return "; ".join(_field_changes(before, after))


def _same(a: dict[str, Any] | None, b: dict[str, Any] | None) -> bool:
    return (a and _without_id(a)) == (b and _without_id(b))


def _who(version: models.RuleSetVersion) -> str:
    user = version.created_by
    return user.get_username() if user else "a change made outside the admin"


def _when(version: models.RuleSetVersion) -> str:
    return version.created_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


# Each section of a snapshot: its label in a diff, and what names one of its rows.
_SECTIONS = (
    ("capabilities", "capability", lambda row: row["name"]),
    ("rules", "rule", lambda row: row["name"]),
    ("mappings", "mapping", lambda row: f"{row['capability']} -> {row['tool']}"),
    ("profiles", "profile", lambda row: row["tool"]),
    ("score_rules", "score rule",
     lambda row: f"{row['score_name']} {row['operator']} {row['threshold']}"),
)  # fmt: skip
_KEY_OF = {section: key for section, _, key in _SECTIONS}
_LABEL_OF = {section: label for section, label, _ in _SECTIONS}
_SECTION_OF = {model: section for section, model in _MODELS.items()}


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
            elif _without_id(before[name]) != _without_id(after[name]):
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
        if old == value or name == "id":  # ids are kept from version to version
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
