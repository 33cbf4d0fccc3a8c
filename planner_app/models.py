"""The planner's rules (versioned, live in every process) and saved workflows with their runs."""

from __future__ import annotations

import os
import re
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.utils import timezone

from planner_app.agents.recall import RECALL_TOOL
from planner_app.pipeline.ruleset import ScoreRule as ScoreRuleData
from tools_app.models import unknown_tool_problem


def _validate_patterns(patterns: Any) -> None:
    if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
        raise ValidationError("patterns must be a list of regular expressions (strings)")
    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValidationError(f"invalid regular expression {pattern!r}: {exc}") from None


def _validate_names(value: Any) -> None:
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise ValidationError("expected a list of non-empty names")


def _validate_tool_names(value: Any) -> None:
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise ValidationError("expected a list of tool names")
    if len(set(value)) != len(value):
        raise ValidationError("a tool is listed twice")


class Capability(models.Model):
    """A thing a request may need done; tools offer capabilities, rules ask for them."""

    name = models.CharField(max_length=80, unique=True)
    description = models.TextField(blank=True)
    input_type = models.CharField(max_length=40, blank=True)
    output_type = models.CharField(max_length=40, blank=True)
    subsumes = models.ManyToManyField(
        "self", symmetrical=False, blank=True, related_name="subsumed_by",
        help_text="Capabilities this one covers: Summation covers Arithmetic",
    )  # fmt: skip
    depends_on = models.ManyToManyField(
        "self", symmetrical=False, blank=True, related_name="needed_by",
        help_text="Capabilities whose output this one needs, when the request needs both",
    )  # fmt: skip

    class Meta:
        ordering = ["name"]
        verbose_name_plural = "capabilities"

    def __str__(self) -> str:
        return self.name


class IntentRule(models.Model):
    """Keywords (any language) or regexes that, found in a request, give capabilities."""

    name = models.CharField(max_length=80, unique=True)
    keywords = models.JSONField(
        default=list, blank=True, validators=[_validate_names],
        help_text='English words match whole words and plurals; others (中文) as substrings',
    )  # fmt: skip
    patterns = models.JSONField(
        default=list, blank=True, validators=[_validate_patterns],
        help_text="Regular expressions, matched case-insensitively",
    )  # fmt: skip
    language = models.CharField(max_length=8, default="any")
    capabilities = models.ManyToManyField(Capability, related_name="rules")
    goal = models.CharField(max_length=200, blank=True)
    priority = models.PositiveIntegerField(default=100, help_text="Lower runs first")
    enabled = models.BooleanField(default=True)

    class Meta:
        ordering = ["priority", "name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        if not self.keywords and not self.patterns:
            raise ValidationError("a rule needs at least one keyword or pattern")


class CapabilityMapping(models.Model):
    """An operator's statement that a tool serves a capability, with a static bonus."""

    capability = models.ForeignKey(Capability, on_delete=models.CASCADE, related_name="mappings")
    tool = models.CharField(max_length=200)
    weight = models.FloatField(default=0.0, help_text="Added to the tool's score")

    class Meta:
        ordering = ["capability__name", "tool"]
        constraints = [
            models.UniqueConstraint(fields=["capability", "tool"], name="mapping_unique")
        ]

    def __str__(self) -> str:
        return f"{self.capability} -> {self.tool}"

    def clean(self) -> None:
        problem = unknown_tool_problem(self.tool)
        if problem:
            raise ValidationError({"tool": problem})


class ToolProfile(models.Model):
    """The planner's overrides of a tool's contract; blank fields come from the tool spec."""

    tool = models.CharField(max_length=200, unique=True)
    cost = models.FloatField(null=True, blank=True)
    latency_ms = models.FloatField(null=True, blank=True, help_text="Used until evidence exists")
    deterministic = models.BooleanField(null=True, blank=True)
    composable = models.BooleanField(null=True, blank=True)
    side_effects = models.BooleanField(null=True, blank=True)

    class Meta:
        ordering = ["tool"]

    def __str__(self) -> str:
        return self.tool


class ScoringWeights(models.Model):
    """The one row of scoring weights (Final = Base + Evidence - Penalty)."""

    cost = models.FloatField(default=10.0)
    deterministic = models.FloatField(default=3.0)
    composable = models.FloatField(default=2.0)
    success_rate = models.FloatField(default=20.0)
    latency_per_100ms = models.FloatField(default=1.0)
    latency_cap = models.FloatField(default=5.0)
    failure_ratio = models.FloatField(default=10.0)
    side_effects = models.FloatField(default=5.0)
    default_success_rate = models.FloatField(default=0.95)
    evidence_window = models.PositiveIntegerField(default=200)

    class Meta:
        verbose_name_plural = "scoring weights"

    def __str__(self) -> str:
        return "Scoring weights"


class ScoreRule(models.Model):
    """How scores count in a tool's evidence: an ok call whose score matches counts as failed.

    `weight` is the share of a failed call it counts as (1: in full; 0.5: half). Versioned
    with the rules, so the backtest compares rule sets with their score rules.
    """

    class Operator(models.TextChoices):
        EQ = "=", "equals"
        NE = "!=", "differs from"
        LT = "<", "is below"
        LE = "<=", "is at most"
        GT = ">", "is above"
        GE = ">=", "is at least"

    score_name = models.CharField(max_length=64, help_text="A score definition's name")
    operator = models.CharField(max_length=2, choices=Operator.choices, default=Operator.EQ)
    threshold = models.CharField(
        max_length=100, help_text="A number, true or false, or a category's label"
    )
    weight = models.FloatField(
        default=1.0, help_text="The share of a failed call a matching score counts as (0 to 1)"
    )
    enabled = models.BooleanField(default=True)
    note = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["score_name", "id"]

    def __str__(self) -> str:
        return f"{self.score_name} {self.operator} {self.threshold} counts {self.weight:g} failure"

    def clean(self) -> None:
        problem = ScoreRuleData(
            self.score_name, self.operator, self.threshold, self.weight
        ).problem()
        if problem:
            raise ValidationError(problem)


class RuleSetVersion(models.Model):
    """A snapshot of every rule, capability, mapping, profile and weight after a change."""

    number = models.PositiveIntegerField(unique=True)
    created_at = models.DateTimeField(default=timezone.now)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    change = models.CharField(max_length=300, blank=True)
    snapshot = models.JSONField()

    class Meta:
        ordering = ["-number"]

    def __str__(self) -> str:
        return f"v{self.number}: {self.change}"


class Proposal(models.Model):
    """A change the planner proposes from recorded traffic, with its evidence and backtest.

    `key` names what is proposed (stable across refreshes); a dismissed proposal comes back
    only when its evidence grows past `dismissed_evidence`. Applying a rule or mapping
    proposal makes a rule-set version (`applied_version`); a workflow proposal saves a
    Workflow (`workflow`).
    """

    class Kind(models.TextChoices):
        RULE = "rule", "Rule"
        MAPPING = "mapping", "Mapping"
        WORKFLOW = "workflow", "Workflow"

    class Status(models.TextChoices):
        OPEN = "open", "Open"
        APPLIED = "applied", "Applied"
        DISMISSED = "dismissed", "Dismissed"

    kind = models.CharField(max_length=16, choices=Kind.choices)
    key = models.CharField(max_length=300, unique=True)
    title = models.CharField(max_length=300)
    target = models.CharField(max_length=200, help_text="The capability, or the workflow's name")
    why = models.TextField(blank=True)
    ops = models.JSONField(default=list, blank=True, help_text="The change (proposals/changes.py)")
    workflow_definition = models.JSONField(null=True, blank=True)
    evidence = models.JSONField(default=list, blank=True, help_text="The requests behind it")
    evidence_count = models.PositiveIntegerField(default=0)
    backtest = models.JSONField(default=dict, blank=True)
    ruleset_version = models.PositiveIntegerField(
        default=0, help_text="The rule-set version it was proposed and backtested against"
    )
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.OPEN)
    dismissed_evidence = models.PositiveIntegerField(null=True, blank=True)
    applied_version = models.PositiveIntegerField(null=True, blank=True)
    workflow = models.ForeignKey(
        "Workflow", null=True, blank=True, on_delete=models.SET_NULL, related_name="proposals"
    )
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    decided_via = models.CharField(
        max_length=250, blank=True, help_text="Who decided: a staff user, or an API key by name"
    )
    history = models.JSONField(
        default=list, blank=True, help_text="Earlier decisions undone since (newest last)"
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["status", "-evidence_count", "key"]
        indexes = [models.Index(fields=["status", "kind"], name="proposal_status_kind")]

    def __str__(self) -> str:
        return self.title


class Workflow(models.Model):
    """A named DAG of tool steps (Path 3), stored as the JSON that workflows/graph.py reads."""

    name = models.CharField(max_length=100, unique=True)
    description = models.TextField(blank=True)
    definition = models.JSONField(
        help_text='{"steps": [{"id": "s1", "tool": "calculator", "arguments": {...}, '
        '"depends_on": [], "fallback_tools": [], "request": "what the step is for"}], '
        '"max_steps": 20, "max_parallel": 4}; arguments may use {$s1.result}',
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        from planner_app.workflows.graph import WorkflowError, validate_workflow
        from tools_app.site_engine import get_engine

        try:
            workflow = self.as_workflow()
        except WorkflowError as exc:
            raise ValidationError({"definition": [str(p) for p in exc.problems]}) from None
        problems = validate_workflow(workflow, get_engine().registry)
        if problems:
            raise ValidationError({"definition": [p.message for p in problems]})

    def as_workflow(self) -> Any:
        """Return the workflow this row defines; WorkflowError if the JSON is malformed."""
        from planner_app.workflows.graph import workflow_from_json

        definition = self.definition if isinstance(self.definition, dict) else {"steps": None}
        return workflow_from_json({**definition, "name": self.name})


class WorkflowRun(models.Model):
    """One run of a workflow, with per-step progress saved while it runs."""

    class Status(models.TextChoices):
        PENDING = "pending"
        RUNNING = "running"
        SUCCESS = "success"
        PARTIAL_FAILURE = "partial_failure"
        FAILED = "failed"
        CANCELLED = "cancelled"  # stopped by its caller before it finished

    workflow = models.ForeignKey(Workflow, on_delete=models.CASCADE, related_name="runs")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    trace_id = models.CharField(max_length=32)
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    progress = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.workflow} run {self.pk} ({self.status})"


_ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class Agent(models.Model):
    """An LLM agent: its model, prompt, the tools it may call and how its loop runs (Path 1)."""

    class Discovery(models.TextChoices):
        PASSIVE = "passive", "Passive: the model sees every allowed tool"
        ACTIVE = "active", "Active: the model asks for the tools it needs"

    name = models.CharField(
        max_length=100,
        unique=True,
        validators=[RegexValidator(r"^[a-zA-Z0-9_.-]{1,100}$", "letters, digits, _ . - only")],
    )
    description = models.TextField(blank=True)
    model = models.CharField(
        max_length=200, blank=True, help_text="Empty: ARES_LLM_MODEL from the environment"
    )
    system_prompt = models.TextField(blank=True)
    tools = models.JSONField(
        default=list,
        blank=True,
        validators=[_validate_tool_names],
        help_text='Tools it may call, e.g. ["calculator", "mcp.time.get_current_time"]; '
        "empty: none. Enforced on every call, not only in what the model is shown.",
    )
    max_iterations = models.PositiveIntegerField(
        default=10,
        validators=[MinValueValidator(1), MaxValueValidator(100)],
        help_text="LLM round trips before one last call without tools asks for an answer",
    )
    parallel_tools = models.BooleanField(
        default=True, help_text="Run one turn's tool calls at the same time"
    )
    tool_timeout_s = models.FloatField(
        default=30,
        validators=[MinValueValidator(0.1), MaxValueValidator(3600)],
        help_text="Seconds a tool call may take when the tool sets no timeout of its own",
    )
    discovery = models.CharField(max_length=8, choices=Discovery.choices, default=Discovery.PASSIVE)
    tool_calling = models.BooleanField(
        default=True,
        help_text="Off for a model without tool support: it gets no tools and answers in text",
    )
    token_budget = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(500)],
        help_text="Tokens per task; empty: ARES_LLM_TOKEN_BUDGET",
    )
    base_url = models.URLField(
        max_length=500, blank=True, help_text="Empty: ARES_LLM_BASE_URL from the environment"
    )
    api_key = models.CharField(
        max_length=100,
        blank=True,
        validators=[
            RegexValidator(
                r"^\$\{[A-Za-z_][A-Za-z0-9_]*\}$",
                'a reference like "${OPENAI_API_KEY}": keep the key in ARES\'s environment',
            )
        ],
        help_text='A reference like "${MY_LLM_KEY}", read from the environment; never the key '
        "itself. Empty: ARES_LLM_API_KEY",
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        if isinstance(self.tools, list):
            # recall is the agent loop's own tool (agents/recall.py), in no tool registry.
            names = [name for name in self.tools if name != RECALL_TOOL]
            problems = [p for p in map(unknown_tool_problem, names) if p]
            if problems:
                raise ValidationError({"tools": problems})

    def resolved_api_key(self) -> str:
        """Return the API key its ${NAME} reference points at ("" when unset)."""
        return _ENV_REFERENCE.sub(lambda m: os.environ.get(m.group(1), ""), self.api_key)


class SandboxStop(models.Model):
    """An operator's request to stop a running sandbox task.

    A row, not a flag in memory: the stop request may reach any web process, while only
    the one streaming the task runs it; that process looks for the row twice a second
    and deletes it when the stream ends.
    """

    trace_id = models.CharField(max_length=32, unique=True)
    requested_by = models.CharField(max_length=150, blank=True)
    requested_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"stop {self.trace_id}"


# Monitors and their notifications live in a package of their own (planner_app/monitors).
from planner_app.monitors.records import (  # noqa: E402
    Delivery,
    DeliveryAttempt,
    Monitor,
    MonitorEvent,
    NotificationChannel,
)

__all__ = [
    "Agent", "Capability", "CapabilityMapping", "Delivery", "DeliveryAttempt", "IntentRule",
    "Monitor", "MonitorEvent", "NotificationChannel", "Proposal", "RuleSetVersion",
    "SandboxStop", "ScoreRule", "ScoringWeights", "ToolProfile", "Workflow", "WorkflowRun",
]  # fmt: skip
